// SPDX-License-Identifier: MIT
/*
 * tests/coord_s8_s9.c - part of test_coord: S8 / S9, per-worker values and
 * resources (made lazily, creation failures, released on the last put).
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

/* ---- S8 / S9 -------------------------------------------------------------------- */

/* S8/S9: a per-worker argument is, on worker i, worker i's own component,
 * created lazily (once per worker, only where used). */
void test_s8_s9_per_worker_lazy(void **state)
{
	struct t_fx *f = *state;
	uint32_t fn = t_fn(f->c, "pw_next");
	struct coord_pw *pw;
	struct coord_call call = { .fn = fn };
	struct coord_rv *rv[300];
	int64_t next[2] = { 0, 0 };
	int64_t start = 100;

	assert_int_equal(coord_per_worker_create(f->c, "counter", &start, sizeof(start), &pw, NULL),
			 0);
	assert_int_equal(atomic_load(&t_creates[0]) + atomic_load(&t_creates[1]), 0); /* lazy */
	/* S7: a resource not made yet on a worker is ABORTED there */
	assert_int_equal(coord_per_worker_state(pw, 0), COORD_RV_ABORTED);
	assert_int_equal(coord_per_worker_state(pw, 2), COORD_RV_NOT_READY);
	call.pw = &pw;
	call.npw = 1;
	for (int i = 0; i < 300; i++)
		assert_int_equal(coord_schedule_call(f->c, &call, &rv[i], NULL), 0);
	assert_int_equal(coord_join(f->c, NULL), 0);
	next[0] = next[1] = start;
	for (int i = 0; i < 300; i++) {
		struct {
			int32_t worker, owner;
			int64_t value;
		} out;
		const void *v;
		size_t len;

		assert_int_equal(coord_rv_fetch(rv[i], &v, &len, NULL), 0);
		assert_int_equal(len, sizeof(out));
		memcpy(&out, v, sizeof(out));
		assert_int_equal(out.worker, out.owner); /* its own component */
		assert_true(out.worker == 0 || out.worker == 1);
		/* a worker runs its closures in order, so its counter is
		 * contiguous across the closures it ran */
		assert_true(out.value >= start);
		next[out.worker]++;
		coord_rv_put(rv[i]);
	}
	assert_int_equal(next[0] + next[1] - 2 * start, 300);
	for (int w = 0; w < 2; w++) {
		assert_int_equal(atomic_load(&t_creates[w]), next[w] > start ? 1 : 0);
		assert_int_equal(coord_per_worker_state(pw, (unsigned)w),
				 next[w] > start ? COORD_RV_READY : COORD_RV_ABORTED);
	}
	coord_per_worker_put(pw);
}

/* S9: a creator's failure fails the closure with an INPUT error wrapping the
 * cause, and is an error of the coordinator like any other (S3). */
void test_s9_creation_failure_is_input_error(void **state)
{
	struct t_fx *f = *state;
	struct coord_pw *pw;
	struct coord_call call = { .fn = t_fn(f->c, "pw_next"), .npw = 1 };
	struct coord_rv *rv;
	struct coord_error err;

	atomic_store(&t_create_fail, 1);
	assert_int_equal(coord_per_worker_create(f->c, "counter", NULL, 0, &pw, NULL), 0);
	call.pw = &pw;
	assert_int_equal(coord_schedule_call(f->c, &call, &rv, NULL), 0);
	assert_int_equal(coord_rv_fetch(rv, NULL, NULL, &err), COORD_EINPUT);
	assert_int_equal(err.cause, -ENOSPC);
	assert_non_null(strstr(err.msg, "counter"));
	assert_non_null(strstr(err.msg, "refused"));
	assert_int_equal(coord_join(f->c, &err), COORD_EINPUT);
	assert_int_equal(atomic_load(&t_entered), 0); /* the function never ran */
	coord_rv_put(rv);
	coord_per_worker_put(pw);
	/* an unknown creator is refused at once */
	assert_int_equal(coord_per_worker_create(f->c, "nope", NULL, 0, &pw, &err), COORD_ENOFN);
	assert_int_equal(coord_per_worker_create(f->c, "echo", NULL, 0, &pw, &err), COORD_ENOFN);
}

/* ---- S9: release on the last put ------------------------------------------------- */

/* A fresh token for "tracked" resources (helpers.h): only this test's count. */
static int64_t tr_begin(void)
{
	int64_t tok = (int64_t)(t_now_ns() | 1);

	atomic_store(&t_sh->tr_token, tok);
	return tok;
}

/* Closures @fn with per-worker argument @pw, @n of them on worker @w (handles
 * in @rv, or none). */
static void sched_pw_on(struct coord *c, const char *fn, struct coord_pw *pw, unsigned w,
			unsigned n, struct coord_rv **rv)
{
	struct coord_call call = {
		.fn = t_fn(c, fn), .pw = &pw, .npw = 1, .affinity = COORD_ON_WORKER(w)
	};

	for (unsigned i = 0; i < n; i++)
		assert_int_equal(coord_schedule_call(c, &call, rv ? &rv[i] : NULL, NULL), 0);
}

/* Tracked resources alive on worker @w, as a closure bound to it sees them:
 * after every release put before this call (runtime/pw.c P3). */
static int64_t tr_live_on(struct coord *c, unsigned w)
{
	struct coord_call call = { .fn = t_fn(c, "tr_live"), .affinity = COORD_ON_WORKER(w) };
	struct coord_rv *rv;
	int64_t live;

	assert_int_equal(coord_schedule_call(c, &call, &rv, NULL), 0);
	live = fetch_i64(rv);
	coord_rv_put(rv);
	return live;
}

/* S9: the last put destroys the resource on every worker that made it (its
 * destroy callback runs there once), while the coordinator lives. */
void test_s9_last_put_destroys_on_every_worker(void **state)
{
	struct t_fx *f = *state;
	int64_t tok = tr_begin();
	struct coord_rv *rv[2][20];
	struct coord_pw *pw;

	assert_int_equal(coord_per_worker_create(f->c, "tracked", &tok, sizeof(tok), &pw, NULL), 0);
	for (unsigned w = 0; w < 2; w++)
		sched_pw_on(f->c, "echo", pw, w, 20, rv[w]);
	assert_int_equal(coord_join(f->c, NULL), 0);
	for (unsigned w = 0; w < 2; w++)
		for (int i = 0; i < 20; i++) {
			assert_int_equal(coord_rv_fetch(rv[w][i], NULL, NULL, NULL), 0);
			coord_rv_put(rv[w][i]);
		}
	for (unsigned w = 0; w < 2; w++) {
		assert_int_equal(atomic_load(&t_sh->tr_creates[w]), 1);
		assert_int_equal(tr_live_on(f->c, w), 1); /* the handle keeps it */
	}
	coord_per_worker_put(pw);
	for (unsigned w = 0; w < 2; w++) {
		assert_int_equal(tr_live_on(f->c, w), 0);
		assert_int_equal(atomic_load(&t_sh->tr_destroys[w]), 1);
		assert_int_equal(atomic_load(&t_sh->tr_creates[w]), 1);
	}
}

/* S9: a put while closures use the resource (one running on each worker,
 * more queued behind it) destroys nothing until the last of them is
 * final; then each worker destroys it once. */
void test_s9_put_while_closures_use_it(void **state)
{
	struct t_fx *f = *state;
	int64_t tok = tr_begin();
	struct coord_rv *g[2], *rv[2][10];
	struct coord_pw *pw;

	assert_int_equal(coord_per_worker_create(f->c, "tracked", &tok, sizeof(tok), &pw, NULL), 0);
	for (unsigned w = 0; w < 2; w++)
		sched_pw_on(f->c, "gated", pw, w, 1, &g[w]);
	wait_entered(2);
	for (unsigned w = 0; w < 2; w++) {
		sched_pw_on(f->c, "echo", pw, w, 10, rv[w]);
		sched_pw_on(f->c, "echo", pw, w, 10, NULL);
	}
	coord_per_worker_put(pw); /* the closures hold it now */
	t_sleep_ns(20000000);
	for (unsigned w = 0; w < 2; w++) {
		assert_int_equal(atomic_load(&t_sh->tr_creates[w]), 1);
		assert_int_equal(atomic_load(&t_sh->tr_destroys[w]), 0);
	}
	atomic_store(&t_gate, 1);
	assert_int_equal(coord_join(f->c, NULL), 0);
	for (unsigned w = 0; w < 2; w++) {
		for (int i = 0; i < 10; i++) {
			assert_int_equal(coord_rv_fetch(rv[w][i], NULL, NULL, NULL), 0);
			coord_rv_put(rv[w][i]);
		}
		/* still held: the gated closure's RemoteValue */
		assert_int_equal(atomic_load(&t_sh->tr_destroys[w]), 0);
	}
	for (unsigned w = 0; w < 2; w++) {
		int32_t where = fetch_i32(g[w]);

		assert_int_equal(where, (int32_t)w);
		coord_rv_put(g[w]); /* the last one releases it */
	}
	for (unsigned w = 0; w < 2; w++) {
		assert_int_equal(tr_live_on(f->c, w), 0);
		assert_int_equal(atomic_load(&t_sh->tr_creates[w]), 1);
		assert_int_equal(atomic_load(&t_sh->tr_destroys[w]), 1);
	}
}

/* S9: a new dataset per epoch, as a trainer makes one: after each epoch's
 * put no worker holds any of them, so nothing grows over 50 epochs. */
void test_s9_dataset_per_epoch_does_not_grow(void **state)
{
	struct t_fx *f = *state;
	int64_t tok = tr_begin();
	long made = 0;

	for (int e = 0; e < 50; e++) {
		struct coord_call call = { .fn = t_fn(f->c, "echo"), .npw = 1 };
		struct coord_pw *pw;

		assert_int_equal(
			coord_per_worker_create(f->c, "tracked", &tok, sizeof(tok), &pw, NULL), 0);
		call.pw = &pw;
		for (int i = 0; i < 16; i++) /* no handles: the runtime's closures */
			assert_int_equal(coord_schedule_call(f->c, &call, NULL, NULL), 0);
		assert_int_equal(coord_join(f->c, NULL), 0);
		coord_per_worker_put(pw);
		for (unsigned w = 0; w < 2; w++)
			assert_int_equal(tr_live_on(f->c, w), 0);
	}
	for (unsigned w = 0; w < 2; w++) {
		assert_int_equal(atomic_load(&t_sh->tr_destroys[w]),
				 atomic_load(&t_sh->tr_creates[w]));
		made += atomic_load(&t_sh->tr_creates[w]);
	}
	assert_true(made >= 50); /* every epoch made one at least */
}

/* S9 with coord_destroy(): a handle released before it is destroyed once
 * on each worker; one still held at destroy is destroyed there by the
 * worker's teardown, once (no second destroy from the release), and may be
 * put after destroy; its state then reads NOT_READY. */
void test_s9_destroy_after_put_and_put_after_destroy(void **state)
{
	struct t_fx *f;
	struct coord_pw *a, *b;
	uint64_t until;
	int64_t tok;

	(void)state;
	setup_n((void **)&f, 2, COORD_RING_DEFAULT);
	tok = tr_begin();
	assert_int_equal(coord_per_worker_create(f->c, "tracked", &tok, sizeof(tok), &a, NULL), 0);
	assert_int_equal(coord_per_worker_create(f->c, "tracked", &tok, sizeof(tok), &b, NULL), 0);
	for (unsigned w = 0; w < 2; w++) {
		sched_pw_on(f->c, "echo", a, w, 5, NULL);
		sched_pw_on(f->c, "echo", b, w, 5, NULL);
	}
	assert_int_equal(coord_join(f->c, NULL), 0);
	coord_per_worker_put(a);
	for (unsigned w = 0; w < 2; w++)
		assert_int_equal(tr_live_on(f->c, w), 1); /* a is gone, b is not */
	teardown((void **)&f);				  /* b still held */
	assert_int_equal(coord_per_worker_state(b, 0), COORD_RV_NOT_READY);
	coord_per_worker_put(b); /* after destroy: freed, nothing else */
	/* Over the network the workers drop b when their connection ends,
	 * after destroy returned: wait for that (bounded). */
	until = t_now_ns() + 10000000000ull;
	for (unsigned w = 0; w < 2; w++)
		while (atomic_load(&t_sh->tr_destroys[w]) < 2 && t_now_ns() < until)
			t_sleep_ns(1000000);
	t_sleep_ns(20000000); /* a second destroy would come by now */
	for (unsigned w = 0; w < 2; w++) {
		assert_int_equal(atomic_load(&t_sh->tr_creates[w]), 2);
		assert_int_equal(atomic_load(&t_sh->tr_destroys[w]), 2);
	}
}
