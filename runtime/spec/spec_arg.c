// SPDX-License-Identifier: MIT
/*
 * runtime/spec/spec_arg.c - the `--spec` argument of the servers and examples: a
 * file, a JSON string, `tf_config` or `slurm[:options]`.
 */
#include <ctype.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <coord/spec.h>

#include "runtime/spec/spec_pvt.h"

#define SLURM_ARG_JOBS 16

static void no_task(struct coord_task_id *self)
{
	if (self) {
		self->job[0] = '\0';
		self->index = -1;
	}
}

/* "port=N,tasks_per_node=N,JOB=N,..." after "slurm:". */
static int from_slurm_arg(const char *opt, struct coord_spec **out, struct coord_task_id *self,
			  struct coord_error *err)
{
	struct coord_slurm_job jobs[SLURM_ARG_JOBS];
	char copy[512], *save = NULL, *tok;
	struct coord_slurm_opts o;
	size_t nj = 0;

	coord_slurm_opts_init(&o);
	if (strlen(opt) >= sizeof(copy))
		return coord_seterr(err, COORD_EINVAL, "--spec slurm: options longer than %zu",
				    sizeof(copy) - 1);
	strcpy(copy, opt);
	/* Each token consumes at least one character of the bounded copy. */
	for (tok = strtok_r(copy, ",", &save); tok; tok = strtok_r(NULL, ",", &save)) {
		char *eq = strchr(tok, '='), *end;
		unsigned long v;

		if (!eq || !isdigit((unsigned char)eq[1]))
			return coord_seterr(err, COORD_EINVAL,
					    "--spec slurm: option '%.60s' is "
					    "not NAME=NUMBER",
					    tok);
		*eq = '\0';
		v = strtoul(eq + 1, &end, 10);
		if (*end || v > COORD_SPEC_MAX_INDEX + 1ul)
			return coord_seterr(err, COORD_EINVAL,
					    "--spec slurm: option '%.60s' has "
					    "a bad number",
					    tok);
		if (!strcmp(tok, "port")) {
			o.port_base = (unsigned)v;
		} else if (!strcmp(tok, "tasks_per_node")) {
			o.tasks_per_node = (unsigned)v;
		} else {
			if (nj == SLURM_ARG_JOBS)
				return coord_seterr(err, COORD_EINVAL,
						    "--spec slurm: more than "
						    "%d jobs",
						    SLURM_ARG_JOBS);
			jobs[nj].name = tok;
			jobs[nj].ntasks = (unsigned)v;
			nj++;
		}
	}
	if (nj) {
		o.jobs = jobs;
		o.njobs = nj;
	}
	return coord_spec_resolve_slurm(&o, out, self, err);
}

static int from_file(const char *path, struct coord_spec **out, struct coord_error *err)
{
	size_t len = 0;
	char *buf;
	int fd, r;

	fd = open(path, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		r = -errno;
		return coord_seterr(err, r,
				    "--spec '%.100s' is not JSON, tf_config or slurm, and "
				    "cannot be opened as a file: %s",
				    path, coord_strerror(r));
	}
	buf = malloc(COORD_SPEC_TEXT_MAX + 1);
	if (!buf) {
		close(fd);
		return coord_seterr(err, COORD_ENOMEM, "no memory to read '%.100s'", path);
	}
	/* Each read adds at least one byte or ends the loop; the buffer bounds it. */
	for (;;) {
		ssize_t n = read(fd, buf + len, COORD_SPEC_TEXT_MAX + 1 - len);

		if (n < 0 && errno == EINTR)
			continue;
		if (n < 0) {
			r = -errno;
			coord_seterr(err, r, "--spec file '%.100s': %s", path, coord_strerror(r));
			goto out;
		}
		if (n == 0)
			break;
		len += (size_t)n;
		if (len > COORD_SPEC_TEXT_MAX) {
			r = coord_seterr(err, COORD_EINVAL,
					 "--spec file '%.100s' is larger than "
					 "%u bytes",
					 path, COORD_SPEC_TEXT_MAX);
			goto out;
		}
	}
	buf[len] = '\0';
	if (memchr(buf, '\0', len)) {
		r = coord_seterr(err, COORD_EINVAL, "--spec file '%.100s' holds a NUL byte", path);
		goto out;
	}
	r = coord_spec_parse(buf, out, err);
	if (r < 0 && err) {
		char msg[COORD_ERRMSG_LEN];

		snprintf(msg, sizeof(msg), "%s", err->msg);
		coord_seterr(err, r, "--spec file '%.60s': %s", path, msg);
	}
out:
	free(buf);
	close(fd);
	return r;
}

int coord_spec_from_arg(const char *arg, struct coord_spec **out, struct coord_task_id *self,
			struct coord_error *err)
{
	const char *p = arg;

	if (!arg || !out)
		return coord_seterr(err, COORD_EINVAL, "--spec: no argument or no out pointer");
	if (!strcmp(arg, "tf_config"))
		return coord_spec_resolve_tf_config(out, self, err);
	if (!strcmp(arg, "slurm"))
		return coord_spec_resolve_slurm(NULL, out, self, err);
	if (!strncmp(arg, "slurm:", 6))
		return from_slurm_arg(arg + 6, out, self, err);
	no_task(self);
	while (isspace((unsigned char)*p))
		p++;
	if (*p == '{') {
		if (strlen(arg) > COORD_SPEC_TEXT_MAX)
			return coord_seterr(err, COORD_EINVAL,
					    "--spec JSON is longer than %u "
					    "bytes",
					    COORD_SPEC_TEXT_MAX);
		return coord_spec_parse(arg, out, err);
	}
	if (!*p)
		return coord_seterr(err, COORD_EINVAL, "--spec is empty");
	return from_file(arg, out, err);
}
