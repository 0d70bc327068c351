/* SPDX-License-Identifier: MIT */
/*
 * tools/server_cli.h - what coord-worker and coord-ps share: the common
 * options (--spec --task --listen --key --max-frame --partial-ms
 * --idle-ms --max-handshakes --log --transport --version --help),
 * the listen address from a spec, the "listening on port P" line, and a
 * clean stop on SIGTERM / SIGINT.
 */
#ifndef COORD_TOOLS_SERVER_CLI_H
#define COORD_TOOLS_SERVER_CLI_H

#include <getopt.h>
#include <stdio.h>

#include <coord/coord.h>

/* The common long options; a tool appends its own after these. */
#define CLI_COMMON_OPTS                                                                            \
	{ "spec", required_argument, NULL, 's' }, { "task", required_argument, NULL, 't' },        \
		{ "listen", required_argument, NULL, 'l' },                                        \
		{ "key", required_argument, NULL, 'k' },                                           \
		{ "max-frame", required_argument, NULL, 'm' },                                     \
		{ "partial-ms", required_argument, NULL, 'p' },                                    \
		{ "idle-ms", required_argument, NULL, 'I' },                                       \
		{ "max-handshakes", required_argument, NULL, 'H' },                                \
		{ "log", required_argument, NULL, 'v' },                                           \
		{ "transport", required_argument, NULL, 'T' },                                     \
		{ "version", no_argument, NULL, 'V' },                                             \
	{                                                                                          \
		"help", no_argument, NULL, 'h'                                                     \
	}

struct cli {
	const char *name; /* "coord-worker" */
	const char *job;  /* the spec job whose task address --task names */
	const char *spec_arg, *listen;
	long task;
	struct coord_spec *spec;
	struct coord_server_opts o;
};

/* Defaults; then cli_opt() for each option getopt_long() returns. */
void cli_init(struct cli *cl, const char *name, const char *job);
/*
 * 1 handled, 0 not a common option, -1 bad value (message printed),
 * CLI_DONE after printing --help (@usage to stdout) or --version: exit 0.
 */
#define CLI_DONE 2
int cli_opt(struct cli *cl, int c, const char *arg, void (*usage)(FILE *));
/*
 * After getopt_long(): an empty command line or a stray argument prints
 * @usage to stderr and returns 2 (the exit status); else 0.
 */
int cli_args_done(struct cli *cl, int argc, char **argv, void (*usage)(FILE *));
/* Resolve --spec/--task to the listen address, install the stop handler,
 * and fill cl->o (listen, stop_fd, on_listen, task).  0, -1 (printed), or
 * -2: neither --spec nor --listen given (usage error, exit 2). */
int cli_ready(struct cli *cl);
void cli_fini(struct cli *cl);

#endif
