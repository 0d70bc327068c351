// SPDX-License-Identifier: MIT
/*
 * tests/test_q2.c - small handle-less calls carried inline in the queue's
 * ring entries (coordinator.c Q2), in-process transport: what that path
 * must keep of the contract (B7's sampling, S3's cancellation of a put-back).
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
#include "helpers.h"

struct fx {
	struct coord_registry *reg;
	struct coord *c;
};

static int setup2(void **state)
{
	struct fx *f = calloc(1, sizeof(*f));

	t_reset_counters();
	f->reg = t_registry();
	f->c = t_coord(f->reg, 2, COORD_RING_DEFAULT);
	*state = f;
	return 0;
}

static int teardown(void **state)
{
	struct fx *f = *state;

	atomic_store(&t_gate, 1);
	coord_destroy(f->c);
	coord_registry_destroy(f->reg);
	free(f);
	return 0;
}

/* Samples in the round-trip and execution histograms since @m0. */
static void samples_since(struct coord *c, const struct coord_metrics *m0, uint64_t *rt,
			  uint64_t *ex)
{
	struct coord_metrics m;

	assert_int_equal(coord_metrics(c, &m, NULL, 0), 0);
	*rt = m.round_trip_ns.count - m0->round_trip_ns.count;
	*ex = m.exec_ns.count - m0->exec_ns.count;
}

/*
 * B7: the histograms sample one closure in 64 (coord.h, README), also when
 * the calls are small and handle-less and so travel inline (Q2): through
 * coord_schedule() and through coord_schedule_many().  Expected N / 64 each;
 * a quarter of that is asked for.
 */
static void test_q2_b7_samples_one_in_64(void **state)
{
	enum { N = 8192 };
	struct fx *f = *state;
	uint32_t echo = t_fn(f->c, "echo");
	struct coord_call *calls = calloc(N, sizeof(*calls));
	struct coord_metrics m0;
	uint64_t rt, ex, x = 7;

	assert_non_null(calls);
	assert_int_equal(coord_metrics(f->c, &m0, NULL, 0), 0);
	for (int i = 0; i < N; i++)
		assert_int_equal(coord_schedule(f->c, echo, &x, sizeof(x), NULL, NULL), 0);
	assert_int_equal(coord_join(f->c, NULL), 0);
	samples_since(f->c, &m0, &rt, &ex);
	print_message("coord_schedule: %llu round-trip, %llu exec samples of %d\n",
		      (unsigned long long)rt, (unsigned long long)ex, N);
	assert_true(rt >= N / 64 / 4);
	assert_true(ex >= N / 64 / 4);

	assert_int_equal(coord_metrics(f->c, &m0, NULL, 0), 0);
	for (int i = 0; i < N; i++)
		calls[i] = (struct coord_call){ .fn = echo, .args = &x, .len = sizeof(x) };
	assert_int_equal(coord_schedule_many(f->c, calls, N, NULL, NULL, NULL), 0);
	assert_int_equal(coord_join(f->c, NULL), 0);
	samples_since(f->c, &m0, &rt, &ex);
	print_message("coord_schedule_many: %llu round-trip, %llu exec samples of %d\n",
		      (unsigned long long)rt, (unsigned long long)ex, N);
	assert_true(rt >= N / 64 / 4);
	assert_true(ex >= N / 64 / 4);
	free(calls);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_q2_b7_samples_one_in_64, setup2, teardown),
	};

	t_watchdog(300);
	if (getenv("T_FILTER"))
		cmocka_set_test_filter(getenv("T_FILTER"));
	return cmocka_run_group_tests_name("q2/inproc", tests, NULL, NULL);
}
