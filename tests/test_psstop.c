// SPDX-License-Identifier: MIT
/*
 * tests/test_psstop.c - a ps task that stops answering (SIGSTOP: a stalled
 * or preempted host), without a namespace or root: a local coord-ps and
 * coord-worker over tcp.  The coordinator's own update in flight is sent
 * again under its key and counted once (runtime/ps/ps.h "At most once",
 * coord_psc_run_sure()); the workers' ps client times out after the
 * coordinator's ps_timeout_ms (PS_OPTS, transport/wire/wire.h); one whose
 * ps died is not sent again for long.  The same
 * with a real partition: tests/test_pspart.c.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <pthread.h>
#include <dirent.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include <coord/var.h>

#include "helpers.h"

static struct coord_registry *reg;

/* coord-ps and one coord-worker on 127.0.0.1 (no key); a coordinator with
 * @hb_ms x 3 heartbeats, @ps_timeout_ms, ps failures fatal at once. */
static struct coord *local_make(pid_t *pps, pid_t *pwk, int hb_ms, int ps_timeout_ms)
{
	char *pargv[] = {
		getenv("COORD_PS_BIN"), "--listen", "127.0.0.1:0", "--log", "error", NULL
	};
	char *wargv[] = { getenv("COORD_WORKER_BIN"),
			  "--fns",
			  getenv("COORD_TESTFNS"),
			  "--listen",
			  "127.0.0.1:0",
			  "--log",
			  "error",
			  NULL };
	struct coord_spec *sp = NULL;
	struct coord_error err;
	struct coord_opts o;
	struct coord *c = NULL;
	unsigned pport, wport;
	char spec[160];

	*pps = t_spawn(pargv, "coord-ps", &pport);
	*pwk = t_spawn(wargv, "coord-worker", &wport);
	assert_true(*pps > 0 && *pwk > 0);
	snprintf(spec, sizeof(spec), "{\"worker\": [\"127.0.0.1:%u\"], \"ps\": [\"127.0.0.1:%u\"]}",
		 wport, pport);
	coord_opts_init(&o);
	o.registry = reg;
	o.transport = "tcp";
	o.heartbeat_ms = hb_ms;
	o.heartbeat_misses = 3;
	o.ps_timeout_ms = ps_timeout_ms;
	o.ps_failure_threshold = 0;
	assert_int_equal(coord_spec_parse(spec, &sp, &err), 0);
	if (coord_create(sp, &o, &c, &err) != 0)
		fail_msg("coord_create: %s", err.msg);
	coord_spec_destroy(sp);
	return c;
}

static void local_stop(struct coord *c, pid_t ps, pid_t wk)
{
	coord_destroy(c);
	t_reap(wk);
	if (ps > 0) {
		kill(ps, SIGCONT);
		t_reap(ps);
	}
}

/* Stop @pid and wait (at most 10 s) until every thread of it is stopped:
 * kill() returns before a thread running on another CPU has stopped. */
static void stop(pid_t pid)
{
	uint64_t until = t_now_ns() + 10000000000ull;
	char path[64];

	assert_int_equal(kill(pid, SIGSTOP), 0);
	snprintf(path, sizeof(path), "/proc/%d/task", (int)pid);
	for (;;) {
		unsigned running = 0, n = 0;
		struct dirent *de;
		DIR *d = opendir(path);

		assert_non_null(d);
		while ((de = readdir(d)) && n++ < 4096) {
			char sp[400], st[512], *e;
			FILE *f;

			if (de->d_name[0] == '.')
				continue;
			snprintf(sp, sizeof(sp), "%s/%s/stat", path, de->d_name);
			f = fopen(sp, "r");
			if (!f)
				continue;
			if (fgets(st, sizeof(st), f) && (e = strrchr(st, ')')) && e[1] == ' ' &&
			    e[2] != 'T' && e[2] != 't')
				running++;
			fclose(f);
		}
		closedir(d);
		if (!running)
			return;
		assert_true(t_now_ns() < until);
		t_sleep_ns(1000000);
	}
}

/*
 * The coordinator's own update in flight while its ps is stopped for 2.5 s
 * (longer than the heartbeat's 1.5 s: the connection is lost and the
 * update's outcome unknown): sent again under its key once the ps answers
 * (coord_psc_run_sure()), the call succeeds, and the variable counts it
 * once (the first copy, read late, is given up by the ps: Give-up).  Three
 * times.  (test_coordinator_updates_sum_exactly: replies lost after the
 * ps applied the update, in a namespace.)
 */
static void test_coordinator_update_through_stopped_ps(void **state)
{
	uint64_t dims[1] = { 1 };
	struct coord_error err;
	struct coord *c;
	coord_var_t var;
	pid_t ps, wk;
	float x = -1;

	(void)state;
	c = local_make(&ps, &wk, 500, 30000);
	assert_int_equal(coord_var_create(c, "stopped/x", 1, dims, NULL, &var, &err), 0);
	for (int i = 1; i <= 3; i++) {
		struct t_one_add q = { .c = c, .var = var };
		pthread_t th;

		stop(ps);
		assert_int_equal(pthread_create(&th, NULL, t_one_add_main, &q), 0);
		t_sleep_ns(2500000000ull);
		assert_int_equal(kill(ps, SIGCONT), 0);
		pthread_join(th, NULL);
		if (q.r != 0)
			fail_msg("call %d: %d %s", i, q.r, q.msg);
		if (q.ns < 1000000000ull) /* it waited the stop out */
			fail_msg("call %d: done after %.3f s", i, q.ns / 1e9);
		assert_int_equal(coord_var_read(c, var, 0, 1, &x, &err), 0);
		assert_true(x == (float)i);
	}
	local_stop(c, ps, wk);
}

/*
 * A ps that dies with the coordinator's update in flight (stopped, then
 * killed): the update's outcome is unknown, but a dial refused (nothing
 * listens: the process is gone, and with it what it applied) ends the
 * re-sends, so the call fails at once, not after ps_timeout_ms (30 s),
 * saying the update may or may not have been applied.
 */
static void test_coordinator_update_ps_died(void **state)
{
	uint64_t dims[1] = { 1 };
	struct t_one_add q = { 0 };
	struct coord_error err;
	pthread_t th;
	pid_t ps, wk;

	(void)state;
	q.c = local_make(&ps, &wk, 500, 30000);
	assert_int_equal(coord_var_create(q.c, "died/x", 1, dims, NULL, &q.var, &err), 0);
	stop(ps);
	assert_int_equal(pthread_create(&th, NULL, t_one_add_main, &q), 0);
	t_sleep_ns(300000000);
	assert_int_equal(kill(ps, SIGKILL), 0);
	assert_int_equal(waitpid(ps, NULL, 0), ps);
	pthread_join(th, NULL);
	printf("# the ps killed under an update: %d after %.2f s: %s\n", q.r, q.ns / 1e9, q.msg);
	assert_int_equal(q.r, COORD_EUNAVAILABLE);
	assert_non_null(strstr(q.msg, "may or may not have been applied"));
	assert_true(q.ns < 20000000000ull); /* not ps_timeout_ms */
	local_stop(q.c, -1, wk);
}

/*
 * The workers' ps timeout follows the coordinator's option (PS_OPTS): with
 * heartbeats off and ps_timeout_ms 1000, a closure whose ps stops
 * answering (SIGSTOP) fails as a ps failure (UNAVAILABLE, cause ps task
 * 0, at once: threshold 0) well within the 30 s the workers used to wait.
 */
static void test_worker_ps_timeout_follows_coordinator(void **state)
{
	struct t_var_args a = { .off = 0, .n = 1, .val = 1.0f };
	uint64_t dims[1] = { 1 }, t0;
	struct coord_error err;
	struct coord_rv *rv;
	struct coord *c;
	coord_var_t var;
	pid_t ps, wk;
	int e;

	(void)state;
	c = local_make(&ps, &wk, 0, 1000);
	assert_int_equal(coord_var_create(c, "wtimeout/x", 1, dims, NULL, &var, &err), 0);
	a.var = var;
	assert_int_equal(coord_schedule(c, t_fn(c, "var_add"), &a, sizeof(a), &rv, &err), 0);
	assert_int_equal(coord_rv_fetch_timeout(rv, 60000000000ll, NULL, NULL, &err), 0);
	coord_rv_put(rv); /* the worker's ps connection is up */
	stop(ps);
	t0 = t_now_ns();
	assert_int_equal(coord_schedule(c, t_fn(c, "var_add"), &a, sizeof(a), &rv, &err), 0);
	e = coord_rv_fetch_timeout(rv, 20000000000ll, NULL, NULL, &err);
	printf("# a closure on a stopped ps: %d after %.2f s (%s)\n", e, (t_now_ns() - t0) / 1e9,
	       err.msg);
	assert_int_equal(e, COORD_EUNAVAILABLE); /* not -ETIMEDOUT: within 20 s */
	assert_int_equal(err.cause, 1);
	coord_rv_put(rv);
	assert_int_equal(coord_join(c, &err), COORD_EUNAVAILABLE); /* the job's error too */
	local_stop(c, ps, wk);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_coordinator_update_through_stopped_ps),
		cmocka_unit_test(test_coordinator_update_ps_died),
		cmocka_unit_test(test_worker_ps_timeout_follows_coordinator),
	};
	int failed;

	t_watchdog(300);
	reg = t_registry();
	failed = cmocka_run_group_tests_name("psstop/tcp", tests, NULL, NULL);
	coord_registry_destroy(reg);
	return failed;
}
