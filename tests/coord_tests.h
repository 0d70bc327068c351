/* SPDX-License-Identifier: MIT */
/*
 * tests/coord_tests.h - what the parts of the test_coord executable share:
 * the contract tests (test_coord.c holds main() and the group tables and runs
 * them) and the fetch helpers every part uses.
 */
#ifndef COORD_TESTS_COORD_TESTS_H
#define COORD_TESTS_COORD_TESTS_H

#include <stddef.h>
#include <stdint.h>

#include "helpers.h"

/* open_gate_later()'s argument: open t_gate after delay_ns, on its own thread. */
struct opener {
	uint64_t delay_ns;
};

/* Helpers the parts share. */
int setup_extra_fns(void **state);
void *open_gate_later(void *arg);
int setup_n(void **state, unsigned nworkers, unsigned cap);
int teardown(void **state);
void fetch_exact(struct coord_rv *rv, void *out, size_t n);
int64_t fetch_i64(struct coord_rv *rv);
int32_t fetch_i32(struct coord_rv *rv);
void wait_entered(long n);

/* coord_takeback.c */
void test_s2_packed_behind_long_taken_back(void **state);
void test_s2_taken_back_runs_once(void **state);
void test_s3_taken_back_race(void **state);

/* coord_s1_s3.c */
void test_s1_schedule_returns_at_once(void **state);
void test_s1_backpressure_tiny_ring(void **state);
void test_s2_runs_on_any_worker(void **state);
void test_s3_schedule_returns_error_nothing_executing(void **state);
void test_s3_not_started_behind_long_is_cancelled(void **state);
void test_s3_cancel_reaches_windows(void **state);
void test_s3_running_closure_keeps_outcome(void **state);
void test_s3_only_first_error_returned(void **state);
void test_s3_new_round_error_kept_while_cancelling(void **state);
void test_s3_old_round_error_not_returned(void **state);
void test_s3_generation_taken_when_queued(void **state);

/* coord_s4_s7.c */
void test_s4_join_waits_for_all(void **state);
void test_s4_join_timeout(void **state);
void test_s5_done(void **state);
void test_result_arrives_without_a_waiter(void **state);
void test_s6_fetch_blocks_and_times_out(void **state);
void test_s6_fetch_cancelled(void **state);
void test_b3_fetch_many(void **state);
void test_concurrent_round_trips(void **state);
void test_b3_schedule_many(void **state);
void test_b3_schedule_many_order(void **state);
void test_results_all_sizes(void **state);

/* coord_s8_s9.c */
void test_s8_s9_per_worker_lazy(void **state);
void test_s9_creation_failure_is_input_error(void **state);
void test_s9_last_put_destroys_on_every_worker(void **state);
void test_s9_put_while_closures_use_it(void **state);
void test_s9_dataset_per_epoch_does_not_grow(void **state);
void test_s9_destroy_after_put_and_put_after_destroy(void **state);

/* coord_s13_s15.c */
void test_s13_stagger_formula_and_env(void **state);
void test_s13_stagger_observed(void **state);
void test_s14_unbounded(void **state);
void test_s15_unknown_function_refused(void **state);
void test_b8_closure_id_is_rv_id(void **state);
void test_b8_attempt_visible(void **state);
void test_s2_b8_put_back_runs_again(void **state);
void test_b8_closure_id_after_put_back(void **state);
void test_registry_and_options_errors(void **state);
void test_each_code_prints_its_own_text(void **state);
void test_null_handles_refused(void **state);
void test_worker_lacks_function_named(void **state);
void test_spec_sizes_cluster(void **state);
void test_destroy_with_queued_work_values_outlive(void **state);

/* coord_b1.c */
void test_b1_chain_10000(void **state);
void test_b1_fan_in_1000(void **state);
void test_b1_values_right(void **state);
void test_b1_input_error(void **state);
void test_b1_cancelled_input(void **state);
void test_b1_s3_consumers_waiting(void **state);
void test_b1_waiting_take_no_thread(void **state);

/* coord_b7_w1.c */
void test_b7_metrics(void **state);
void test_b7_hist_percentiles_known(void **state);
void test_b7_metrics_percentile_of_sleeps(void **state);
void test_b7_metrics_size(void **state);
void test_w1_short_waits_spin(void **state);
void test_w1_budget_rule(void **state);
void test_w1_long_waits_sleep(void **state);

#endif
