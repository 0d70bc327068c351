// SPDX-License-Identifier: MIT
/*
 * tools/server_cli.c - the command-line plumbing coord-worker and coord-ps
 * share (server_cli.h).
 */
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "server_cli.h"

static int stop_pipe[2] = { -1, -1 };

static void on_signal(int sig)
{
	char c = 1;

	(void)sig;
	(void)!write(stop_pipe[1], &c, 1);
}

static void on_listen(unsigned port, void *arg)
{
	printf("%s listening on port %u\n", (const char *)arg, port);
	fflush(stdout);
}

void cli_init(struct cli *cl, const char *name, const char *job)
{
	*cl = (struct cli){ .name = name, .job = job, .task = -1 };
	coord_server_opts_init(&cl->o);
}

static int number(struct cli *cl, const char *opt, const char *arg, long max, long *out)
{
	char *end;

	errno = 0;
	*out = strtol(arg, &end, 10);
	if (errno || *end || end == arg || *out < 0 || *out > max) {
		fprintf(stderr, "%s: %s wants 0..%ld\n", cl->name, opt, max);
		return -1;
	}
	return 1;
}

int cli_opt(struct cli *cl, int c, const char *arg, void (*usage)(FILE *))
{
	/* enum coord_log_level's order */
	static const char *const levels[] = { "error", "warn", "info", "debug" };
	long v;

	switch (c) {
	case 'h':
		usage(stdout);
		return CLI_DONE;
	case 'V':
		printf("%s %s\n", cl->name, coord_version());
		return CLI_DONE;
	case 's':
		cl->spec_arg = arg;
		return 1;
	case 't':
		return number(cl, "--task", arg, 1048575, &cl->task);
	case 'l':
		cl->listen = arg;
		return 1;
	case 'k':
		cl->o.key_file = arg;
		return 1;
	case 'm':
		if (number(cl, "--max-frame", arg, 1l << 30, &v) < 0)
			return -1;
		cl->o.max_frame = (uint32_t)v;
		return 1;
	case 'p':
		if (number(cl, "--partial-ms", arg, 3600000, &v) < 0)
			return -1;
		cl->o.partial_ms = (int)v;
		return 1;
	case 'I':
		if (number(cl, "--idle-ms", arg, INT32_MAX, &v) < 0)
			return -1;
		cl->o.idle_ms = (int)v;
		return 1;
	case 'H':
		if (number(cl, "--max-handshakes", arg, 1048576, &v) < 0)
			return -1;
		if (v == 0) {
			fprintf(stderr, "%s: --max-handshakes wants 1..1048576\n", cl->name);
			return -1;
		}
		cl->o.max_handshakes = (unsigned)v;
		return 1;
	case 'v':
		for (int i = 0; i < (int)(sizeof(levels) / sizeof(levels[0])); i++)
			if (!strcmp(arg, levels[i]))
				return coord_set_log_level(i) < 0 ? -1 : 1;
		fprintf(stderr, "%s: --log wants error, warn, info or debug\n", cl->name);
		return -1;
	case 'T':
		if (strcmp(arg, "tcp") != 0 && strcmp(arg, "rdma") != 0) {
			fprintf(stderr, "%s: --transport wants tcp or rdma\n", cl->name);
			return -1;
		}
		cl->o.transport = arg;
		return 1;
	default:
		return 0;
	}
}

int cli_args_done(struct cli *cl, int argc, char **argv, void (*usage)(FILE *))
{
	if (optind < argc)
		fprintf(stderr, "%s: unexpected argument '%s'\n", cl->name, argv[optind]);
	if (argc <= 1 || optind < argc) {
		usage(stderr);
		return 2;
	}
	return 0;
}

int cli_ready(struct cli *cl)
{
	struct coord_error err;
	int r;

	if (!cl->listen && !cl->spec_arg) {
		fprintf(stderr, "%s: give --spec SPEC [--task N], or --listen HOST:PORT\n",
			cl->name);
		return -2;
	}
	if (!cl->listen) {
		struct coord_task_id self;

		r = coord_spec_from_arg(cl->spec_arg, &cl->spec, &self, &err);
		if (r == 0 && cl->task < 0) {
			/* tf_config / slurm say which task this process is */
			if (self.index < 0 || strcmp(self.job, cl->job) != 0) {
				fprintf(stderr,
					"%s: --task N is needed (the spec names %s%s task here, "
					"not a \"%s\" one)\n",
					cl->name, self.index < 0 ? "no" : "a ",
					self.index < 0 ? "" : self.job, cl->job);
				return -1;
			}
			cl->task = self.index;
		}
		if (r == 0)
			r = coord_spec_task_address(cl->spec, cl->job, cl->task, &cl->listen, &err);
		if (r < 0) {
			fprintf(stderr, "%s: %s\n", cl->name, err.msg);
			return -1;
		}
	}
	if (pipe(stop_pipe) < 0) {
		perror(cl->name);
		return -1;
	}
	signal(SIGTERM, on_signal);
	signal(SIGINT, on_signal);
	signal(SIGPIPE, SIG_IGN);
	cl->o.listen = cl->listen;
	cl->o.task = (int)cl->task;
	cl->o.stop_fd = stop_pipe[0];
	cl->o.on_listen = on_listen;
	cl->o.arg = (void *)cl->name;
	return 0;
}

void cli_fini(struct cli *cl)
{
	coord_spec_destroy(cl->spec);
	cl->spec = NULL;
}
