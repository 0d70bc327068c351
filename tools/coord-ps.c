// SPDX-License-Identifier: MIT
/*
 * tools/coord-ps.c - serve one parameter-server task: a store of named
 * float32 variables that coordinators and workers reach over tcp.
 */
#include <errno.h>
#include <getopt.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <coord/var.h>

static int stop_pipe[2] = { -1, -1 };

static void on_signal(int sig)
{
	char c = 1;

	(void)sig;
	(void)!write(stop_pipe[1], &c, 1);
}

static void usage(FILE *f)
{
	fprintf(f, "usage: coord-ps (--spec SPEC --task N | --listen HOST:PORT [--task N])\n"
		   "                [--key FILE] [--max-frame BYTES] [--log LEVEL]\n"
		   "\n"
		   "Serve one parameter-server task: named float32 variables that the\n"
		   "coordinator creates (coord_var_create()) and worker functions read and\n"
		   "update through their ctx (coord/var.h).  Variables live in memory;\n"
		   "coord_checkpoint_save() on the coordinator makes every ps task write\n"
		   "its variables to DIR/ps-<task>/ (a path the coordinator names; it must\n"
		   "be reachable from here), and coord_checkpoint_restore() loads them.\n"
		   "\n"
		   "  --spec SPEC     the cluster: a JSON file or text, `tf_config` or `slurm`\n"
		   "  --task N        this ps task's index: with --spec, listen on the address\n"
		   "                  of task N of the \"ps\" job; peers asking for another\n"
		   "                  task are refused\n"
		   "  --listen ADDR   listen on ADDR instead (port 0: any free port)\n"
		   "  --key FILE      cluster key (else $COORD_CLUSTER_KEY_FILE or\n"
		   "                  $COORD_CLUSTER_KEY); without one, loopback only\n"
		   "  --max-frame N   largest frame accepted (default 16 MiB)\n"
		   "  --log LEVEL     error, warn (default), info or debug\n"
		   "\n"
		   "Prints `coord-ps listening on port P` once ready; SIGTERM or SIGINT\n"
		   "stops it cleanly (variables not saved are lost).\n");
}

static void on_listen(unsigned port, void *arg)
{
	(void)arg;
	printf("coord-ps listening on port %u\n", port);
	fflush(stdout);
}

int main(int argc, char **argv)
{
	static const struct option lo[] = { { "spec", required_argument, NULL, 's' },
					    { "task", required_argument, NULL, 't' },
					    { "listen", required_argument, NULL, 'l' },
					    { "key", required_argument, NULL, 'k' },
					    { "max-frame", required_argument, NULL, 'm' },
					    { "log", required_argument, NULL, 'v' },
					    { "help", no_argument, NULL, 'h' },
					    { NULL, 0, NULL, 0 } };
	const char *spec_arg = NULL, *listen = NULL;
	struct coord_server_opts o;
	struct coord_spec *spec = NULL;
	struct coord_error err;
	long task = -1;
	char *end;
	int c, r;

	coord_server_opts_init(&o);
	while ((c = getopt_long(argc, argv, "h", lo, NULL)) != -1) {
		switch (c) {
		case 's':
			spec_arg = optarg;
			break;
		case 't':
			errno = 0;
			task = strtol(optarg, &end, 10);
			if (errno || *end || task < 0 || task > 1048575) {
				fprintf(stderr, "coord-ps: --task wants 0..1048575\n");
				return 2;
			}
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
		case 'h':
			usage(stdout);
			return 0;
		default:
			usage(stderr);
			return 2;
		}
	}
	if (!listen && (!spec_arg || task < 0)) {
		usage(stderr);
		return 2;
	}
	if (!listen) {
		r = coord_spec_from_arg(spec_arg, &spec, NULL, &err);
		if (r == 0)
			r = coord_spec_task_address(spec, "ps", (int)task, &listen, &err);
		if (r < 0) {
			fprintf(stderr, "coord-ps: %s\n", err.msg);
			coord_spec_destroy(spec);
			return 1;
		}
	}
	if (pipe(stop_pipe) < 0)
		return 1;
	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);
	signal(SIGPIPE, SIG_IGN);
	o.listen = listen;
	o.task = (int)task;
	o.stop_fd = stop_pipe[0];
	o.on_listen = on_listen;
	r = coord_ps_serve(&o, &err);
	if (r < 0)
		fprintf(stderr, "coord-ps: %s\n", err.msg);
	coord_spec_destroy(spec);
	return r < 0 ? 1 : 0;
}
