// SPDX-License-Identifier: MIT
/*
 * tests/test_results.c - results as the fetcher sees them, whatever their
 * size and whoever drops the last reference: small values and short error
 * messages kept in the closure's first line (V5 in runtime/core/rv.c),
 * results replaced before the function returns, inputs of every size read
 * by consumers (B1), and handles put before, during and after completion,
 * from several threads at once (RL1 in runtime/core/dispatch.c, the
 * producer stashes' C10).  In process and over tcp.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <coord/coord.h>

#include "helpers.h"

static int setup2(void **state)
{
	return t_fx_setup(state, 2, COORD_RING_DEFAULT);
}

static int teardown(void **state)
{
	return t_fx_teardown(state);
}

/* @n bytes of a pattern that differs by @seed. */
static void fill(unsigned char *b, size_t n, unsigned seed)
{
	for (size_t i = 0; i < n; i++)
		b[i] = (unsigned char)(i * 13 + seed * 7 + 1);
}

/*
 * V5: every result length from 0 to 80 comes back whole, through
 * coord_rv_fetch() and coord_rv_fetch_many(), while results of other
 * sizes are in flight in the same closures' earlier lives.
 */
static void test_v5_every_length_fetched(void **state)
{
	enum { MAXLEN = 80, ROUNDS = 3 };
	struct t_fx *f = *state;
	uint32_t echo = t_fn(f->c, "echo");
	struct coord_rv *rv[MAXLEN + 1];
	struct coord_result res[MAXLEN + 1];
	unsigned char buf[MAXLEN + 1];

	for (unsigned r = 0; r < ROUNDS; r++) {
		for (unsigned n = 0; n <= MAXLEN; n++) {
			fill(buf, n, n + r);
			assert_int_equal(coord_schedule(f->c, echo, buf, n, &rv[n], NULL), 0);
		}
		if (r == 1) {
			assert_int_equal(coord_rv_fetch_many(rv, MAXLEN + 1, res, -1), 0);
		} else {
			for (unsigned n = 0; n <= MAXLEN; n++) {
				res[n].code = coord_rv_fetch(rv[n], &res[n].val, &res[n].len, NULL);
			}
		}
		for (unsigned n = 0; n <= MAXLEN; n++) {
			assert_int_equal(res[n].code, 0);
			assert_int_equal(res[n].len, n);
			fill(buf, n, n + r);
			if (n)
				assert_memory_equal(res[n].val, buf, n);
			coord_rv_put(rv[n]);
		}
	}
	assert_int_equal(coord_join(f->c, NULL), 0);
}

/* V5: a result replaced before the function returns is the second one,
 * from small to large, large to small and small to small. */
static void test_v5_result_replaced(void **state)
{
	static const uint32_t pairs[][2] = { { 4, 100 }, { 100, 4 }, { 8, 3 }, { 3, 8 },
					     { 1, 0 },	 { 0, 1 },   { 9, 8 }, { 2000, 5 } };
	struct t_fx *f = *state;
	uint32_t fn = t_fn(f->c, "set_twice");

	for (size_t i = 0; i < sizeof(pairs) / sizeof(pairs[0]); i++) {
		struct coord_rv *rv;
		const unsigned char *v;
		size_t len = 99;

		assert_int_equal(coord_schedule(f->c, fn, pairs[i], sizeof(pairs[i]), &rv, NULL),
				 0);
		assert_int_equal(coord_rv_fetch(rv, (const void **)&v, &len, NULL), 0);
		assert_int_equal(len, pairs[i][1]);
		for (size_t k = 0; k < len; k++)
			assert_int_equal(v[k], 0xbb);
		coord_rv_put(rv);
	}
	assert_int_equal(coord_join(f->c, NULL), 0);
}

/*
 * V5: error messages of every length from empty to 20 bytes (a short one
 * fits the first line, NUL included) reach the fetcher whole, and a
 * consumer of the failed value fails with COORD_EINPUT naming it (B1).
 * The failing call waits (as a consumer) for a gated closure, so nothing
 * fails before both are queued; each error is then taken by join (S3).
 */
static void test_v5_short_error_messages(void **state)
{
	struct t_fx *f = *state;
	uint32_t gated = t_fn(f->c, "gated"), fail = t_fn(f->c, "fail_msg");
	uint32_t sum = t_fn(f->c, "sum_inputs");
	const char *text = "abcdefghijklmnopqrst";

	for (int n = 0; n <= 20; n++) {
		struct coord_error err = { 0 };
		struct coord_rv *g, *rv, *cons;
		struct coord_call fcall = {
			.fn = fail, .args = text, .len = (size_t)n, .inputs = &g, .ninputs = 1
		};
		struct coord_call scall = { .fn = sum, .inputs = &rv, .ninputs = 1 };
		char want[64];

		snprintf(want, sizeof(want), "%.*s", n, text);
		atomic_store(&t_gate, 0);
		assert_int_equal(coord_schedule(f->c, gated, NULL, 0, &g, NULL), 0);
		assert_int_equal(coord_schedule_call(f->c, &fcall, &rv, NULL), 0);
		assert_int_equal(coord_schedule_call(f->c, &scall, &cons, NULL), 0);
		atomic_store(&t_gate, 1);
		assert_int_equal(coord_rv_fetch(rv, NULL, NULL, &err), -EIO);
		assert_string_equal(err.msg, want);
		assert_int_equal(err.closure, coord_rv_id(rv));
		memset(&err, 0, sizeof(err));
		assert_int_equal(coord_rv_fetch(cons, NULL, NULL, &err), COORD_EINPUT);
		assert_int_equal(err.cause, -EIO);
		if (n) /* "input 0 (closure N) failed: <message>" */
			assert_non_null(strstr(err.msg, want));
		coord_rv_put(cons);
		coord_rv_put(rv);
		coord_rv_put(g);
		memset(&err, 0, sizeof(err));
		assert_int_equal(coord_join(f->c, &err), -EIO); /* S3: the first error */
		assert_string_equal(err.msg, want);
		assert_int_equal(coord_join(f->c, NULL), 0);
	}
}

/* B1 with V5: consumers read inputs of every length from 0 to 72 in place
 * (in process) or forwarded (tcp), concatenated in order. */
static void test_v5_inputs_every_length(void **state)
{
	enum { MAXLEN = 72 };
	struct t_fx *f = *state;
	uint32_t echo = t_fn(f->c, "echo"), cat = t_fn(f->c, "concat_inputs");
	unsigned char buf[MAXLEN + 1], want[2 * MAXLEN + 2];

	for (unsigned n = 0; n <= MAXLEN; n++) {
		struct coord_rv *in[2], *rv;
		struct coord_call call = { .fn = cat, .inputs = in, .ninputs = 2 };
		const void *v;
		size_t len;

		fill(buf, n, n);
		assert_int_equal(coord_schedule(f->c, echo, buf, n, &in[0], NULL), 0);
		memcpy(want, buf, n);
		fill(buf, n / 2 + 1, n + 100);
		assert_int_equal(coord_schedule(f->c, echo, buf, n / 2 + 1, &in[1], NULL), 0);
		memcpy(want + n, buf, n / 2 + 1);
		assert_int_equal(coord_schedule_call(f->c, &call, &rv, NULL), 0);
		coord_rv_put(in[0]); /* the consumer keeps its own references (B1) */
		coord_rv_put(in[1]);
		assert_int_equal(coord_rv_fetch(rv, &v, &len, NULL), 0);
		assert_int_equal(len, n + n / 2 + 1);
		assert_memory_equal(v, want, len);
		coord_rv_put(rv);
	}
	assert_int_equal(coord_join(f->c, NULL), 0);
}

/* One producer of the RL1 test: a window of handles; each closure's handle
 * is put before its fetch (never fetched), right after it (fetched), or
 * kept until the end, by the closure's number. */
struct rl1_arg {
	struct coord *c;
	uint32_t echo;
	unsigned seed;
	int64_t n;
	int bad;
};

static void *rl1_producer(void *p)
{
	enum { W = 64 };
	struct rl1_arg *a = p;
	struct coord_rv *win[W] = { 0 }, **kept = calloc((size_t)a->n, sizeof(*kept));
	int64_t nk = 0;

	if (!kept) {
		a->bad++;
		return NULL;
	}
	for (int64_t i = 0; i < a->n + W; i++) {
		unsigned s = (unsigned)(i % W);

		if (i >= W && win[s]) {
			int64_t want = (i - W) * 3 + a->seed, got = -1;
			const void *v;
			size_t len = 0;

			if (coord_rv_fetch(win[s], &v, &len, NULL) != 0 || len != sizeof(got))
				a->bad++;
			else
				memcpy(&got, v, sizeof(got));
			if (got != want)
				a->bad++;
			coord_rv_put(win[s]);
		}
		win[s] = NULL;
		if (i < a->n) {
			int64_t x = i * 3 + a->seed;
			struct coord_rv *rv;

			if (coord_schedule(a->c, a->echo, &x, sizeof(x), &rv, NULL) != 0) {
				a->bad++;
				continue;
			}
			switch ((i * 7 + a->seed) % 5) {
			case 0: /* dropped at once: the worker's release is the last */
				coord_rv_put(rv);
				break;
			case 1: /* kept to the end */
				kept[nk++] = rv;
				break;
			default: /* fetched W closures later */
				win[s] = rv;
			}
		}
	}
	for (int64_t k = 0; k < nk; k++) {
		const void *v;
		size_t len = 0;

		if (coord_rv_fetch(kept[k], &v, &len, NULL) != 0 || len != sizeof(int64_t))
			a->bad++;
		coord_rv_put(kept[k]);
	}
	free(kept);
	return NULL;
}

/*
 * RL1, C10: three threads schedule, fetch and put handles in every order
 * against the workers' completions (a handle put before its closure ran,
 * while it runs, after it finished, at the end), so the last reference is
 * sometimes the worker's and sometimes the user's, and freed closures go
 * back through the pool and through the producers' stashes.  Every fetched
 * value is right, join returns 0, and nothing leaks (the sanitizers' runs)
 * or is used after it was recycled (ASan, TSan).
 */
static void test_rl1_handles_put_in_every_order(void **state)
{
	enum { T = 3, N = 20000 };
	struct t_fx *f = *state;
	struct rl1_arg a[T];
	pthread_t th[T];

	for (unsigned t = 0; t < T; t++) {
		a[t] = (struct rl1_arg){ .c = f->c, .echo = t_fn(f->c, "echo"), .seed = t, .n = N };
		assert_int_equal(pthread_create(&th[t], NULL, rl1_producer, &a[t]), 0);
	}
	for (unsigned t = 0; t < T; t++) {
		assert_int_equal(pthread_join(th[t], NULL), 0);
		assert_int_equal(a[t].bad, 0);
	}
	assert_int_equal(coord_join(f->c, NULL), 0);
}

/*
 * C10: producer stash slots pass from thread to thread.  Waves of threads,
 * more at once than there are slots (4), each schedule, fetch and put in
 * every order (rl1_producer()) and exit; a thread of a later wave takes a
 * slot an exited one left, with the closures and the count (`added`) in
 * its stashes (TSan: ordered by the exit's release, the take's acquire).
 * Every value is right, join returns 0 and nothing stays outstanding.
 */
static void test_c10_threads_come_and_go(void **state)
{
	enum { WAVES = 4, T = 6, N = 3000 };
	struct t_fx *f = *state;
	struct coord_metrics m;

	for (unsigned w = 0; w < WAVES; w++) {
		struct rl1_arg a[T];
		pthread_t th[T];

		for (unsigned t = 0; t < T; t++) {
			a[t] = (struct rl1_arg){
				.c = f->c, .echo = t_fn(f->c, "echo"), .seed = w * T + t, .n = N
			};
			assert_int_equal(pthread_create(&th[t], NULL, rl1_producer, &a[t]), 0);
		}
		for (unsigned t = 0; t < T; t++) {
			assert_int_equal(pthread_join(th[t], NULL), 0);
			assert_int_equal(a[t].bad, 0);
		}
	}
	assert_int_equal(coord_join(f->c, NULL), 0);
	assert_int_equal(coord_metrics(f->c, &m, NULL, 0), 0);
	assert_int_equal(m.outstanding, 0);
}

int main(void)
{
#define T(fn) cmocka_unit_test_setup_teardown(fn, setup2, teardown)
	const struct CMUnitTest tests[] = {
		T(test_v5_every_length_fetched),	T(test_v5_result_replaced),
		T(test_v5_short_error_messages),	T(test_v5_inputs_every_length),
		T(test_rl1_handles_put_in_every_order), T(test_c10_threads_come_and_go),
	};
	int failed = 0;

	t_watchdog(300);
	if (t_group_on("inproc"))
		failed += cmocka_run_group_tests_name("results/inproc", tests, NULL, NULL);
	if (t_group_on("tcp"))
		failed += cmocka_run_group_tests_name("results/tcp", tests, t_group_tcp,
						      t_group_inproc);
	return failed;
}
