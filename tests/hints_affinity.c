// SPDX-License-Identifier: MIT
/*
 * tests/hints_affinity.c - part of test_hints: B4's affinity (strict,
 * preferred and its fallback, named sets) and bad hints refused.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "runtime/core/internal.h"
#include "transport/rdma_provider.h"
#include "helpers.h"
#include "hints_tests.h"

/* B4: a strict closure runs on its worker and nowhere else, mixed with
 * closures without hints (which worker runs those is timing: on a loaded
 * machine worker 0's thread may not run before worker 1 has done them all;
 * that worker 0 takes them while worker 1 is busy is the next test's,
 * which holds worker 1 with a gate). */
void test_b4_strict_runs_there(void **state)
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
	assert_int_equal(on[0] + on[1], 100); /* each free one ran on a worker */
}

/* B4: a strict closure waits for its busy worker; other workers do not
 * take it, and closures without hints are not held up behind it. */
void test_b4_strict_waits_for_busy_worker(void **state)
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

/* B4: with its worker idle, a preferred closure runs there (a fallback
 * bound far beyond any scheduling delay of a loaded machine). */
void test_b4_preferred_runs_on_idle(void **state)
{
	struct fx *f = fx_make(state, 2, 100, 30000);
	uint32_t who = t_fn(f->c, "sleep_us");
	uint32_t us = 0;

	for (int i = 0; i < 8; i++) {
		struct coord_rv *rv = sched(f->c, who, &us, sizeof(us), 0, COORD_ON_WORKER(1),
					    COORD_AFFINITY_PREFERRED);

		assert_int_equal(fetch_i32(rv), 1);
		coord_rv_put(rv);
	}
	assert_int_equal(coord_join(f->c, NULL), 0);
}

/* B4: preferred affinity falls back to another worker after the bound. */
void test_b4_preferred_falls_back(void **state)
{
	struct fx *f = fx_make(state, 2, 100, 20);
	uint32_t gated = t_fn(f->c, "gated"), who = t_fn(f->c, "sleep_us");
	struct coord_rv *g, *pref[4];
	uint32_t us = 0;
	uint64_t t0;

	g = sched(f->c, gated, NULL, 0, 0, COORD_ON_WORKER(1), COORD_AFFINITY_STRICT);
	wait_entered(1);
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

/* Gate worker @w (a strict "gated" closure entered there), run @n closures
 * strict on set @id meanwhile: each must run on a member other than @w. */
static void set_while_gated(struct fx *f, uint32_t id, int32_t w, int32_t other, int n)
{
	uint32_t gated = t_fn(f->c, "gated"), who = t_fn(f->c, "sleep_us");
	long entered = atomic_load(&t_entered);
	struct coord_rv *g, *rv[8];
	uint32_t us = 0;

	assert_true(n <= 8);
	atomic_store(&t_gate, 0);
	g = sched(f->c, gated, NULL, 0, 0, COORD_ON_WORKER(w), COORD_AFFINITY_STRICT);
	wait_entered(entered + 1); /* @w has no room until the gate opens */
	for (int i = 0; i < n; i++)
		rv[i] = sched(f->c, who, &us, sizeof(us), 0, id, COORD_AFFINITY_STRICT);
	for (int i = 0; i < n; i++) {
		assert_int_equal(fetch_i32(rv[i]), other); /* gate still closed */
		coord_rv_put(rv[i]);
	}
	atomic_store(&t_gate, 1);
	assert_int_equal(fetch_i32(g), w);
	coord_rv_put(g);
}

/* B4: a named set: closures run on its members only (worker 0, idle, is
 * not one), and on each of them (the other member gated); the same members
 * name the same set; one member is COORD_ON_WORKER(). */
void test_b4_affinity_set(void **state)
{
	struct fx *f = fx_make(state, 3, 100, 100);
	uint32_t who = t_fn(f->c, "sleep_us"), id, id2, one;
	unsigned both[] = { 2, 1, 2 }, w1[] = { 1 };
	struct coord_rv *rv[64];
	uint32_t us = 300;
	int on[3] = { 0, 0, 0 };

	assert_int_equal(coord_affinity_set(f->c, both, 3, &id, NULL), 0);
	assert_int_equal(coord_affinity_set(f->c, both, 2, &id2, NULL), 0);
	assert_int_equal(id, id2);
	assert_true(id > COORD_ON_WORKER(2));
	assert_int_equal(coord_affinity_set(f->c, w1, 1, &one, NULL), 0);
	assert_int_equal(one, COORD_ON_WORKER(1));
	for (int i = 0; i < 64; i++)
		rv[i] = sched(f->c, who, &us, sizeof(us), 0, id, COORD_AFFINITY_STRICT);
	assert_int_equal(coord_join(f->c, NULL), 0);
	for (int i = 0; i < 64; i++) {
		on[fetch_i32(rv[i])]++;
		coord_rv_put(rv[i]);
	}
	assert_int_equal(on[0], 0); /* members only */
	assert_int_equal(on[1] + on[2], 64);
	/* Which member runs which is up to the dispatchers: with one member
	 * busy, the other must take them (deterministic, not by chance). */
	set_while_gated(f, id, 1, 2, 8);
	set_while_gated(f, id, 2, 1, 8);
	assert_int_equal(coord_join(f->c, NULL), 0);
}

/* B4: bad hints are refused at schedule with a clear error. */
void test_b4_bad_hints_refused(void **state)
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
