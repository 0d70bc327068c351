// SPDX-License-Identifier: MIT
/*
 * tests/fuzz/fuzz_spec_arg.c - libFuzzer harness for coord_spec_from_arg(),
 * the `--spec` argument, with the resolvers' environment taken from the
 * input too.
 *
 * Input: one mode byte, then fields separated by '\n': the argument's text
 * (or a spec file's bytes), then the values of TF_CONFIG, SLURM_JOB_NODELIST,
 * SLURM_NODELIST, SLURM_NTASKS, SLURM_PROCID, SLURM_NTASKS_PER_NODE and
 * SLURM_TASKS_PER_NODE, in that order.  A missing field, or one starting
 * with byte 0x01, leaves its variable unset.  Modes (byte % 6): "tf_config",
 * "slurm", "slurm:" + text, the text itself (skipped when it would name a
 * file: the harness opens only its own files), a file holding the text, a
 * missing file or a directory.
 *
 * Checked on every input: a spec comes back only with 0, and then survives
 * the round trips of spec_check.h; @self names a task of it (the resolvers)
 * or nothing (JSON and files); a failure is negative, is the code in @err,
 * and has a message; a file that cannot be opened is named with its
 * errno's own text.  Anything else aborts (a finding).
 */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <coord/spec.h>

#include "spec_check.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define NVARS 7
#define VAL_MAX 4096

static const char *const var_names[NVARS] = {
	"TF_CONFIG",	"SLURM_JOB_NODELIST",	 "SLURM_NODELIST",	 "SLURM_NTASKS",
	"SLURM_PROCID", "SLURM_NTASKS_PER_NODE", "SLURM_TASKS_PER_NODE",
};

/* putenv() buffers: setenv() would keep every value ever set (glibc). */
static char env_buf[NVARS][32 + VAL_MAX + 1];
static char dir[64], file[96], missing[96];

static void cleanup(void)
{
	unlink(file);
	rmdir(dir);
}

static void set_var(unsigned i, const uint8_t *v, size_t len)
{
	size_t n = strlen(var_names[i]);

	if (!v || (len && v[0] == 1)) {
		unsetenv(var_names[i]);
		return;
	}
	if (len > VAL_MAX)
		len = VAL_MAX;
	memcpy(env_buf[i], var_names[i], n);
	env_buf[i][n] = '=';
	memcpy(env_buf[i] + n + 1, v, len); /* a NUL in it ends the value */
	env_buf[i][n + 1 + len] = '\0';
	if (putenv(env_buf[i]) != 0)
		abort();
}

/* Would coord_spec_from_arg() take @arg as a file name? */
static bool names_file(const char *arg)
{
	const char *p = arg;

	if (!strcmp(arg, "tf_config") || !strcmp(arg, "slurm") || !strncmp(arg, "slurm:", 6))
		return false;
	while (*p == ' ' || (*p >= '\t' && *p <= '\r'))
		p++;
	return *p && *p != '{';
}

static bool write_file(const uint8_t *p, size_t len)
{
	FILE *f = fopen(file, "wb");
	bool ok;

	if (!f)
		return false;
	ok = fwrite(p, 1, len, f) == len;
	return fclose(f) == 0 && ok;
}

static void check(int r, const struct coord_spec *s, const struct coord_task_id *self,
		  const struct coord_error *err, bool resolver)
{
	const char *addr;

	if (r > 0)
		abort();
	if (r < 0) {
		if (s || err->code != r || !memchr(err->msg, '\0', sizeof(err->msg)) ||
		    !err->msg[0]) {
			fprintf(stderr, "bad failure: %d / %d '%.256s'\n", r, err->code, err->msg);
			abort();
		}
		return;
	}
	if (!s)
		abort();
	fuzz_spec_roundtrip(s);
	if (self->index < 0) {
		if (self->index != -1 || self->job[0])
			abort();
		return;
	}
	if (!resolver || !memchr(self->job, '\0', sizeof(self->job)) ||
	    coord_spec_task_address(s, self->job, self->index, &addr, NULL) != 0) {
		fprintf(stderr, "self %.64s/%lld is not a task of the spec\n", self->job,
			(long long)self->index);
		abort();
	}
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	const uint8_t *field[1 + NVARS] = { 0 }, *p, *end = data + size;
	size_t flen[1 + NVARS] = { 0 };
	struct coord_spec *s = NULL;
	struct coord_task_id self;
	struct coord_error err;
	char *arg = NULL;
	unsigned mode;
	int r;

	if (size == 0)
		return 0;
	if (!dir[0]) {
		snprintf(dir, sizeof(dir), "/tmp/coord-fuzz-spec-arg-XXXXXX");
		if (!mkdtemp(dir))
			abort();
		snprintf(file, sizeof(file), "%s/spec.json", dir);
		snprintf(missing, sizeof(missing), "%s/missing.json", dir);
		atexit(cleanup);
	}
	mode = data[0] % 6;
	p = data + 1;
	for (unsigned i = 0; i < 1 + NVARS && p <= end; i++) {
		const uint8_t *nl = memchr(p, '\n', (size_t)(end - p));

		field[i] = p;
		flen[i] = nl ? (size_t)(nl - p) : (size_t)(end - p);
		p += flen[i] + 1;
	}
	for (unsigned i = 0; i < NVARS; i++)
		set_var(i, field[1 + i], flen[1 + i]);
	arg = malloc(flen[0] + sizeof("tf_config"));
	if (!arg)
		return 0;
	switch (mode) {
	case 0:
		strcpy(arg, "tf_config");
		break;
	case 1:
		strcpy(arg, "slurm");
		break;
	case 2:
		memcpy(arg, "slurm:", 6);
		memcpy(arg + 6, field[0], flen[0]);
		arg[6 + flen[0]] = '\0';
		break;
	case 3:
		memcpy(arg, field[0], flen[0]);
		arg[flen[0]] = '\0';
		if (names_file(arg))
			goto out;
		break;
	}
	memset(&err, 0, sizeof(err));
	memset(&self, 0x5a, sizeof(self));
	if (mode == 4) {
		if (!write_file(field[0], flen[0]))
			abort();
		r = coord_spec_from_arg(file, &s, &self, &err);
	} else if (mode == 5) {
		r = coord_spec_from_arg(flen[0] & 1 ? dir : missing, &s, &self, &err);
		/* The errno's own text, not another meaning of its value. */
		if (r >= 0 || !strstr(err.msg, flen[0] & 1 ? coord_strerror(r)
							   : "No such file or directory")) {
			fprintf(stderr, "unreadable file: %d '%.256s'\n", r, err.msg);
			abort();
		}
	} else {
		r = coord_spec_from_arg(arg, &s, &self, &err);
	}
	check(r, s, &self, &err, mode < 3);
	coord_spec_destroy(s);
out:
	free(arg);
	return 0;
}
