/* SPDX-License-Identifier: MIT */
/*
 * runtime/core/coord_pvt.h - what the pieces of the coordinator share and
 * nobody else sees: the invariants C1-C10 they keep together, the inline
 * entry's encoding (Q2, inline.c), and the few helpers and functions one
 * piece calls in another.  The pieces (runtime/core/):
 *   coordinator.c  options, per-worker resources, create / destroy
 *   queue.c        the ring + overflow FIFO, pushes, waits for room
 *   inline.c       inline ring entries (Q2) and direct runs (Q3)
 *   cancel.c       completion, cancellation, the error rule (S3-S5)
 *   dataflow.c     RemoteValues as arguments (B1, DF1-DF3)
 *   schedule.c     schedule / join / done, producer stashes (C10)
 *   dispatch.c     the dispatch interface the transports drive
 *   metrics.c      coord_metrics() and the histograms (B7)
 *
 * Labels in the pieces: C1-C10 are below (D1, D2: the seq_cst edges of C2);
 * E1-E3 are runtime/util/futex.h's eventcount, which every wake relies on;
 * Q1 is queue.c's, Q2-Q3 inline.c's, DF1-DF3 dataflow.c's, V1-V4 and W1
 * rv.c's, H1-H4 sched.c's, R1-R3 recovery.c's, P1-P4 pw.c's.  ring.c's
 * (I1-I3) and pool.c's (P1-P5) labels, and the R1 / A1 release / acquire
 * edges of the ring, the pool and rv.c, are cited with their file or
 * function; S and B are only the contract's (design.md).
 *
 * Overview
 *   schedule() takes a closure from a type-stable pool, copies the arguments
 *   in, counts it in `outstanding`, stamps it with the current cancellation
 *   generation and pushes it on the queue: a bounded MPMC ring (ring.c) plus
 *   an overflow stack for put-backs and for the unbounded mode.  Dispatchers
 *   (one per worker for inproc) take batches, run or send them, complete the
 *   RemoteValues and drop the counts.  No lock anywhere on that path.  With
 *   the inproc transport a small call without a handle takes no closure at
 *   all: it travels inline in its ring entry (Q2).
 *
 *   The first failing closure records the coordinator's error (a CAS on
 *   err_state).  The next schedule/join/done that sees it becomes the
 *   canceller: it bumps `gen`, drains the queue cancelling every closure of
 *   an older generation, waits for every dispatcher's inflight to reach zero,
 *   then hands the error to its caller and clears it (S3-S5).
 *
 * Invariants
 *   C1  outstanding = closures scheduled and not yet final, plus those
 *       final but not yet taken off by a deferring dispatcher (C9).  It is
 *       raised before the push and dropped after the RemoteValue is final,
 *       so outstanding == 0 means no function is running (S5).  It is a
 *       sum (outstanding_total()): c->outstanding, which every drop and
 *       most raises change with an RMW, plus each producer stash's `added`,
 *       which coord_schedule() raises with a plain store (its owner's,
 *       C10), so the one-at-a-time path has no RMW on a shared
 *       counter.  A reader takes c->outstanding first (acquire), then the
 *       stashes: every drop it sees came after its closure's raise in
 *       happens-before (raise, push R1, pop A1, drop), so it sees that
 *       raise too, and the sum is never below the true count at the
 *       moment of its first load; a sum of 0 means nothing was
 *       outstanding then.  Each part may wrap (c->outstanding goes "below
 *       zero" by what the stashes raised); the sum is exact mod 2^64.
 *   C2  A dispatcher raises d->inflight (seq_cst, D2) before it pops and reads
 *       gen (seq_cst, D2) after; the canceller bumps gen (seq_cst, D1) before
 *       it reads inflight (seq_cst, D1).  In the single total order of these
 *       seq_cst operations, either the dispatcher sees the new gen and
 *       cancels what it popped, or the canceller sees its inflight and waits:
 *       when the canceller returns, no closure of the old generation runs.
 *   C3  A closure takes its generation when it is queued, not when built.
 *   C4  err_state moves EMPTY -> WRITING -> SET (one failing closure, the
 *       first) -> TAKEN (one caller) -> EMPTY.  Only the TAKEN owner reads
 *       the error record after WRITING's owner released it with SET; it
 *       copies it, bumps gen and frees the slot before it drains and waits,
 *       so WRITING and TAKEN last a few stores and others spin on them.
 *   C5  Old-generation closures that a canceller missed (pushed by a racing
 *       schedule that read gen before the bump) are cancelled by whichever
 *       dispatcher pops them: they never run.
 *   C7  An error is recorded only for a closure of the current generation:
 *       one of an older round, still running when that round's error was
 *       taken, keeps its own outcome and its error is dropped (S3: only the
 *       first error is returned); a closure of the new round that fails
 *       while the canceller still drains is recorded for the next caller.
 *   C8  Nothing pushed after an UNAVAILABLE report stays queued for ever
 *       (check_unavailable(): a seq_cst Dekker pair with the report's drain).
 *   C9  A dispatcher with defer_fin set (inproc) takes the closures it
 *       finished off `outstanding` in batches: it counts them in fin_done
 *       (fin_add(), before its inflight drop for them) and settles them
 *       (fin_settle(): a CAS on fin_taken hands each to one settler, who
 *       lowers `outstanding`) when it has COORD_FIN_DEFER of them, and always
 *       before it waits for work or returns from coord_dispatch_take() for
 *       good.  A dispatcher may be preempted between a finish and its
 *       settle, so the canceller (after its inflight wait), done() and
 *       join() (before sleeping) settle every dispatcher themselves: when
 *       the raising call returns, `outstanding` counts no final closure.
 *       C1 holds (outstanding is still lowered only after the closures are
 *       final, by whoever settles them).  While a producer and a worker
 *       chase each other one closure at a time, `outstanding` then changes
 *       caches once per batch instead of once per closure.
 *   C10 A closure in a producer stash (c->pstash, closure_get(); a user's
 *       last put adds to it, closure_stash_put()) is free: refs == 0, in no
 *       queue, owned by the stash.  Stash slot s (of every coordinator) is
 *       read and written only by the thread that owns slot s process-wide
 *       (schedule.c, stash_owned[]): it takes the slot with an acquire CAS
 *       once and gives it back at its exit with a release store, which
 *       orders one owner's accesses before the next's; in between it uses
 *       the stash with no atomic RMW.  coord_destroy() frees the pool with
 *       the stashes in it (their closures count as free, not held).
 *
 * Synchronization: the shared fields of struct coord (internal.h) and of
 * a dispatcher d, who writes them, who reads them, and what orders the two.
 *   field            written by (how)                read by (how)           order
 *   outstanding      producers + (relaxed),          join, done, metrics     C1: raise, push
 *                    finishers - (seq_cst)           (acquire, outstanding_  (ring R1), pop (A1),
 *                                                    total())                drop; the acquire
 *   pstash[].added   the slot's owner (plain         outstanding_total()     C1 (coherence after
 *                    store of a relaxed load)        (relaxed)               the acquire), C10
 *   stash_owned[]    a thread taking a slot          the same                C10
 *   (schedule.c)     (acquire CAS), leaving it at
 *                    exit (release store)
 *   gen              the canceller (seq_cst RMW,     producers (acquire,     C3; C2 (the seq_cst
 *                    gen_bump())                     stamp_gen()); takes     pair with inflight);
 *                                                    (seq_cst); early-outs   C5, C7
 *                                                    (relaxed)
 *   d->inflight      d's thread (seq_cst raise       the canceller           C2
 *                    before a pop; drops release     (seq_cst, inflight_sum())
 *                    or seq_cst)
 *   err_state, err   the first failing closure's     schedule, join, done    C4
 *                    completer (CAS to WRITING,      (relaxed hint, then
 *                    release SET); the canceller     acquire in take_error())
 *                    (CAS to TAKEN, release EMPTY)
 *   ov_count         pushers + (seq_cst), poppers    anyone (relaxed hint)   Q1 (queue.c), E3
 *                    - (release)                                             (futex.h)
 *   ov_in / ov_out   pushers (release CAS) / the     poppers (acquire xchg)  R3 / A3 (queue.c);
 *                    holder of ov_lock               / ov_lock's holder      the mutex
 *   loop_sleepers    event loops (seq_cst +,         producers (seq_cst      the Dekker pair of
 *                    relaxed -)                      load, queue_push())     coord_loop_sleep()
 *   unavailable      the transport that lost its     pushers (seq_cst,       C8
 *                    last worker (seq_cst store)     check_unavailable());
 *                                                    schedule (relaxed hint)
 *   hq_count         hinted pushes + (seq_cst),      anyone (relaxed hint)   sched.c H1, E3
 *                    takes - (release)
 *   stopping         coord_destroy() (relaxed)       dispatchers, transports the wakes and joins
 *                                                    (relaxed)               that follow the store
 *   dataflow         the first consumer's schedule   the canceller (relaxed) set before the first
 *                    (relaxed, once)                                         consumer is counted
 *   dead,            coord_destroy() (relaxed)       the last put of a       the caller's own
 *   held_after_                                      handle (relaxed, rv.c)  hand-off of the
 *   destroy                                                                  handle after destroy
 * The closure's own fields (state, refs, deps): closure.h and rv.c; the
 * ring's: ring.c; the hint queue's: sched.c.
 */
#ifndef COORD_RUNTIME_CORE_COORD_PVT_H
#define COORD_RUNTIME_CORE_COORD_PVT_H

#include "runtime/core/internal.h"

/* A statistic read without stopping anyone. */
static inline uint64_t stat_rd(_Atomic uint64_t *x)
{
	/* Relaxed: metrics are a recent value, not a synchronization point. */
	return atomic_load_explicit(x, memory_order_relaxed);
}

enum { ERR_EMPTY, ERR_WRITING, ERR_SET, ERR_TAKEN };

/* Q2: an inline entry's flag, argument length and function in w[1]. */
#define QE_INLINE (1ull << 63)
#define QE_LEN(w1) ((uint32_t)((w1) >> 32) & 0xfu)
#define QE_FN(w1) ((uint32_t)(w1))

/*
 * stamp_gen() - C3: the generation a closure takes when it is queued (a
 * consumer: when it starts waiting for its inputs).
 */
static inline uint64_t stamp_gen(struct coord *c)
{
	/* Acquire: pairs with the canceller's bump (gen_bump(), D1): a closure
	 * queued after a cancellation carries the new generation (C3). */
	return atomic_load_explicit(&c->gen, memory_order_acquire);
}

/*
 * qe_encode() - Q2: inline entry @e for a call of @fn with @len <= 8
 * argument bytes at @args.  Its generation (w[2]) is the caller's to stamp
 * (C3), just before the push.
 */
static inline void qe_encode(struct coord_ring_ent *e, uint32_t fn, const void *args, size_t len)
{
	e->w[0] = 0;
	if (likely(len == sizeof(e->w[0])))
		memcpy(&e->w[0], args, sizeof(e->w[0])); /* one load */
	else if (len)
		memcpy(&e->w[0], args, len);
	e->w[1] = QE_INLINE | ((uint64_t)len << 32) | fn;
}

/* C9: closures finished per batch taken off `outstanding` at most. */
#define COORD_FIN_DEFER 64

/* Closures per claim of the pool and of the ring in coord_schedule_many(). */
#define SCHED_CHUNK 64

/* queue.c */
COORD_HIDDEN void ov_push(struct coord *c, struct coord_closure *newest,
			  struct coord_closure *oldest, int64_t n);
COORD_HIDDEN bool queue_empty(struct coord *c);
COORD_HIDDEN unsigned queue_pop(struct coord *c, struct coord_closure **out, unsigned max,
				bool block, struct coord_dispatcher *d);
COORD_HIDDEN void queue_pushed(struct coord *c);
COORD_HIDDEN bool work_for(struct coord_dispatcher *d);
COORD_HIDDEN bool work_hint(struct coord_dispatcher *d);
COORD_HIDDEN void queue_push(struct coord *c, struct coord_closure *cl,
			     const struct coord_ring_ent *e);
COORD_HIDDEN void queue_push_ents(struct coord *c, const struct coord_ring_ent *e, unsigned n);
COORD_HIDDEN void queue_push_many(struct coord *c, struct coord_closure **cls, unsigned n);

/* inline.c */
COORD_HIDDEN struct coord_closure *ent_closure(struct coord *c, const struct coord_ring_ent *e);
COORD_HIDDEN struct coord_closure *ent_taken(struct coord *c, struct coord_dispatcher *d,
					     unsigned i, const struct coord_ring_ent *e);
COORD_HIDDEN unsigned ring_pop(struct coord *c, struct coord_closure **out, unsigned max,
			       struct coord_dispatcher *d, unsigned base);
COORD_HIDDEN unsigned ring_pop_raw(struct coord *c, struct coord_dispatcher *d, unsigned max);
COORD_HIDDEN unsigned direct_run(struct coord_dispatcher *d, struct coord_closure **out, unsigned n,
				 uint64_t g, unsigned *own);

/* schedule.c */
COORD_HIDDEN bool closure_stash_put(struct coord *c, struct coord_closure *cl);

/* cancel.c */
COORD_HIDDEN void cancel_one(struct coord *c, struct coord_closure *cl);
COORD_HIDDEN void drain_cancel(struct coord *c);
COORD_HIDDEN void record_error(struct coord *c, int worker, struct coord_closure *cl, int code,
			       int cause, const char *msg);
COORD_HIDDEN void closure_set_err(struct coord_closure *cl, int code, int cause, int worker,
				  const char *msg);
COORD_HIDDEN uint64_t outstanding_total(struct coord *c);
COORD_HIDDEN void outstanding_sub(struct coord *c, uint64_t n);
COORD_HIDDEN void fin_settle(struct coord_dispatcher *d);
COORD_HIDDEN void fin_settle_all(struct coord *c);
COORD_HIDDEN uint64_t gen_bump(struct coord *c);
COORD_HIDDEN void cancel_older(struct coord *c, uint64_t g);
COORD_HIDDEN int take_error(struct coord *c, struct coord_error *err);

/* dataflow.c */
COORD_HIDDEN int schedule_consumer(struct coord *c, struct coord_closure *x,
				   const struct coord_call *call, struct coord_rv **out,
				   struct coord_error *err);

static inline bool ov_empty(struct coord *c)
{
	/* Relaxed: a polling hint (Q1); ov_pop() decides under the lock. */
	return atomic_load_explicit(&c->ov_count, memory_order_relaxed) <= 0;
}

/* Hinted closures queued (B4; sched.c H1), a hint. */
static inline int64_t hq_queued(struct coord *c)
{
	/* Relaxed: a polling hint; sched.c decides under its lock. */
	return atomic_load_explicit(&c->hq_count, memory_order_relaxed);
}

/*
 * C8  A closure pushed after the transport reported UNAVAILABLE is not left
 *     in a queue nobody serves: the report stores `unavailable` (seq_cst)
 *     and then drains; a push (a seq_cst RMW) is followed by a seq_cst load
 *     of `unavailable`.  In their total order either the drain comes after
 *     the push and cancels the closure, or the pusher sees the flag and
 *     drains itself.
 */
static inline void check_unavailable(struct coord *c)
{
	/* seq_cst: C8. */
	if (unlikely(atomic_load_explicit(&c->unavailable, memory_order_seq_cst)))
		drain_cancel(c);
}

static inline bool ent_inline(const struct coord_ring_ent *e)
{
	return e->w[1] & QE_INLINE;
}

/* A counter of this dispatcher's own: one writer, so no RMW is needed. */
static inline void dm_inc(_Atomic uint64_t *x, uint64_t n)
{
	/* Relaxed: single writer (the dispatcher's thread); readers only
	 * want a recent value (struct coord_dmetrics). */
	atomic_store_explicit(x, atomic_load_explicit(x, memory_order_relaxed) + n,
			      memory_order_relaxed);
}

static inline bool error_pending(struct coord *c)
{
	/* Relaxed: a fast-path hint; take_error() re-reads with acquire. */
	return atomic_load_explicit(&c->err_state, memory_order_relaxed) != ERR_EMPTY;
}

/* C9: count @n closures that @d finished (they are final) for a later
 * fin_settle().  @d's thread only, before its inflight drop for them. */
static inline void fin_add(struct coord_dispatcher *d, uint64_t n)
{
	/* Relaxed: only this thread writes fin_done. */
	uint64_t t = atomic_load_explicit(&d->fin_done, memory_order_relaxed) + n;

	/* C9 (release), pairs with the acquire in fin_settle(): the closures
	 * counted are final before anyone takes them off `outstanding` (C1). */
	atomic_store_explicit(&d->fin_done, t, memory_order_release);
}

/* C9: closures @d finished that are still counted in `outstanding`. */
static inline uint64_t fin_pending(struct coord_dispatcher *d)
{
	/* Relaxed both: a threshold for the owner's own settle; a stale
	 * fin_taken only makes it settle early. */
	return atomic_load_explicit(&d->fin_done, memory_order_relaxed) -
	       atomic_load_explicit(&d->fin_taken, memory_order_relaxed);
}

/* B7 (schedule.c): closures this thread filled, and sampled lives it still
 * owes (closure_sample_next()). */
extern __thread uint32_t coord_tl_fill, coord_tl_force;

/*
 * closure_next_life() - a new id for @cl, and whether this life is a B7
 * sample, decided by the filling thread, not by which pool object it got:
 * the thread's every 64th fill, and those closure_sample_next() asked for.
 * Its reuse count moves on to the next value that makes coord_sampled()
 * true, or one past a value that would by chance.  So N closures filled
 * by one thread carry at least N / 64 samples whatever the pool hands out
 * (by pool index alone, a short cycle of reused objects could carry none).
 * reuse only grows, so ids stay distinct.
 */
static inline void closure_next_life(struct coord_closure *cl)
{
	cl->reuse++;
	if (unlikely(coord_tl_force)) {
		coord_tl_force--;
		cl->reuse += (0u - cl->idx - cl->reuse) & COORD_SAMPLE_MASK;
	} else if (unlikely(!(++coord_tl_fill & COORD_SAMPLE_MASK))) {
		cl->reuse += (0u - cl->idx - cl->reuse) & COORD_SAMPLE_MASK;
	} else if (unlikely(coord_sampled(cl))) {
		cl->reuse++;
	}
	cl->id = ((uint64_t)cl->reuse << 32) | cl->idx;
}

/* Fill a closure fresh from the pool: function, arguments, references (no
 * per-worker arguments); 0 or COORD_ENOMEM (then the closure holds nothing
 * and goes back to the pool). */
static inline int closure_fill_args(struct coord *c, struct coord_closure *cl, uint32_t fn,
				    const void *args, size_t len, bool want_rv)
{
	closure_next_life(cl);
	if (unlikely(coord_sampled(cl)))
		cl->t_sched = coord_now_ns(); /* metrics: 1 in 64 (B7) */
	cl->fn = fn;
	cl->attempt = 1;
	if (likely(len <= CL_INLINE_ARGS)) {
		/* cl->args is inline_args already: args_cls is INLINE on a
		 * free closure, and whoever returns an argument buffer resets
		 * both (closure.h, Layout), so the second line is neither read
		 * nor written.  (Checked on the first line, at no cost.) */
		if (unlikely(cl->args_cls != COORD_BUF_INLINE)) {
			coord_buf_put(&c->bufs, cl->args, cl->args_cls);
			cl->args_cls = COORD_BUF_INLINE;
			cl->args = cl->inline_args;
		}
		if (likely(len == sizeof(uint64_t)))
			memcpy(cl->inline_args, args, sizeof(uint64_t)); /* one store */
		else if (len)
			memcpy(cl->inline_args, args, len);
	} else {
		uint8_t cls;
		void *b = coord_buf_get(&c->bufs, len, cl->inline_args, CL_INLINE_ARGS, &cls);

		if (unlikely(!b))
			return COORD_ENOMEM; /* args and args_cls untouched */
		memcpy(b, args, len);
		cl->args = b;
		cl->args_cls = cls;
	}
	cl->args_len = (uint32_t)len;
	cl->npw = 0;
	/* The result fields are clean (inline, empty, no error): the previous
	 * life left them so (coord_closure_drop_contents()), which keeps this
	 * closure's first cache line the only one written here. */
	/* Relaxed: the closure is private until the ring's release (R1 in
	 * ring.c) publishes it with everything above.  Without a handle the
	 * runtime owns it alone and counts nothing (V4 in rv.c). */
	atomic_store_explicit(&cl->state, COORD_RV_NOT_READY, memory_order_relaxed);
	atomic_store_explicit(&cl->refs, want_rv ? 2 : 0, memory_order_relaxed);
	return 0;
}

/* The log-linear bucket of @ns (coord.h, struct coord_hist). */
static inline unsigned hist_bucket(uint64_t ns)
{
	unsigned e, i;

	if (ns < 2 * COORD_HIST_SUB)
		return (unsigned)ns;
	e = 63u - (unsigned)__builtin_clzll(ns); /* >= 5: 2^e <= ns < 2^(e+1) */
	i = (e - 4u) * COORD_HIST_SUB + (unsigned)(ns >> (e - 4u));
	return i < COORD_HIST_BUCKETS ? i : COORD_HIST_BUCKETS - 1;
}

/* Add dispatcher histogram @d to snapshot @h (any thread; metrics.c). */
COORD_HIDDEN void coord_hist_add(struct coord_hist *h, struct coord_dhist *d);

/* One sample of @ns into dispatcher histogram @h (its thread only). */
static inline void hist_record(struct coord_dhist *h, uint64_t ns)
{
	dm_inc(&h->b[hist_bucket(ns)], 1);
	dm_inc(&h->sum, ns);
	/* Relaxed: single writer, as dm_inc(); readers want a recent value. */
	if (ns > atomic_load_explicit(&h->max, memory_order_relaxed))
		atomic_store_explicit(&h->max, ns, memory_order_relaxed);
}
#endif /* COORD_RUNTIME_CORE_COORD_PVT_H */
