// SPDX-License-Identifier: MIT
/*
 * examples/hello.c - the smallest coord program: register functions,
 * schedule them on an in-process cluster, see an error cancel what was
 * queued, and print the results.
 *
 *   build/examples/hello                      in-process workers
 *   build/examples/hello --spec cluster.json  coord-worker processes over tcp
 *                                             (their --fns must register
 *                                             square, slow and fail)
 */
#include <inttypes.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include <coord/coord.h>

static int square(struct coord_ctx *ctx, const void *args, size_t len)
{
	int64_t x, y;

	if (len != sizeof(x))
		return coord_ctx_fail(ctx, COORD_EINVAL, "square wants one int64");
	memcpy(&x, args, sizeof(x));
	y = x * x;
	return coord_ctx_set_result(ctx, &y, sizeof(y));
}

static int slow(struct coord_ctx *ctx, const void *args, size_t len)
{
	struct timespec ts = { 0, 2000000 }; /* 2 ms */

	nanosleep(&ts, NULL);
	return 0;
}

static int fail(struct coord_ctx *ctx, const void *args, size_t len)
{
	return coord_ctx_fail(ctx, -EIO, "worker %d: the disk is on fire", coord_ctx_worker(ctx));
}

int main(int argc, char **argv)
{
	struct coord_spec *spec = NULL;
	struct coord_registry *reg;
	struct coord_opts opts;
	struct coord_error err;
	struct coord *c;
	struct coord_rv *rv[8], *slow_rv[16];
	uint32_t f_square, f_slow, f_fail;
	int r, cancelled = 0;

	if (coord_registry_create(&reg) || coord_registry_add(reg, "square", square) ||
	    coord_registry_add(reg, "slow", slow) || coord_registry_add(reg, "fail", fail))
		return 1;
	coord_opts_init(&opts);
	opts.registry = reg;
	opts.inproc_workers = 2;
	if (argc == 3 && !strcmp(argv[1], "--spec")) {
		/* a JSON file or text, `tf_config` or `slurm`: its "worker" job are
		 * coord-worker processes serving this program's functions (built
		 * as a shared object), reached over tcp */
		if (coord_spec_from_arg(argv[2], &spec, NULL, &err)) {
			fprintf(stderr, "--spec: %s\n", err.msg);
			return 1;
		}
		opts.transport = "tcp";
	} else if (argc != 1) {
		fprintf(stderr, "usage: %s [--spec SPEC]\n", argv[0]);
		return 2;
	}
	if (coord_create(spec, &opts, &c, &err)) {
		fprintf(stderr, "coord_create: %s\n", err.msg);
		return 1;
	}
	if (coord_fn_lookup(c, "square", &f_square, &err) ||
	    coord_fn_lookup(c, "slow", &f_slow, &err) || coord_fn_lookup(c, "fail", &f_fail, &err))
		return 1;

	printf("== %u %s workers\n", coord_num_workers(c), spec ? "tcp" : "in-process");
	for (int64_t i = 0; i < 8; i++)
		if (coord_schedule(c, f_square, &i, sizeof(i), &rv[i], &err))
			return 1;
	for (int i = 0; i < 8; i++) {
		const void *v;
		int64_t y;

		if (coord_rv_fetch(rv[i], &v, NULL, &err))
			return 1;
		memcpy(&y, v, sizeof(y));
		printf("square(%d) = %" PRId64 "\n", i, y);
		coord_rv_put(rv[i]);
	}

	printf("== an error cancels what is still queued (S3)\n");
	r = coord_schedule(c, f_fail, NULL, 0, NULL, &err);
	for (int i = 0; r == 0 && i < 16; i++)
		r = coord_schedule(c, f_slow, NULL, 0, &slow_rv[i], &err);
	r = coord_join(c, &err);
	printf("join: %s (code %d, from worker %d)\n", err.msg, r, err.worker);
	for (int i = 0; i < 16; i++) {
		cancelled += coord_rv_fetch(slow_rv[i], NULL, NULL, NULL) == COORD_ECANCELLED;
		coord_rv_put(slow_rv[i]);
	}
	printf("%d of 16 slow closures were cancelled, the rest ran\n", cancelled);
	r = coord_join(c, &err);
	printf("join again: %s\n", r == 0 ? "ok, the error was returned once" : err.msg);

	printf("== an unknown function is refused at schedule (S15)\n");
	r = coord_schedule(c, 999, NULL, 0, NULL, &err);
	printf("schedule(999): %s\n", err.msg);

	coord_destroy(c);
	coord_spec_destroy(spec);
	coord_registry_destroy(reg);
	return 0;
}
