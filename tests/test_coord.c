// SPDX-License-Identifier: MIT
/*
 * tests/test_coord.c - the coordinator's contract (design.md S1-S9, S13-S15,
 * B1, B3, B7, B8) over every transport: main() and the group tables, the
 * fixtures and fetch helpers the parts share, and the two placement tests of
 * issue 20 (test_s2_idle_worker_not_left_idle, test_s13_stagger_spreads).
 * The other tests are in the parts linked into the same executable,
 * declared in coord_tests.h: coord_s1_s3.c, coord_s4_s7.c, coord_s8_s9.c,
 * coord_s13_s15.c, coord_b1.c, coord_b7_w1.c.  Each test names its item.
 *
 * "Nothing is executing": every test function counts t_entered / t_exited,
 * so entered == exited means no function is running at that instant.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/coord_pvt.h"
#include "runtime/core/internal.h"
#include "transport/rdma_provider.h"
#include "helpers.h"
#include "coord_tests.h"

int setup_n(void **state, unsigned nworkers, unsigned cap)
{
	return t_fx_setup(state, nworkers, cap);
}

static int setup2(void **state)
{
	return setup_n(state, 2, COORD_RING_DEFAULT);
}

static int setup1(void **state)
{
	return setup_n(state, 1, COORD_RING_DEFAULT);
}

int teardown(void **state)
{
	return t_fx_teardown(state);
}

/* Fetch a value that must succeed and be exactly @n bytes into @out. */
void fetch_exact(struct coord_rv *rv, void *out, size_t n)
{
	const void *v;
	size_t len;

	assert_int_equal(coord_rv_fetch(rv, &v, &len, NULL), 0);
	assert_int_equal(len, n);
	memcpy(out, v, n);
}

int64_t fetch_i64(struct coord_rv *rv)
{
	int64_t x;

	fetch_exact(rv, &x, sizeof(x));
	return x;
}

int32_t fetch_i32(struct coord_rv *rv)
{
	int32_t x;

	fetch_exact(rv, &x, sizeof(x));
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

/*
 * S2, placement (issue 20): a closure never waits in one worker's window
 * while another worker is idle and could run it.  Two workers; one closure
 * of 2 s, then ten of 50 ms, all scheduled at once (none known yet).  The
 * ten take 0.5 s on the other worker; none of them may wait behind the
 * long one until it ends: nothing may wait sent ahead (or in an inproc
 * worker's batch) behind it (place.h PL6; before it, inproc ran 4 of the
 * ten, tcp 5, behind the long one).
 */
static void test_s2_idle_worker_not_left_idle(void **state)
{
	struct t_fx *f = *state;
	uint32_t sl = t_fn(f->c, "sleep_us"), ul = 2000000, us = 50000;
	struct coord_rv *l, *sh[10];
	struct coord_metrics m;
	int32_t wl, on_wl = 0;

	assert_int_equal(coord_schedule(f->c, sl, &ul, sizeof(ul), &l, NULL), 0);
	for (int i = 0; i < 10; i++)
		assert_int_equal(coord_schedule(f->c, sl, &us, sizeof(us), &sh[i], NULL), 0);
	wl = fetch_i32(l);
	for (int i = 0; i < 10; i++) {
		on_wl += fetch_i32(sh[i]) == wl;
		coord_rv_put(sh[i]);
	}
	coord_rv_put(l);
	print_message("placement: %d of 10 short closures ran behind the long one\n", on_wl);
	assert_int_equal(on_wl, 0);
	/* what was given back never ran: not counted as put back (nor its
	 * attempt raised: test_b4_targeted_not_put_back) */
	assert_int_equal(coord_metrics(f->c, &m, NULL, 0), 0);
	assert_int_equal(m.put_back, 0);
}

/*
 * S13 with long closures (issue 20, item 2): a worker whose delay has passed
 * takes work at once; nothing sits sent ahead to worker 0 that the others
 * could run.  Three workers started 0 / 150 / 300 ms apart, 30 closures of
 * 40 ms: worker 0 alone runs about 4 before worker 1 starts, then they
 * share; each worker runs several, and join comes well before the 1.2 s
 * that worker 0 alone would take.
 */
static void test_s13_stagger_spreads(void **state)
{
	struct coord_registry *reg = t_registry();
	struct coord_rv *rv[30];
	struct coord_opts o;
	struct coord *c;
	uint32_t sleep_us, us = 40000;
	unsigned ran[3] = { 0 };
	uint64_t t0;

	t_reset_counters();
	t_opts(&o, reg);
	o.start_delay_ms = 150;
	o.start_delay_max_ms = 300;
	assert_int_equal(t_create(&o, 3, &c, NULL), 0);
	sleep_us = t_fn(c, "sleep_us");
	t0 = t_now_ns();
	for (int i = 0; i < 30; i++)
		assert_int_equal(coord_schedule(c, sleep_us, &us, sizeof(us), &rv[i], NULL), 0);
	assert_int_equal(coord_join(c, NULL), 0);
	printf("# stagger: join after %llu ms\n",
	       (unsigned long long)((t_now_ns() - t0) / 1000000));
	for (int i = 0; i < 30; i++) {
		const void *v;
		size_t len;
		int32_t w;

		assert_int_equal(coord_rv_fetch(rv[i], &v, &len, NULL), 0);
		assert_int_equal(len, sizeof(w));
		memcpy(&w, v, sizeof(w));
		assert_true(w >= 0 && w < 3);
		ran[w]++;
		coord_rv_put(rv[i]);
	}
	printf("# stagger: %u / %u / %u closures\n", ran[0], ran[1], ran[2]);
	/* Fair shares from their starts are about 13 / 10 / 7. */
	for (int w = 0; w < 3; w++)
		assert_true(ran[w] >= 3);
	coord_destroy(c);
	coord_registry_destroy(reg);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup2, teardown)
#define T1(fn) cmocka_unit_test_setup_teardown(fn, setup1, teardown)
/* The contract, once per transport (one configuration table). */
#define CONTRACT_TESTS                                                                             \
	T(test_s1_schedule_returns_at_once), cmocka_unit_test(test_s1_backpressure_tiny_ring),     \
		T(test_s2_runs_on_any_worker), T(test_s2_idle_worker_not_left_idle),               \
		T(test_s2_packed_behind_long_taken_back), T(test_s2_taken_back_runs_once),         \
		T(test_s3_taken_back_race), T(test_s3_schedule_returns_error_nothing_executing),   \
		cmocka_unit_test(test_s3_not_started_behind_long_is_cancelled),                    \
		cmocka_unit_test(test_s3_cancel_reaches_windows),                                  \
		T(test_s3_running_closure_keeps_outcome), T(test_s3_only_first_error_returned),    \
		T(test_s3_generation_taken_when_queued),                                           \
		T(test_s3_new_round_error_kept_while_cancelling),                                  \
		T(test_s3_old_round_error_not_returned), T(test_s4_join_waits_for_all),            \
		T(test_s4_join_timeout), T(test_s5_done), T(test_s6_fetch_blocks_and_times_out),   \
		T(test_result_arrives_without_a_waiter),                                           \
		cmocka_unit_test(test_s6_fetch_cancelled), T(test_b3_fetch_many),                  \
		T(test_b3_schedule_many), cmocka_unit_test(test_b3_schedule_many_order),           \
		T(test_concurrent_round_trips), T1(test_results_all_sizes),                        \
		T(test_s8_s9_per_worker_lazy), T(test_s9_creation_failure_is_input_error),         \
		T(test_s9_last_put_destroys_on_every_worker),                                      \
		T(test_s9_put_while_closures_use_it), T(test_s9_dataset_per_epoch_does_not_grow),  \
		cmocka_unit_test(test_s9_destroy_after_put_and_put_after_destroy),                 \
		T(test_b8_closure_id_is_rv_id), cmocka_unit_test(test_s13_stagger_observed),       \
		cmocka_unit_test(test_s13_stagger_spreads), cmocka_unit_test(test_s14_unbounded),  \
		T(test_s15_unknown_function_refused), T(test_b8_attempt_visible),                  \
		T(test_b7_metrics), T(test_b7_metrics_percentile_of_sleeps),                       \
		cmocka_unit_test(test_w1_short_waits_spin),                                        \
		cmocka_unit_test(test_w1_long_waits_sleep),                                        \
		cmocka_unit_test(test_destroy_with_queued_work_values_outlive),                    \
		T(test_b1_chain_10000), T(test_b1_fan_in_1000), T(test_b1_values_right),           \
		T(test_b1_input_error), cmocka_unit_test(test_b1_cancelled_input),                 \
		T(test_b1_s3_consumers_waiting), T(test_b1_waiting_take_no_thread)
	const struct CMUnitTest inproc_tests[] = {
		CONTRACT_TESTS,
		/* in-process only: they reach into the runtime or its options */
		T(test_s2_b8_put_back_runs_again),
		T(test_b8_closure_id_after_put_back),
		cmocka_unit_test(test_s13_stagger_formula_and_env),
		cmocka_unit_test(test_w1_budget_rule),
		cmocka_unit_test(test_registry_and_options_errors),
		cmocka_unit_test(test_each_code_prints_its_own_text),
		T(test_null_handles_refused),
		cmocka_unit_test(test_spec_sizes_cluster),
		cmocka_unit_test(test_b7_hist_percentiles_known),
		T(test_b7_metrics_size),
	};
	/* Worker processes (coord-worker) only: what the server side reports. */
#define SERVER_TESTS                                                                               \
	cmocka_unit_test_setup_teardown(test_worker_lacks_function_named, setup_extra_fns, teardown)
	const struct CMUnitTest tcp_tests[] = { CONTRACT_TESTS, SERVER_TESTS };
	const struct CMUnitTest rdma_tests[] = { CONTRACT_TESTS, SERVER_TESTS };
	struct coord_error err = { 0 };
	int failed = 0;

	t_watchdog(600);
	if (getenv("T_FILTER")) /* run only the tests matching this pattern */
		cmocka_set_test_filter(getenv("T_FILTER"));
	if (getenv("T_SKIP")) /* skip the tests matching this pattern */
		cmocka_set_skip_filter(getenv("T_SKIP"));
	if (t_group_on("inproc"))
		failed += cmocka_run_group_tests_name("coord/inproc", inproc_tests, NULL, NULL);
	if (t_group_on("tcp"))
		failed += cmocka_run_group_tests_name("coord/tcp", tcp_tests, t_group_tcp,
						      t_group_inproc);
	/* The same table over two event loops: one worker each, so what
	 * crosses loops (a push waking the other loop, S3's CANCEL reaching
	 * both, per-worker frees) is tested too (helpers.h t_tcp_loops). */
	if (t_group_on("tcp-loops"))
		failed += cmocka_run_group_tests_name("coord/tcp-loops", tcp_tests,
						      t_group_tcp_loops, t_group_inproc);
	if (t_group_on("rdma")) {
		/* Over rdma when this host has a device (tests/rdma/rig.sh). */
		if (coord_rdma_usable(&err) == 0) {
			failed += cmocka_run_group_tests_name("coord/rdma", rdma_tests,
							      t_group_rdma, t_group_inproc);
		} else {
			printf("coord/rdma: skipped: %s\n", err.msg);
			if (getenv("T_GROUPS") && !strcmp(getenv("T_GROUPS"), "rdma"))
				return 77; /* only rdma asked for, and no device */
		}
	}
	return failed;
}
