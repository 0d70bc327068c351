// SPDX-License-Identifier: MIT
/*
 * tests/hints_priority.c - part of test_hints: B4's priorities (order, no
 * starvation of low or plain closures) and hints with the rest of the
 * contract: S3's cancellation, B1's consumers, batches.
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

/* B4: higher priorities are dispatched first; oldest first within one. */
void test_b4_priority_order(void **state)
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
void test_b4_low_not_starved(void **state)
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

/* B4: a closure without hints (the main queue, NORMAL) queued before a
 * burst of urgent ones ages as a LOW hinted one does: it does not wait for
 * every urgent closure that arrived while the worker was busy. */
void test_b4_plain_not_starved(void **state)
{
	struct fx *f = fx_make(state, 1, 10, 100); /* one level per 10 ms */
	uint32_t gated = t_fn(f->c, "gated"), who = t_fn(f->c, "sleep_us");
	struct coord_rv *g, *plain, *urgent[300];
	uint32_t us = 1000, zero = 0;
	long ran_before;

	g = sched(f->c, gated, NULL, 0, 0, 0, 0);
	wait_entered(1);
	plain = sched(f->c, who, &zero, sizeof(zero), 0, 0, 0);
	for (int i = 0; i < 300; i++) /* 300 ms of urgent work, all newer */
		urgent[i] = sched(f->c, who, &us, sizeof(us), COORD_PRIO_URGENT, 0, 0);
	atomic_store(&t_gate, 1);
	assert_int_equal(fetch_i32(plain), 0);
	ran_before = atomic_load(&t_exited);
	print_message("plain closure ran after %ld others\n", ran_before);
	assert_true(ran_before < 250); /* most urgent ones were still waiting */
	assert_int_equal(coord_join(f->c, NULL), 0);
	coord_rv_put(g);
	coord_rv_put(plain);
	for (int i = 0; i < 300; i++)
		coord_rv_put(urgent[i]);
}

/* B4 with S3: hinted closures still queued are cancelled by an error, and
 * nothing is executing when the error is returned. */
void test_b4_s3_hinted_cancelled(void **state)
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
void test_b4_consumer_with_affinity(void **state)
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
void test_b4_schedule_many_hinted(void **state)
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
