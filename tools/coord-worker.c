// SPDX-License-Identifier: MIT
/*
 * tools/coord-worker.c - serve a shared object's functions to coordinators.
 */
#include <dlfcn.h>
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <coord/coord.h>

static int stop_pipe[2] = { -1, -1 };

static void on_signal(int sig)
{
	char c = 1;

	(void)!write(stop_pipe[1], &c, 1);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: coord-worker --fns LIB.so (--spec SPEC --task N | --listen HOST:PORT)\n"
		   "                    [--key FILE] [--max-frame BYTES] [--log LEVEL]\n"
		   "\n"
		   "Serve the functions that LIB.so registers (its exported\n"
		   "`int coord_register_fns(struct coord_registry *)`) to coord coordinators.\n"
		   "\n"
		   "  --spec SPEC     the cluster: a JSON file or text, `tf_config` or `slurm`\n"
		   "  --task N        listen on the address of task N of the \"worker\" job\n"
		   "  --listen ADDR   listen on ADDR instead (port 0: any free port)\n"
		   "  --key FILE      cluster key (else $COORD_CLUSTER_KEY_FILE or\n"
		   "                  $COORD_CLUSTER_KEY); without one, loopback only\n"
		   "  --max-frame N   largest frame accepted (default 16 MiB)\n"
		   "  --log LEVEL     error, warn (default), info or debug\n"
		   "\n"
		   "Prints `coord-worker listening on port P` once ready; SIGTERM or SIGINT\n"
		   "stops it cleanly.\n");
}

static void on_listen(unsigned port, void *arg)
{
	printf("coord-worker listening on port %u\n", port);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	static const struct option lo[] = { { "fns", required_argument, NULL, 'f' },
					    { "spec", required_argument, NULL, 's' },
					    { "task", required_argument, NULL, 't' },
					    { "listen", required_argument, NULL, 'l' },
					    { "key", required_argument, NULL, 'k' },
					    { "max-frame", required_argument, NULL, 'm' },
					    { "log", required_argument, NULL, 'v' },
					    { "help", no_argument, NULL, 'h' },
					    { "partial-ms", required_argument, NULL, 'p' },
					    { NULL, 0, NULL, 0 } };
	const char *fns = NULL, *spec_arg = NULL, *listen = NULL;
	struct coord_server_opts o;
	struct coord_registry *reg;
	struct coord_spec *spec = NULL;
	struct coord_error err;
	coord_register_fns_t reg_fn;
	long task = -1;
	void *dl;
	int c, r;

	coord_server_opts_init(&o);
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case 'f':
			fns = optarg;
			break;
		case 's':
			spec_arg = optarg;
			break;
		case 't':
			task = strtol(optarg, NULL, 10);
			break;
		case 'l':
			listen = optarg;
			break;
		case 'k':
			o.key_file = optarg;
			break;
		case 'm':
			o.max_frame = (uint32_t)strtoul(optarg, NULL, 10);
			break;
		case 'v':
			setenv("COORD_LOG", optarg, 1);
			break;
		case 'p':
			o.partial_ms = (int)strtol(optarg, NULL, 10);
			break;
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (!fns || (!listen && (!spec_arg || task < 0))) {
		usage(stderr);
		return 2;
	}
	if (!listen) {
		r = coord_spec_from_arg(spec_arg, &spec, NULL, &err);
		if (r == 0)
			r = coord_spec_task_address(spec, "worker", task, &listen, &err);
		if (r < 0) {
			fprintf(stderr, "coord-worker: %s\n", err.msg);
			return 1;
		}
	}
	dl = dlopen(fns, RTLD_NOW | RTLD_LOCAL);
	if (!dl) {
		fprintf(stderr, "coord-worker: cannot load %s: %s\n", fns, dlerror());
		return 1;
	}
	*(void **)&reg_fn = dlsym(dl, COORD_REGISTER_FNS_SYMBOL);
	if (!reg_fn) {
		fprintf(stderr, "coord-worker: %s exports no %s()\n", fns,
			COORD_REGISTER_FNS_SYMBOL);
		return 1;
	}
	if (coord_registry_create(&reg) || (r = reg_fn(reg)) < 0) {
		fprintf(stderr, "coord-worker: %s failed to register its functions\n", fns);
		return 1;
	}
	if (pipe(stop_pipe) < 0)
		return 1;
	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);
	signal(SIGPIPE, SIG_IGN);
	o.registry = reg;
	o.listen = listen;
	o.stop_fd = stop_pipe[0];
	o.on_listen = on_listen;
	r = coord_worker_serve(&o, &err);
	if (r < 0)
		fprintf(stderr, "coord-worker: %s\n", err.msg);
	coord_registry_destroy(reg);
	coord_spec_destroy(spec);
	dlclose(dl);
	return r < 0 ? 1 : 0;
}
