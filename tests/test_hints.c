// SPDX-License-Identifier: MIT
/*
 * tests/test_hints.c - worker affinity and priority (design.md B4), over
 * every transport from one table: inproc, tcp (coord-worker processes on
 * loopback), rdma (in the soft-RoCE rig).  Worker loss with hints (a strict
 * closure waits for its worker's recovery, fails UNAVAILABLE once it is
 * dropped) is in test_recovery.c, where workers are killed.
 *
 * Over the networked transports a worker's "room" is its connection's
 * window: these tests use a window of 1, so a worker running a closure has
 * none, as an in-process worker thread has none while it runs one.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/internal.h"
#include "transport/rdma_chan.h"
#include "helpers.h"

struct fx {
	struct coord_registry *reg;
	struct coord *c;
};

/* A coordinator of @nw workers, window 1, with these B4 options. */
static struct fx *fx_make(void **state, unsigned nw, int64_t aging_ms, int64_t fallback_ms)
{
	struct fx *f = calloc(1, sizeof(*f));
	struct coord_opts o;
	struct coord_error err;

	assert_non_null(f);
	t_reset_counters();
	f->reg = t_registry();
	t_opts(&o, f->reg);
	o.window = 1;
	o.priority_aging_ms = aging_ms;
	o.affinity_fallback_ms = fallback_ms;
	if (t_create(&o, nw, &f->c, &err)) {
		fprintf(stderr, "fx_make: %s\n", err.msg);
		abort();
	}
	*state = f;
	return f;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	atomic_store(&t_gate, 1);
	if (f) {
		coord_destroy(f->c);
		coord_registry_destroy(f->reg);
		free(f);
	}
	return 0;
}

/* Schedule @fn with these hints; the RemoteValue (asserts success). */
static struct coord_rv *sched(struct coord *c, uint32_t fn, const void *args, size_t len, int prio,
			      uint32_t aff, unsigned mode)
{
	struct coord_call call = { .fn = fn,
				   .args = args,
				   .len = len,
				   .priority = prio,
				   .affinity = aff,
				   .affinity_mode = mode };
	struct coord_error err = { 0 };
	struct coord_rv *rv = NULL;
	int r = coord_schedule_call(c, &call, &rv, &err);

	if (r)
		fprintf(stderr, "sched: %s\n", err.msg);
	assert_int_equal(r, 0);
	return rv;
}

static int32_t fetch_i32(struct coord_rv *rv)
{
	const void *v;
	size_t len;
	int32_t x;

	assert_int_equal(coord_rv_fetch(rv, &v, &len, NULL), 0);
	assert_int_equal(len, sizeof(x));
	memcpy(&x, v, sizeof(x));
	return x;
}

/* Wait (bounded) until @n functions have entered. */
static void wait_entered(long n)
{
	uint64_t until = t_now_ns() + 10000000000ull;

	while (atomic_load(&t_entered) < n && t_now_ns() < until)
		t_sleep_ns(100000);
	assert_true(atomic_load(&t_entered) >= n);
}

/* B4: a strict closure runs on its worker and nowhere else, while closures
 * without hints keep every worker busy. */
static void test_b4_strict_runs_there(void **state)
{
	struct fx *f = fx_make(state, 2, 100, 100);
	uint32_t who = t_fn(f->c, "sleep_us");
	struct coord_rv *pinned[100], *any[100];
	uint32_t us = 200;
	int on[2] = { 0, 0 };

	for (int i = 0; i < 100; i++) {
		pinned[i] = sched(f->c, who, &us, sizeof(us), 0, COORD_ON_WORKER(1),
				  COORD_AFFINITY_STRICT);
		any[i] = sched(f->c, who, &us, sizeof(us), 0, 0, 0);
	}
	assert_int_equal(coord_join(f->c, NULL), 0);
	for (int i = 0; i < 100; i++) {
		assert_int_equal(fetch_i32(pinned[i]), 1);
		on[fetch_i32(any[i])]++;
		coord_rv_put(pinned[i]);
		coord_rv_put(any[i]);
	}
	assert_true(on[0] > 0); /* worker 0 took the free ones meanwhile */
}

/* B4: a strict closure waits for its busy worker; other workers do not
 * take it, and closures without hints are not held up behind it. */
static void test_b4_strict_waits_for_busy_worker(void **state)
{
	struct fx *f = fx_make(state, 2, 100, 100);
	uint32_t gated = t_fn(f->c, "gated"), who = t_fn(f->c, "sleep_us");
	struct coord_rv *g, *pinned[8], *free_rv;
	uint32_t us = 0;

	g = sched(f->c, gated, NULL, 0, 0, COORD_ON_WORKER(1), COORD_AFFINITY_STRICT);
	wait_entered(1); /* worker 1 is busy until the gate opens */
	for (int i = 0; i < 8; i++)
		pinned[i] = sched(f->c, who, &us, sizeof(us), 0, COORD_ON_WORKER(1),
				  COORD_AFFINITY_STRICT);
	/* worker 0 runs unhinted work meanwhile */
	for (int i = 0; i < 20; i++) {
		free_rv = sched(f->c, who, &us, sizeof(us), 0, 0, 0);
		assert_int_equal(fetch_i32(free_rv), 0);
		coord_rv_put(free_rv);
	}
	t_sleep_ns(50000000); /* 50 ms: long past any fallback, were it preferred */
	for (int i = 0; i < 8; i++)
		assert_int_equal(coord_rv_state(pinned[i]), COORD_RV_NOT_READY);
	atomic_store(&t_gate, 1);
	assert_int_equal(fetch_i32(g), 1);
	for (int i = 0; i < 8; i++) {
		assert_int_equal(fetch_i32(pinned[i]), 1);
		coord_rv_put(pinned[i]);
	}
	coord_rv_put(g);
	assert_int_equal(coord_join(f->c, NULL), 0);
}

/* B4: preferred affinity falls back to another worker after the bound. */
static void test_b4_preferred_falls_back(void **state)
{
	struct fx *f = fx_make(state, 2, 100, 20);
	uint32_t gated = t_fn(f->c, "gated"), who = t_fn(f->c, "sleep_us");
	struct coord_rv *g, *pref[4], *idle_pref;
	uint32_t us = 0;
	uint64_t t0;

	/* With its worker idle, a preferred closure runs there. */
	idle_pref = sched(f->c, who, &us, sizeof(us), 0, COORD_ON_WORKER(1),
			  COORD_AFFINITY_PREFERRED);
	assert_int_equal(fetch_i32(idle_pref), 1);
	coord_rv_put(idle_pref);
	g = sched(f->c, gated, NULL, 0, 0, COORD_ON_WORKER(1), COORD_AFFINITY_STRICT);
	wait_entered(2);
	t0 = t_now_ns();
	for (int i = 0; i < 4; i++)
		pref[i] = sched(f->c, who, &us, sizeof(us), 0, COORD_ON_WORKER(1),
				COORD_AFFINITY_PREFERRED);
	for (int i = 0; i < 4; i++) {
		assert_int_equal(fetch_i32(pref[i]), 0); /* while worker 1 is gated */
		coord_rv_put(pref[i]);
	}
	/* not before the bound (20 ms) */
	assert_true(t_now_ns() - t0 >= 20000000ull);
	atomic_store(&t_gate, 1);
	assert_int_equal(fetch_i32(g), 1);
	coord_rv_put(g);
	assert_int_equal(coord_join(f->c, NULL), 0);
}

/* B4: a named set: closures run on its members only; the same members
 * name the same set; one member is COORD_ON_WORKER(). */
static void test_b4_affinity_set(void **state)
{
	struct fx *f = fx_make(state, 2, 100, 100);
	uint32_t who = t_fn(f->c, "sleep_us"), id, id2, one;
	unsigned both[] = { 1, 0, 1 }, w1[] = { 1 };
	struct coord_rv *rv[64];
	uint32_t us = 300;
	int on[2] = { 0, 0 };

	assert_int_equal(coord_affinity_set(f->c, both, 3, &id, NULL), 0);
	assert_int_equal(coord_affinity_set(f->c, both, 2, &id2, NULL), 0);
	assert_int_equal(id, id2);
	assert_true(id > COORD_ON_WORKER(1));
	assert_int_equal(coord_affinity_set(f->c, w1, 1, &one, NULL), 0);
	assert_int_equal(one, COORD_ON_WORKER(1));
	for (int i = 0; i < 64; i++)
		rv[i] = sched(f->c, who, &us, sizeof(us), 0, id, COORD_AFFINITY_STRICT);
	assert_int_equal(coord_join(f->c, NULL), 0);
	for (int i = 0; i < 64; i++) {
		on[fetch_i32(rv[i])]++;
		coord_rv_put(rv[i]);
	}
	assert_true(on[0] > 0 && on[1] > 0); /* both members ran some */
}

/* B4: bad hints are refused at schedule with a clear error. */
static void test_b4_bad_hints_refused(void **state)
{
	struct fx *f = fx_make(state, 2, 100, 100);
	uint32_t who = t_fn(f->c, "sleep_us"), id;
	struct coord_call call = { .fn = who };
	struct coord_error err;
	struct coord_rv *rv = NULL;
	unsigned bad[] = { 0, 7 };

	call.priority = 3;
	assert_int_equal(coord_schedule_call(f->c, &call, &rv, &err), COORD_EINVAL);
	assert_non_null(strstr(err.msg, "priority"));
	assert_null(rv);
	call.priority = COORD_PRIO_LOW - 1;
	assert_int_equal(coord_schedule_call(f->c, &call, &rv, &err), COORD_EINVAL);
	call.priority = 0;
	call.affinity = COORD_ON_WORKER(2); /* 2 workers: 0 and 1 */
	assert_int_equal(coord_schedule_call(f->c, &call, &rv, &err), COORD_EINVAL);
	assert_non_null(strstr(err.msg, "affinity"));
	call.affinity = 9999;
	assert_int_equal(coord_schedule_call(f->c, &call, &rv, &err), COORD_EINVAL);
	call.affinity = 0;
	call.affinity_mode = COORD_AFFINITY_PREFERRED; /* a mode needs an affinity */
	assert_int_equal(coord_schedule_call(f->c, &call, &rv, &err), COORD_EINVAL);
	call.affinity = COORD_ON_WORKER(0);
	call.affinity_mode = 2;
	assert_int_equal(coord_schedule_call(f->c, &call, &rv, &err), COORD_EINVAL);
	assert_int_equal(coord_affinity_set(f->c, bad, 2, &id, &err), COORD_EINVAL);
	assert_non_null(strstr(err.msg, "out of range"));
	assert_int_equal(coord_affinity_set(f->c, bad, 0, &id, &err), COORD_EINVAL);
	/* and the coordinator goes on */
	call.affinity_mode = COORD_AFFINITY_STRICT;
	assert_int_equal(coord_schedule_call(f->c, &call, &rv, &err), 0);
	assert_int_equal(fetch_i32(rv), 0);
	coord_rv_put(rv);
	assert_int_equal(coord_join(f->c, NULL), 0);
}

/* B4: higher priorities are dispatched first; oldest first within one. */
static void test_b4_priority_order(void **state)
{
	struct fx *f = fx_make(state, 1, 60000, 100); /* no aging within the test */
	uint32_t gated = t_fn(f->c, "gated"), order = t_fn(f->c, "order");
	struct coord_rv *g;
	long n = 0;

	g = sched(f->c, gated, NULL, 0, 0, 0, 0);
	wait_entered(1); /* the only worker is busy: everything below queues */
	for (int64_t i = 0; i < 40; i++) {
		int prio = (int)(i % 4) - 1; /* LOW, NORMAL, HIGH, URGENT, ... */
		int64_t tag = (prio + 1) * 1000 + i;

		coord_rv_put(sched(f->c, order, &tag, sizeof(tag), prio, 0, 0));
	}
	atomic_store(&t_gate, 1);
	assert_int_equal(coord_join(f->c, NULL), 0);
	coord_rv_put(g);
	assert_int_equal(atomic_load(&t_norder), 40);
	for (int lvl = 3; lvl >= 0; lvl--)
		for (int64_t k = 0; k < 10; k++, n++)
			/* level lvl's tags, in the order they were scheduled */
			assert_int_equal(t_order[n], lvl * 1000 + lvl + 4 * k);
}

/* B4: a low-priority closure is not starved by a stream of urgent ones
 * that keep arriving: it ages up (one level per aging period), then wins
 * on age, and runs while most urgent work is still queued. */
static void test_b4_low_not_starved(void **state)
{
	struct fx *f = fx_make(state, 1, 10, 100); /* one level per 10 ms */
	uint32_t gated = t_fn(f->c, "gated"), who = t_fn(f->c, "sleep_us");
	struct coord_rv *g, *low, *urgent[300];
	uint32_t us = 1000, zero = 0;
	long ran_before;

	g = sched(f->c, gated, NULL, 0, 0, 0, 0);
	wait_entered(1);
	low = sched(f->c, who, &zero, sizeof(zero), COORD_PRIO_LOW, 0, 0);
	for (int i = 0; i < 300; i++) /* 300 ms of urgent work, all newer */
		urgent[i] = sched(f->c, who, &us, sizeof(us), COORD_PRIO_URGENT, 0, 0);
	atomic_store(&t_gate, 1);
	assert_int_equal(fetch_i32(low), 0);
	ran_before = atomic_load(&t_exited);
	assert_true(ran_before < 250); /* most urgent ones were still waiting */
	assert_int_equal(coord_join(f->c, NULL), 0);
	coord_rv_put(g);
	coord_rv_put(low);
	for (int i = 0; i < 300; i++)
		coord_rv_put(urgent[i]);
}

/* B4 with S3: hinted closures still queued are cancelled by an error, and
 * nothing is executing when the error is returned. */
static void test_b4_s3_hinted_cancelled(void **state)
{
	struct fx *f = fx_make(state, 2, 100, 100);
	uint32_t gated = t_fn(f->c, "gated"), who = t_fn(f->c, "sleep_us"),
		 failfn = t_fn(f->c, "fail");
	struct coord_rv *g, *pinned[16], *bad;
	struct coord_error err;
	uint32_t us = 0;

	g = sched(f->c, gated, NULL, 0, 0, COORD_ON_WORKER(1), COORD_AFFINITY_STRICT);
	wait_entered(1);
	for (int i = 0; i < 16; i++)
		pinned[i] = sched(f->c, who, &us, sizeof(us), i % 2 ? COORD_PRIO_HIGH : 0,
				  COORD_ON_WORKER(1), COORD_AFFINITY_STRICT);
	bad = sched(f->c, failfn, NULL, 0, COORD_PRIO_URGENT, COORD_ON_WORKER(0),
		    COORD_AFFINITY_STRICT);
	/* the error is kept until a call returns it; open the gate so the
	 * canceller's wait for in-flight closures ends */
	assert_int_equal(coord_rv_fetch_timeout(bad, 10000000000ll, NULL, NULL, NULL), -EIO);
	atomic_store(&t_gate, 1);
	assert_int_equal(coord_join(f->c, &err), -EIO);
	assert_int_equal(atomic_load(&t_entered), atomic_load(&t_exited));
	for (int i = 0; i < 16; i++) {
		/* each was cancelled, or ran on its worker before the error */
		enum coord_rv_state st = coord_rv_state(pinned[i]);

		assert_true(st == COORD_RV_CANCELLED || st == COORD_RV_READY);
		if (st == COORD_RV_READY)
			assert_int_equal(fetch_i32(pinned[i]), 1);
		coord_rv_put(pinned[i]);
	}
	assert_int_equal(coord_rv_state(g), COORD_RV_READY);
	coord_rv_put(g);
	coord_rv_put(bad);
	assert_int_equal(coord_join(f->c, NULL), 0);
}

/* B4 with B1: a consumer with a strict affinity runs there once its input
 * is ready. */
static void test_b4_consumer_with_affinity(void **state)
{
	struct fx *f = fx_make(state, 2, 100, 100);
	uint32_t who = t_fn(f->c, "sleep_us");
	struct coord_rv *in, *out;
	uint32_t us = 1000;
	struct coord_call call = { .fn = who,
				   .priority = COORD_PRIO_HIGH,
				   .affinity = COORD_ON_WORKER(0),
				   .affinity_mode = COORD_AFFINITY_STRICT };

	in = sched(f->c, who, &us, sizeof(us), 0, COORD_ON_WORKER(1), COORD_AFFINITY_STRICT);
	call.inputs = &in;
	call.ninputs = 1;
	assert_int_equal(coord_schedule_call(f->c, &call, &out, NULL), 0);
	assert_int_equal(fetch_i32(out), 0);
	assert_int_equal(fetch_i32(in), 1);
	coord_rv_put(in);
	coord_rv_put(out);
	assert_int_equal(coord_join(f->c, NULL), 0);
}

/* B4: coord_schedule_many() with hinted calls keeps each call's hints. */
static void test_b4_schedule_many_hinted(void **state)
{
	struct fx *f = fx_make(state, 2, 100, 100);
	uint32_t who = t_fn(f->c, "sleep_us");
	struct coord_call calls[32];
	struct coord_rv *rv[32];
	uint32_t us = 100;
	size_t queued;

	for (int i = 0; i < 32; i++)
		calls[i] = (struct coord_call){ .fn = who,
						.args = &us,
						.len = sizeof(us),
						.affinity = i % 2 ? COORD_ON_WORKER(1) : 0 };
	assert_int_equal(coord_schedule_many(f->c, calls, 32, rv, &queued, NULL), 0);
	assert_int_equal(queued, 32);
	assert_int_equal(coord_join(f->c, NULL), 0);
	for (int i = 0; i < 32; i++) {
		int32_t w = fetch_i32(rv[i]);

		if (i % 2)
			assert_int_equal(w, 1);
		coord_rv_put(rv[i]);
	}
}

static int tcp_group_setup(void **state)
{
	(void)state;
	t_transport = "tcp";
	return t_workers_start(2) == 0 ? 0 : -1;
}

static int rdma_group_setup(void **state)
{
	(void)state;
	setenv("COORD_CLUSTER_KEY",
	       "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff", 1);
	t_transport = "rdma";
	return t_workers_start(2) == 0 ? 0 : -1;
}

static int group_teardown(void **state)
{
	(void)state;
	t_workers_stop();
	t_transport = "inproc";
	unsetenv("COORD_CLUSTER_KEY");
	return 0;
}

/* Is group @name selected by $T_GROUPS (a comma list; default: all)? */
static bool group_on(const char *name)
{
	const char *g = getenv("T_GROUPS");
	size_t n = strlen(name);

	for (const char *p = g; p && *p; p += strcspn(p, ",") + (p[strcspn(p, ",")] != 0))
		if (strncmp(p, name, n) == 0 && (p[n] == ',' || p[n] == 0))
			return true;
	return !g || !*g;
}

int main(void)
{
#define T(fn) cmocka_unit_test_teardown(fn, teardown)
#define HINT_TESTS                                                                                 \
	T(test_b4_strict_runs_there), T(test_b4_strict_waits_for_busy_worker),                     \
		T(test_b4_preferred_falls_back), T(test_b4_affinity_set),                          \
		T(test_b4_bad_hints_refused), T(test_b4_priority_order),                           \
		T(test_b4_low_not_starved), T(test_b4_s3_hinted_cancelled),                        \
		T(test_b4_consumer_with_affinity), T(test_b4_schedule_many_hinted)
	const struct CMUnitTest tests[] = { HINT_TESTS };
	struct coord_error err = { 0 };
	int failed = 0;

	t_watchdog(600);
	if (getenv("T_FILTER"))
		cmocka_set_test_filter(getenv("T_FILTER"));
	if (group_on("inproc"))
		failed += cmocka_run_group_tests_name("hints/inproc", tests, NULL, NULL);
	if (group_on("tcp"))
		failed += cmocka_run_group_tests_name("hints/tcp", tests, tcp_group_setup,
						      group_teardown);
	if (group_on("rdma")) {
		if (coord_rdma_available(&err) == 0) {
			failed += cmocka_run_group_tests_name("hints/rdma", tests, rdma_group_setup,
							      group_teardown);
		} else {
			printf("hints/rdma: skipped: %s\n", err.msg);
			if (getenv("T_GROUPS") && !strcmp(getenv("T_GROUPS"), "rdma"))
				return 77;
		}
	}
	return failed;
}
