/* SPDX-License-Identifier: MIT */
/*
 * tests/hints_tests.h - what the parts of the test_hints executable share:
 * the hinted coordinator fixture and its schedule and fetch helpers
 * (test_hints.c, with main() and the group tables) and the tests of each part.
 */
#ifndef COORD_TESTS_HINTS_TESTS_H
#define COORD_TESTS_HINTS_TESTS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "helpers.h"

/* A test's registry and coordinator: fx_make() makes them, teardown() frees. */
struct fx {
	struct coord_registry *reg;
	struct coord *c;
};

/* Helpers the parts share. */
struct fx *fx_make_opts(void **state, unsigned nw, int64_t aging_ms, int64_t fallback_ms,
			unsigned window, unsigned loops, int ring_cap);
struct fx *fx_make(void **state, unsigned nw, int64_t aging_ms, int64_t fallback_ms);
struct coord_rv *sched(struct coord *c, uint32_t fn, const void *args, size_t len, int prio,
		       uint32_t aff, unsigned mode);
int32_t fetch_i32(struct coord_rv *rv);
void wait_entered(long n);

/* hints_affinity.c */
void test_b4_strict_runs_there(void **state);
void test_b4_strict_waits_for_busy_worker(void **state);
void test_b4_preferred_runs_on_idle(void **state);
void test_b4_preferred_falls_back(void **state);
void test_b4_affinity_set(void **state);
void test_b4_bad_hints_refused(void **state);

/* hints_priority.c */
void test_b4_priority_order(void **state);
void test_b4_low_not_starved(void **state);
void test_b4_plain_not_starved(void **state);
void test_b4_s3_hinted_cancelled(void **state);
void test_b4_consumer_with_affinity(void **state);
void test_b4_schedule_many_hinted(void **state);

/* hints_contract.c */
void test_b4_targeted_not_put_back(void **state);
void test_b4_waiting_costs_no_cpu(void **state);
void test_b4_error_with_hinted_queued_no_spin(void **state);
void test_b4_destroy_with_hinted_queued(void **state);
void test_b4_backpressure(void **state);
void test_b4_unbounded(void **state);
void test_b4_stress_random(void **state);
void test_b4_waits_for_staggered_start(void **state);

#endif
