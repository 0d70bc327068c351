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
 *
 * This file: main(), the group tables and the fixtures; the tests are in
 * hints_affinity.c, hints_priority.c and hints_contract.c, linked into the
 * same executable (hints_tests.h).
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

/* A coordinator of @nw workers with these B4 options, a tcp window of
 * @window, @loops event loops (0: the group's, helpers.h t_tcp_loops) and
 * a ring of @ring_cap slots (0: unbounded, S14; -1: the default). */
struct fx *fx_make_opts(void **state, unsigned nw, int64_t aging_ms, int64_t fallback_ms,
			unsigned window, unsigned loops, int ring_cap)
{
	struct fx *f = calloc(1, sizeof(*f));
	struct coord_opts o;
	struct coord_error err;

	assert_non_null(f);
	t_reset_counters();
	f->reg = t_registry();
	t_opts(&o, f->reg);
	o.window = window;
	if (loops)
		o.tcp_loops = loops;
	if (ring_cap >= 0)
		o.ring_capacity = (unsigned)ring_cap;
	o.priority_aging_ms = aging_ms;
	o.affinity_fallback_ms = fallback_ms;
	if (t_create(&o, nw, &f->c, &err)) {
		fprintf(stderr, "fx_make: %s\n", err.msg);
		abort();
	}
	*state = f;
	return f;
}

/* A coordinator of @nw workers, window 1, with these B4 options. */
struct fx *fx_make(void **state, unsigned nw, int64_t aging_ms, int64_t fallback_ms)
{
	return fx_make_opts(state, nw, aging_ms, fallback_ms, 1, 0, -1);
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
struct coord_rv *sched(struct coord *c, uint32_t fn, const void *args, size_t len, int prio,
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

int32_t fetch_i32(struct coord_rv *rv)
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
void wait_entered(long n)
{
	uint64_t until = t_now_ns() + 10000000000ull;

	while (atomic_load(&t_entered) < n && t_now_ns() < until)
		t_sleep_ns(100000);
	assert_true(atomic_load(&t_entered) >= n);
}

int main(void)
{
#define T(fn) cmocka_unit_test_teardown(fn, teardown)
#define HINT_TESTS                                                                                 \
	T(test_b4_strict_runs_there), T(test_b4_strict_waits_for_busy_worker),                     \
		T(test_b4_preferred_runs_on_idle), T(test_b4_preferred_falls_back),                \
		T(test_b4_affinity_set), T(test_b4_bad_hints_refused), T(test_b4_priority_order),  \
		T(test_b4_low_not_starved), T(test_b4_plain_not_starved),                          \
		T(test_b4_s3_hinted_cancelled), T(test_b4_consumer_with_affinity),                 \
		T(test_b4_schedule_many_hinted), T(test_b4_targeted_not_put_back),                 \
		T(test_b4_waiting_costs_no_cpu), T(test_b4_error_with_hinted_queued_no_spin),      \
		T(test_b4_destroy_with_hinted_queued), T(test_b4_backpressure),                    \
		T(test_b4_unbounded), T(test_b4_waits_for_staggered_start),                        \
		T(test_b4_stress_random)
	const struct CMUnitTest tests[] = { HINT_TESTS };
	struct coord_error err = { 0 };
	int failed = 0;

	t_watchdog(600);
	if (getenv("T_FILTER"))
		cmocka_set_test_filter(getenv("T_FILTER"));
	if (t_group_on("inproc"))
		failed += cmocka_run_group_tests_name("hints/inproc", tests, NULL, NULL);
	if (t_group_on("tcp"))
		failed += cmocka_run_group_tests_name("hints/tcp", tests, t_group_tcp,
						      t_group_inproc);
	/* Over two event loops: a closure only the other loop's worker may
	 * run (B4) is taken and placed across loops (helpers.h t_tcp_loops). */
	if (t_group_on("tcp-loops"))
		failed += cmocka_run_group_tests_name("hints/tcp-loops", tests, t_group_tcp_loops,
						      t_group_inproc);
	if (t_group_on("rdma")) {
		if (coord_rdma_usable(&err) == 0) {
			failed += cmocka_run_group_tests_name("hints/rdma", tests, t_group_rdma,
							      t_group_inproc);
		} else {
			printf("hints/rdma: skipped: %s\n", err.msg);
			if (getenv("T_GROUPS") && !strcmp(getenv("T_GROUPS"), "rdma"))
				return 77;
		}
	}
	return failed;
}
