// SPDX-License-Identifier: MIT
/*
 * tools/coord-worker.c - serve a shared object's functions to coordinators.
 */
#include <dlfcn.h>
#include <stdio.h>
#include <stdlib.h>

#include <coord/coord.h>

#include "server_cli.h"

static void usage(FILE *f)
{
	fprintf(f,
		"usage: coord-worker --fns LIB.so (--spec SPEC [--task N] | --listen HOST:PORT)\n"
		"                    [--key FILE] [--max-frame BYTES] [--partial-ms MS]\n"
		"                    [--idle-ms MS] [--max-handshakes N]\n"
		"                    [--log LEVEL] [--transport tcp|rdma]\n"
		"\n"
		"Serve the functions that LIB.so registers (its exported\n"
		"`int coord_register_fns(struct coord_registry *)`) to coord coordinators.\n"
		"\n"
		"  --fns LIB.so    the shared object whose functions to serve (required)\n"
		"  --spec SPEC     the cluster: a JSON file or text, `tf_config` or `slurm`\n"
		"  --task N        listen on the address of task N of the \"worker\" job\n"
		"                  (default: the task tf_config or slurm names)\n"
		"  --listen ADDR   listen on ADDR instead (port 0: any free port)\n"
		"  --key FILE      cluster key (else $COORD_CLUSTER_KEY_FILE or\n"
		"                  $COORD_CLUSTER_KEY); without one, loopback only\n"
		"  --max-frame N   largest frame accepted (default 16 MiB)\n"
		"  --partial-ms MS  a peer that stops in the middle of a frame this long\n"
		"                  is closed (default 10000)\n"
		"  --idle-ms MS    an authenticated peer that sends nothing this long\n"
		"                  (at least 4 of its heartbeats) is closed (default\n"
		"                  300000; 0: never)\n"
		"  --max-handshakes N  peers in the handshake at once; more are refused\n"
		"                  (default 1024)\n"
		"  --log LEVEL     error, warn (default), info or debug\n"
		"  --transport T   tcp (default) or rdma: an RC queue pair per\n"
		"                  coordinator (ADDR: an address of an RDMA device;\n"
		"                  needs a cluster key unless loopback)\n"
		"  --version       print the version and exit\n"
		"  --help          print this help and exit\n"
		"\n"
		"Exit status: 0 after a clean stop, 1 on an error, 2 on bad or no\n"
		"arguments.\n"
		"\n"
		"Prints `coord-worker listening on port P` once ready; SIGTERM or SIGINT\n"
		"stops it cleanly.\n");
}

int main(int argc, char **argv)
{
	static const struct option lo[] = { CLI_COMMON_OPTS,
					    { "fns", required_argument, NULL, 'f' },
					    { NULL, 0, NULL, 0 } };
	const char *fns = NULL;
	struct coord_registry *reg = NULL;
	struct coord_error err;
	coord_register_fns_t reg_fn;
	struct cli cl;
	void *dl;
	int c, r;

	cli_init(&cl, "coord-worker", "worker");
	while ((c = getopt_long(argc, argv, "hV", lo, NULL)) != -1) {
		if (c == 'f') {
			fns = optarg;
			continue;
		}
		r = cli_opt(&cl, c, optarg, usage);
		if (r == CLI_DONE)
			return 0;
		if (r <= 0) {
			usage(stderr);
			return 2;
		}
	}
	r = cli_args_done(&cl, argc, argv, usage);
	if (r)
		return r;
	if (!fns) {
		fprintf(stderr, "coord-worker: --fns LIB.so is needed\n");
		usage(stderr);
		return 2;
	}
	r = cli_ready(&cl);
	if (r < 0) {
		cli_fini(&cl);
		if (r == -2)
			usage(stderr);
		return r == -2 ? 2 : 1;
	}
	dl = dlopen(fns, RTLD_NOW | RTLD_LOCAL);
	if (!dl) {
		fprintf(stderr, "coord-worker: cannot load %s: %s\n", fns, dlerror());
		cli_fini(&cl);
		return 1;
	}
	*(void **)&reg_fn = dlsym(dl, COORD_REGISTER_FNS_SYMBOL);
	if (!reg_fn) {
		fprintf(stderr, "coord-worker: %s exports no %s()\n", fns,
			COORD_REGISTER_FNS_SYMBOL);
		r = -1;
	} else if (coord_registry_create(&reg) || (r = reg_fn(reg)) < 0) {
		fprintf(stderr, "coord-worker: %s failed to register its functions\n", fns);
		r = -1;
	} else {
		cl.o.registry = reg;
		r = coord_worker_serve(&cl.o, &err);
		if (r < 0)
			fprintf(stderr, "coord-worker: %s\n", err.msg);
	}
	coord_registry_destroy(reg);
	cli_fini(&cl);
	dlclose(dl);
	return r < 0 ? 1 : 0;
}
