// SPDX-License-Identifier: MIT
/*
 * runtime/core/rv.c - RemoteValue: one atomic state word per closure (S6, S7).
 *
 * State word (closure.state):
 *   bits 0-2  NOT_READY(0) READY(1) ABORTED(2) CANCELLED(3) READY|ERR(4|1)
 *   bit  3    RV_WAITER: a fetcher is parked (or about to be) on the word.
 *   bit  4    RV_DEPS: a consumer registered on the dependents list (B1).
 *   bit  5    RV_HASIN: the closure holds inputs (B1).
 *   bit  6    RV_RTREL (final words): the runtime's reference went with the
 *             final CAS (RL1 in dispatch.c; holder_unref()).
 *   bit  7    RV_ORPHAN (NOT_READY): only the runtime's reference is left.
 *   bits 8-11 a final word's small result length (V5).
 *   Bits 3-5 and 7 live only while NOT_READY: the final CAS replaces the whole
 *   word, and its old value tells the completer whether there is dataflow
 *   work (coord_deps_final()): the default path tests a register, no load.
 *
 * Transitions (S7): NOT_READY -> READY | READY_ERR | CANCELLED | ABORTED;
 * ABORTED -> NOT_READY (rebuilt: put back and run again).  The completer
 * writes the result fields, then exchanges the state word (R1, release) and
 * calls FUTEX_WAKE only if the old word had RV_WAITER.  A fetcher loads the
 * word with acquire (A1), spins (W1; driving the transport's I/O meanwhile
 * if it allows: coord_tp_ops.drive), then sets RV_WAITER with a CAS and
 * sleeps on exactly that value: a completion in between changes the word,
 * so the sleep returns at once (EAGAIN).
 *
 * W1  Adaptive spin (coord_spin_budget()).  A fetch spins for opts.spin_ns,
 *     or, while the coordinator's recent waits (c->wait_avg_ns, the waits
 *     that did not end within the first few pauses) ended within
 *     opts.spin_max_ns, for four times their average, up to spin_max_ns.  Why:
 *     a parked waiter costs its completer a cross-CPU FUTEX_WAKE, tens of
 *     microseconds of the completer's CPU once the waiter's CPU has idled,
 *     and with many closures in flight the caller's waits for the oldest
 *     are longer than a fixed short spin (the measurements:
 *     docs/perf-history.md, "runtime/core/rv.c").  Waits longer than
 *     spin_max_ns (a trainer's steps) still spin only spin_ns.
 *
 * Invariants:
 *   V1  The result fields are written only while the state is NOT_READY, by
 *       the one thread that owns the closure (its dispatcher).
 *   V2  After a final state (READY, READY_ERR, CANCELLED) the result fields
 *       never change until the closure is freed (refs == 0).
 *   V3  refs counts the user's handle and the runtime's; the closure (and its
 *       buffers) are recycled by whoever drops the last one.  A final word
 *       with RV_RTREL says the runtime's, still counted, is gone (RL1), so
 *       a holder that sees it and refs == 2 holds the last one.
 *   V4  A closure scheduled without a RemoteValue (out == NULL) has refs == 0
 *       for its whole life: nobody holds a handle, so nobody can fetch it,
 *       wait on it or consume it (dataflow inputs are handles, DF2), and the
 *       runtime, its only owner, retires it with no RMW on refs.  Refs never
 *       reach 0 on a closure that has a handle until it is freed, so
 *       refs == 0 on a closure the runtime holds means exactly this case.
 *       Its completion need not touch the state word either (see
 *       coord_dispatch_complete()): the worker then only reads the closure's
 *       first line, which stays in the producer's cache for its next life.
 *   V5  A result (or error message) of 1..8 bytes is kept in res_small, on
 *       the closure's first line with the state word (res_cls ==
 *       CL_RES_SMALL; its owner keeps the length in res_dirty's high
 *       nibble, and the final CAS copies it into the state word, bits 8-11,
 *       which stay as they are while final), and res and res_len are not
 *       written: a fetch of it reads one line, the one its completer wrote.
 *       Readers take the value through coord_closure_value() (closure.h),
 *       never res directly.
 *
 * Synchronization (one closure; struct coord's fields: coord_pvt.h):
 *   field          written by (how)               read by (how)              order
 *   state          the completer (release         fetchers, waiters          R1 -> A1: the result
 *                  exchange/CAS, R1); a fetcher   (acquire, A1)              fields (V1, V2)
 *                  sets RV_WAITER (relaxed CAS)
 *   result fields  the owning dispatcher, while   fetchers, after A1         R1 -> A1
 *                  NOT_READY (plain, V1)
 *   refs           handles and the runtime        the same                   acq_rel on the drop
 *                  (relaxed +, acq_rel -, V3)                                that may free (V3)
 *   RV_RTREL,      the in-process completer's     holders' drops             acq_rel CASes on the
 *   RV_ORPHAN      final CAS / a holder leaving   (acquire), that final      state word: one of the
 *                  only the runtime (acq_rel CAS)  CAS (acq_rel)              two frees (V3)
 *   wait_avg_ns,   fetchers that waited           fetchers (relaxed)         none needed: a spin
 *   waits, parked  (relaxed)                                                 budget and metrics
 */
#include <stdio.h>
#include <string.h>

#include "runtime/core/coord_pvt.h"

static inline uint32_t st_of(uint32_t w)
{
	return w & RV_STATE_MASK;
}

static inline bool st_final(uint32_t st)
{
	return st == COORD_RV_READY || st == (COORD_RV_READY | RV_READY_ERR) ||
	       st == COORD_RV_CANCELLED || st == COORD_RV_ABORTED;
}

enum coord_rv_state coord_rv_state(const struct coord_rv *rv)
{
	uint32_t w;

	if (unlikely(!rv))
		return COORD_RV_CANCELLED; /* final, no value (coord.h) */
	/* A1 (acquire): pairs with R1 in rv_set_final(); a caller that sees a
	 * final state may read the result fields. */
	w = atomic_load_explicit(&rv_cl(rv)->state, memory_order_acquire);
	return (enum coord_rv_state)(st_of(w) & 3u);
}

uint64_t coord_rv_id(const struct coord_rv *rv)
{
	return rv ? rv_cl(rv)->id : COORD_NO_CLOSURE;
}

/* Return @cl's result buffer, if it has one, and forget a small result. */
static inline void res_release(struct coord_closure *cl)
{
	if (cl->res_cls != COORD_BUF_INLINE && cl->res_cls != CL_RES_SMALL)
		coord_buf_put(&cl->c->bufs, cl->res, cl->res_cls);
	cl->res_dirty &= (uint8_t)~CL_SMALL_MASK;
}

void *coord_closure_result_buf(struct coord_closure *cl, size_t len)
{
	void *b;

	/* V1: only the owner writes, before R1. */
	res_release(cl);
	if (len && len <= sizeof(cl->res_small)) {
		/* V5: in the first line; res and res_len stay as they are. */
		cl->res_cls = CL_RES_SMALL;
		cl->res_dirty |= (uint8_t)(len << CL_SMALL_SHIFT);
		return &cl->res_small;
	}
	cl->res_dirty |= CL_DIRTY_RES;
	b = coord_buf_get(&cl->c->bufs, len, cl->inline_res, CL_INLINE_RES, &cl->res_cls);
	if (!b) {
		cl->res_cls = COORD_BUF_INLINE;
		cl->res = cl->inline_res;
		cl->res_len = 0;
		return NULL;
	}
	cl->res = b;
	cl->res_len = (uint32_t)len;
	return b;
}

/*
 * rv_final() - publish final state @st (V1, V2); with @rel (RL1 in
 * dispatch.c), release the runtime's reference with the same CAS (RV_RTREL)
 * unless only the runtime holds the closure (RV_ORPHAN) or it has dataflow
 * work to do after the CAS (RV_DEPS, RV_HASIN: that reads the closure).
 * Returns -1 if the closure was already final (a late, out-of-generation
 * result: discarded), 1 if the runtime's reference went with the CAS, else 0.
 */
static int rv_final(struct coord_closure *cl, uint32_t st, bool rel)
{
	/* Relaxed: a snapshot for the CAS loop, which re-validates. */
	uint32_t w = atomic_load_explicit(&cl->state, memory_order_relaxed);
	uint32_t nw;

	/* V5: the small result's length goes with the state (the owner's
	 * res_dirty may change after the CAS: coord_deps_final()). */
	if (cl->res_cls == CL_RES_SMALL)
		st |= (uint32_t)((cl->res_dirty & CL_SMALL_MASK) >> CL_SMALL_SHIFT)
		      << RV_SMALL_SHIFT;

	for (;;) {
		uint32_t cur = st_of(w);

		if (cur != COORD_RV_NOT_READY && cur != COORD_RV_ABORTED)
			return -1;
		nw = st;
		if (rel && !(w & (RV_ORPHAN | RV_DEPS | RV_HASIN)))
			nw |= RV_RTREL;
		/* R1 (release): pairs with A1 in coord_rv_state()/rv_wait(): the
		 * result fields written before it are visible to any thread that
		 * sees the final state.  Acquire: pairs with the acq_rel CAS that
		 * set RV_ORPHAN (holder_unref()): the holders' drops happen-
		 * before the runtime's own (coord_closure_unref()) that follows.
		 * The CAS (not a plain store) reads RV_WAITER and RV_ORPHAN
		 * atomically and clears them. */
		if (atomic_compare_exchange_weak_explicit(&cl->state, &w, nw, memory_order_acq_rel,
							  memory_order_relaxed))
			break;
	}
	/* With RV_RTREL the closure may be recycled by now: the wake only
	 * names its address (type-stable pool memory, coord_destroy() waits
	 * for this dispatcher's finish), and a waiter of its next life
	 * re-checks its word. */
	if (w & RV_WAITER)
		coord_futex_wake_all(&cl->state);
	/* B1: inputs to drop, dependents to hand on (DF1-DF3, dataflow.c);
	 * never with RV_RTREL (above). */
	if (unlikely(w & (RV_DEPS | RV_HASIN)))
		coord_deps_final(cl, w);
	return (nw & RV_RTREL) != 0;
}

bool coord_rv_set_final(struct coord_closure *cl, uint32_t st)
{
	return rv_final(cl, st, false) >= 0;
}

int coord_rv_set_final_rel(struct coord_closure *cl, uint32_t st)
{
	return rv_final(cl, st, true);
}

/* W1: fold a wait that began at @since into the coordinator's average. */
static void wait_note(struct coord *c, uint64_t since)
{
	/* Relaxed, both: the average is a hint for the spin budget; two
	 * fetchers updating it at once may lose one sample, which is harmless,
	 * and nothing else is published through it. */
	uint64_t avg = atomic_load_explicit(&c->wait_avg_ns, memory_order_relaxed);
	uint64_t next = coord_spin_avg(avg, coord_now_ns() - since, c->opts.spin_max_ns);

	/* Relaxed: as above. */
	atomic_store_explicit(&c->wait_avg_ns, next, memory_order_relaxed);
}

/* Wait until @cl is final; 0 or -ETIMEDOUT.  Leaves the state acquired. */
static int rv_wait(struct coord_closure *cl, uint64_t deadline)
{
	struct coord *c = cl->c;
	uint64_t spin_until = 0, since = 0;
	bool parked = false;
	uint32_t w;

	for (unsigned i = 0;; i++) {
		/* A1 (acquire): see coord_rv_state(). */
		w = atomic_load_explicit(&cl->state, memory_order_acquire);
		if (st_final(st_of(w))) {
			/* S6: an aborted value fails at once, as a final one. */
			if (since)
				wait_note(c, since);
			return 0;
		}
		if (i < 64) {
			cpu_relax();
			continue;
		}
		if (spin_until == 0) {
			/* Relaxed: a hint (wait_note()). */
			uint64_t avg = atomic_load_explicit(&c->wait_avg_ns, memory_order_relaxed);

			since = coord_now_ns();
			spin_until = since +
				     coord_spin_budget(avg, c->opts.spin_ns, c->opts.spin_max_ns);
			/* Relaxed: a metric (B7); readers want a recent value. */
			atomic_fetch_add_explicit(&c->waits, 1, memory_order_relaxed);
		}
		if (coord_now_ns() < spin_until && coord_now_ns() < deadline) {
			/* A transport that lets waiters drive its I/O: reap the
			 * result here rather than wait for its thread to (and be
			 * woken by it). */
			if (c->tp->drive && c->tp->drive(c, since, &spin_until))
				continue;
			coord_spin_pause(i);
			continue;
		}
		if (!(w & RV_WAITER)) {
			/* Relaxed: the flag only asks for a wake; a failed CAS means
			 * the state moved, and we loop to look at it. */
			if (!atomic_compare_exchange_weak_explicit(&cl->state, &w, w | RV_WAITER,
								   memory_order_relaxed,
								   memory_order_relaxed))
				continue;
			w |= RV_WAITER;
		}
		if (!parked) {
			parked = true;
			/* Relaxed: a metric (B7), as waits above. */
			atomic_fetch_add_explicit(&c->parked, 1, memory_order_relaxed);
		}
		if (coord_futex_wait(&cl->state, w, deadline) == -ETIMEDOUT) {
			wait_note(c, since);
			return COORD_ETIMEDOUT;
		}
	}
}

/* Read the outcome of a final @cl into code/val/len/err. */
static int rv_outcome(struct coord_closure *cl, const void **val, size_t *len,
		      struct coord_error *err)
{
	/* Relaxed: rv_wait() or the caller already acquired the final state. */
	uint32_t st = st_of(atomic_load_explicit(&cl->state, memory_order_relaxed));

	uint32_t n;
	const void *v;

	if (st == COORD_RV_READY) {
		v = coord_closure_value(cl, &n);
		if (val)
			*val = v;
		if (len)
			*len = n;
		return 0;
	}
	if (st == COORD_RV_CANCELLED || st == COORD_RV_ABORTED) {
		coord_seterr(err, COORD_ECANCELLED, "closure %llu was %s",
			     (unsigned long long)cl->id,
			     st == COORD_RV_ABORTED ? "aborted (its worker was lost); reschedule it"
						    : "cancelled after an earlier error");
		if (err)
			err->closure = cl->id;
		return COORD_ECANCELLED;
	}
	/* READY with an error: its message is the value (V2). */
	v = coord_closure_value(cl, &n);
	coord_seterr(err, cl->err_code, "%s", n ? (const char *)v : coord_strerror(cl->err_code));
	if (err) {
		err->cause = cl->err_cause;
		err->worker = cl->err_worker;
		err->closure = cl->id;
	}
	return cl->err_code;
}

int coord_rv_fetch_timeout(struct coord_rv *rv, int64_t timeout_ns, const void **val, size_t *len,
			   struct coord_error *err)
{
	struct coord_closure *cl;
	int r;

	if (unlikely(!rv))
		return coord_seterr(err, COORD_EINVAL, "coord_rv_fetch: the RemoteValue is NULL");
	cl = rv_cl(rv);
	r = rv_wait(cl, coord_deadline(timeout_ns));
	if (r < 0)
		return coord_seterr(err, r, "closure %llu not ready after %lld ns",
				    (unsigned long long)cl->id, (long long)timeout_ns);
	return rv_outcome(cl, val, len, err);
}

int coord_rv_fetch(struct coord_rv *rv, const void **val, size_t *len, struct coord_error *err)
{
	return coord_rv_fetch_timeout(rv, -1, val, len, err);
}

int coord_rv_fetch_many(struct coord_rv *const *rvs, size_t n, struct coord_result *res,
			int64_t timeout_ns)
{
	uint64_t deadline = coord_deadline(timeout_ns);

	if (n && (!rvs || !res))
		return COORD_EINVAL;
	/* The total wait is the slowest value's, not the sum: each wait starts
	 * where the previous one ended and all share one deadline. */
	for (size_t i = 0; i < n; i++) {
		if (!rvs[i]) { /* that outcome alone is refused */
			res[i] = (struct coord_result){ .code = COORD_EINVAL };
			continue;
		}
		if (rv_wait(rv_cl(rvs[i]), deadline) < 0)
			return COORD_ETIMEDOUT;
		res[i].val = NULL;
		res[i].len = 0;
		res[i].code = rv_outcome(rv_cl(rvs[i]), &res[i].val, &res[i].len, NULL);
	}
	return 0;
}

/*
 * Leaves the closure clean for its next life: no buffers, the result inline
 * and empty, no error code.  Each field is stored only if it changed, so a
 * closure that had none of these keeps its lines clean in other caches.
 */
void coord_closure_drop_contents(struct coord_closure *cl)
{
	/* Only the first line is read unless there is something to drop. */
	for (unsigned i = 0; i < cl->npw; i++)
		coord_per_worker_put(cl->pw[i]);
	if (cl->args_cls != COORD_BUF_INLINE) {
		coord_buf_put(&cl->c->bufs, cl->args, cl->args_cls);
		cl->args_cls = COORD_BUF_INLINE;
		cl->args = cl->inline_args; /* both, always (closure.h, Layout) */
	}
	if (cl->res_cls != COORD_BUF_INLINE) {
		if (cl->res_cls != CL_RES_SMALL) {
			coord_buf_put(&cl->c->bufs, cl->res, cl->res_cls);
			cl->res = cl->inline_res;
		}
		cl->res_cls = COORD_BUF_INLINE;
	}
	if (cl->res_dirty) {
		if (unlikely(cl->res_dirty & CL_DIRTY_DEPS))
			/* Relaxed: refs == 0, so no consumer can register any
			 * more (each holds a reference); DF2. */
			atomic_store_explicit(&cl->deps, NULL, memory_order_relaxed);
		/* A small result (V5) left the other lines alone. */
		if (cl->res_dirty & ~CL_SMALL_MASK) {
			cl->res = cl->inline_res;
			cl->res_len = 0;
			cl->err_code = 0;
		}
		cl->res_dirty = 0;
	}
}

bool coord_closure_unref(struct coord_closure *cl)
{
	/* Acquire: pairs with the release of the other holders' drops (the
	 * acq_rel below): when we see 1, ours is the only reference left, and
	 * nobody can take another (only a holder can: V3), so their uses of
	 * the closure happen-before our recycling it, with no RMW.  0: V4, a
	 * closure without a handle, which the caller (the runtime) owns alone. */
	uint32_t r = atomic_load_explicit(&cl->refs, memory_order_acquire);

	if (r <= 1) {
		if (r)
			/* Relaxed: nobody else reads or writes refs now (see
			 * above); 0 marks it free for coord_destroy()'s count. */
			atomic_store_explicit(&cl->refs, 0, memory_order_relaxed);
		return true;
	}
	/* acq_rel: release our uses of the closure to the thread that frees
	 * it; acquire theirs if we are the one (V3). */
	return atomic_fetch_sub_explicit(&cl->refs, 1, memory_order_acq_rel) == 1;
}

/* The last holder's drop left @rt (the runtime's released reference) in
 * refs: 0 marks the closure free for coord_destroy()'s count.  True. */
static inline bool refs_clear(struct coord_closure *cl, uint32_t rt)
{
	if (rt)
		/* Relaxed: nobody else holds a reference (V3). */
		atomic_store_explicit(&cl->refs, 0, memory_order_relaxed);
	return true;
}

/*
 * holder_unref() - drop a holder's reference (a handle, or a consumer's on
 * its input), never the runtime's; true if it was the last.  RL1: a final
 * word with RV_RTREL means the runtime's reference, still counted in refs,
 * is gone, so one fewer is left than refs says: a fetcher that saw the
 * value and holds the only handle frees the closure without an RMW.  A
 * holder that leaves only the runtime's reference while the closure is not
 * final tells the completer (RV_ORPHAN), whose final CAS then keeps the
 * runtime's reference and frees it as before; if the completer's CAS came
 * first (RV_RTREL), this holder was the last.  Both decide on the state
 * word, one CAS after the other, so exactly one of them frees it.
 */
static bool holder_unref(struct coord_closure *cl)
{
	/* Acquire: pairs with R1 (the acq_rel final CAS in rv_final()): with
	 * RV_RTREL seen, the completer's uses of the closure happen-before
	 * our recycling it. */
	uint32_t w = atomic_load_explicit(&cl->state, memory_order_acquire);
	uint32_t rt = w & RV_RTREL ? 1 : 0, r;

	/* Acquire: as in coord_closure_unref(); 1 + rt: ours is the only
	 * reference left (V3). */
	r = atomic_load_explicit(&cl->refs, memory_order_acquire);
	if (r <= 1 + rt)
		return refs_clear(cl, 1);
	/* acq_rel: as in coord_closure_unref(). */
	r = atomic_fetch_sub_explicit(&cl->refs, 1, memory_order_acq_rel);
	if (rt || r != 2)
		return r == 1 + rt && refs_clear(cl, rt);
	/* One reference is left and RV_RTREL was not set when we looked: the
	 * runtime's (not final yet, or final and dropped the old way), or,
	 * final, another holder's. */
	/* Acquire: as the first load. */
	w = atomic_load_explicit(&cl->state, memory_order_acquire);
	for (;;) {
		if (st_final(st_of(w))) /* RV_RTREL: the completer's CAS came first */
			return (w & RV_RTREL) && refs_clear(cl, 1);
		/* acq_rel: releases our drop to the completer (its acquire CAS
		 * in rv_final()); acquire on failure: the completer's R1, when
		 * it came first. */
		if (atomic_compare_exchange_weak_explicit(&cl->state, &w, w | RV_ORPHAN,
							  memory_order_acq_rel,
							  memory_order_acquire))
			return false;
	}
}

/* Recycle @cl, whose last reference was just dropped, into this thread's
 * producer stash if @stash and it has room (C10 in coord_pvt.h). */
static inline void closure_free(struct coord_closure *cl, bool stash)
{
	coord_closure_drop_contents(cl);
	/* Relaxed: set by coord_destroy() before the caller could hand this
	 * handle to the thread that puts it (see there). */
	if (unlikely(atomic_load_explicit(&cl->c->dead, memory_order_relaxed)))
		coord_closure_release_dead(cl);
	else if (!stash || !closure_stash_put(cl->c, cl))
		coord_pool_put(cl->c->closures, cl->idx);
}

void coord_closure_put(struct coord_closure *cl)
{
	if (coord_closure_unref(cl))
		closure_free(cl, false);
}

void coord_closure_put_held(struct coord_closure *cl)
{
	if (holder_unref(cl))
		closure_free(cl, false);
}

/* The user's put: a thread that fetches and schedules in turn gets the
 * closure back on its next schedule(), its lines still in its cache. */
void coord_rv_put(struct coord_rv *rv)
{
	if (rv && holder_unref(rv_cl(rv)))
		closure_free(rv_cl(rv), true);
}
