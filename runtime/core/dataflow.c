// SPDX-License-Identifier: MIT
/*
 * runtime/core/dataflow.c - RemoteValues as arguments (B1): consumers wait for their
 * inputs on no queue and no thread.
 *
 *   A consumer (a closure with inputs) is counted in `outstanding` (C1) and
 *   stamped with the generation (C3) when scheduled, but it is not queued:
 *   it registers one edge (struct coord_dep) on each input's dependents list
 *   and waits in no queue, on no thread.  Its `pending` counts the inputs
 *   not yet final, plus 1 while it registers.  Values stay on the
 *   coordinator (results come back to it), so a lost worker never loses an
 *   input: the consumer reads them from the inputs' RemoteValues (inproc, in
 *   place) or gets them inside its REQ record (tcp).  No lineage is needed.
 *   DF1 Registration on input I: set RV_DEPS in I's state word with a CAS
 *       while I is NOT_READY (else I is final: count it done), then push the
 *       edge on I->deps with a CAS (release, DR1), unless it is SEALED (count
 *       it done).  I's completer makes the state final with one CAS (R1 in
 *       rv.c) and, only if the old word had RV_DEPS, exchanges I->deps with
 *       SEALED (acquire, DA1) and follows every edge it got.  Each edge is
 *       therefore counted exactly once: by the completer if the push came
 *       first in I->deps' modification order, else by the consumer; a
 *       closure nobody consumes pays a bit test on a word it already holds.
 *   DF2 A consumer holds a reference on each input from schedule until it
 *       is final itself (then coord_deps_final() drops them and frees its
 *       edges: every edge was counted by then, so nobody follows one).  So
 *       an input is never recycled while an edge of it is live, and
 *       I->deps, SEALED once, is reset only when I is freed (CL_DIRTY_DEPS).
 *   DF3 The decrement of `pending` (acq_rel) that reaches 0 makes its thread
 *       the consumer's owner, which sees every input's outcome and every
 *       write of schedule().  It fails the consumer (an input failed:
 *       COORD_EINPUT, cause the input's code), cancels it (an input was
 *       cancelled, or its generation was cancelled: S3), or queues it.  The
 *       completers that do this are dispatchers (within their inflight) or
 *       cancellers, so they never block: a full ring sends the consumer to
 *       the overflow FIFO.  Cascades (a chain failing or cancelled) are
 *       walked with a per-thread worklist, never by recursion.
 *       S3 with consumers: every consumer of a cancelled round is reached,
 *       since its inputs are older and are themselves cancelled, run to the
 *       end while the canceller waits for in-flight ones, or are consumers
 *       (by induction); the canceller drains the queue once more after the
 *       wait, for consumers queued by completers that read the old gen.
 *
 * Synchronization: struct coord's fields in coord_pvt.h's table; a
 * closure's state, refs and deps in rv.c (V1-V4) and DF1-DF3 above.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/coord_pvt.h"

/* Edges whose input became final, to count on their consumers, and whether
 * this thread is already walking them (cascades iterate, never recurse). */
static __thread struct coord_dep *tl_edges;
static __thread bool tl_firing;

const void *coord_closure_input(const void *src, uint32_t i, uint32_t *len,
				struct coord_in_cursor *cur)
{
	const struct coord_closure *x = src;
	const struct coord_closure *in = x->in[i].input;

	(void)cur;
	/* READY and unchanging (V2); its state was acquired by the thread that
	 * queued x, whose push published it to this worker (DF3). */
	return coord_closure_value(in, len); /* V5 in rv.c */
}

/* @x's inputs all failed or finished: fail it with COORD_EINPUT for input
 * @i, which failed (DF3).  Owner of @x only; drops its runtime reference. */
static void dep_fail(struct coord *c, struct coord_closure *x, uint32_t i)
{
	const struct coord_closure *in = x->in[i].input;
	char msg[COORD_ERRMSG_LEN];
	uint32_t mlen;
	const char *m = coord_closure_value(in, &mlen); /* V5 in rv.c */
	size_t len;
	char *b;
	/* The underlying failure: a failed input's own cause when it failed
	 * for an input in turn (a chain), else its code. */
	int cause = in->err_code == COORD_EINPUT && in->err_cause ? in->err_cause : in->err_code;

	snprintf(msg, sizeof(msg), "input %u (closure %llu) failed: %s", i,
		 (unsigned long long)in->id, mlen ? m : coord_strerror(in->err_code));
	len = strlen(msg) + 1;
	b = coord_closure_result_buf(x, len);
	if (b)
		memcpy(b, msg, len);
	x->res_dirty |= CL_DIRTY_RES;
	x->err_code = COORD_EINPUT;
	x->err_cause = cause;
	x->err_worker = in->err_worker;
	record_error(c, in->err_worker, x, COORD_EINPUT, cause, msg);
	/* Relaxed: a statistic (B7). */
	atomic_fetch_add_explicit(&c->dep_failed, 1, memory_order_relaxed);
	coord_rv_set_final(x, COORD_RV_READY | RV_READY_ERR);
	outstanding_sub(c, 1);
	/* No transport ever saw x's id: a plain put. */
	coord_closure_put(x);
}

/* @x is runnable: queue it without ever blocking (DF3). */
static void dep_queue(struct coord *c, struct coord_closure *x)
{
	if (unlikely(x->res_dirty & CL_HINT))
		coord_hq_push(c, x); /* B4; never blocks either */
	else if ((c->unbounded && !ov_empty(c)) ||
		 coord_ring_push_ent_mp(&c->ring,
					&(struct coord_ring_ent){ { (uintptr_t)x, 0, 0 } }) < 0)
		ov_push(c, x, x, 1);
	queue_pushed(c); /* either push was a seq_cst RMW (E3) */
}

/* Every input of @x is final and we own @x (DF3): decide its fate. */
static void dep_resolve(struct coord *c, struct coord_closure *x)
{
	uint32_t bad = UINT32_MAX;
	bool cancelled = false;

	for (uint32_t i = 0; i < x->nin; i++) {
		/* DA2 (acquire): pairs with R1 in coord_rv_set_final(): the
		 * input's outcome and value (DF3). */
		uint32_t st = atomic_load_explicit(&x->in[i].input->state, memory_order_acquire) &
			      RV_STATE_MASK;

		if (st == (COORD_RV_READY | RV_READY_ERR)) {
			bad = i;
			break;
		}
		cancelled |= st == COORD_RV_CANCELLED;
	}
	/* Relaxed: an early-out like coord_dispatch_stale(); a stale gen
	 * queues x and C5 (or the canceller's second drain) cancels it. */
	if (x->gen < atomic_load_explicit(&c->gen, memory_order_relaxed))
		cancel_one(c, x); /* S3: its round was cancelled */
	else if (bad != UINT32_MAX)
		dep_fail(c, x, bad);
	else if (cancelled)
		cancel_one(c, x);
	else
		dep_queue(c, x);
}

/* One input of @x is final (its edge counted once, DF1). */
static void dep_done(struct coord *c, struct coord_closure *x, uint32_t n)
{
	/* acq_rel (DF3): release what we saw to the owner; the decrement that
	 * reaches 0 acquires every earlier one, schedule()'s included. */
	if (atomic_fetch_sub_explicit(&x->pending, n, memory_order_acq_rel) == n)
		dep_resolve(c, x);
}

void coord_deps_final(struct coord_closure *cl, uint32_t old)
{
	if (old & RV_HASIN) {
		/* DF2: every edge of cl was counted before it was queued or
		 * resolved, so nobody follows them now: drop the inputs. */
		struct coord_dep *in = cl->in;
		uint32_t n = cl->nin;

		cl->in = NULL;
		cl->nin = 0;
		for (uint32_t i = 0; i < n; i++)
			coord_closure_put_held(in[i].input);
		coord_buf_put(&cl->c->bufs, in, cl->in_cls);
	}
	if (old & RV_DEPS) {
		/* DA1 (acquire): pairs with DR1 in dep_register(): the edges'
		 * contents.  SEALED turns later registrations away (DF1). */
		struct coord_dep *e = atomic_exchange_explicit(&cl->deps, COORD_DEPS_SEALED,
							       memory_order_acquire);

		cl->res_dirty |= CL_DIRTY_DEPS; /* reset deps before reuse (DF2) */
		while (e) {
			struct coord_dep *nx = e->next;

			e->next = tl_edges;
			tl_edges = e;
			e = nx;
		}
	}
	if (tl_firing)
		return; /* the outer walk below takes what we added */
	tl_firing = true;
	while (tl_edges) {
		struct coord_dep *e = tl_edges;

		/* Read the edge before the count: once it reaches 0 the
		 * consumer (and its edges) may be gone. */
		tl_edges = e->next;
		dep_done(e->consumer->c, e->consumer, 1);
	}
	tl_firing = false;
}

/* DF1: put edge @e on its input's dependents list; false if the input is
 * final already (the caller counts the edge itself). */
static bool dep_register(struct coord_dep *e)
{
	struct coord_closure *in = e->input;
	/* Relaxed: a snapshot for the CAS loop, which re-validates. */
	uint32_t w = atomic_load_explicit(&in->state, memory_order_relaxed);
	struct coord_dep *h;

	for (;;) {
		if ((w & RV_STATE_MASK) != COORD_RV_NOT_READY)
			return false;
		if (w & RV_DEPS)
			break;
		/* Relaxed (DF1): only the atomicity matters: either this CAS
		 * sees the final word, or the final CAS sees RV_DEPS. */
		if (atomic_compare_exchange_weak_explicit(&in->state, &w, w | RV_DEPS,
							  memory_order_relaxed,
							  memory_order_relaxed))
			break;
	}
	/* Relaxed: a snapshot for the CAS loop. */
	h = atomic_load_explicit(&in->deps, memory_order_relaxed);
	for (;;) {
		if (h == COORD_DEPS_SEALED)
			return false;
		e->next = h;
		/* DR1 (release): pairs with DA1 in coord_deps_final(): the edge
		 * is complete before its completer can follow it (DF1). */
		if (atomic_compare_exchange_weak_explicit(&in->deps, &h, e, memory_order_release,
							  memory_order_relaxed))
			return true;
	}
}

/* Give fresh closure @x the inputs of @call (DF2); 0 or COORD_ENOMEM. */
static int inputs_setup(struct coord *c, struct coord_closure *x, const struct coord_call *call)
{
	uint32_t n = call->ninputs;

	x->in = coord_buf_get(&c->bufs, (size_t)n * sizeof(*x->in), NULL, 0, &x->in_cls);
	if (unlikely(!x->in))
		return COORD_ENOMEM;
	for (uint32_t i = 0; i < n; i++) {
		struct coord_closure *in = rv_cl(call->inputs[i]);

		/* Relaxed: the caller holds a reference, so this is not the
		 * 0 -> 1 edge; the drop in coord_closure_unref() is acq_rel. */
		atomic_fetch_add_explicit(&in->refs, 1, memory_order_relaxed);
		x->in[i].next = NULL;
		x->in[i].consumer = x;
		x->in[i].input = in;
	}
	x->nin = n;
	x->res_dirty |= CL_HAS_IN;
	/* Relaxed: x is private until registered (DR1 publishes it, and the
	 * pending decrements chain to its owner, DF3).  The +1 keeps it from
	 * resolving while we still register. */
	atomic_store_explicit(&x->pending, n + 1, memory_order_relaxed);
	/* Relaxed: private, as above. */
	atomic_store_explicit(&x->state, COORD_RV_NOT_READY | RV_HASIN, memory_order_relaxed);
	return 0;
}

/* coord_schedule_call() for filled @x with inputs: count it, register it on
 * every input, and resolve it now if they are all final (B1). */
int schedule_consumer(struct coord *c, struct coord_closure *x, const struct coord_call *call,
		      struct coord_rv **out, struct coord_error *err)
{
	uint32_t done = 0;

	if (unlikely(inputs_setup(c, x, call) < 0)) {
		coord_closure_drop_contents(x);
		/* Relaxed: never published. */
		atomic_store_explicit(&x->refs, 0, memory_order_relaxed);
		coord_pool_put(c->closures, x->idx);
		return coord_seterr(err, COORD_ENOMEM, "no memory for %u inputs", call->ninputs);
	}
	/* Relaxed: read by cancellers only, to drain once more (DF3); set
	 * before this consumer can be queued by anyone. */
	if (!atomic_load_explicit(&c->dataflow, memory_order_relaxed))
		atomic_store_explicit(&c->dataflow, true, memory_order_relaxed);
	/* Relaxed: C1, as in coord_schedule_call(); every decrement comes
	 * after x's owner acquired our final pending decrement (DF3). */
	atomic_fetch_add_explicit(&c->outstanding, 1, memory_order_relaxed);
	/* C3: the generation when the consumer starts waiting (a canceller
	 * then reaches it, DF3). */
	x->gen = stamp_gen(c);
	if (out)
		*out = (struct coord_rv *)x;
	for (uint32_t i = 0; i < x->nin; i++)
		done += !dep_register(&x->in[i]);
	dep_done(c, x, done + 1); /* the final inputs and our +1 */
	return 0;
}
