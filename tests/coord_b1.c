// SPDX-License-Identifier: MIT
/*
 * tests/coord_b1.c - part of test_coord: B1, RemoteValues as arguments
 * (dataflow: chains, fan-in, input errors and cancellation, S3 with consumers
 * waiting).
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

/* ---- B1: RemoteValues as arguments (dataflow) -------------------------------- */

/* Schedule @fn with @args and the @n inputs @in; the RemoteValue, or fail. */
static struct coord_rv *sched_in(struct coord *c, uint32_t fn, const void *args, size_t len,
				 struct coord_rv *const *in, unsigned n)
{
	struct coord_call call = { .fn = fn, .args = args, .len = len, .inputs = in, .ninputs = n };
	struct coord_error err = { 0 };
	struct coord_rv *rv = NULL;
	int r = coord_schedule_call(c, &call, &rv, &err);

	if (r != 0)
		fprintf(stderr, "schedule with inputs: %d %s\n", r, err.msg);
	assert_int_equal(r, 0);
	return rv;
}

/* Threads of this process, from /proc/self/status. */
static long t_threads(void)
{
	FILE *fp = fopen("/proc/self/status", "r");
	char line[256];
	long n = -1;

	while (fp && fgets(line, sizeof(line), fp))
		if (sscanf(line, "Threads: %ld", &n) == 1)
			break;
	if (fp)
		fclose(fp);
	return n;
}

/* B1: a chain of 10,000 closures, each taking the previous one's value:
 * all complete, in order, with the right values; the handles can be
 * dropped at once (each closure holds its input). */
void test_b1_chain_10000(void **state)
{
	struct t_fx *f = *state;
	uint32_t sum = t_fn(f->c, "sum_inputs");
	int64_t one = 1;
	struct coord_rv *prev, *next, *mid = NULL;
	struct coord_metrics m;

	prev = sched_in(f->c, sum, &one, sizeof(one), NULL, 0);
	for (int i = 1; i < 10000; i++) {
		next = sched_in(f->c, sum, &one, sizeof(one), &prev, 1);
		if (i == 5000)
			mid = prev; /* keep one in the middle */
		else
			coord_rv_put(prev);
		prev = next;
	}
	assert_int_equal(fetch_i64(prev), 10000);
	assert_int_equal(fetch_i64(mid), 5000);
	assert_int_equal(coord_join(f->c, NULL), 0);
	assert_int_equal(atomic_load(&t_exited), 10000);
	assert_int_equal(coord_metrics(f->c, &m, NULL, 0), 0);
	assert_int_equal(m.outstanding, 0);
	coord_rv_put(prev);
	coord_rv_put(mid);
}

/* B1: one closure taking 1,000 inputs, scheduled before they ran. */
void test_b1_fan_in_1000(void **state)
{
	struct t_fx *f = *state;
	uint32_t echo = t_fn(f->c, "echo"), sum = t_fn(f->c, "sum_inputs"),
		 gated = t_fn(f->c, "gated");
	struct coord_rv *in[1000], *g, *rv, *rv2;
	int64_t want = 0;

	/* the first input waits on the gate, so the consumer surely waits */
	g = sched_in(f->c, gated, NULL, 0, NULL, 0);
	in[0] = g;
	for (int64_t i = 1; i < 1000; i++) {
		in[i] = sched_in(f->c, echo, &i, sizeof(i), NULL, 0);
		want += i;
	}
	rv = sched_in(f->c, sum, NULL, 0, in, 1000);
	assert_int_equal(coord_rv_state(rv), COORD_RV_NOT_READY);
	for (int i = 1; i < 1000; i++)
		coord_rv_put(in[i]);
	atomic_store(&t_gate, 1);
	int32_t w = fetch_i32(g);

	assert_true(w == 0 || w == 1);
	assert_int_equal(fetch_i64(rv), want + w);
	/* a consumer of final inputs is queued at once; schedule_many too */
	{
		struct coord_rv *two[2] = { rv, rv };
		struct coord_call calls[2] = {
			{ .fn = sum, .inputs = two, .ninputs = 2 },
			{ .fn = sum, .inputs = &rv, .ninputs = 1 },
		};
		struct coord_rv *out[2];

		assert_int_equal(coord_schedule_many(f->c, calls, 2, out, NULL, NULL), 0);
		assert_int_equal(fetch_i64(out[0]), 2 * (want + w));
		assert_int_equal(fetch_i64(out[1]), want + w);
		coord_rv_put(out[0]);
		coord_rv_put(out[1]);
	}
	rv2 = sched_in(f->c, sum, NULL, 0, &rv, 1);
	assert_int_equal(fetch_i64(rv2), want + w);
	assert_int_equal(coord_join(f->c, NULL), 0);
	coord_rv_put(rv2);
	coord_rv_put(rv);
	coord_rv_put(g);
}

/* B1: values of every size reach the consumer intact, read in order and
 * out of order. */
void test_b1_values_right(void **state)
{
	struct t_fx *f = *state;
	uint32_t echo = t_fn(f->c, "echo"), cat = t_fn(f->c, "concat_inputs");
	static const size_t sizes[] = { 0, 1, 7, 8, 63, 64, 65, 200, 4096, 100000 };
	enum { N = sizeof(sizes) / sizeof(sizes[0]) };
	struct coord_rv *in[N], *fwd, *rev;
	uint8_t *buf[N];
	size_t total = 0, off = 0, len;
	const void *v;

	for (unsigned i = 0; i < N; i++) {
		buf[i] = malloc(sizes[i] + 1);
		for (size_t k = 0; k < sizes[i]; k++)
			buf[i][k] = (uint8_t)(i * 31 + k * 7);
		in[i] = sched_in(f->c, echo, buf[i], sizes[i], NULL, 0);
		total += sizes[i];
	}
	fwd = sched_in(f->c, cat, NULL, 0, in, N);
	rev = sched_in(f->c, cat, "r", 1, in, N);
	for (int k = 0; k < 2; k++) {
		assert_int_equal(coord_rv_fetch(k ? rev : fwd, &v, &len, NULL), 0);
		assert_int_equal(len, total);
		off = 0;
		for (unsigned i = 0; i < N; i++) {
			if (sizes[i])
				assert_memory_equal((const uint8_t *)v + off, buf[i], sizes[i]);
			off += sizes[i];
		}
	}
	assert_int_equal(coord_join(f->c, NULL), 0);
	for (unsigned i = 0; i < N; i++) {
		coord_rv_put(in[i]);
		free(buf[i]);
	}
	coord_rv_put(fwd);
	coord_rv_put(rev);
}

/* B1: a failed input fails its consumer with COORD_EINPUT, its code as the
 * cause and the input named; through a chain too; the first error (the
 * input's) is returned once; bad inputs are refused at schedule. */
void test_b1_input_error(void **state)
{
	struct t_fx *f = *state;
	uint32_t gated = t_fn(f->c, "gated"), sum = t_fn(f->c, "sum_inputs"),
		 echo = t_fn(f->c, "echo");
	struct coord_rv *g, *c1, *c2, *ok, *both[2], *late;
	struct coord_error err;
	char want[64];
	int64_t seven = 7;

	g = sched_in(f->c, gated, "f", 1, NULL, 0); /* fails when the gate opens */
	ok = sched_in(f->c, echo, &seven, sizeof(seven), NULL, 0);
	c1 = sched_in(f->c, sum, NULL, 0, &g, 1);
	c2 = sched_in(f->c, sum, NULL, 0, &c1, 1);
	both[0] = ok;
	both[1] = g;
	struct coord_rv *c3 = sched_in(f->c, sum, NULL, 0, both, 2);

	atomic_store(&t_gate, 1);
	assert_int_equal(coord_rv_fetch(g, NULL, NULL, NULL), -EIO);
	assert_int_equal(coord_rv_fetch(c1, NULL, NULL, &err), COORD_EINPUT);
	assert_int_equal(err.cause, -EIO);
	assert_int_equal(err.closure, coord_rv_id(c1));
	snprintf(want, sizeof(want), "input 0 (closure %llu) failed",
		 (unsigned long long)coord_rv_id(g));
	assert_non_null(strstr(err.msg, want));
	assert_non_null(strstr(err.msg, "gated failure"));
	assert_int_equal(coord_rv_fetch(c2, NULL, NULL, &err), COORD_EINPUT);
	assert_int_equal(err.cause, -EIO); /* the root cause, through the chain */
	assert_int_equal(coord_rv_fetch(c3, NULL, NULL, &err), COORD_EINPUT);
	assert_non_null(strstr(err.msg, "input 1 (closure"));
	/* the first error is the input's own, returned once */
	assert_int_equal(coord_join(f->c, &err), -EIO);
	assert_int_equal(err.closure, coord_rv_id(g));
	assert_int_equal(coord_join(f->c, NULL), 0);
	/* a consumer of the failed value in a new round fails at once, and
	 * its error is this round's */
	late = sched_in(f->c, sum, NULL, 0, &g, 1);
	assert_int_equal(coord_rv_fetch(late, NULL, NULL, &err), COORD_EINPUT);
	assert_int_equal(coord_join(f->c, &err), COORD_EINPUT);
	assert_int_equal(err.cause, -EIO);
	/* refused at schedule: bad inputs */
	{
		struct coord_rv *nul = NULL;
		struct coord_call call = { .fn = sum, .inputs = &nul, .ninputs = 1 };
		struct coord_rv *x = NULL;

		assert_int_equal(coord_schedule_call(f->c, &call, &x, &err), COORD_EINVAL);
		assert_null(x);
		call.inputs = NULL;
		assert_int_equal(coord_schedule_call(f->c, &call, &x, &err), COORD_EINVAL);
		call.inputs = &ok;
		call.ninputs = COORD_MAX_INPUTS + 1;
		assert_int_equal(coord_schedule_call(f->c, &call, &x, &err), COORD_EINVAL);
	}
	assert_int_equal(atomic_load(&t_entered), atomic_load(&t_exited));
	/* c1, c2, c3, late never ran: entered counts g and ok only */
	assert_int_equal(atomic_load(&t_entered), 2);
	coord_rv_put(late);
	coord_rv_put(c3);
	coord_rv_put(c2);
	coord_rv_put(c1);
	coord_rv_put(ok);
	coord_rv_put(g);
}

/*
 * B1 + S3: inputs cancelled with the queue cancel their consumers; when
 * join returns the error nothing runs, and every consumer is final; a
 * consumer of a cancelled value scheduled later is cancelled at once.
 */
void test_b1_cancelled_input(void **state)
{
	struct t_fx *f;
	struct coord_rv *g, *p[300], *cons[300], *late;
	struct coord_error err;
	uint32_t us = 200, sum;
	int pc = 0, cc = 0, last_cancelled = -1;

	setup_n((void **)&f, 1, 4096);
	sum = t_fn(f->c, "sum_inputs");
	g = sched_in(f->c, t_fn(f->c, "gated"), "f", 1, NULL, 0);
	for (int i = 0; i < 300; i++) {
		p[i] = sched_in(f->c, t_fn(f->c, "sleep_us"), &us, sizeof(us), NULL, 0);
		cons[i] = sched_in(f->c, t_fn(f->c, "echo"), NULL, 0, &p[i], 1);
	}
	atomic_store(&t_gate, 1);
	assert_int_equal(coord_join(f->c, &err), -EIO);
	long entered = atomic_load(&t_entered);

	assert_int_equal(entered, atomic_load(&t_exited));
	for (int i = 0; i < 300; i++) {
		enum coord_rv_state ps = coord_rv_state(p[i]), cs = coord_rv_state(cons[i]);

		/* final at once, without a fetch that would wait */
		assert_true(ps == COORD_RV_READY || ps == COORD_RV_CANCELLED);
		assert_true(cs == COORD_RV_READY || cs == COORD_RV_CANCELLED);
		if (ps == COORD_RV_CANCELLED) {
			assert_int_equal(cs, COORD_RV_CANCELLED);
			assert_int_equal(coord_rv_fetch(cons[i], NULL, NULL, &err),
					 COORD_ECANCELLED);
			pc++;
			last_cancelled = i;
		}
		cc += cs == COORD_RV_CANCELLED;
	}
	assert_true(pc >= 1);
	assert_true(cc >= pc);
	/* nothing of the cancelled round runs later */
	t_sleep_ns(20000000);
	assert_int_equal(atomic_load(&t_entered), entered);
	/* a new consumer of a cancelled value is cancelled, not run */
	late = sched_in(f->c, sum, NULL, 0, &p[last_cancelled], 1);
	assert_int_equal(coord_rv_fetch(late, NULL, NULL, &err), COORD_ECANCELLED);
	assert_int_equal(coord_join(f->c, NULL), 0);
	assert_int_equal(atomic_load(&t_entered), entered);
	coord_rv_put(late);
	for (int i = 0; i < 300; i++) {
		coord_rv_put(p[i]);
		coord_rv_put(cons[i]);
	}
	coord_rv_put(g);
	teardown((void **)&f);
}

/*
 * B1 + S3: consumers still waiting for an input in flight when the error is
 * taken are cancelled by the time schedule/join returns it, and never run.
 */
void test_b1_s3_consumers_waiting(void **state)
{
	struct t_fx *f = *state;
	uint32_t sl = t_fn(f->c, "sleep_us"), sum = t_fn(f->c, "sum_inputs");
	uint32_t us = 600000;
	struct coord_rv *h, *fl, *w[100], *ww[100];
	struct coord_error err;
	bool h_running;

	h = sched_in(f->c, sl, &us, sizeof(us), NULL, 0);
	wait_entered(1); /* h occupies one worker */
	for (int i = 0; i < 100; i++) {
		w[i] = sched_in(f->c, sum, NULL, 0, &h, 1);
		ww[i] = sched_in(f->c, sum, NULL, 0, &w[i], 1); /* a second level */
	}
	fl = sched_in(f->c, t_fn(f->c, "fail"), NULL, 0, NULL, 0);
	assert_int_equal(coord_rv_fetch(fl, NULL, NULL, NULL), -EIO);
	h_running = coord_rv_state(h) == COORD_RV_NOT_READY;
	assert_int_equal(coord_join(f->c, &err), -EIO);
	assert_int_equal(atomic_load(&t_entered), atomic_load(&t_exited));
	assert_int_equal(coord_rv_state(h), COORD_RV_READY); /* kept its outcome */
	for (int i = 0; i < 100; i++) {
		if (h_running) { /* the usual case: they waited through the cancel */
			assert_int_equal(coord_rv_state(w[i]), COORD_RV_CANCELLED);
			assert_int_equal(coord_rv_state(ww[i]), COORD_RV_CANCELLED);
		}
		assert_int_not_equal(coord_rv_state(w[i]), COORD_RV_NOT_READY);
		assert_int_not_equal(coord_rv_state(ww[i]), COORD_RV_NOT_READY);
	}
	if (h_running)
		assert_int_equal(atomic_load(&t_entered), 2); /* h and fl only */
	assert_int_equal(coord_join(f->c, NULL), 0);
	for (int i = 0; i < 100; i++) {
		coord_rv_put(w[i]);
		coord_rv_put(ww[i]);
	}
	coord_rv_put(h);
	coord_rv_put(fl);
}

/* B1: 10,000 consumers waiting on one input with 2 workers: no thread,
 * worker or queue slot each; all run once it is ready. */
void test_b1_waiting_take_no_thread(void **state)
{
	struct t_fx *f = *state;
	uint32_t sum = t_fn(f->c, "sum_inputs");
	struct coord_rv *g, **w = calloc(10000, sizeof(*w));
	struct coord_metrics m;
	long threads = t_threads();
	int64_t k;

	g = sched_in(f->c, t_fn(f->c, "gated"), NULL, 0, NULL, 0);
	wait_entered(1);
	for (k = 0; k < 10000; k++)
		w[k] = sched_in(f->c, sum, &k, sizeof(k), &g, 1);
	assert_int_equal(coord_metrics(f->c, &m, NULL, 0), 0);
	assert_int_equal(m.outstanding, 10001); /* counted (C1) */
	assert_int_equal(m.queued, 0);		/* but not queued */
	assert_true(m.in_flight <= 1);
	assert_int_equal(t_threads(), threads);
	assert_int_equal(atomic_load(&t_entered), 1);
	atomic_store(&t_gate, 1);
	int32_t gw = fetch_i32(g);

	for (k = 0; k < 10000; k++) {
		assert_int_equal(fetch_i64(w[k]), k + gw);
		coord_rv_put(w[k]);
	}
	assert_int_equal(coord_join(f->c, NULL), 0);
	assert_int_equal(atomic_load(&t_exited), 10001);
	coord_rv_put(g);
	free(w);
}
