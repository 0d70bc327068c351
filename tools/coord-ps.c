// SPDX-License-Identifier: MIT
/*
 * tools/coord-ps.c - serve one parameter-server task: a store of named
 * float32 variables that coordinators and workers reach over tcp.
 */
#include <stdio.h>

#include <coord/var.h>

#include "server_cli.h"

static void usage(FILE *f)
{
	fprintf(f, "usage: coord-ps (--spec SPEC [--task N] | --listen HOST:PORT [--task N])\n"
		   "                [--key FILE] [--max-frame BYTES] [--partial-ms MS]\n"
		   "                [--idle-ms MS] [--max-handshakes N]\n"
		   "                [--log LEVEL] [--transport tcp|rdma] [--ckpt-root DIR]\n"
		   "\n"
		   "Serve one parameter-server task: named float32 variables that the\n"
		   "coordinator creates (coord_var_create()) and worker functions read and\n"
		   "update through their ctx (coord/var.h).  Variables live in memory;\n"
		   "coord_checkpoint_save() on the coordinator makes every ps task write\n"
		   "its variables to DIR/ps-<task>/ (a path the coordinator names; it must\n"
		   "be reachable from here), and coord_checkpoint_restore() loads them.\n"
		   "\n"
		   "  --spec SPEC     the cluster: a JSON file or text, `tf_config` or `slurm`\n"
		   "  --task N        this ps task's index (default: the task tf_config or slurm\n"
		   "                  names): with --spec, listen on the address\n"
		   "                  of task N of the \"ps\" job; peers asking for another\n"
		   "                  task are refused\n"
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
		   "  --transport T   tcp (default) or rdma (ADDR: an address of an\n"
		   "                  RDMA device)\n"
		   "  --ckpt-root DIR  read and write checkpoints only beneath DIR (default:\n"
		   "                  the working directory); a checkpoint dir that escapes\n"
		   "                  it is refused and logged\n"
		   "  --version       print the version and exit\n"
		   "  --help          print this help and exit\n"
		   "\n"
		   "Exit status: 0 after a clean stop, 1 on an error, 2 on bad or no\n"
		   "arguments.\n"
		   "\n"
		   "Prints `coord-ps listening on port P` once ready; SIGTERM or SIGINT\n"
		   "stops it cleanly (variables not saved are lost).\n");
}

int main(int argc, char **argv)
{
	static const struct option lo[] = { { "ckpt-root", required_argument, NULL, 'R' },
					    CLI_COMMON_OPTS,
					    { NULL, 0, NULL, 0 } };
	struct coord_error err;
	struct cli cl;
	int c, r;

	cli_init(&cl, "coord-ps", "ps");
	while ((c = getopt_long(argc, argv, "hV", lo, NULL)) != -1) {
		if (c == 'R') {
			cl.o.ckpt_root = optarg;
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
	r = cli_ready(&cl);
	if (r < 0) {
		cli_fini(&cl);
		if (r == -2)
			usage(stderr);
		return r == -2 ? 2 : 1;
	}
	r = coord_ps_serve(&cl.o, &err);
	if (r < 0)
		fprintf(stderr, "coord-ps: %s\n", err.msg);
	cli_fini(&cl);
	return r < 0 ? 1 : 0;
}
