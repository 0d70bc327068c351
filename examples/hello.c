// SPDX-License-Identifier: MIT
/*
 * examples/hello.c - the smallest coord program: register functions,
 * schedule them on an in-process cluster, see an error cancel what was
 * queued, and print the results.
 *
 *   build/examples/hello                      in-process workers
 *   build/examples/hello --spec cluster.json  coord-worker processes over tcp,
 *                                             serving its functions:
 *     coord-worker --fns build/examples/libhello_fns.so --spec cluster.json --task N
 *
 * The functions are in hello_fns.c (linked in here, and built as the worker
 * library libhello_fns.so).
 */
#include <inttypes.h>
#include <stdbool.h>
#include <stdio.h>
#include <string.h>

#include <coord/coord.h>

/* examples/hello_fns.c: square, slow and fail. */
int coord_register_fns(struct coord_registry *reg);

/* Say why hello cannot go on, and how to fix it when functions are missing. */
static int fail_with(const char *what, const struct coord_error *err, bool tcp)
{
	fprintf(stderr, "hello: %s: %s\n", what, err->msg);
	if (tcp && err->code == COORD_ENOFN)
		fprintf(stderr, "hello: the workers must serve square, slow and fail: "
				"coord-worker --fns build/examples/libhello_fns.so\n");
	return 1;
}

/* The tour on coordinator @c; 0, or 1 after saying why it stopped. */
static int tour(struct coord *c, bool tcp)
{
	struct coord_rv *rv[8], *slow_rv[16];
	uint32_t f_square, f_slow, f_fail;
	struct coord_error err;
	int r, cancelled = 0, nslow = 0;

	if (coord_fn_lookup(c, "square", &f_square, &err) ||
	    coord_fn_lookup(c, "slow", &f_slow, &err) || coord_fn_lookup(c, "fail", &f_fail, &err))
		return fail_with("coord_fn_lookup", &err, tcp);

	printf("== %u %s workers\n", coord_num_workers(c), tcp ? "tcp" : "in-process");
	for (int64_t i = 0; i < 8; i++)
		if (coord_schedule(c, f_square, &i, sizeof(i), &rv[i], &err)) {
			while (i > 0)
				coord_rv_put(rv[--i]);
			return fail_with("coord_schedule", &err, tcp);
		}
	r = 0;
	for (int i = 0; i < 8; i++) { /* after a failure, only put the rest */
		const void *v;
		int64_t y;

		if (r == 0 && (r = coord_rv_fetch(rv[i], &v, NULL, &err)) == 0) {
			memcpy(&y, v, sizeof(y));
			printf("square(%d) = %" PRId64 "\n", i, y);
		}
		coord_rv_put(rv[i]);
	}
	if (r)
		return fail_with("square", &err, tcp);

	printf("== an error cancels what is still queued (S3)\n");
	r = coord_schedule(c, f_fail, NULL, 0, NULL, &err);
	/* the error surfaces at the next schedule or join, whichever comes first */
	while (r == 0 && nslow < 16 &&
	       (r = coord_schedule(c, f_slow, NULL, 0, &slow_rv[nslow], &err)) == 0)
		nslow++;
	if (r == 0)
		r = coord_join(c, &err);
	printf("%s: %s (code %d, from worker %d)\n", nslow < 16 ? "schedule" : "join", err.msg, r,
	       err.worker);
	for (int i = 0; i < nslow; i++) {
		cancelled += coord_rv_fetch(slow_rv[i], NULL, NULL, NULL) == COORD_ECANCELLED;
		coord_rv_put(slow_rv[i]);
	}
	printf("%d of %d slow closures were cancelled, the rest ran\n", cancelled, nslow);
	r = coord_join(c, &err);
	printf("join again: %s\n", r == 0 ? "ok, the error was returned once" : err.msg);

	printf("== an unknown function is refused at schedule (S15)\n");
	r = coord_schedule(c, 999, NULL, 0, NULL, &err);
	printf("schedule(999): %s\n", err.msg);
	return 0;
}

int main(int argc, char **argv)
{
	struct coord_spec *spec = NULL;
	struct coord_registry *reg;
	struct coord_opts opts;
	struct coord_error err;
	struct coord *c;
	int r = 1;

	if (argc != 1 && !(argc == 3 && !strcmp(argv[1], "--spec"))) {
		fprintf(stderr, "usage: %s [--spec SPEC]\n", argv[0]);
		return 2;
	}
	if (coord_registry_create(&reg) || coord_register_fns(reg)) {
		fprintf(stderr, "hello: cannot register its functions (out of memory?)\n");
		coord_registry_destroy(reg);
		return 1;
	}
	coord_opts_init(&opts);
	opts.registry = reg;
	opts.inproc_workers = 2;
	if (argc == 3) {
		/* a JSON file or text, `tf_config` or `slurm`: its "worker" job are
		 * coord-worker processes serving this program's functions (built
		 * as a shared object), reached over tcp */
		if (coord_spec_from_arg(argv[2], &spec, NULL, &err)) {
			fail_with("--spec", &err, false);
			goto out;
		}
		opts.transport = "tcp";
	}
	if (coord_create(spec, &opts, &c, &err)) {
		fail_with("coord_create", &err, spec != NULL);
		goto out;
	}
	r = tour(c, spec != NULL);
	coord_destroy(c);
out:
	coord_spec_destroy(spec);
	coord_registry_destroy(reg);
	return r;
}
