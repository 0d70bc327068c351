// SPDX-License-Identifier: MIT
/*
 * tests/test_pkg.c - what a program embedding libcoord sees of the package
 * (issue 26): the version macros against meson's project version and
 * coord_version(); the log callback and levels, and the default stderr
 * logger's line format (coord/log.h), and callbacks swapped while threads
 * log (the sink's fn and arg always seen as a pair); option structs that
 * carry their size (runtime/abi.h): init writes only the caller's bytes, a
 * struct not from its init is refused, a larger (newer) one is accepted
 * while its unknown tail is zero.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <regex.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <coord/coord.h>
#include <coord/var.h>

#include "runtime/util.h"

/* The headers, the library and meson.build agree on the version. */
static void test_version(void **state)
{
	char want[32];

	(void)state;
	snprintf(want, sizeof(want), "%d.%d.%d", COORD_VERSION_MAJOR, COORD_VERSION_MINOR,
		 COORD_VERSION_PATCH);
	assert_string_equal(want, COORD_VERSION_STRING);
	assert_string_equal(COORD_VERSION_STRING, T_MESON_VERSION);
	assert_string_equal(coord_version(), T_MESON_VERSION);
	assert_true(COORD_VERSION_AT_LEAST(0, 0, 0));
	assert_true(COORD_VERSION_AT_LEAST(COORD_VERSION_MAJOR, COORD_VERSION_MINOR,
					   COORD_VERSION_PATCH));
	assert_false(COORD_VERSION_AT_LEAST(COORD_VERSION_MAJOR, COORD_VERSION_MINOR,
					    COORD_VERSION_PATCH + 1));
}

/* What a test callback received. */
struct got {
	int n;
	int level[8];
	char msg[8][512];
	void *arg;
};

static void on_log(int level, const char *msg, void *arg)
{
	struct got *g = arg;

	g->arg = arg;
	if (g->n < 8) {
		g->level[g->n] = level;
		snprintf(g->msg[g->n], sizeof(g->msg[0]), "%s", msg);
	}
	g->n++;
}

static int noop(struct coord_ctx *ctx, const void *args, size_t len)
{
	(void)ctx;
	(void)args;
	(void)len;
	return 0;
}

/*
 * Make coord log one warning (a malformed TF_COORDINATOR_SCHEDULE_START_DELAY
 * read by coord_create()) and, with @held, one info message (coord_destroy()
 * while a RemoteValue is still held).
 */
static void make_logs(bool held)
{
	struct coord_registry *reg;
	struct coord_opts o;
	struct coord_error err;
	struct coord_rv *rv = NULL;
	struct coord *c;
	uint32_t id;

	assert_int_equal(coord_registry_create(&reg), 0);
	assert_int_equal(coord_registry_add(reg, "noop", noop), 0);
	coord_opts_init(&o);
	o.registry = reg;
	o.inproc_workers = 1;
	setenv("TF_COORDINATOR_SCHEDULE_START_DELAY", "soon", 1);
	assert_int_equal(coord_create(NULL, &o, &c, &err), 0);
	unsetenv("TF_COORDINATOR_SCHEDULE_START_DELAY");
	if (held) {
		assert_int_equal(coord_fn_lookup(c, "noop", &id, &err), 0);
		assert_int_equal(coord_schedule(c, id, NULL, 0, &rv, &err), 0);
		assert_int_equal(coord_join(c, &err), 0);
	}
	coord_destroy(c);
	coord_rv_put(rv);
	coord_registry_destroy(reg);
}

/* The callback gets every message at or above the level, with its level
 * and arg, and none below; NULL restores stderr. */
static void test_log_fn(void **state)
{
	struct got g = { 0 };
	int i, warns = 0, infos = 0;

	(void)state;
	assert_int_equal(coord_set_log_level(COORD_LOG_DEBUG + 1), COORD_EINVAL);
	assert_int_equal(coord_set_log_level(-1), COORD_EINVAL);
	coord_set_log_fn(on_log, &g);
	assert_int_equal(coord_set_log_level(COORD_LOG_INFO), COORD_LOG_WARN); /* $COORD_LOG */
	make_logs(true);
	assert_true(g.n >= 2);
	assert_ptr_equal(g.arg, &g);
	for (i = 0; i < g.n && i < 8; i++) {
		assert_true(g.level[i] <= COORD_LOG_INFO);
		assert_null(strchr(g.msg[i], '\n'));
		if (g.level[i] == COORD_LOG_WARN && strstr(g.msg[i], "TF_COORDINATOR_SCHEDULE"))
			warns++;
		if (g.level[i] == COORD_LOG_INFO && strstr(g.msg[i], "still held"))
			infos++;
	}
	assert_int_equal(warns, 1);
	assert_int_equal(infos, 1);

	/* error only: neither passes */
	memset(&g, 0, sizeof(g));
	assert_int_equal(coord_set_log_level(COORD_LOG_ERROR), COORD_LOG_INFO);
	make_logs(true);
	assert_int_equal(g.n, 0);

	/* warn: the warning, not the info */
	assert_int_equal(coord_set_log_level(COORD_LOG_WARN), COORD_LOG_ERROR);
	make_logs(true);
	assert_int_equal(g.n, 1);
	assert_int_equal(g.level[0], COORD_LOG_WARN);
	coord_set_log_fn(NULL, NULL);
	coord_set_log_level(COORD_LOG_ERROR);
}

/* The default logger: one line on stderr, "UTC-time prog[pid] level: msg". */
static void test_log_default_format(void **state)
{
	char path[] = "/tmp/coord_test_pkg_XXXXXX", line[1024], want[256];
	regex_t re;
	FILE *f;
	int fd, saved, n = 0;

	(void)state;
	fd = mkstemp(path);
	assert_true(fd >= 0);
	unlink(path);
	fflush(stderr);
	saved = dup(2);
	assert_true(saved >= 0);
	dup2(fd, 2);
	coord_set_log_fn(NULL, NULL);
	coord_set_log_level(COORD_LOG_WARN);
	make_logs(false);
	fflush(stderr);
	dup2(saved, 2);
	close(saved);
	coord_set_log_level(COORD_LOG_ERROR);

	snprintf(want, sizeof(want),
		 "^[0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9]{2}:[0-9]{2}:[0-9]{2}\\.[0-9]{3}Z "
		 "test_pkg\\[%ld\\] warn: .*TF_COORDINATOR_SCHEDULE_START_DELAY.*$",
		 (long)getpid());
	assert_int_equal(regcomp(&re, want, REG_EXTENDED | REG_NOSUB), 0);
	f = fdopen(fd, "r");
	assert_non_null(f);
	rewind(f);
	while (fgets(line, sizeof(line), f)) {
		line[strcspn(line, "\n")] = 0;
		print_message("logged: %s\n", line);
		if (regexec(&re, line, 0, NULL, 0) == 0)
			n++;
	}
	fclose(f);
	regfree(&re);
	assert_int_equal(n, 1);
}

/* Two callbacks, each with its own arg: a mismatch means a torn pair. */
static _Atomic int race_a, race_b, race_torn;
static int tag_a, tag_b;

static void on_log_a(int level, const char *msg, void *arg)
{
	(void)level;
	(void)msg;
	if (arg != &tag_a)
		atomic_fetch_add(&race_torn, 1);
	atomic_fetch_add(&race_a, 1);
}

static void on_log_b(int level, const char *msg, void *arg)
{
	(void)level;
	(void)msg;
	if (arg != &tag_b)
		atomic_fetch_add(&race_torn, 1);
	atomic_fetch_add(&race_b, 1);
}

#define RACE_LOGS 20000

static void *race_logger(void *p)
{
	(void)p;
	for (int i = 0; i < RACE_LOGS; i++)
		coord_log(COORD_LOG_WARN, "race %d", i);
	return NULL;
}

/* coord_set_log_fn() while two threads log: every message reaches exactly
 * one callback, always with that callback's own arg (bounded: a fixed
 * number of messages and swaps). */
static void test_log_fn_race(void **state)
{
	pthread_t t[2];

	(void)state;
	coord_set_log_level(COORD_LOG_WARN);
	coord_set_log_fn(on_log_a, &tag_a);
	for (int i = 0; i < 2; i++)
		assert_int_equal(pthread_create(&t[i], NULL, race_logger, NULL), 0);
	for (int i = 0; i < 2000; i++) {
		coord_set_log_fn(on_log_b, &tag_b);
		coord_set_log_fn(on_log_a, &tag_a);
	}
	for (int i = 0; i < 2; i++)
		pthread_join(t[i], NULL);
	coord_set_log_fn(NULL, NULL);
	coord_set_log_level(COORD_LOG_ERROR);
	assert_int_equal(atomic_load(&race_torn), 0);
	assert_int_equal(atomic_load(&race_a) + atomic_load(&race_b), 2 * RACE_LOGS);
}

/* _init() writes exactly the caller's size, and records it. */
static void test_opts_init_size(void **state)
{
	unsigned char buf[sizeof(struct coord_opts) + 64];
	struct coord_opts *o = (struct coord_opts *)buf;
	size_t sz;

	(void)state;
	memset(buf, 0xa5, sizeof(buf));
	coord_opts_init_size(o, 24);
	memcpy(&sz, buf, sizeof(sz));
	assert_int_equal(sz, 24);
	for (size_t i = 24; i < sizeof(buf); i++)
		assert_int_equal(buf[i], 0xa5);
	memset(buf, 0xa5, sizeof(buf));
	coord_opts_init_size(o, sizeof(buf) - 8);
	assert_int_equal(o->size, sizeof(buf) - 8);
	assert_int_equal(o->batch, 32);
	for (size_t i = sizeof(struct coord_opts); i < sizeof(buf) - 8; i++)
		assert_int_equal(buf[i], 0); /* a newer caller's unknown tail: zero */
	for (size_t i = sizeof(buf) - 8; i < sizeof(buf); i++)
		assert_int_equal(buf[i], 0xa5);
	coord_opts_init_size(NULL, sizeof(*o)); /* ignored */
}

/* coord_create() and the servers refuse a struct not filled by its init, and
 * accept a newer (larger) one while the options they do not know are 0. */
static void test_opts_size_checked(void **state)
{
	struct {
		struct coord_opts o;
		uint64_t newer_option;
	} big;
	struct coord_server_opts so;
	struct coord_slurm_opts sl;
	struct coord_registry *reg;
	struct coord_opts o;
	struct coord_error err;
	struct coord_spec *spec;
	struct coord *c;

	(void)state;
	assert_int_equal(coord_registry_create(&reg), 0);
	memset(&o, 0, sizeof(o));
	o.registry = reg;
	o.transport = "inproc";
	o.batch = 32;
	assert_int_equal(coord_create(NULL, &o, &c, &err), COORD_EINVAL);
	assert_non_null(strstr(err.msg, "coord_opts_init()"));

	coord_opts_init_size(&big.o, sizeof(big));
	big.o.registry = reg;
	big.o.inproc_workers = 1;
	assert_int_equal(coord_create(NULL, &big.o, &c, &err), 0);
	coord_destroy(c);
	big.newer_option = 1;
	assert_int_equal(coord_create(NULL, &big.o, &c, &err), COORD_EINVAL);
	assert_non_null(strstr(err.msg, "does not know"));

	coord_server_opts_init(&so);
	so.registry = reg;
	so.size = 0;
	assert_int_equal(coord_worker_serve(&so, &err), COORD_EINVAL);
	assert_non_null(strstr(err.msg, "coord_server_opts_init()"));
	assert_int_equal(coord_ps_serve(&so, &err), COORD_EINVAL);

	coord_slurm_opts_init(&sl);
	sl.size = 3;
	assert_int_equal(coord_spec_resolve_slurm(&sl, &spec, NULL, &err), COORD_EINVAL);
	assert_non_null(strstr(err.msg, "coord_slurm_opts_init()"));
	coord_registry_destroy(reg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_version),
		cmocka_unit_test(test_log_fn),
		cmocka_unit_test(test_log_default_format),
		cmocka_unit_test(test_log_fn_race),
		cmocka_unit_test(test_opts_init_size),
		cmocka_unit_test(test_opts_size_checked),
	};

	return cmocka_run_group_tests(tests, NULL, NULL);
}
