// SPDX-License-Identifier: MIT
/*
 * tests/test_q2.c - small handle-less calls carried inline in the queue's
 * ring entries (coordinator.c Q2) and run straight from them by the worker
 * (Q3), in-process transport: what that path must keep of the contract
 * (B7's sampling, S3's cancellation of a put-back, S3's first error, the
 * order of one worker's calls, results nobody asked for).
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

#include "runtime/core/internal.h"
#include "helpers.h"

static int setup2(void **state)
{
	return t_fx_setup(state, 2, COORD_RING_DEFAULT);
}

static int setup1(void **state)
{
	return t_fx_setup(state, 1, COORD_RING_DEFAULT);
}

static int teardown(void **state)
{
	return t_fx_teardown(state);
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

/* Join, then check the samples taken since @m0 by @how's N calls. */
static void expect_samples(struct coord *c, const struct coord_metrics *m0, const char *how, int n)
{
	uint64_t rt, ex;

	assert_int_equal(coord_join(c, NULL), 0);
	samples_since(c, m0, &rt, &ex);
	print_message("%s: %llu round-trip, %llu exec samples of %d\n", how, (unsigned long long)rt,
		      (unsigned long long)ex, n);
	assert_true(rt >= (uint64_t)n / 64 / 4);
	assert_true(ex >= (uint64_t)n / 64 / 4);
}

/*
 * B7: the histograms sample one closure in 64 (coord.h, docs/contract.md), also when
 * the calls are small and handle-less and so travel inline (Q2): through
 * coord_schedule() and through coord_schedule_many().  Expected N / 64 each;
 * a quarter of that is asked for.
 */
static void test_q2_b7_samples_one_in_64(void **state)
{
	enum { N = 8192 };
	struct t_fx *f = *state;
	uint32_t echo = t_fn(f->c, "echo");
	struct coord_call *calls = calloc(N, sizeof(*calls));
	struct coord_metrics m0;
	uint64_t x = 7;

	assert_non_null(calls);
	assert_int_equal(coord_metrics(f->c, &m0, NULL, 0), 0);
	for (int i = 0; i < N; i++)
		assert_int_equal(coord_schedule(f->c, echo, &x, sizeof(x), NULL, NULL), 0);
	expect_samples(f->c, &m0, "coord_schedule", N);

	assert_int_equal(coord_metrics(f->c, &m0, NULL, 0), 0);
	for (int i = 0; i < N; i++)
		calls[i] = (struct coord_call){ .fn = echo, .args = &x, .len = sizeof(x) };
	assert_int_equal(coord_schedule_many(f->c, calls, N, NULL, NULL, NULL), 0);
	expect_samples(f->c, &m0, "coord_schedule_many", N);
	free(calls);
}

/*
 * S3/S11: a call that ran inline in a dispatcher's own closure, wrote a
 * result (here over 1 MiB: a malloc'd buffer) and is put back after a
 * cancellation made it stale is cancelled; its closure must come out clean,
 * with the buffer released, as a pool closure's does (cancel_one()).  The
 * test acts as a dispatcher with closures of its own (as local_init() makes
 * them) while the two workers are busy.
 */
static void test_q2_stale_put_back_drops_result(void **state)
{
	enum { NLOCAL = 4 };
	struct t_fx *f = *state;
	struct coord_dispatcher d = { .c = f->c, .index = 0 };
	struct coord_closure *local = calloc(NLOCAL, sizeof(*local)), *taken[NLOCAL];
	struct coord_rv *g[2];
	unsigned n = 0;
	uint64_t x = 1;
	size_t big = COORD_BUF_MAX_POOLED + 1;

	assert_non_null(local);
	for (unsigned i = 0; i < NLOCAL; i++) {
		local[i].c = f->c;
		local[i].idx = CL_IDX_LOCAL + 0x100000 + i;
		local[i].res = local[i].inline_res;
		local[i].res_cls = COORD_BUF_INLINE;
		local[i].args = local[i].inline_args;
		local[i].args_cls = COORD_BUF_INLINE;
		local[i].reuse = (1u - local[i].idx) & COORD_SAMPLE_MASK;
	}
	d.local = local;
	d.nlocal = NLOCAL;
	/* keep both workers busy so the calls stay queued for us */
	for (int i = 0; i < 2; i++)
		assert_int_equal(coord_schedule(f->c, t_fn(f->c, "gated"), NULL, 0, &g[i], NULL),
				 0);
	while (atomic_load(&t_entered) < 2)
		t_sleep_ns(100000);
	/* Two handle-less calls: at most one of them is a thread's 64th, which
	 * takes the closure path; the other travels inline. */
	for (int i = 0; i < 2; i++)
		assert_int_equal(
			coord_schedule(f->c, t_fn(f->c, "echo"), &x, sizeof(x), NULL, NULL), 0);
	for (int i = 0; i < 1000 && n < 2; i++)
		n += coord_dispatch_try_take(&d, taken + n, NLOCAL - n);
	assert_int_equal(n, 2);
	if (!coord_closure_local(taken[0])) {
		struct coord_closure *t = taken[0];

		taken[0] = taken[1];
		taken[1] = t;
	}
	assert_true(coord_closure_local(taken[0]));
	/* It ran and wrote a result, then its ps failed (S11)... */
	assert_non_null(coord_closure_result_buf(taken[0], big));
	/* ...while an error was taken (S3): its generation is cancelled. */
	atomic_fetch_add(&f->c->gen, 1);
	coord_dispatch_put_back(&d, taken, 2);
	assert_int_equal(atomic_load(&d.inflight), 0);
	/* Cancelled, and the closure ready for its next take. */
	assert_int_equal(taken[0]->res_cls, COORD_BUF_INLINE);
	assert_ptr_equal(taken[0]->res, taken[0]->inline_res);
	assert_int_equal(taken[0]->res_dirty, 0);
	atomic_store(&t_gate, 1);
	assert_int_equal(coord_join(f->c, NULL), 0);
	coord_rv_put(g[0]);
	coord_rv_put(g[1]);
	free(local);
}

/* Hold the only worker in a "gated" call, so what is scheduled next queues. */
static struct coord_rv *hold_worker(struct t_fx *f)
{
	long before = atomic_load(&t_entered);
	struct coord_rv *g;

	atomic_store(&t_gate, 0);
	assert_int_equal(coord_schedule(f->c, t_fn(f->c, "gated"), NULL, 0, &g, NULL), 0);
	for (int i = 0; i < 2000 && atomic_load(&t_entered) == before; i++)
		t_sleep_ns(100000);
	assert_int_equal(atomic_load(&t_entered), before + 1);
	return g;
}

/*
 * Q3: one worker runs its calls in the order they were scheduled, although
 * inline ones run inside its take and closures (every 7th has a handle) on
 * its loop: a take runs inline entries up to the first closure and hands
 * that one and the rest to the loop, in order.
 */
static void test_q3_one_worker_keeps_order(void **state)
{
	enum { N = 5000 };
	struct t_fx *f = *state;
	uint32_t order = t_fn(f->c, "order");
	struct coord_rv *g, *rv;
	long bad = -1;

	t_reset_counters();
	g = hold_worker(f);
	for (int64_t i = 0; i < N; i++) {
		bool handle = i % 7 == 3;

		assert_int_equal(
			coord_schedule(f->c, order, &i, sizeof(i), handle ? &rv : NULL, NULL), 0);
		if (handle)
			coord_rv_put(rv);
	}
	atomic_store(&t_gate, 1);
	assert_int_equal(coord_join(f->c, NULL), 0);
	coord_rv_put(g);
	assert_int_equal(atomic_load(&t_norder), N);
	for (long i = 0; i < N && bad < 0; i++)
		if (t_order[i] != i)
			bad = i;
	if (bad >= 0)
		print_message("call %ld ran at place %ld\n", (long)t_order[bad], bad);
	assert_int_equal(bad, -1);
}

/*
 * Q3: a handle-less call that sets a result (nobody reads it) and one that
 * fails, among inline calls: the results are dropped without a leak (ASan),
 * the failure is the error join() returns once (S3, with its worker and a
 * closure id), what was queued behind it is cancelled, and every call is
 * accounted for: completed + failed + cancelled == scheduled.
 */
static void test_q3_inline_result_and_error(void **state)
{
	enum { N = 3000, FAIL_AT = 1000 };
	struct t_fx *f = *state;
	uint32_t echo = t_fn(f->c, "echo"), fail = t_fn(f->c, "fail");
	struct coord_metrics m0, m;
	struct coord_error err;
	struct coord_rv *g;
	uint64_t x = 42;

	assert_int_equal(coord_metrics(f->c, &m0, NULL, 0), 0);
	/* Results nobody asked for. */
	for (int i = 0; i < N; i++)
		assert_int_equal(coord_schedule(f->c, echo, &x, sizeof(x), NULL, NULL), 0);
	assert_int_equal(coord_join(f->c, NULL), 0);
	/* A failure in the middle of a queued run of inline calls. */
	g = hold_worker(f);
	for (int i = 0; i < N; i++)
		assert_int_equal(
			coord_schedule(f->c, i == FAIL_AT ? fail : echo, &x, sizeof(x), NULL, NULL),
			0);
	atomic_store(&t_gate, 1);
	assert_int_equal(coord_join(f->c, &err), -EIO);
	assert_string_equal(err.msg, "injected failure on worker 0");
	assert_int_equal(err.worker, 0);
	assert_true(err.closure != 0);
	coord_rv_put(g);
	/* Reported once; the coordinator goes on. */
	assert_int_equal(coord_join(f->c, NULL), 0);
	for (int i = 0; i < N; i++)
		assert_int_equal(coord_schedule(f->c, echo, &x, sizeof(x), NULL, NULL), 0);
	assert_int_equal(coord_join(f->c, NULL), 0);
	assert_int_equal(coord_metrics(f->c, &m, NULL, 0), 0);
	assert_int_equal(m.outstanding, 0);
	assert_int_equal(m.failed - m0.failed, 1);
	assert_true(m.cancelled - m0.cancelled <= N - FAIL_AT - 1);
	assert_int_equal((m.completed - m0.completed) + (m.cancelled - m0.cancelled),
			 3 * N + 1); /* 3N calls and the gated one; completed counts the failure */
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_q2_b7_samples_one_in_64, setup2, teardown),
		cmocka_unit_test_setup_teardown(test_q2_stale_put_back_drops_result, setup2,
						teardown),
		cmocka_unit_test_setup_teardown(test_q3_one_worker_keeps_order, setup1, teardown),
		cmocka_unit_test_setup_teardown(test_q3_inline_result_and_error, setup1, teardown),
	};

	t_watchdog(300);
	if (getenv("T_FILTER"))
		cmocka_set_test_filter(getenv("T_FILTER"));
	return cmocka_run_group_tests_name("q2/inproc", tests, NULL, NULL);
}
