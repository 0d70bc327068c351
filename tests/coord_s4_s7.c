// SPDX-License-Identifier: MIT
/*
 * tests/coord_s4_s7.c - part of test_coord: S4 (join), S5 (done), S6 / S7
 * (fetch, cancelled fetch, RemoteValue states) and B3 (batch schedule and
 * fetch, results of every size).
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

/* ---- S4 / S5 ------------------------------------------------------------------- */

/* S4: join blocks until every scheduled closure is final. */
void test_s4_join_waits_for_all(void **state)
{
	struct t_fx *f = *state;
	uint32_t fn = t_fn(f->c, "sleep_us");
	struct coord_rv *rv[100];
	uint32_t us = 300;

	for (int i = 0; i < 100; i++)
		assert_int_equal(coord_schedule(f->c, fn, &us, sizeof(us), &rv[i], NULL), 0);
	assert_int_equal(coord_join(f->c, NULL), 0);
	assert_int_equal(atomic_load(&t_exited), 100);
	for (int i = 0; i < 100; i++) {
		assert_int_equal(coord_rv_state(rv[i]), COORD_RV_READY);
		coord_rv_put(rv[i]);
	}
	/* join on an idle coordinator returns at once */
	assert_int_equal(coord_join(f->c, NULL), 0);
}

/* S4: join with a deadline gives up with ETIMEDOUT and can be retried. */
void test_s4_join_timeout(void **state)
{
	struct t_fx *f = *state;
	struct coord_error err;

	assert_int_equal(coord_schedule(f->c, t_fn(f->c, "gated"), NULL, 0, NULL, NULL), 0);
	assert_int_equal(coord_join_timeout(f->c, 50000000, &err), COORD_ETIMEDOUT);
	assert_non_null(strstr(err.msg, "pending"));
	atomic_store(&t_gate, 1);
	assert_int_equal(coord_join(f->c, NULL), 0);
}

/* S5: done says whether all are final; yes means nothing is executing; an
 * error is returned once, with nothing executing. */
void test_s5_done(void **state)
{
	struct t_fx *f = *state;
	uint32_t gated = t_fn(f->c, "gated"), fail = t_fn(f->c, "fail");
	struct coord_error err;

	assert_int_equal(coord_done(f->c, NULL), 1);
	assert_int_equal(coord_schedule(f->c, gated, NULL, 0, NULL, NULL), 0);
	assert_int_equal(coord_done(f->c, NULL), 0);
	atomic_store(&t_gate, 1);
	for (int i = 0; i < 10000 && coord_done(f->c, NULL) == 0; i++)
		t_sleep_ns(1000000);
	assert_int_equal(coord_done(f->c, NULL), 1);
	assert_int_equal(atomic_load(&t_entered), atomic_load(&t_exited));

	assert_int_equal(coord_schedule(f->c, fail, NULL, 0, NULL, NULL), 0);
	int r = 0;

	for (int i = 0; i < 10000; i++) {
		r = coord_done(f->c, &err);
		if (r != 0)
			break;
		t_sleep_ns(1000000);
	}
	assert_int_equal(r, -EIO);
	assert_int_equal(atomic_load(&t_entered), atomic_load(&t_exited));
	assert_int_equal(coord_done(f->c, NULL), 1);
}

/*
 * A result is taken in while nobody waits for it: done() turns true and the
 * value is there, although no fetch() or join() ran (over rdma, a
 * schedule() that sends its closure itself leaves the loop's timer to
 * reap the result, transport/rdma.c D6).  Twice: once into a sleeping loop,
 * once right after a round trip.
 */
void test_result_arrives_without_a_waiter(void **state)
{
	struct t_fx *f = *state;
	uint32_t add = t_fn(f->c, "add");

	for (int64_t k = 0; k < 2; k++) {
		int64_t ab[2] = { 40, k };
		struct coord_rv *rv;
		const void *v;
		size_t len;
		int64_t x = 0;
		int done = 0;

		if (k == 0)
			t_sleep_ns(50000000); /* the loop goes to sleep */
		assert_int_equal(coord_schedule(f->c, add, ab, sizeof(ab), &rv, NULL), 0);
		for (int i = 0; i < 5000 && (done = coord_done(f->c, NULL)) == 0; i++)
			t_sleep_ns(1000000);
		assert_int_equal(done, 1);
		assert_int_equal(coord_rv_fetch(rv, &v, &len, NULL), 0);
		assert_int_equal(len, sizeof(x));
		memcpy(&x, v, sizeof(x));
		assert_int_equal(x, 40 + k);
		coord_rv_put(rv);
	}
}

/* ---- S6 / S7 / B3 ------------------------------------------------------------------ */

/* S6: fetch blocks until ready; fetch with a deadline times out first. */
void test_s6_fetch_blocks_and_times_out(void **state)
{
	struct t_fx *f = *state;
	struct coord_rv *rv;
	struct coord_error err;
	struct opener o = { 100000000 };
	pthread_t t;

	assert_int_equal(coord_schedule(f->c, t_fn(f->c, "gated"), NULL, 0, &rv, NULL), 0);
	assert_int_equal(coord_rv_fetch_timeout(rv, 20000000, NULL, NULL, &err), COORD_ETIMEDOUT);
	assert_int_equal(coord_rv_state(rv), COORD_RV_NOT_READY);
	pthread_create(&t, NULL, open_gate_later, &o);
	/* parks on the futex (longer than the spin budget), then is woken */
	assert_true(fetch_i32(rv) >= 0);
	pthread_join(t, NULL);
	coord_rv_put(rv);
}

/*
 * S6: fetch of a cancelled value fails with CANCELLED (S7 state CANCELLED).
 * As in the reference, workers go on running queued closures until a caller
 * takes the error; join then cancels what is still queued.  One worker has
 * 1000 x 100 us of work queued behind the failure, far more than a joiner
 * needs to wake up, so some of it is cancelled.
 */
void test_s6_fetch_cancelled(void **state)
{
	struct t_fx *f;
	struct coord_rv *g, *q[1000];
	struct coord_error err;
	uint32_t us = 100;
	int cancelled = 0, ready = 0;

	setup_n((void **)&f, 1, 4096);
	assert_int_equal(coord_schedule(f->c, t_fn(f->c, "gated"), "f", 1, &g, NULL), 0);
	for (int i = 0; i < 1000; i++)
		assert_int_equal(
			coord_schedule(f->c, t_fn(f->c, "sleep_us"), &us, sizeof(us), &q[i], NULL),
			0);
	atomic_store(&t_gate, 1);
	assert_int_equal(coord_join(f->c, &err), -EIO);
	assert_int_equal(atomic_load(&t_entered), atomic_load(&t_exited));
	for (int i = 0; i < 1000; i++) {
		int r = coord_rv_fetch(q[i], NULL, NULL, &err);

		if (r == COORD_ECANCELLED) {
			assert_int_equal(coord_rv_state(q[i]), COORD_RV_CANCELLED);
			assert_int_equal(err.closure, coord_rv_id(q[i]));
			cancelled++;
		} else {
			assert_int_equal(r, 0);
			/* FIFO on one worker: nothing runs after a cancelled one */
			assert_int_equal(cancelled, 0);
			ready++;
		}
		coord_rv_put(q[i]);
	}
	assert_true(cancelled >= 1);
	assert_int_equal(cancelled + ready, 1000);
	coord_rv_put(g);
	teardown((void **)&f);
}

/* B3: a batch fetch waits for all and reports each outcome. */
void test_b3_fetch_many(void **state)
{
	struct t_fx *f = *state;
	uint32_t add = t_fn(f->c, "add");
	struct coord_rv *rv[64];
	struct coord_result res[64];

	for (int64_t i = 0; i < 64; i++) {
		int64_t ab[2] = { i, 1000 };

		assert_int_equal(coord_schedule(f->c, add, ab, sizeof(ab), &rv[i], NULL), 0);
	}
	assert_int_equal(coord_rv_fetch_many(rv, 64, res, -1), 0);
	for (int64_t i = 0; i < 64; i++) {
		int64_t x;

		assert_int_equal(res[i].code, 0);
		assert_int_equal(res[i].len, sizeof(x));
		memcpy(&x, res[i].val, sizeof(x));
		assert_int_equal(x, i + 1000);
		coord_rv_put(rv[i]);
	}
	/* and with a deadline that runs out */
	assert_int_equal(coord_schedule(f->c, t_fn(f->c, "gated"), NULL, 0, &rv[0], NULL), 0);
	assert_int_equal(coord_rv_fetch_many(rv, 1, res, 10000000), COORD_ETIMEDOUT);
	atomic_store(&t_gate, 1);
	assert_int_equal(coord_rv_fetch_many(rv, 1, res, -1), 0);
	coord_rv_put(rv[0]);
}

/* Threads that each schedule one closure and fetch it, one at a time, while
 * another streams closures without RemoteValues: every waiter may drive the
 * transport's I/O and every schedule may send its own closure (rdma.c
 * D1-D5); each value must come back to its own caller exactly. */
struct rt_arg {
	struct coord *c;
	uint32_t add;
	int64_t base;
	unsigned n;
	int bad;
};

static void *rt_thread(void *p)
{
	struct rt_arg *a = p;

	for (unsigned i = 0; i < a->n && !a->bad; i++) {
		int64_t ab[2] = { a->base, (int64_t)i }, x = 0;
		struct coord_rv *rv;
		const void *v;
		size_t len;

		if (coord_schedule(a->c, a->add, ab, sizeof(ab), &rv, NULL) != 0) {
			a->bad = 1;
			break;
		}
		if (coord_rv_fetch(rv, &v, &len, NULL) != 0 || len != sizeof(x))
			a->bad = 2;
		else
			memcpy(&x, v, sizeof(x));
		if (!a->bad && x != a->base + (int64_t)i)
			a->bad = 3;
		coord_rv_put(rv);
	}
	return NULL;
}

static void *stream_thread(void *p)
{
	struct rt_arg *a = p;

	for (unsigned i = 0; i < a->n; i++) {
		int64_t ab[2] = { (int64_t)i, 1 };

		if (coord_schedule(a->c, a->add, ab, sizeof(ab), NULL, NULL) != 0)
			a->bad = 1;
	}
	return NULL;
}

void test_concurrent_round_trips(void **state)
{
	struct t_fx *f = *state;
	unsigned n = strcmp(t_transport, "inproc") ? 300 : 20000;
	struct rt_arg a[5];
	pthread_t th[5];

	for (int i = 0; i < 5; i++) {
		a[i] = (struct rt_arg){ .c = f->c,
					.add = t_fn(f->c, "add"),
					.base = (int64_t)i << 40,
					.n = i < 4 ? n : 10 * n };
		assert_int_equal(
			pthread_create(&th[i], NULL, i < 4 ? rt_thread : stream_thread, &a[i]), 0);
	}
	for (int i = 0; i < 5; i++) {
		pthread_join(th[i], NULL);
		assert_int_equal(a[i].bad, 0);
	}
	assert_int_equal(coord_join(f->c, NULL), 0);
}

/* Fill @calls[0..n) with calls of @fn whose argument is &@args[i]. */
static void many_calls(struct coord_call *calls, int64_t *args, size_t n, uint32_t fn, size_t len)
{
	for (size_t i = 0; i < n; i++) {
		memset(&calls[i], 0, sizeof(calls[i]));
		calls[i].fn = fn;
		calls[i].args = &args[i * (len / sizeof(int64_t))];
		calls[i].len = len;
	}
}

/* B3: a batched schedule queues every call (chunks and all) with its own
 * RemoteValue and arguments; bad calls and a pending error queue none. */
void test_b3_schedule_many(void **state)
{
	struct t_fx *f = *state;
	enum { N = 200 };
	struct coord_call calls[N];
	struct coord_rv *rv[N], *frv;
	struct coord_error err;
	int64_t ab[N * 2];
	size_t queued = 12345;

	for (int64_t i = 0; i < N; i++) {
		ab[2 * i] = i;
		ab[2 * i + 1] = 1000;
	}
	many_calls(calls, ab, N, t_fn(f->c, "add"), 2 * sizeof(int64_t));
	assert_int_equal(coord_schedule_many(f->c, calls, N, rv, &queued, NULL), 0);
	assert_int_equal(queued, N);
	for (int64_t i = 0; i < N; i++) {
		assert_int_equal(fetch_i64(rv[i]), i + 1000);
		coord_rv_put(rv[i]);
	}
	/* without RemoteValues, and nothing at all */
	assert_int_equal(coord_schedule_many(f->c, calls, N, NULL, NULL, NULL), 0);
	assert_int_equal(coord_schedule_many(f->c, calls, 0, NULL, &queued, NULL), 0);
	assert_int_equal(queued, 0);
	assert_int_equal(coord_join(f->c, NULL), 0);
	assert_int_equal(atomic_load(&t_exited), 2 * N);

	/* S15: one unknown function refuses the whole batch, naming the call */
	calls[150].fn = 12345;
	assert_int_equal(coord_schedule_many(f->c, calls, N, rv, &queued, &err), COORD_ENOFN);
	assert_int_equal(queued, 0);
	assert_null(rv[0]);
	assert_null(rv[N - 1]);
	assert_non_null(strstr(err.msg, "call 150"));
	assert_int_equal(coord_schedule_many(f->c, NULL, 3, NULL, NULL, &err), COORD_EINVAL);
	assert_int_equal(coord_join(f->c, NULL), 0);
	assert_int_equal(atomic_load(&t_exited), 2 * N);
	calls[150].fn = calls[0].fn;

	/* S3: a pending error is returned once, before anything is queued */
	assert_int_equal(coord_schedule(f->c, t_fn(f->c, "fail"), NULL, 0, &frv, NULL), 0);
	assert_int_equal(coord_rv_fetch(frv, NULL, NULL, NULL), -EIO);
	coord_rv_put(frv);
	assert_int_equal(coord_schedule_many(f->c, calls, N, rv, &queued, &err), -EIO);
	assert_int_equal(queued, 0);
	assert_null(rv[0]);
	assert_int_equal(atomic_load(&t_entered), atomic_load(&t_exited));
	assert_int_equal(atomic_load(&t_exited), 2 * N + 1);
	assert_int_equal(coord_schedule_many(f->c, calls, N, NULL, &queued, NULL), 0);
	assert_int_equal(queued, N);
	assert_int_equal(coord_join(f->c, NULL), 0);
	assert_int_equal(atomic_load(&t_exited), 3 * N + 1);
}

/* Run @n "order" calls as one batch on a 1-worker coordinator with ring
 * capacity @cap (after a gated closure when @gate) and check the run order. */
static void schedule_many_in_order(unsigned cap, size_t n, bool gate)
{
	struct coord_call *calls = calloc(n, sizeof(*calls));
	int64_t *args = calloc(n, sizeof(*args));
	size_t queued = 0;
	struct t_fx *f;

	assert_non_null(calls);
	assert_non_null(args);
	assert_true(n <= T_ORDER_MAX);
	setup_n((void **)&f, 1, cap);
	atomic_store(&t_norder, 0);
	for (size_t i = 0; i < n; i++)
		args[i] = (int64_t)i;
	many_calls(calls, args, n, t_fn(f->c, "order"), sizeof(int64_t));
	if (gate) {
		assert_int_equal(coord_schedule(f->c, t_fn(f->c, "gated"), NULL, 0, NULL, NULL), 0);
		wait_entered(1);
	}
	assert_int_equal(coord_schedule_many(f->c, calls, n, NULL, &queued, NULL), 0);
	assert_int_equal(queued, n);
	if (gate) {
		assert_true(atomic_load(&f->c->ov_count) > 0); /* past the ring */
		atomic_store(&t_gate, 1);
	}
	assert_int_equal(coord_join(f->c, NULL), 0);
	assert_int_equal(atomic_load(&t_norder), n);
	for (size_t i = 0; i < n; i++)
		if (t_order[i] != (int64_t)i)
			fail_msg("run order broken at %zu: got %lld", i, (long long)t_order[i]);
	teardown((void **)&f);
	free(calls);
	free(args);
}

/* B3 with S1 and S14: a batch larger than a tiny ring blocks for room and
 * resumes, in order; unbounded, it runs past the ring into the overflow and
 * stays FIFO. */
void test_b3_schedule_many_order(void **state)
{
	schedule_many_in_order(16, 5000, false);
	schedule_many_in_order(0, COORD_RING_DEFAULT + 5000, true);
}

/* Results of every size come back intact (inline, pooled classes, malloc). */
void test_results_all_sizes(void **state)
{
	struct t_fx *f = *state;
	uint32_t echo = t_fn(f->c, "echo");
	size_t sizes[] = { 0, 1, 63, 64, 65, 4096, 100000, (1u << 20) + 7 };

	for (size_t s = 0; s < ARRAY_SIZE(sizes); s++) {
		unsigned char *buf = malloc(sizes[s] + 1);
		struct coord_rv *rv;
		const void *v;
		size_t len;

		for (size_t i = 0; i < sizes[s]; i++)
			buf[i] = (unsigned char)(i * 7 + s);
		assert_int_equal(coord_schedule(f->c, echo, buf, sizes[s], &rv, NULL), 0);
		assert_int_equal(coord_rv_fetch(rv, &v, &len, NULL), 0);
		assert_int_equal(len, sizes[s]);
		if (len)
			assert_memory_equal(v, buf, len);
		coord_rv_put(rv);
		free(buf);
	}
}
