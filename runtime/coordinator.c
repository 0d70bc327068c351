// SPDX-License-Identifier: MIT
/*
 * runtime/coordinator.c - schedule / join / done, the S3 error rule, and the
 * dispatch interface the transports drive.
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
 *       which coord_schedule() raises with a plain store while it holds the
 *       stash (C10), so the one-at-a-time path has no RMW on a shared
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
 *   C10 A closure in a producer stash (c->pstash, closure_get()) is free:
 *       refs == 0, in no queue, owned by the stash.  The stash's contents
 *       are read and written only by the thread that holds its busy flag:
 *       the acquire CAS that takes the flag and the release store that
 *       drops it order one holder's accesses before the next's.
 *       coord_destroy() frees the pool with the stashes in it (their
 *       closures count as free, not held).
 *   Q2  The ring's entries (struct coord_ring_ent) are closures (w[0] the
 *       pointer, w[1] == 0) or, with c->inline_q (inproc), small closures
 *       carried inline: a call without a handle, hints, inputs or
 *       per-worker arguments and at most 8 argument bytes is w[0] = the
 *       bytes, w[1] = QE_INLINE | len << 32 | fn, w[2] = its generation
 *       (C3).  It is counted in `outstanding` like any other (C1), but
 *       no pool closure is taken, written or freed for it: the dispatcher
 *       that pops it fills one of its own closures (d->local, one per place
 *       of its take; their pool index is CL_IDX_LOCAL and up), runs and
 *       finishes it as a handle-less closure (V4 in rv.c) and never returns
 *       it to the pool; a put-back moves it into a pool closure first.
 *       Whoever pops entries without a dispatcher's closures at hand (the
 *       canceller's drain, the hint queue's take) makes pool closures of
 *       them (ent_closure()).  Every 64th such call of a thread takes the
 *       closure path instead, sampled (closure_sample_next()), so the
 *       histograms (B7) keep their one in 64.
 *   Q3  A dispatcher that runs functions on its own thread (inproc: it has
 *       d->exec_env) runs inline entries straight from the ring entry,
 *       inside its take: after the reservation and the generation read of
 *       C2, in ring order, up to the first entry that is a closure or of an
 *       older generation; that one and the rest become closures as in Q2
 *       and are returned.  A run that succeeds without a result touches no
 *       closure at all: it is counted finished like coord_dispatch_finish()
 *       counts one (inflight dropped with the take's unused reservation,
 *       `outstanding` through C9).  A run that sets a result or fails gets
 *       one of d->local filled at that moment (with the id the function
 *       saw, B8) and is completed, finished or put back on the spot, as the
 *       transport's loop would have; direct runs then stop for this take.
 *       Only the plain ring is taken this way: with put-backs waiting in
 *       the overflow FIFO or hinted closures queued, the take is Q2's.
 *
 * Dataflow (B1): RemoteValues as arguments
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
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/abi.h"
#include "runtime/internal.h"
#include "runtime/ps.h"

/* A statistic read without stopping anyone. */
static inline uint64_t stat_rd(_Atomic uint64_t *x)
{
	/* Relaxed: metrics are a recent value, not a synchronization point. */
	return atomic_load_explicit(x, memory_order_relaxed);
}

enum { ERR_EMPTY, ERR_WRITING, ERR_SET, ERR_TAKEN };

/* ---- options --------------------------------------------------------------- */

void coord_opts_defaults(struct coord_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->transport = "inproc";
	o->inproc_workers = 2;
	o->ring_capacity = COORD_RING_DEFAULT;
	o->start_delay_ms = -1;
	o->start_delay_max_ms = -1;
	o->spin_ns = 50000;
	o->spin_max_ns = 500000;
	o->batch = 32;
	o->window = 128;
	o->max_frame = 16u << 20;
	o->connect_timeout_ms = 5000;
	o->inproc_ps = 1;
	o->ps_timeout_ms = 30000;
	o->ps_failure_threshold = -1;
	o->restart_exit_code = -1;
	o->recovery_limit_ms = 3600000;
	o->heartbeat_ms = 1000;
	o->heartbeat_misses = 3;
	o->closure_timeout_ms = 0;
	o->affinity_fallback_ms = 100;
	o->priority_aging_ms = 100;
}

/* Seconds (a decimal number) from the environment, as ms; -1 if unset. */
static int64_t env_seconds_ms(const char *name)
{
	const char *v = getenv(name);
	char *end;
	double s;

	if (!v || !*v)
		return -1;
	s = strtod(v, &end);
	if (*end || s < 0 || s > 1e9) {
		coord_log(COORD_LOG_WARN, "%s=\"%s\" is not a number of seconds; ignored", name, v);
		return -1;
	}
	return (int64_t)(s * 1000.0 + 0.5);
}

/* A non-negative integer from the environment, else @def (warns when set
 * to something else). */
int coord_env_int(const char *name, int def)
{
	const char *v = getenv(name);
	char *end;
	long x;

	if (!v || !*v)
		return def;
	errno = 0;
	x = strtol(v, &end, 10);
	if (errno || *end || x < 0 || x > INT32_MAX) {
		coord_log(COORD_LOG_WARN, "ignoring %s=%s: not a non-negative integer", name, v);
		return def;
	}
	return (int)x;
}

uint64_t coord_stagger_ns(const struct coord_opts *o, unsigned i)
{
	int64_t d = o->start_delay_ms > 0 ? o->start_delay_ms * (int64_t)i : 0;

	/* S13: min(delay * i, max); no max means no cap (the reference only
	 * multiplies when MAX is set: we always do). */
	if (o->start_delay_max_ms >= 0 && d > o->start_delay_max_ms)
		d = o->start_delay_max_ms;
	return (uint64_t)d * 1000000ull;
}

/* ---- the queue: ring + overflow FIFO ---------------------------------------- */

/*
 * The overflow FIFO holds put-backs and, in unbounded mode, closures that
 * did not fit in the ring.  It is off the fast path.  Producers push onto
 * ov_in, a Treiber stack (push-one, take-all: no ABA); a consumer, under
 * ov_lock, takes all of ov_in at once, reverses it onto the tail of ov_out
 * and pops from ov_out's head: a two-stack FIFO, O(1) amortised.
 * ov_count (Q1) is raised before a push and lowered after a pop, so it is
 * never below the number of closures in the FIFO.
 */

/* Push @newest..@oldest (@n closures linked newest-first through next). */
static void ov_push(struct coord *c, struct coord_closure *newest, struct coord_closure *oldest,
		    int64_t n)
{
	struct coord_closure *h;

	/* seq_cst: Q1 and E3 in futex.h: this RMW makes queue_empty() false
	 * before the push lands, so coord_ec_signal_sc() needs no fence. */
	atomic_fetch_add_explicit(&c->ov_count, n, memory_order_seq_cst);
	/* Relaxed: the CAS below re-validates. */
	h = atomic_load_explicit(&c->ov_in, memory_order_relaxed);
	do {
		oldest->next = h;
		/* R3 (release): pairs with A3 in ov_pop(): the closures and
		 * their links are visible to the consumer that takes them. */
	} while (!atomic_compare_exchange_weak_explicit(&c->ov_in, &h, newest, memory_order_release,
							memory_order_relaxed));
}

static inline bool ov_empty(struct coord *c)
{
	/* Relaxed: a polling hint (Q1); ov_pop() decides under the lock. */
	return atomic_load_explicit(&c->ov_count, memory_order_relaxed) <= 0;
}

/* Pop up to @max from the overflow FIFO.  @block: wait for ov_lock rather
 * than leave it to the consumer that holds it. */
static unsigned ov_pop(struct coord *c, struct coord_closure **out, unsigned max, bool block)
{
	unsigned n = 0;

	if (ov_empty(c) || max == 0)
		return 0;
	if (block)
		pthread_mutex_lock(&c->ov_lock);
	else if (pthread_mutex_trylock(&c->ov_lock) != 0)
		return 0;
	if (!c->ov_out) {
		/* A3 (acquire): pairs with R3 in ov_push(). */
		struct coord_closure *h = atomic_exchange_explicit(&c->ov_in, NULL,
								   memory_order_acquire);
		struct coord_closure *rev = NULL, *nx;

		while (h) { /* newest-first -> oldest-first */
			nx = h->next;
			h->next = rev;
			rev = h;
			h = nx;
		}
		c->ov_out = rev;
	}
	while (c->ov_out && n < max) {
		out[n++] = c->ov_out;
		c->ov_out = c->ov_out->next;
	}
	pthread_mutex_unlock(&c->ov_lock);
	/* Release: Q1, lowered only after the closures left the FIFO. */
	atomic_fetch_sub_explicit(&c->ov_count, n, memory_order_release);
	return n;
}

bool coord_main_queue_empty(struct coord *c)
{
	return coord_ring_empty(&c->ring) && ov_empty(c);
}

/* Hinted closures queued (B4; sched.c H1), a hint. */
static inline int64_t hq_queued(struct coord *c)
{
	/* Relaxed: a polling hint; sched.c decides under its lock. */
	return atomic_load_explicit(&c->hq_count, memory_order_relaxed);
}

static bool queue_empty(struct coord *c)
{
	return coord_main_queue_empty(c) && hq_queued(c) <= 0;
}

/* Is there anything @d may take?  Hinted closures count only when @d can
 * serve one (sched.c H2), so one waiting for another worker costs @d no
 * spinning. */
static bool work_for(struct coord_dispatcher *d)
{
	return !coord_main_queue_empty(d->c) || (hq_queued(d->c) > 0 && coord_hq_work(d)) ||
	       coord_dispatch_pw_pending(d); /* S9: resources to release (pw.c) */
}

/* Closures waiting, a snapshot for batch sizing. */
uint64_t coord_queue_size(struct coord *c)
{
	/* Relaxed: a sizing hint only. */
	int64_t ov = atomic_load_explicit(&c->ov_count, memory_order_relaxed), h = hq_queued(c);

	return coord_ring_size(&c->ring) + (ov > 0 ? (uint64_t)ov : 0) + (h > 0 ? (uint64_t)h : 0);
}

/* Q2: an inline entry's flag, argument length and function in w[1]. */
#define QE_INLINE (1ull << 63)
#define QE_LEN(w1) ((uint32_t)((w1) >> 32) & 0xfu)
#define QE_FN(w1) ((uint32_t)(w1))

static inline bool ent_inline(const struct coord_ring_ent *e)
{
	return e->w[1] & QE_INLINE;
}

static int closure_fill_args(struct coord *c, struct coord_closure *cl, uint32_t fn,
			     const void *args, size_t len, bool want_rv);

/* Q2: a pool closure for inline entry @e: without a handle, its generation
 * the entry's.  Only when memory is exhausted does this fail, and then no
 * closure could be queued anyway: the process dies. */
static struct coord_closure *ent_closure(struct coord *c, const struct coord_ring_ent *e)
{
	struct coord_closure *cl = coord_pool_get(c->closures);

	if (unlikely(!cl))
		coord_die("a closure for a queued call", ENOMEM);
	closure_fill_args(c, cl, QE_FN(e->w[1]), &e->w[0], QE_LEN(e->w[1]), false);
	if (unlikely(coord_sampled(cl))) {
		/* B7: the call's schedule time is not known here, so this life
		 * is not a sample (its round trip would read short). */
		cl->reuse++;
		cl->id = ((uint64_t)cl->reuse << 32) | cl->idx;
	}
	cl->gen = e->w[2];
	return cl;
}

/* Q2: dispatcher @d's own closure @i, filled from inline entry @e. */
/* Q2: the next id of a call run by dispatcher @d, in its closure of pool
 * index @idx. */
static inline uint64_t local_id(struct coord_dispatcher *d, uint32_t idx)
{
	if (unlikely(++d->local_seq == UINT32_MAX))
		d->local_seq = 1; /* ids stay distinct from COORD_NO_CLOSURE */
	return ((uint64_t)d->local_seq << 32) | idx;
}

/* Q2: dispatcher @d's own closure @i, filled from inline entry @e, with id
 * @id. */
static inline struct coord_closure *ent_local_id(struct coord_dispatcher *d, unsigned i,
						 const struct coord_ring_ent *e, uint64_t id)
{
	struct coord_closure *cl = &d->local[i];

	cl->fn = QE_FN(e->w[1]);
	cl->args_len = QE_LEN(e->w[1]);
	memcpy(cl->inline_args, &e->w[0], sizeof(e->w[0]));
	cl->gen = e->w[2];
	cl->attempt = 1;
	cl->id = id;
	/* Relaxed: this dispatcher's closure; nobody else reads it (V4). */
	atomic_store_explicit(&cl->state, COORD_RV_NOT_READY, memory_order_relaxed);
	return cl;
}

static inline struct coord_closure *ent_local(struct coord_dispatcher *d, unsigned i,
					      const struct coord_ring_ent *e)
{
	return ent_local_id(d, i, e, local_id(d, d->local[i].idx));
}

/* Q2: the closure popped entry @e stands for, at place @i of dispatcher
 * @d's take (one of @d's own for an inline call, if it has one there), or
 * of a take without a dispatcher (@d NULL). */
static inline struct coord_closure *ent_taken(struct coord *c, struct coord_dispatcher *d,
					      unsigned i, const struct coord_ring_ent *e)
{
	if (likely(!ent_inline(e)))
		return (struct coord_closure *)(uintptr_t)e->w[0];
	if (d && i < d->nlocal)
		return ent_local(d, i, e);
	return ent_closure(c, e);
}

/* Q2: pop up to @max ring entries as closures into @out; inline ones into
 * @d's own closures (by place in @out, whose first @base places are taken),
 * or pool closures without @d. */
static unsigned ring_pop(struct coord *c, struct coord_closure **out, unsigned max,
			 struct coord_dispatcher *d, unsigned base)
{
	struct coord_ring_ent e[64];
	unsigned n = 0;

	while (n < max) {
		unsigned want = max - n < 64 ? max - n : 64;
		unsigned k = coord_ring_pop_batch_ent_mc(&c->ring, e, want);

		for (unsigned i = 0; i < k; i++, n++)
			out[n] = ent_taken(c, d, base + n, &e[i]);
		if (k < want)
			break;
	}
	return n;
}

/* A counter of this dispatcher's own: one writer, so no RMW is needed. */
static inline void dm_inc(_Atomic uint64_t *x, uint64_t n)
{
	/* Relaxed: single writer (the dispatcher's thread); readers only
	 * want a recent value (struct coord_dmetrics). */
	atomic_store_explicit(x, atomic_load_explicit(x, memory_order_relaxed) + n,
			      memory_order_relaxed);
}

/* Q3: pop up to @max ring entries as they are into @d->ents. */
static unsigned ring_pop_raw(struct coord *c, struct coord_dispatcher *d, unsigned max)
{
	unsigned n = 0;

	while (n < max) {
		unsigned want = max - n < 64 ? max - n : 64;
		unsigned k = coord_ring_pop_batch_ent_mc(&c->ring, d->ents + n, want);

		n += k;
		if (k < want)
			break;
	}
	return n;
}

/* Q3: where a direct run's result goes: @d's own closure @slot, filled from
 * @e (with the id the function was given) when the function first asks. */
struct direct_sink {
	struct coord_dispatcher *d;
	const struct coord_ring_ent *e;
	unsigned slot;
	uint64_t id;
	struct coord_closure *cl;
};

static struct coord_closure *direct_closure(struct direct_sink *s)
{
	if (!s->cl)
		s->cl = ent_local_id(s->d, s->slot, s->e, s->id);
	return s->cl;
}

static void *direct_result_buf(void *sink, size_t len)
{
	return coord_closure_result_buf(direct_closure(sink), len);
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

/*
 * Q3: run the inline entries at the front of @d->ents[0..@n) (generation @g
 * current) in place; turn the rest into closures in @out, as ring_pop()
 * does.  Returns how many closures are in @out; *@own: how many entries
 * were finished or put back here, each of which dropped its own
 * reservation.  The reservations of the others run here (done, nothing
 * left of them) are the caller's to drop.
 */
static unsigned direct_run(struct coord_dispatcher *d, struct coord_closure **out, unsigned n,
			   uint64_t g, unsigned *own)
{
	struct coord *c = d->c;
	struct coord_worker *w = &c->workers[d->index];
	unsigned i = 0, k = 0, done = 0, mine = 0;

	for (; i < n; i++) {
		const struct coord_ring_ent *e = &d->ents[i];
		struct direct_sink sink = { d, e, 0, 0, NULL };
		struct coord_exec_call call;
		struct coord_ctx ctx;
		int code, cause;

		if (!ent_inline(e) || e->w[2] < g)
			break;
		sink.id = local_id(d, d->local[0].idx);
		call.id = sink.id;
		call.fn = QE_FN(e->w[1]);
		call.attempt = 1;
		call.args = &e->w[0];
		call.len = QE_LEN(e->w[1]);
		call.npw = 0;
		call.nin = 0;
		call.in_get = NULL;
		call.in_src = NULL;
		code = coord_exec(d->exec_env, &call, direct_result_buf, &sink, &ctx, &cause);
		if (likely(code == 0 && !sink.cl)) {
			done++;
			continue;
		}
		/* A result or an error: the closure the transport's loop would
		 * have had, finished (or put back) here.  Then stop: an error
		 * may have moved the generation on. */
		struct coord_closure *cl = direct_closure(&sink);

		mine++;
		i++;
		if (coord_dispatch_ps_retry(d, cl, code, cause)) {
			coord_dispatch_put_back(d, &cl, 1); /* S11: transient */
			break;
		}
		coord_dispatch_complete(d, cl, w->index, code, cause, ctx.has_msg ? ctx.msg : NULL);
		coord_dispatch_finish(d, w, &cl, 1);
		break;
	}
	for (; i < n; i++, k++)
		out[k] = ent_taken(c, d, k, &d->ents[i]);
	if (done) {
		/* Relaxed: a statistic, as in coord_dispatch_finish(). */
		atomic_fetch_add_explicit(&w->executed, done, memory_order_relaxed);
		dm_inc(&d->m.finished, done);
		fin_add(d, done); /* C9: exec_env comes with defer_fin */
	}
	*own = mine;
	return k;
}

/*
 * queue_pop() - up to @max closures, oldest first.  Bounded mode: the
 * overflow holds only put-backs, which were queued before anything in the
 * ring, so it goes first.  Unbounded mode: producers divert to the overflow
 * while it is non-empty (queue_push()), so the ring holds the older ones.
 * @d: the dispatcher taking, whose own closures take inline entries (Q2),
 * or NULL.
 */
static unsigned queue_pop(struct coord *c, struct coord_closure **out, unsigned max, bool block,
			  struct coord_dispatcher *d)
{
	unsigned n = 0;

	if (!c->unbounded)
		n = ov_pop(c, out, max, block);
	n += ring_pop(c, out + n, max - n, d, n);
	if (c->unbounded && n < max)
		n += ov_pop(c, out + n, max - n, block);
	return n;
}

unsigned coord_queue_pop(struct coord *c, struct coord_closure **out, unsigned max)
{
	return queue_pop(c, out, max, false, NULL);
}

/* A producer that found the ring full waits until this many slots are free
 * (at most a quarter of the ring): see wait_not_full(). */
#define COORD_ROOM_MIN 2048u

/*
 * wait_not_full() - wait (spin, then futex) until the ring has room (S1);
 * false if no worker will ever make room (UNAVAILABLE:
 * coord_report_unavailable() wakes us).  "Room" is COORD_ROOM_MIN free
 * slots, not one: a worker claims a batch (the tail CAS) before it frees
 * the slots one by one, and a producer let in at the first free slot would
 * push into the very lines the worker is still writing, taking each from
 * it in turn.  Let in a few thousand slots later, it writes lines the
 * worker has finished with.  The ring stays bounded by its capacity, and
 * a producer that finds room pushes at once, as before.
 */
static bool wait_not_full(struct coord *c)
{
	uint64_t cap = coord_ring_capacity(&c->ring);
	uint64_t until = coord_now_ns() + c->opts.spin_ns;
	unsigned i = 1;

	/* Room: at most this many queued (a tiny ring: one slot free). */
	cap -= cap / 4 < COORD_ROOM_MIN ? (cap / 4 ? cap / 4 : 1) : COORD_ROOM_MIN;
	cap += 1;
	while (coord_now_ns() < until) {
		if (coord_ring_size(&c->ring) < cap)
			return true;
		coord_spin_pause(i++);
	}
	for (;;) {
		uint32_t v = coord_ec_prepare(&c->not_full);

		/* Relaxed: set before the signal that wakes us (E1); checked
		 * first, as the drain that follows it empties the ring. */
		if (atomic_load_explicit(&c->unavailable, memory_order_relaxed))
			return false;
		if (coord_ring_size(&c->ring) < cap)
			return true;
		coord_ec_wait(&c->not_full, v, COORD_FOREVER);
	}
}

static void cancel_one(struct coord *c, struct coord_closure *cl);
static void drain_cancel(struct coord *c);

/* S1 for hinted closures (B4): the hint queue holds at most the ring's
 * capacity; false if no worker will ever make room (as wait_not_full()). */
static bool wait_hq_room(struct coord *c)
{
	uint64_t cap = coord_ring_capacity(&c->ring);

	if (c->unbounded || hq_queued(c) < (int64_t)cap)
		return true;
	for (;;) {
		uint32_t v = coord_ec_prepare(&c->not_full);

		/* Relaxed: as in wait_not_full(). */
		if (atomic_load_explicit(&c->unavailable, memory_order_relaxed))
			return false;
		if (hq_queued(c) < (int64_t)cap)
			return true;
		coord_ec_wait(&c->not_full, v, coord_now_ns() + 1000000ull);
	}
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

/* Queue closure @cl, or (Q2) inline entry @e when @cl is NULL. */
static void queue_push(struct coord *c, struct coord_closure *cl, const struct coord_ring_ent *e)
{
	struct coord_ring_ent ce;

	if (cl && unlikely(cl->res_dirty & CL_HINT)) { /* B4: the hint queue */
		if (!wait_hq_room(c)) {
			cancel_one(c, cl); /* no worker left: never runs */
			return;
		}
		coord_hq_push(c, cl);
	} else if (c->unbounded && !ov_empty(c)) {
		/* Unbounded: once closures overflowed, later ones queue behind
		 * them, so the ring drains and the overflow is served. */
		cl = cl ? cl : ent_closure(c, e);
		ov_push(c, cl, cl, 1);
	} else {
		if (cl) {
			ce.w[0] = (uintptr_t)cl;
			ce.w[1] = 0;
			ce.w[2] = 0;
			e = &ce;
		}
		while (coord_ring_push_ent_mp(&c->ring, e) < 0) {
			if (c->unbounded) {
				cl = cl ? cl : ent_closure(c, e);
				ov_push(c, cl, cl, 1);
				break;
			}
			if (!wait_not_full(c)) {
				/* No worker left: never runs. */
				cancel_one(c, cl ? cl : ent_closure(c, e));
				return;
			}
		}
	}
	check_unavailable(c);
	/* Either push made queue_empty() false with a seq_cst RMW (E3). */
	coord_ec_signal_sc(&c->not_empty);
	/* seq_cst: the same Dekker pair as E3, with a transport event loop
	 * that registers in loop_sleepers and then re-checks the queue
	 * (coord_loop_sleep()).  A plain load on x86. */
	if (unlikely(atomic_load_explicit(&c->loop_sleepers, memory_order_seq_cst)))
		c->tp->wake(c);
}

/* Wake whoever takes from the queue after a push (a seq_cst RMW, E3). */
static void queue_pushed(struct coord *c)
{
	coord_ec_signal_sc(&c->not_empty);
	/* seq_cst: as in queue_push(). */
	if (unlikely(atomic_load_explicit(&c->loop_sleepers, memory_order_seq_cst)))
		c->tp->wake(c);
}

void coord_queue_wake(struct coord *c)
{
	queue_pushed(c);
}

/* Closures per claim of the pool and of the ring in coord_schedule_many(). */
#define SCHED_CHUNK 64

/* queue_push() for @n entries (closures or inline calls, Q2), in order: one
 * ring claim and one wake per run of free slots rather than per closure. */
static void queue_push_ents(struct coord *c, const struct coord_ring_ent *e, unsigned n)
{
	unsigned done = 0, k;

	while (done < n) {
		if (!(c->unbounded && !ov_empty(c))) {
			k = coord_ring_push_batch_ent_mp(&c->ring, e + done, n - done);
			done += k;
			if (done == n)
				break;
			if (k) {
				/* Wake takers before we wait for the room they make. */
				queue_pushed(c);
				continue;
			}
			if (!c->unbounded) {
				if (wait_not_full(c))
					continue;
				while (done < n) /* no worker left: these never run */
					cancel_one(c, ent_taken(c, NULL, 0, &e[done++]));
				return;
			}
		}
		/* Unbounded, and the ring is full or the overflow is in use: the
		 * rest go to the overflow FIFO behind what is there (S14). */
		struct coord_closure *newest = NULL, *oldest = NULL;

		for (unsigned i = done; i < n; i++) {
			struct coord_closure *cl = ent_taken(c, NULL, 0, &e[i]);

			cl->next = newest;
			newest = cl;
			if (!oldest)
				oldest = cl;
		}
		ov_push(c, newest, oldest, (int64_t)(n - done));
		break;
	}
	check_unavailable(c);
	/* Either push made queue_empty() false with a seq_cst RMW (E3). */
	queue_pushed(c);
}

/* queue_push_ents() for @n <= SCHED_CHUNK closures. */
static void queue_push_many(struct coord *c, struct coord_closure **cls, unsigned n)
{
	struct coord_ring_ent e[SCHED_CHUNK];

	for (unsigned i = 0; i < n; i++) {
		e[i].w[0] = (uintptr_t)cls[i];
		e[i].w[1] = 0;
		e[i].w[2] = 0;
	}
	queue_push_ents(c, e, n);
}

/* Set around a user's schedule()'s push (coord_wake_in_schedule()). */
static __thread bool tl_in_schedule;

bool coord_wake_in_schedule(void)
{
	return tl_in_schedule;
}

bool coord_loop_sleep(struct coord_dispatcher *d)
{
	struct coord *c = d->c;

	/* seq_cst: pairs with the load in queue_push() (see there). */
	atomic_fetch_add_explicit(&c->loop_sleepers, 1, memory_order_seq_cst);
	coord_smp_mb(); /* the registration before the re-check below */
	if (work_for(d)) {
		coord_loop_wake_done(c);
		return false;
	}
	return true;
}

void coord_loop_wake_done(struct coord *c)
{
	/* Relaxed: only producers read it, and a stale non-zero costs one
	 * spurious wake. */
	atomic_fetch_sub_explicit(&c->loop_sleepers, 1, memory_order_relaxed);
}

/* ---- completion, cancellation, the error slot ------------------------------ */

/* C1: closures outstanding, a sum read in the order C1 requires. */
static uint64_t outstanding_total(struct coord *c)
{
	/* Acquire: pairs with the drops in outstanding_sub(): the closures
	 * counted out are final and their raises visible to the loads below
	 * (C1); join() reads their results after this. */
	uint64_t n = atomic_load_explicit(&c->outstanding, memory_order_acquire);

	for (unsigned i = 0; i < COORD_PSTASH_SLOTS; i++)
		/* Relaxed: C1: each raise that matters happened-before the
		 * drop acquired above, so coherence shows it here. */
		n += atomic_load_explicit(&c->pstash[i].added, memory_order_relaxed);
	return n;
}

static void outstanding_sub(struct coord *c, uint64_t n)
{
	uint32_t w;

	if (!n)
		return;
	/* seq_cst: C1, release the final RemoteValues to join() and acquire
	 * the earlier drops for the sum below (acq_rel would do); seq_cst
	 * lets the wake skip its fence (E3 in futex.h). */
	atomic_fetch_sub_explicit(&c->outstanding, n, memory_order_seq_cst);
	/* seq_cst: E3, after the RMW above in the total order.  The sum is
	 * only worth reading when a joiner sleeps. */
	w = atomic_load_explicit(&c->idle.word, memory_order_seq_cst);
	if ((w & COORD_EC_WAITERS) && outstanding_total(c) == 0)
		ec_wake_if_waiters(&c->idle, w);
}

/* C9: closures finished per batch taken off `outstanding` at most. */
#define COORD_FIN_DEFER 64

/* C9: take what @d finished and nobody took yet off `outstanding`.  Any
 * thread: the CAS hands each finished closure to exactly one settler. */
static void fin_settle(struct coord_dispatcher *d)
{
	/* C9 (acquire), pairs with fin_add()'s release: what it counts is
	 * final, and outstanding_sub()'s seq_cst RMW below passes that on to
	 * join() (C1). */
	uint64_t t = atomic_load_explicit(&d->fin_done, memory_order_acquire);
	/* Relaxed: the CAS below checks it. */
	uint64_t k = atomic_load_explicit(&d->fin_taken, memory_order_relaxed);

	/* Relaxed CAS: it only decides who owns (k, t]; fin_taken never
	 * passes fin_done, and moves only forward. */
	while (k < t)
		if (atomic_compare_exchange_weak_explicit(
			    &d->fin_taken, &k, t, memory_order_relaxed, memory_order_relaxed)) {
			outstanding_sub(d->c, t - k);
			return;
		}
}

/* C9: settle every deferring dispatcher, so that `outstanding` counts no
 * closure that is final: the canceller after its wait, done() and join()
 * before they report a count (a dispatcher may be preempted between its
 * finish and its own settle). */
static void fin_settle_all(struct coord *c)
{
	/* Every dispatcher: one that does not defer has nothing to settle
	 * (fin_done stays 0), and defer_fin is its own thread's to read. */
	for (unsigned i = 0; i < c->ndisp; i++)
		fin_settle(&c->disp[i]);
}

static void rcu_put_cb(struct rcu_head *head)
{
	coord_closure_put(container_of(head, struct coord_closure, rcu));
}

/* Make a queued closure CANCELLED and retire it.  Caller owns it (popped). */
static void cancel_one(struct coord *c, struct coord_closure *cl)
{
	if (coord_closure_local(cl)) {
		/* Q2: a dispatcher's own closure: no handle, no reader, not the
		 * pool's; only the counts move.  One put back stale after a run
		 * (S11) may hold that run's result: drop it, for the next take. */
		coord_closure_drop_contents(cl);
		/* Relaxed: a statistic (B7). */
		atomic_fetch_add_explicit(&c->cancelled, 1, memory_order_relaxed);
		outstanding_sub(c, 1);
		return;
	}
	if (cl->res_cls != COORD_BUF_INLINE)
		coord_buf_put(&c->bufs, cl->res, cl->res_cls);
	cl->res_cls = COORD_BUF_INLINE;
	cl->res = cl->inline_res;
	cl->res_len = 0;
	coord_rv_set_final(cl, COORD_RV_CANCELLED);
	/* Relaxed: a statistic (B7). */
	atomic_fetch_add_explicit(&c->cancelled, 1, memory_order_relaxed);
	outstanding_sub(c, 1);
	/* The runtime's reference goes through epoch reclamation: a transport
	 * may still resolve this closure's id in a read-side section. */
	urcu_bp_register_thread();
	urcu_bp_call_rcu(&cl->rcu, rcu_put_cb);
}

void coord_cancel_queued(struct coord *c, struct coord_closure *cl)
{
	cancel_one(c, cl);
}

static void record_error(struct coord *c, int worker, struct coord_closure *cl, int code, int cause,
			 const char *msg);

/* An error outcome in @cl's result fields: the message (as its result
 * bytes, V2: read once the state is final), code, cause and worker. */
static void closure_set_err(struct coord_closure *cl, int code, int cause, int worker,
			    const char *msg)
{
	size_t len = strlen(msg) + 1;
	char *b = coord_closure_result_buf(cl, len);

	if (b)
		memcpy(b, msg, len);
	cl->res_dirty |= CL_DIRTY_RES;
	cl->err_code = code;
	cl->err_cause = cause;
	cl->err_worker = worker;
}

void coord_fail_queued(struct coord *c, struct coord_closure *cl, int code, int worker,
		       const char *msg)
{
	closure_set_err(cl, code, 0, worker, msg);
	record_error(c, worker, cl, code, 0, msg); /* S3 */
	coord_rv_set_final(cl, COORD_RV_READY | RV_READY_ERR);
	outstanding_sub(c, 1);
	/* Through epoch reclamation, as cancel_one(): a put-back closure's id
	 * may still be resolved by a transport. */
	urcu_bp_register_thread();
	urcu_bp_call_rcu(&cl->rcu, rcu_put_cb);
}

static void record_error(struct coord *c, int worker, struct coord_closure *cl, int code, int cause,
			 const char *msg)
{
	for (;;) {
		/* Acquire: see the generation bumped before a canceller's EMPTY
		 * (C4), for the check below. */
		uint32_t e = atomic_load_explicit(&c->err_state, memory_order_acquire);

		if (e == ERR_SET)
			return; /* the first error wins (S3) */
		if (e != ERR_EMPTY) {
			cpu_relax(); /* WRITING or TAKEN: a few stores away (C4) */
			continue;
		}
		/* C4: acquire on success, so our writes below cannot move above
		 * the claim. */
		if (atomic_compare_exchange_weak_explicit(&c->err_state, &e, ERR_WRITING,
							  memory_order_acquire,
							  memory_order_relaxed))
			break;
	}
	/* C7: a closure of a generation whose error was already taken keeps
	 * its own outcome, but its error is not the coordinator's.  Relaxed:
	 * the claim above synchronized with the canceller's EMPTY, which it
	 * stored after the bump. */
	if (cl->gen < atomic_load_explicit(&c->gen, memory_order_relaxed)) {
		/* Release: nothing written; hand the slot back. */
		atomic_store_explicit(&c->err_state, ERR_EMPTY, memory_order_release);
		return;
	}
	c->err.code = code;
	c->err.cause = cause;
	c->err.worker = worker;
	c->err.closure = cl->id;
	snprintf(c->err.msg, sizeof(c->err.msg), "%s", msg ? msg : coord_strerror(code));
	/* C4 (release): publishes the record to the canceller's acquire CAS. */
	atomic_store_explicit(&c->err_state, ERR_SET, memory_order_release);
	coord_ec_signal(&c->idle);
}

static uint64_t inflight_sum(struct coord *c)
{
	uint64_t s = 0;

	for (unsigned i = 0; i < c->ndisp; i++)
		/* D1 (seq_cst): after the gen bump in gen_bump(); see C2. */
		s += atomic_load_explicit(&c->disp[i].inflight, memory_order_seq_cst);
	return s;
}

static uint64_t gen_bump(struct coord *c)
{
	/* D1 (seq_cst): see C2.  New closures get the new generation; older
	 * ones are cancelled. */
	return atomic_fetch_add_explicit(&c->gen, 1, memory_order_seq_cst) + 1;
}

/* Pop the whole queue: cancel what is older than @g, queue the rest again. */
static void drain_older(struct coord *c, uint64_t g)
{
	struct coord_closure *buf[64], *keep = NULL, *keep_last = NULL;
	/* A bound for the drain, so a producer that never stops cannot keep
	 * us here; anything missed is cancelled by C5. */
	uint64_t budget = outstanding_total(c) + 64;
	unsigned n, spins = 0;
	int64_t nkeep = 0;

	while (budget > 0) {
		n = queue_pop(c, buf, 64, true, NULL);
		if (n == 0) {
			/* Empty, or a producer claimed a ring slot and has not
			 * published it yet: it will, within a few instructions.
			 * Only the main queue: hinted closures are drained below,
			 * never popped here (B4; waiting on them spun ~5 ms). */
			if (coord_main_queue_empty(c) || ++spins > 100000)
				break;
			coord_spin_pause(spins);
			continue;
		}
		budget = budget > n ? budget - n : 0;
		for (unsigned i = 0; i < n; i++) {
			if (buf[i]->gen < g) {
				cancel_one(c, buf[i]);
				continue;
			}
			buf[i]->next = keep; /* a new closure: queue it again */
			keep = buf[i];
			if (!keep_last)
				keep_last = buf[i];
			nkeep++;
		}
	}
	if (keep) {
		ov_push(c, keep, keep_last, nkeep);
		coord_ec_signal_sc(&c->not_empty);
	}
	coord_hq_drain(c, g); /* B4: hinted closures, which never enter the ring */
	coord_ec_signal(&c->not_full);
}

/*
 * cancel_older() - S3: cancel every queued closure of a generation older
 * than @g, then wait until no worker has one in flight.  Several threads may
 * run this at once (two errors taken back to back); each pop is exclusive.
 */
static void cancel_older(struct coord *c, uint64_t g)
{
	uint64_t until = coord_now_ns() + c->opts.spin_ns;

	drain_older(c, g);
	for (unsigned i = 1;; i++) {
		uint32_t v = coord_ec_prepare(&c->drained);

		if (inflight_sum(c) == 0)
			break;
		/* Spin as other waits do (opts.spin_ns), then sleep: a bound in
		 * time, not pauses, whatever a pause costs (sanitizers, an
		 * emulated CPU). */
		if (i < 1000 && ((i & 15) || coord_now_ns() < until)) {
			coord_spin_pause(i);
			continue;
		}
		coord_ec_wait(&c->drained, v, COORD_FOREVER);
	}
	fin_settle_all(c); /* C9: what finished is off `outstanding` now */
	/* DF3: consumers that in-flight completions queued with a generation
	 * they read before our bump are in the queue now (each completion came
	 * before its dispatcher's inflight release): cancel them too.
	 * Relaxed: set once, before the first consumer is counted. */
	if (unlikely(atomic_load_explicit(&c->dataflow, memory_order_relaxed)) && !queue_empty(c))
		drain_older(c, g);
}

/*
 * take_error() - S3-S5: if an error is recorded, become the canceller,
 * return it once and clear it.  Returns 0 when there is none to return.
 */
static int take_error(struct coord *c, struct coord_error *err)
{
	for (;;) {
		/* Acquire: pairs with the release stores of err_state (C4). */
		uint32_t s = atomic_load_explicit(&c->err_state, memory_order_acquire);
		uint64_t g;
		int code, cause;

		if (s == ERR_EMPTY)
			return 0;
		if (s == ERR_SET) {
			/* C4: acquire, to read the record released by SET. */
			if (!atomic_compare_exchange_strong_explicit(&c->err_state, &s, ERR_TAKEN,
								     memory_order_acquire,
								     memory_order_relaxed))
				continue;
			code = c->err.code;
			cause = c->err.cause;
			if (err)
				*err = c->err;
			g = gen_bump(c);
			/* C4 (release): our reads of the record are done, and the
			 * bump is visible to record_error()'s check (C7).  The
			 * slot is free again before we drain, so an error of the
			 * new generation is kept for the next caller. */
			atomic_store_explicit(&c->err_state, ERR_EMPTY, memory_order_release);
			coord_ec_signal(&c->idle);
			cancel_older(c, g);
			if (code == COORD_EUNAVAILABLE && cause > 0 &&
			    c->opts.restart_exit_code >= 0) {
				/* S12: nothing runs now; let a supervisor restart us. */
				coord_log(COORD_LOG_ERROR,
					  "ps task %d failed: %s; exiting with the restart code %d",
					  cause - 1, c->err.msg, c->opts.restart_exit_code);
				exit(c->opts.restart_exit_code);
			}
			return code;
		}
		/* WRITING or TAKEN by another thread: a few stores away (C4). */
		cpu_relax();
	}
}

static inline bool error_pending(struct coord *c)
{
	/* Relaxed: a fast-path hint; take_error() re-reads with acquire. */
	return atomic_load_explicit(&c->err_state, memory_order_relaxed) != ERR_EMPTY;
}

/* Cancel everything queued: nothing will ever run it (C8). */
static void drain_cancel(struct coord *c)
{
	struct coord_closure *buf[64];
	unsigned n;

	while ((n = queue_pop(c, buf, 64, true, NULL)) > 0)
		for (unsigned i = 0; i < n; i++)
			cancel_one(c, buf[i]);
	coord_hq_drain(c, UINT64_MAX);
	coord_ec_signal(&c->not_full); /* schedule() blocked on a full ring */
}

void coord_report_unavailable(struct coord *c, int worker, const char *msg)
{
	struct coord_closure none = { .id = COORD_NO_CLOSURE };

	/* seq_cst: C8 (and schedule_admit() refuses from now on). */
	atomic_store_explicit(&c->unavailable, true, memory_order_seq_cst);
	/* Relaxed: a generation no older than current, so C7 keeps it. */
	none.gen = atomic_load_explicit(&c->gen, memory_order_relaxed);
	record_error(c, worker, &none, COORD_EUNAVAILABLE, 0, msg);
	/* Nothing will ever run what is queued: cancel it now, so fetches
	 * return instead of waiting for ever.  (No wait for in-flight ones:
	 * with no worker there are none.) */
	drain_cancel(c);
}

/* ---- dataflow: RemoteValues as arguments (B1, DF1-DF3) ----------------------- */

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
	*len = in->res_len;
	return in->res;
}

/* @x's inputs all failed or finished: fail it with COORD_EINPUT for input
 * @i, which failed (DF3).  Owner of @x only; drops its runtime reference. */
static void dep_fail(struct coord *c, struct coord_closure *x, uint32_t i)
{
	const struct coord_closure *in = x->in[i].input;
	char msg[COORD_ERRMSG_LEN];
	size_t len;
	char *b;
	/* The underlying failure: a failed input's own cause when it failed
	 * for an input in turn (a chain), else its code. */
	int cause = in->err_code == COORD_EINPUT && in->err_cause ? in->err_cause : in->err_code;

	snprintf(msg, sizeof(msg), "input %u (closure %llu) failed: %s", i,
		 (unsigned long long)in->id,
		 in->res_len ? (const char *)in->res : coord_strerror(in->err_code));
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
			coord_closure_put(in[i].input);
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
static int schedule_consumer(struct coord *c, struct coord_closure *x,
			     const struct coord_call *call, struct coord_rv **out,
			     struct coord_error *err)
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
	/* Acquire: C3, as in coord_schedule_call(): the generation when the
	 * consumer starts waiting (a canceller then reaches it, DF3). */
	x->gen = atomic_load_explicit(&c->gen, memory_order_acquire);
	if (out)
		*out = (struct coord_rv *)x;
	for (uint32_t i = 0; i < x->nin; i++)
		done += !dep_register(&x->in[i]);
	dep_done(c, x, done + 1); /* the final inputs and our +1 */
	return 0;
}

/* ---- schedule / join / done ------------------------------------------------- */

int coord_fn_lookup(const struct coord *c, const char *name, uint32_t *id, struct coord_error *err)
{
	for (uint32_t i = 0; name && i < c->reg->n; i++)
		if (c->reg->fns[i].fn && !strcmp(c->reg->fns[i].name, name)) {
			*id = i;
			return 0;
		}
	return coord_seterr(err, COORD_ENOFN, "no function named '%s' is registered",
			    name ? name : "(null)");
}

/* The checks every schedule makes before it queues anything (S3, S15). */
static int schedule_admit(struct coord *c, struct coord_error *err)
{
	if (unlikely(error_pending(c))) {
		int r = take_error(c, err);

		if (r < 0)
			return r;
	}
	/* Relaxed: a hint set once by the transport when its last worker
	 * went down; closures would wait for ever. */
	if (unlikely(atomic_load_explicit(&c->unavailable, memory_order_relaxed)))
		return coord_seterr(err, COORD_EUNAVAILABLE, "no worker is available");
	return 0;
}

/* B1: the inputs of @call are RemoteValues of @c. */
static int inputs_check(struct coord *c, const struct coord_call *call, struct coord_error *err)
{
	if (call->ninputs > COORD_MAX_INPUTS || !call->inputs)
		return coord_seterr(err, COORD_EINVAL, "bad call: %u inputs (max %u)",
				    call->ninputs, COORD_MAX_INPUTS);
	for (unsigned i = 0; i < call->ninputs; i++)
		if (!call->inputs[i] || rv_cl(call->inputs[i])->c != c)
			return coord_seterr(err, COORD_EINVAL,
					    "input %u is not a RemoteValue of this coordinator", i);
	return 0;
}

static int call_check(struct coord *c, const struct coord_call *call, struct coord_error *err)
{
	/* S15: refuse what cannot run, here and not on a worker. */
	if (unlikely(call->fn >= c->reg->n || !c->reg->fns[call->fn].fn))
		return coord_seterr(err, COORD_ENOFN,
				    "function id %u is not a registered function (%u known)",
				    call->fn, c->reg->n);
	if (unlikely(call->npw > COORD_MAX_PW || (call->npw && !call->pw) ||
		     call->len > UINT32_MAX || (call->len && !call->args)))
		return coord_seterr(err, COORD_EINVAL,
				    "bad call: %u per-worker args (max %u), "
				    "%zu argument bytes",
				    call->npw, COORD_MAX_PW, call->len);
	for (unsigned i = 0; i < call->npw; i++)
		if (unlikely(!call->pw[i] || call->pw[i]->c != c))
			return coord_seterr(err, COORD_EINVAL,
					    "per-worker argument %u is not of this coordinator", i);
	if (unlikely(call->priority || call->affinity || call->affinity_mode)) {
		int r = coord_hq_check(c, call, err); /* B4 */

		if (r < 0)
			return r;
	}
	if (unlikely(call->ninputs))
		return inputs_check(c, call, err);
	return 0;
}

/* Does @call take the hint queue (B4)? */
static inline bool call_hinted(const struct coord_call *call)
{
	return call->priority || call->affinity;
}

/* B7: closures this thread filled, and sampled lives it still owes
 * (closure_sample_next()). */
static __thread uint32_t tl_fill, tl_force;

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
	if (unlikely(tl_force)) {
		tl_force--;
		cl->reuse += (0u - cl->idx - cl->reuse) & COORD_SAMPLE_MASK;
	} else if (unlikely(!(++tl_fill & COORD_SAMPLE_MASK))) {
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
		cl->args = cl->inline_args;
		cl->args_cls = COORD_BUF_INLINE;
		if (likely(len == sizeof(uint64_t)))
			memcpy(cl->args, args, sizeof(uint64_t)); /* one store */
		else if (len)
			memcpy(cl->args, args, len);
	} else {
		cl->args = coord_buf_get(&c->bufs, len, cl->inline_args, CL_INLINE_ARGS,
					 &cl->args_cls);
		if (unlikely(!cl->args))
			return COORD_ENOMEM;
		memcpy(cl->args, args, len);
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

/* closure_fill_args() for @call, per-worker arguments included. */
static int closure_fill(struct coord *c, struct coord_closure *cl, const struct coord_call *call,
			bool want_rv)
{
	int r = closure_fill_args(c, cl, call->fn, call->args, call->len, want_rv);

	if (unlikely(r < 0))
		return r;
	cl->npw = (uint8_t)call->npw;
	for (unsigned i = 0; i < call->npw; i++) {
		cl->pw[i] = call->pw[i];
		/* Relaxed: the caller holds a reference, so this is not the
		 * 0 -> 1 edge; the drop in coord_per_worker_put() is acq_rel. */
		atomic_fetch_add_explicit(&call->pw[i]->refs, 1, memory_order_relaxed);
	}
	return 0;
}

/* Producer stashes (C10). */
/* Which stash this thread uses: a number handed out on first use. */
static __thread unsigned tl_pstash = UINT32_MAX;
static _Atomic unsigned pstash_next;

/* This thread's stash (C10). */
static inline struct coord_pstash *my_stash(struct coord *c)
{
	if (unlikely(tl_pstash == UINT32_MAX))
		/* Relaxed: only spreads threads over the stashes. */
		tl_pstash = atomic_fetch_add_explicit(&pstash_next, 1, memory_order_relaxed);
	return &c->pstash[tl_pstash % COORD_PSTASH_SLOTS];
}

/* Raise outstanding by one for a closure about to be queued (C1), in the
 * stash @st if we hold it: a plain store. */
static inline void stash_count(struct coord *c, struct coord_pstash *st, bool held)
{
	if (held)
		/* Relaxed: C1: only stash holders write `added` (C10), and the
		 * push of this closure (R1 in ring.c) publishes the raise
		 * before any drop of it; readers sum it (outstanding_total()). */
		atomic_store_explicit(&st->added,
				      atomic_load_explicit(&st->added, memory_order_relaxed) + 1,
				      memory_order_relaxed);
	else
		/* Relaxed: C1, as in schedule_one(). */
		atomic_fetch_add_explicit(&c->outstanding, 1, memory_order_relaxed);
}

/* Take stash @st (C10); false if another thread holds it. */
static inline bool stash_take(struct coord_pstash *st)
{
	uint32_t idle = 0;

	/* Acquire (C10): the previous holder's accesses to the stash happen-
	 * before ours.  Another thread holds it: the caller does without,
	 * rather than wait. */
	return atomic_compare_exchange_strong_explicit(&st->busy, &idle, 1, memory_order_acquire,
						       memory_order_relaxed);
}

static inline void stash_drop(struct coord_pstash *st)
{
	/* Release (C10): hands the stash to its next holder. */
	atomic_store_explicit(&st->busy, 0, memory_order_release);
}

/* A free closure for schedule(), through this thread's stash (C10);
 * @count: raise outstanding for it (C1), in the stash if we hold it. */
static struct coord_closure *closure_get(struct coord *c, bool count)
{
	struct coord_pstash *st = my_stash(c);
	struct coord_closure *cl;

	if (!stash_take(st)) {
		/* The pool is thread-safe. */
		cl = coord_pool_get(c->closures);
		if (cl && count)
			stash_count(c, st, false);
		return cl;
	}
	if (st->n <= COORD_PSTASH / 4) {
		/* Top up below what is left, which is used first: those lines
		 * were asked for a batch ago and are here by now. */
		struct coord_closure *top[COORD_PSTASH / 4];
		uint32_t left = st->n, k;

		memcpy(top, st->cl, left * sizeof(top[0]));
		k = coord_pool_get_many(c->closures, (void **)st->cl, COORD_PSTASH - left);
		/* The workers that freed them last had these lines: fetch the
		 * whole batch now, for writing, so the misses overlap. */
		for (uint32_t i = 0; i < k; i++)
			coord_prefetch_w(st->cl[i]);
		memcpy(st->cl + k, top, left * sizeof(top[0]));
		st->n = k + left;
	}
	cl = st->n ? st->cl[--st->n] : NULL;
	if (cl && count)
		stash_count(c, st, true);
	stash_drop(st);
	return cl;
}

/* Q2: calls of a thread that could travel inline; every 64th does not. */
static __thread uint32_t tl_inline;

/* Q2: make the next @n lives this thread fills (closure_next_life()) sampled
 * ones (B7): they stand for the calls before them that travelled inline and
 * were not sampled, so the histograms keep their rate of one in 64. */
static inline void closure_sample_next(unsigned n)
{
	tl_force = n;
}

/* The end of a user's schedule() of one counted closure: its generation,
 * the push (flagged for the transport's wake, rdma.c D5), its handle. */
static int schedule_push(struct coord *c, struct coord_closure *cl, struct coord_rv **out)
{
	/* Acquire: pairs with the canceller's bump (C3: the generation is the
	 * one current when the closure is queued). */
	cl->gen = atomic_load_explicit(&c->gen, memory_order_acquire);
	tl_in_schedule = true;
	queue_push(c, cl, NULL);
	tl_in_schedule = false;
	if (out)
		*out = (struct coord_rv *)cl;
	return 0;
}

/* Queue one checked @call (S1), or start it waiting for its inputs (B1). */
static int schedule_one(struct coord *c, const struct coord_call *call, struct coord_rv **out,
			struct coord_error *err)
{
	struct coord_closure *cl;

	cl = closure_get(c, false);
	if (unlikely(!cl))
		return coord_seterr(err, COORD_ENOMEM, "no memory for a closure");
	if (unlikely(closure_fill(c, cl, call, out != NULL) < 0)) {
		coord_pool_put(c->closures, cl->idx);
		return coord_seterr(err, COORD_ENOMEM, "no memory for %zu argument bytes",
				    call->len);
	}
	if (unlikely(call_hinted(call)))
		coord_hq_fill(cl, call); /* B4 */
	if (unlikely(call->ninputs))	 /* B1: waits for its inputs instead */
		return schedule_consumer(c, cl, call, out, err);
	/* Relaxed: C1 only needs the increment before the push, and the push's
	 * release orders it before any completion's decrement. */
	atomic_fetch_add_explicit(&c->outstanding, 1, memory_order_relaxed);
	return schedule_push(c, cl, out);
}

int coord_schedule_call(struct coord *c, const struct coord_call *call, struct coord_rv **out,
			struct coord_error *err)
{
	int r;

	if (out)
		*out = NULL;
	r = schedule_admit(c, err);
	if (r < 0)
		return r;
	r = call_check(c, call, err);
	if (r < 0)
		return r;
	return schedule_one(c, call, out, err);
}

/* coord_schedule_many() when some calls have inputs (B1) or hints (B4):
 * one at a time. */
static int schedule_many_each(struct coord *c, const struct coord_call *calls, size_t n,
			      struct coord_rv **out, size_t *queued, struct coord_error *err)
{
	for (size_t i = 0; i < n; i++) {
		int r = schedule_one(c, &calls[i], out ? &out[i] : NULL, err);

		if (r < 0)
			return r;
		if (queued)
			*queued = i + 1;
	}
	return 0;
}

/* Q2: queue @n <= SCHED_CHUNK checked calls without handles as inline
 * entries, if they all fit (no per-worker arguments, at most 8 argument
 * bytes) and this is not the thread's 64th chunk (B7 samples: then
 * *@sample is set); false: the caller queues them as closures. */
static bool schedule_many_inline(struct coord *c, const struct coord_call *calls, unsigned n,
				 bool *sample)
{
	struct coord_ring_ent e[SCHED_CHUNK];
	uint64_t g;

	for (unsigned i = 0; i < n; i++)
		if (calls[i].npw || calls[i].len > sizeof(e[i].w[0]))
			return false;
	if (unlikely(!(++tl_inline & COORD_SAMPLE_MASK))) {
		*sample = true; /* B7: this chunk's closures are all sampled */
		return false;
	}
	for (unsigned i = 0; i < n; i++) {
		e[i].w[0] = 0;
		if (likely(calls[i].len == sizeof(e[i].w[0])))
			memcpy(&e[i].w[0], calls[i].args, sizeof(e[i].w[0]));
		else if (calls[i].len)
			memcpy(&e[i].w[0], calls[i].args, calls[i].len);
		e[i].w[1] = QE_INLINE | ((uint64_t)calls[i].len << 32) | calls[i].fn;
	}
	/* Relaxed: C1, as in coord_schedule_call(): one increment for the
	 * chunk, before its push. */
	atomic_fetch_add_explicit(&c->outstanding, n, memory_order_relaxed);
	/* Acquire: C3, as in coord_schedule_call(); one generation for the
	 * chunk, read just before it is queued. */
	g = atomic_load_explicit(&c->gen, memory_order_acquire);
	for (unsigned i = 0; i < n; i++)
		e[i].w[2] = g;
	queue_push_ents(c, e, n);
	return true;
}

int coord_schedule_many(struct coord *c, const struct coord_call *calls, size_t n,
			struct coord_rv **out, size_t *queued, struct coord_error *err)
{
	struct coord_closure *cls[SCHED_CHUNK];
	size_t done = 0;
	bool each = false;
	int r;

	if (queued)
		*queued = 0;
	if (out)
		for (size_t i = 0; i < n; i++)
			out[i] = NULL;
	if (n && !calls)
		return coord_seterr(err, COORD_EINVAL, "coord_schedule_many: calls is NULL");
	r = schedule_admit(c, err);
	if (r < 0)
		return r;
	for (size_t i = 0; i < n; i++) {
		r = call_check(c, &calls[i], err);
		if (r < 0) {
			if (err) {
				struct coord_error e = *err;

				coord_seterr(err, r, "call %zu: %s", i, e.msg);
			}
			return r;
		}
		each |= calls[i].ninputs != 0 || call_hinted(&calls[i]);
	}
	if (unlikely(each)) /* B1, B4: one at a time, in order */
		return schedule_many_each(c, calls, n, out, queued, err);
	while (done < n) {
		unsigned want = n - done < SCHED_CHUNK ? (unsigned)(n - done) : SCHED_CHUNK;
		unsigned k = 0, got;
		uint64_t g;
		bool sample = false;

		if (!out && c->inline_q && schedule_many_inline(c, calls + done, want, &sample)) {
			done += want;
			if (queued)
				*queued = done;
			continue;
		}

		/* One claim of the free list for the chunk (a short list may
		 * take a few, growth included). */
		while (k < want) {
			got = coord_pool_get_many(c->closures, (void **)cls + k, want - k);
			if (unlikely(got == 0))
				break;
			k += got;
		}
		/* Their first lines were last written by the workers that freed
		 * them: fetch them all at once rather than one miss per fill. */
		for (unsigned i = 0; i < k; i++)
			coord_prefetch_w(cls[i]);
		if (unlikely(sample))
			closure_sample_next(k);
		for (unsigned i = 0; i < k && r == 0; i++)
			if (unlikely(closure_fill(c, cls[i], &calls[done + i], out != NULL) < 0)) {
				/* cls[0..i) hold buffers: drop them; the rest are bare. */
				for (unsigned j = 0; j < i; j++)
					coord_closure_drop_contents(cls[j]);
				r = COORD_ENOMEM;
			}
		if (unlikely(k < want || r < 0)) {
			closure_sample_next(0); /* none owed past this chunk */
			for (unsigned j = 0; j < k; j++) {
				/* Relaxed: never published; destroy's count of held
				 * closures must not see it. */
				atomic_store_explicit(&cls[j]->refs, 0, memory_order_relaxed);
				coord_pool_put(c->closures, cls[j]->idx);
			}
			if (queued)
				*queued = done;
			return coord_seterr(err, COORD_ENOMEM,
					    "no memory for closure %zu of %zu (%zu queued)", done,
					    n, done);
		}
		/* Relaxed: C1, as in coord_schedule_call(): one increment for
		 * the chunk, before its push. */
		atomic_fetch_add_explicit(&c->outstanding, k, memory_order_relaxed);
		/* Acquire: C3, as in coord_schedule_call(); one generation for
		 * the chunk, read just before it is queued. */
		g = atomic_load_explicit(&c->gen, memory_order_acquire);
		for (unsigned i = 0; i < k; i++) {
			cls[i]->gen = g;
			if (out)
				out[done + i] = (struct coord_rv *)cls[i];
		}
		queue_push_many(c, cls, k);
		done += k;
		if (queued)
			*queued = done;
	}
	return 0;
}

int coord_schedule(struct coord *c, uint32_t fn, const void *args, size_t len,
		   struct coord_rv **out, struct coord_error *err)
{
	struct coord_closure *cl;
	bool sample;
	int r;

	/* The checks of call_check() for a call with nothing but arguments
	 * (S15); anything it would refuse goes the general way, for its
	 * message. */
	if (unlikely(fn >= c->reg->n || !c->reg->fns[fn].fn || len > CL_INLINE_ARGS ||
		     (len && !args))) {
		struct coord_call call = { .fn = fn, .args = args, .len = len };

		return coord_schedule_call(c, &call, out, err);
	}
	if (out)
		*out = NULL;
	r = schedule_admit(c, err);
	if (r < 0)
		return r;
	sample = !out && len <= sizeof(uint64_t) && c->inline_q;
	if (sample && likely(++tl_inline & COORD_SAMPLE_MASK)) {
		/* Q2: the call travels in its ring entry; no closure. */
		struct coord_ring_ent e = { { 0, QE_INLINE | ((uint64_t)len << 32) | fn, 0 } };
		struct coord_pstash *st = my_stash(c);
		bool held;

		if (likely(len == sizeof(e.w[0])))
			memcpy(&e.w[0], args, sizeof(e.w[0])); /* one load */
		else if (len)
			memcpy(&e.w[0], args, len);
		held = stash_take(st);
		stash_count(c, st, held); /* C1, before the push */
		if (held)
			stash_drop(st);
		/* Acquire: C3, as in schedule_one(). */
		e.w[2] = atomic_load_explicit(&c->gen, memory_order_acquire);
		queue_push(c, NULL, &e); /* inproc: no wake to do (not rdma.c D5) */
		return 0;
	}
	/* schedule_one() without per-worker arguments, hints or inputs; the
	 * closure comes counted in outstanding (C1). */
	cl = closure_get(c, true);
	if (unlikely(!cl))
		return coord_seterr(err, COORD_ENOMEM, "no memory for a closure");
	if (unlikely(sample)) /* Q2: the thread's 64th, for B7 */
		closure_sample_next(1);
	closure_fill_args(c, cl, fn, args, len, out != NULL); /* inline: cannot fail */
	return schedule_push(c, cl, out);
}

int coord_join_timeout(struct coord *c, int64_t timeout_ns, struct coord_error *err)
{
	uint64_t deadline = coord_deadline(timeout_ns);
	uint64_t spin_until = coord_now_ns() + c->opts.spin_ns;
	unsigned spins = 0;
	bool settled = false;

	for (;;) {
		uint32_t v = coord_ec_prepare(&c->idle);
		int r = take_error(c, err);

		if (r < 0)
			return r;
		/* C1: results are final (outstanding_total() acquires). */
		if (outstanding_total(c) == 0)
			return take_error(c, err);
		if (coord_now_ns() < spin_until) {
			coord_spin_pause(++spins);
			continue;
		}
		if (!settled) {
			/* C9: once before the first sleep, as in done(). */
			fin_settle_all(c);
			settled = true;
			continue;
		}
		if (coord_ec_wait(&c->idle, v, deadline) == -ETIMEDOUT) {
			/* A number for the message only. */
			uint64_t left = outstanding_total(c);

			return coord_seterr(err, COORD_ETIMEDOUT,
					    "join: %llu closures still pending after %lld ns",
					    (unsigned long long)left, (long long)timeout_ns);
		}
	}
}

int coord_join(struct coord *c, struct coord_error *err)
{
	return coord_join_timeout(c, -1, err);
}

int coord_done(struct coord *c, struct coord_error *err)
{
	int r = take_error(c, err);

	if (r < 0)
		return r;
	/* C1, as in join; C9: closures final but not yet settled by a
	 * dispatcher are not outstanding. */
	if (outstanding_total(c) != 0) {
		fin_settle_all(c);
		if (outstanding_total(c) != 0)
			return 0;
	}
	r = take_error(c, err);
	return r < 0 ? r : 1;
}

/* ---- per-worker resources ---------------------------------------------------- */

int coord_per_worker_create(struct coord *c, const char *creator, const void *args, size_t len,
			    struct coord_pw **out, struct coord_error *err)
{
	struct coord_pw *pw;
	uint32_t id = UINT32_MAX;

	for (uint32_t i = 0; creator && i < c->reg->n; i++)
		if (c->reg->fns[i].create && !strcmp(c->reg->fns[i].name, creator))
			id = i;
	if (id == UINT32_MAX)
		return coord_seterr(err, COORD_ENOFN, "no resource creator named '%s'",
				    creator ? creator : "(null)");
	if (len > UINT32_MAX || (len && !args))
		return coord_seterr(err, COORD_EINVAL, "bad creator arguments");
	pw = calloc(1, sizeof(*pw) + c->nworkers * sizeof(*pw->made) +
			       c->ndisp * sizeof(*pw->node) + len);
	if (!pw)
		return coord_seterr(err, COORD_ENOMEM, "no memory for a per-worker resource");
	pw->c = c;
	pw->nworkers = c->nworkers;
	pw->made = (_Atomic uint64_t *)(pw + 1);
	/* Relaxed: uniqueness is all that is needed. */
	pw->uid = atomic_fetch_add_explicit(&c->pw_next_uid, 1, memory_order_relaxed) + 1;
	pw->creator = id;
	pw->len = (uint32_t)len;
	pw->node = (struct coord_pw_node *)(pw->made + c->nworkers); /* runtime/pw.c */
	pw->args = pw->node + c->ndisp;
	/* Relaxed: a count for coord_destroy() (runtime/pw.c P4). */
	atomic_fetch_add_explicit(&c->pw_live, 1, memory_order_relaxed);
	if (len)
		memcpy(pw->args, args, len);
	/* Relaxed: private until returned. */
	atomic_store_explicit(&pw->refs, 1, memory_order_relaxed);
	*out = pw;
	return 0;
}

enum coord_rv_state coord_per_worker_state(const struct coord_pw *pw, unsigned worker)
{
	/* Relaxed: as in coord_pw_retire(); after coord_destroy() no worker
	 * is left to hold it (runtime/pw.c P4). */
	if (!pw || worker >= pw->nworkers ||
	    atomic_load_explicit(&pw->c->dead, memory_order_relaxed))
		return COORD_RV_NOT_READY;
	/* Made since the worker's last loss: READY; else (never made there,
	 * or lost since) ABORTED, made again before its next use (S7, S9). */
	return stat_rd(&pw->made[worker]) == stat_rd(&pw->c->workers[worker].losses) + 1
		       ? COORD_RV_READY
		       : COORD_RV_ABORTED;
}

void coord_per_worker_put(struct coord_pw *pw)
{
	/* acq_rel: the last dropper sees every other user's accesses. */
	if (pw && atomic_fetch_sub_explicit(&pw->refs, 1, memory_order_acq_rel) == 1)
		coord_pw_retire(pw); /* S9: destroyed on the workers (runtime/pw.c) */
}

/* ---- the dispatch interface ----------------------------------------------------- */

/* Polls of an idle wait that still count as a producer streaming (gather()). */
#define COORD_GATHER_POLLS 4
/* Pauses between two looks at the queue while a streaming dispatcher
 * spins idle (idle_wait()). */
#define COORD_IDLE_GAP 4

/* Wait for work (spin, then sleep); true if it came within
 * COORD_GATHER_POLLS polls.  @gap: pauses between two looks at the queue
 * while spinning; a look takes the ring's head line from a producer that
 * is pushing, so a dispatcher whose last take found several closures (a
 * producer streaming) looks less often than one that took a lone closure
 * (a round trip, which wants the quickest response). */
static bool idle_wait(struct coord_dispatcher *d, unsigned gap)
{
	struct coord *c = d->c;
	uint64_t until = coord_now_ns() + c->opts.spin_ns;

	for (unsigned i = 0;; i++) {
		/* Relaxed: stop is re-checked after every wake. */
		if ((i % gap) == 0 &&
		    (work_for(d) || atomic_load_explicit(&c->stopping, memory_order_relaxed)))
			return i <= COORD_GATHER_POLLS * gap;
		if ((i & 63) == 63 && coord_now_ns() >= until)
			break;
		coord_spin_pause(i + 1);
	}
	for (;;) {
		uint32_t v = coord_ec_prepare(&c->not_empty);
		uint64_t due;

		/* Relaxed: as above; the eventcount orders the re-check (E1). */
		if (work_for(d) || atomic_load_explicit(&c->stopping, memory_order_relaxed))
			return false;
		due = coord_dispatch_due(d); /* B4: a fallback or a start to come */
		coord_ec_wait(&c->not_empty, v, due ? due : COORD_FOREVER);
	}
}

/* gather(): a worker that finds fewer than COORD_GATHER_MIN closures
 * queued while a producer streams looks again every COORD_GATHER_SPINS
 * pauses (~0.5 us on our VMs), at most COORD_GATHER_LOOKS times. */
#define COORD_GATHER_MIN 256
#define COORD_GATHER_SPINS 16
#define COORD_GATHER_LOOKS 32

/*
 * gather() - a worker that runs closures itself (inproc) keeps its distance
 * from a producer that is still pushing: it waits until COORD_GATHER_MIN
 * closures are queued, or the queue stops growing between two looks (the
 * producer is done or slow), or ~16 us passed.  A worker that reads the
 * ring right behind its producer takes every slot line from the producer's
 * cache while the producer still writes it, and both slow down; 256
 * entries behind (8 KiB of ring), the lines it reads are ones the producer
 * has left, and its takes (a fair share of the backlog, at most opts.batch)
 * keep that distance while the stream lasts.  Only while the producer
 * streams: after a batch, or an idle wait of a few polls; a closure that
 * arrives after a longer wait (a round trip, one at a time) is taken at
 * once.
 */
static void gather(struct coord *c)
{
	/* Few looks, pauses between them: reading the ring's head while the
	 * producer pushes takes its line from it. */
	uint64_t q = coord_ring_size(&c->ring), last;

	for (unsigned look = 0; q < COORD_GATHER_MIN && look < COORD_GATHER_LOOKS; look++) {
		for (unsigned i = 0; i < COORD_GATHER_SPINS; i++)
			cpu_relax();
		last = q;
		q = coord_ring_size(&c->ring);
		if (q <= last)
			return;
	}
}

/* One attempt at taking closures: reserve, pop, drop stale ones (C2, C5). */
static unsigned take_once(struct coord_dispatcher *d, struct coord_closure **out, unsigned max,
			  unsigned *popped)
{
	struct coord *c = d->c;
	unsigned n = 0, k = 0, want, nraw = 0, own = 0;
	uint64_t g, backlog;

	/* Take a fair share of the backlog, not all of it, so a dispatcher
	 * does not hoard closures while another is idle. */
	backlog = coord_queue_size(c) / c->ndisp;
	want = backlog < 1 ? 1 : backlog < max ? (unsigned)backlog : max;
	/* D2 (seq_cst): reserve before the pop; see C2. */
	atomic_fetch_add_explicit(&d->inflight, want, memory_order_seq_cst);
	if (unlikely(hq_queued(c) > 0))
		n = coord_hq_take(d, out, want); /* B4: hints and the ring, in order */
	else if (d->exec_env && ov_empty(c)) {
		nraw = ring_pop_raw(c, d, want); /* Q3 */
		/* The room made is a producer's now, not after the functions
		 * below ran (one may run for long); as at the end. */
		if (nraw && !c->unbounded)
			coord_ec_signal_sc(&c->not_full);
	} else
		n = queue_pop(c, out, want, false, d);
	/* The producers wrote these closures' first lines: ask for them all now,
	 * so the misses overlap.  For reading: a closure without a handle is
	 * only read here (V4 in rv.c), and a read leaves the producer its copy
	 * of the line for the closure's next life. */
	for (unsigned i = 0; i < n; i++)
		__builtin_prefetch(out[i], 0, 3);
	/* D2 (seq_cst): read gen after the reservation; see C2. */
	g = atomic_load_explicit(&c->gen, memory_order_seq_cst);
	if (nraw)
		n = direct_run(d, out, nraw, g, &own); /* Q3 */
	for (unsigned i = 0; i < n; i++) {
		if (out[i]->gen < g) {
			cancel_one(c, out[i]); /* C5 */
			continue;
		}
		if (unlikely(coord_sampled(out[i])))
			out[i]->t_take = coord_now_ns(); /* metrics (B7) */
		out[k++] = out[i];
	}
	if (want > k + own) {
		/* seq_cst: our cancellations and direct runs (Q3) happen-before
		 * the canceller's D1 load that sees the lower count (release
		 * would do), and this RMW lets the wake below skip its fence (E3
		 * in futex.h). */
		atomic_fetch_sub_explicit(&d->inflight, want - k - own, memory_order_seq_cst);
		coord_ec_signal_sc(&c->drained);
	}
	if (nraw) {
		d->last_take = nraw;
		if (fin_pending(d) >= COORD_FIN_DEFER)
			fin_settle(d); /* C9 */
		*popped = nraw;
		return k;
	}
	/* Room in the ring was made by the pop's seq_cst tail CAS (ring.c),
	 * so the wake needs no fence (E3); closures from the overflow FIFO
	 * or the hint queue make no room in the ring, hence no wake is owed
	 * for them (wait_hq_room() polls). */
	if (n && !c->unbounded)
		coord_ec_signal_sc(&c->not_full);
	*popped = n;
	return k;
}

unsigned coord_dispatch_take(struct coord_dispatcher *d, struct coord_closure **out, unsigned max)
{
	struct coord *c = d->c;
	unsigned idle = 0;
	bool stream = true; /* no wait for work, or a brief one (gather()) */
	/* Did our last take find several closures (idle_wait())? */
	unsigned gap = d->defer_fin && d->last_take > 1 ? COORD_IDLE_GAP : 1;

	for (;;) {
		unsigned k, n;

		/* Relaxed: stop is also signalled through not_empty. */
		if (atomic_load_explicit(&c->stopping, memory_order_relaxed)) {
			fin_settle(d); /* C9 */
			return 0;
		}
		if (!work_for(d)) {
			fin_settle(d); /* C9: before waiting for work */
			stream = idle_wait(d, gap);
			continue;
		}
		if (coord_dispatch_pw_pending(d)) {
			/* S9: the caller releases them first (runtime/pw.c). */
			fin_settle(d); /* C9 */
			return 0;
		}
		if (d->defer_fin && stream)
			gather(c);
		k = take_once(d, out, max, &n);
		if (k) {
			d->last_take = k;
			return k;
		}
		if (n == 0)
			coord_spin_pause(++idle); /* a slot claimed, not yet published */
	}
}

unsigned coord_dispatch_try_take(struct coord_dispatcher *d, struct coord_closure **out,
				 unsigned max)
{
	unsigned n;

	/* Relaxed: as in coord_dispatch_take(). */
	if (max == 0 || !work_for(d) || atomic_load_explicit(&d->c->stopping, memory_order_relaxed))
		return 0;
	return take_once(d, out, max, &n);
}

void coord_dispatch_cancel(struct coord_dispatcher *d, struct coord_closure *cl)
{
	cancel_one(d->c, cl);
	/* Release: as in coord_dispatch_finish(). */
	atomic_fetch_sub_explicit(&d->inflight, 1, memory_order_release);
	coord_ec_signal(&d->c->drained);
}

/* Q2: a pool closure for dispatcher-owned @l (a put-back), with its id and
 * attempt; @l is left clean for the next take. */
static struct coord_closure *local_to_pool(struct coord *c, struct coord_closure *l)
{
	struct coord_ring_ent e = { { 0, QE_INLINE | ((uint64_t)l->args_len << 32) | l->fn,
				      l->gen } };
	struct coord_closure *cl;

	memcpy(&e.w[0], l->inline_args, sizeof(e.w[0]));
	cl = ent_closure(c, &e);
	cl->attempt = l->attempt;
	cl->id = l->id;	  /* B8: the same closure to its function */
	if (l->res_dirty) /* a result of the failed run: drop it */
		coord_closure_drop_contents(l);
	return cl;
}

void coord_dispatch_put_back(struct coord_dispatcher *d, struct coord_closure **cls, unsigned n)
{
	struct coord *c = d->c;
	struct coord_closure *newest = NULL, *oldest = NULL;
	int64_t nb = 0;

	for (unsigned i = 0; i < n; i++) {
		struct coord_closure *cl = cls[i];

		if (coord_dispatch_stale(c, cl)) {
			cancel_one(c, cl);
			continue;
		}
		if (unlikely(coord_closure_local(cl)))
			cl = local_to_pool(c, cl); /* Q2: ours is reused by the next take */
		cl->attempt++;			   /* B8: the next run sees attempt + 1 */
		if (unlikely(cl->res_dirty & CL_HINT)) {
			coord_hq_push(c, cl); /* B4: back under its hints */
			nb++;
			continue;
		}
		cl->next = newest;
		newest = cl;
		if (!oldest)
			oldest = cl;
		nb++;
	}
	if (newest)
		ov_push(c, newest, oldest, nb);
	/* Relaxed: a statistic (B7); an RMW, as a stopping transport's thread
	 * may put back too. */
	atomic_fetch_add_explicit(&d->m.put_back, (uint64_t)nb, memory_order_relaxed);
	/* Release: the closures are back on the queue (or cancelled) before
	 * a canceller's D1 load sees the lower count. */
	atomic_fetch_sub_explicit(&d->inflight, n, memory_order_release);
	coord_ec_signal(&c->drained);
	if (nb) {
		check_unavailable(c); /* C8: nobody may be left to run them */
		queue_pushed(c);      /* ov_push's or coord_hq_push()'s RMW (E3) */
	}
}

/* ---- metrics (B7) ------------------------------------------------------------ */

static inline unsigned hist_bucket(uint64_t ns)
{
	unsigned b = 63u - (unsigned)__builtin_clzll(ns | 1);

	return b < COORD_HIST_BUCKETS ? b : COORD_HIST_BUCKETS - 1;
}

int coord_metrics(struct coord *c, struct coord_metrics *m, struct coord_worker_metrics *w,
		  unsigned nw)
{
	if (!c || !m)
		return COORD_EINVAL;
	memset(m, 0, sizeof(*m));
	m->now_ns = coord_now_ns();
	m->queued = coord_queue_size(c);
	m->outstanding = outstanding_total(c);
	m->cancelled = stat_rd(&c->cancelled);
	m->waits = stat_rd(&c->waits);
	m->parked = stat_rd(&c->parked);
	m->completed = m->failed = stat_rd(&c->dep_failed); /* B1: input errors */
	for (unsigned i = 0; i < c->ndisp; i++) {
		struct coord_dmetrics *dm = &c->disp[i].m;

		m->in_flight += stat_rd(&c->disp[i].inflight);
		m->completed += stat_rd(&dm->finished);
		m->failed += stat_rd(&dm->failed);
		m->put_back += stat_rd(&dm->put_back);
		for (unsigned b = 0; b < COORD_HIST_BUCKETS; b++) {
			m->exec_ns.bucket[b] += stat_rd(&dm->exec[b]);
			m->round_trip_ns.bucket[b] += stat_rd(&dm->rt[b]);
		}
	}
	for (unsigned b = 0; b < COORD_HIST_BUCKETS; b++) {
		m->exec_ns.count += m->exec_ns.bucket[b];
		m->round_trip_ns.count += m->round_trip_ns.bucket[b];
	}
	m->workers = c->nworkers;
	for (unsigned i = 0; i < c->nworkers; i++) {
		struct coord_worker *wk = &c->workers[i];
		/* Relaxed: as in stat_rd(). */
		int st = atomic_load_explicit(&wk->state, memory_order_relaxed);
		uint64_t lo = stat_rd(&wk->losses), re = stat_rd(&wk->recoveries);

		m->workers_up += st == COORD_WORKER_UP;
		m->workers_down += st == COORD_WORKER_DOWN;
		m->workers_dropped += st == COORD_WORKER_DROPPED;
		m->losses += lo;
		m->recoveries += re;
		if (w && i < nw) {
			w[i].state = st;
			w[i].executed = stat_rd(&wk->executed);
			w[i].losses = lo;
			w[i].recoveries = re;
		}
	}
	return 0;
}

uint64_t coord_hist_percentile(const struct coord_hist *h, double p)
{
	uint64_t need, seen = 0;

	if (!h || h->count == 0 || !(p > 0))
		return 0;
	need = (uint64_t)((p >= 100 ? 1.0 : p / 100.0) * (double)h->count);
	if (need == 0)
		need = 1;
	for (unsigned b = 0; b < COORD_HIST_BUCKETS; b++) {
		seen += h->bucket[b];
		if (seen >= need)
			return b >= 63 ? UINT64_MAX : (2ull << b) - 1;
	}
	return UINT64_MAX;
}

bool coord_dispatch_ps_retry_slow(struct coord_dispatcher *d, struct coord_closure *cl, int code,
				  int cause)
{
	struct coord *c = d->c;
	uint32_t n;

	if (code != COORD_EUNAVAILABLE || cause <= 0 || !c->ps || !c->ps->failures ||
	    (unsigned)cause > c->ps->nps)
		return false;
	/* Relaxed: a counter; each report takes one number (S11). */
	n = atomic_fetch_add_explicit(&c->ps->failures[cause - 1], 1, memory_order_relaxed) + 1;
	if (n > (uint32_t)c->opts.ps_failure_threshold)
		return false;
	coord_log(COORD_LOG_WARN,
		  "closure %llu: ps task %d unreachable (failure %u of %d taken as transient); "
		  "put back",
		  (unsigned long long)cl->id, cause - 1, n, c->opts.ps_failure_threshold);
	return true;
}

void coord_dispatch_complete_slow(struct coord_dispatcher *d, struct coord_closure *cl, int worker,
				  int code, int cause, const char *msg)
{
	uint32_t st = COORD_RV_READY;

	if (code < 0) {
		const char *m = msg ? msg : coord_strerror(code);

		closure_set_err(cl, code, cause, worker, m);
		st = COORD_RV_READY | RV_READY_ERR;
		record_error(d->c, worker, cl, code, cause, m);
		dm_inc(&d->m.failed, 1);
	}
	if (cl->npw && code != COORD_EINPUT && worker >= 0 && (unsigned)worker < d->c->nworkers) {
		uint64_t e = stat_rd(&d->c->workers[worker].losses) + 1;

		for (unsigned i = 0; i < cl->npw; i++)
			if (stat_rd(&cl->pw[i]->made[worker]) != e)
				/* Relaxed: a state hint for coord_per_worker_state(). */
				atomic_store_explicit(&cl->pw[i]->made[worker], e,
						      memory_order_relaxed);
	}
	if (unlikely(coord_sampled(cl))) {
		uint64_t now = coord_now_ns();

		dm_inc(&d->m.exec[hist_bucket(now - cl->t_take)], 1);
		dm_inc(&d->m.rt[hist_bucket(now - cl->t_sched)], 1);
	}
	/* V4 (rv.c): a closure nobody holds a handle on, with no inputs to
	 * drop, has no reader of its state: no fetcher, no waiter to wake, no
	 * consumer (RV_DEPS needs a handle).  Leave the word NOT_READY (the
	 * next life stores it anyway) rather than pull the closure's line into
	 * this cache for writing.  Relaxed: refs of such a closure is 0 from
	 * schedule to free and written by nobody (V4). */
	if (st == COORD_RV_READY && !(cl->res_dirty & CL_HAS_IN) &&
	    atomic_load_explicit(&cl->refs, memory_order_relaxed) == 0)
		return;
	coord_rv_set_final(cl, st);
}

void coord_dispatch_finish(struct coord_dispatcher *d, struct coord_worker *w,
			   struct coord_closure **cls, unsigned n)
{
	struct coord *c = d->c;
	uint32_t freed[64];
	unsigned nfree = 0;

	/* Drop the runtime's references; the closures that are now free go back
	 * to the pool in batches: one claim of its recycle ring (or one CAS on
	 * the free-list head) per 64 instead of one per closure. */
	for (unsigned i = 0; i < n; i++) {
		struct coord_closure *cl = cls[i];

		/* Relaxed: V4 (rv.c): refs == 0 is the runtime's closure alone,
		 * nothing to drop (coord_closure_unref() tests it too). */
		if (atomic_load_explicit(&cl->refs, memory_order_relaxed) != 0 &&
		    !coord_closure_unref(cl))
			continue;
		/* Only what coord_closure_drop_contents() would look at: an
		 * empty closure costs no call. */
		if (unlikely(cl->npw || cl->res_dirty || cl->args_cls != COORD_BUF_INLINE ||
			     cl->res_cls != COORD_BUF_INLINE))
			coord_closure_drop_contents(cl);
		if (coord_closure_local(cl))
			continue; /* Q2: ours, not the pool's */
		freed[nfree++] = cl->idx;
		if (nfree == ARRAY_SIZE(freed)) {
			coord_pool_put_many(c->closures, freed, nfree);
			nfree = 0;
		}
	}
	if (nfree)
		coord_pool_put_many(c->closures, freed, nfree);
	if (w)
		/* Relaxed: a statistic. */
		atomic_fetch_add_explicit(&w->executed, n, memory_order_relaxed);
	dm_inc(&d->m.finished, n);
	/* C1 before the inflight drop: a canceller that sees inflight reach
	 * zero (join() returning an error) then sees these off `outstanding`
	 * too (coord_metrics() right after join() reads 0, not a count that
	 * the finishing thread is a few instructions from dropping), or, when
	 * deferred, counted in fin_done for its fin_settle_all() (C9). */
	if (!d->defer_fin)
		outstanding_sub(c, n);
	else
		fin_add(d, n);
	/* seq_cst: the completed closures happen-before a canceller's D1 load
	 * that sees the lower count (release would do); seq_cst lets the wake
	 * below skip its fence (E3 in futex.h). */
	atomic_fetch_sub_explicit(&d->inflight, n, memory_order_seq_cst);
	coord_ec_signal_sc(&c->drained);
	if (d->defer_fin && fin_pending(d) >= COORD_FIN_DEFER)
		fin_settle(d); /* C9 */
}

/* ---- create / destroy ------------------------------------------------------------- */

static void closure_init(void *obj, uint32_t idx, void *arg)
{
	struct coord_closure *cl = obj;

	cl->c = arg;
	cl->idx = idx;
	cl->res = cl->inline_res;
	cl->res_cls = COORD_BUF_INLINE;
	cl->args_cls = COORD_BUF_INLINE;
}

/* Q2: @d's own closures, as closure_init() makes pool ones, with indices
 * from CL_IDX_LOCAL up (distinct per dispatcher, so their ids are too). */
static int local_init(struct coord *c, struct coord_dispatcher *d)
{
	size_t bytes = (sizeof(*d->local) * c->opts.batch + CACHELINE - 1) &
		       ~(size_t)(CACHELINE - 1);

	d->nlocal = c->opts.batch;
	d->local = aligned_alloc(CACHELINE, bytes);
	d->ents = calloc(c->opts.batch, sizeof(*d->ents)); /* Q3 */
	if (!d->local || !d->ents)
		return COORD_ENOMEM;
	memset(d->local, 0, bytes);
	for (unsigned i = 0; i < d->nlocal; i++) {
		struct coord_closure *cl = &d->local[i];

		closure_init(cl, CL_IDX_LOCAL + d->index * c->opts.batch + i, c);
		cl->args = cl->inline_args;
		/* Never sampled (coord_sampled()): B7 samples come from the
		 * pool closures Q2 leaves in the mix. */
		cl->reuse = (1u - cl->idx) & COORD_SAMPLE_MASK;
	}
	return 0;
}

static const struct coord_tp_ops *find_transport(const char *name)
{
	static const struct coord_tp_ops *const all[] = { &coord_tp_inproc, &coord_tp_tcp,
							  &coord_tp_rdma };

	for (size_t i = 0; i < ARRAY_SIZE(all); i++)
		if (!strcmp(all[i]->name, name ? name : "inproc"))
			return all[i];
	return NULL;
}

int coord_create(const struct coord_spec *spec, const struct coord_opts *opts, struct coord **out,
		 struct coord_error *err)
{
	const struct coord_tp_ops *tp;
	struct coord_opts o; /* @opts as this library's struct (runtime/abi.h) */
	struct coord *c;
	unsigned nw;
	int r;

	if (opts && coord_opts_in(&o, opts, err) < 0)
		return COORD_EINVAL;
	opts = opts ? &o : NULL;
	if (!opts || !opts->registry || !out)
		return coord_seterr(err, COORD_EINVAL,
				    "coord_create: opts with a registry and "
				    "an out pointer are required");
	tp = find_transport(opts->transport);
	if (!tp)
		return coord_seterr(err, COORD_EINVAL,
				    "unknown transport '%s' (known: inproc, tcp, rdma)",
				    opts->transport);
	nw = spec ? (unsigned)coord_spec_num_tasks(spec, "worker") : opts->inproc_workers;
	if (nw == 0 || nw > 65536)
		return coord_seterr(err, COORD_EINVAL,
				    "a cluster needs 1 to 65536 workers (got %u)", nw);
	if (opts->batch == 0 || opts->batch > 1024)
		return coord_seterr(err, COORD_EINVAL, "batch must be 1..1024 (got %u)",
				    opts->batch);
	if (opts->affinity_fallback_ms < 0 || opts->priority_aging_ms <= 0)
		return coord_seterr(err, COORD_EINVAL,
				    "affinity_fallback_ms must be >= 0 and priority_aging_ms > 0");
	if (opts->heartbeat_ms < 0 || (opts->heartbeat_ms > 0 && opts->heartbeat_misses < 1) ||
	    opts->closure_timeout_ms < 0)
		return coord_seterr(
			err, COORD_EINVAL,
			"heartbeat_ms and closure_timeout_ms must be >= 0 (0: off), and "
			"heartbeat_misses >= 1 with heartbeats on (got %d, %lld, %d)",
			opts->heartbeat_ms, (long long)opts->closure_timeout_ms,
			opts->heartbeat_misses);
	c = aligned_alloc(CACHELINE, (sizeof(*c) + CACHELINE - 1) & ~(size_t)(CACHELINE - 1));
	if (!c)
		return coord_seterr(err, COORD_ENOMEM, "no memory for a coordinator");
	memset(c, 0, sizeof(*c));
	c->opts = *opts;
	c->reg = opts->registry;
	c->tp = tp;
	c->nworkers = nw;
	if (c->opts.start_delay_ms < 0)
		c->opts.start_delay_ms = env_seconds_ms("TF_COORDINATOR_SCHEDULE_START_DELAY");
	if (c->opts.start_delay_max_ms < 0)
		c->opts.start_delay_max_ms = env_seconds_ms(
			"TF_COORDINATOR_SCHEDULE_START_DELAY_MAX");
	if (c->opts.ps_failure_threshold < 0)
		c->opts.ps_failure_threshold = coord_env_int(
			"TF_COORDINATOR_IGNORE_TRANSIENT_PS_FAILURES", 3);
	if (c->opts.restart_exit_code < 0)
		c->opts.restart_exit_code = coord_env_int("TF_CLIENT_NON_FATAL_RESTART_EXIT_CODE",
							  -1);
	c->unbounded = opts->ring_capacity == 0;
	pthread_mutex_init(&c->ov_lock, NULL);
	if (c->unbounded)
		coord_log(COORD_LOG_WARN,
			  "ring capacity 0: the closure queue is unbounded; "
			  "schedule() never blocks and memory grows with the backlog (S14)");
	r = coord_ring_init_wide(&c->ring, c->unbounded ? COORD_RING_DEFAULT : opts->ring_capacity);
	if (r < 0)
		goto err_free;
	r = coord_pool_create(sizeof(struct coord_closure), 12, 4096, closure_init, c,
			      &c->closures);
	if (r < 0)
		goto err_ring;
	r = coord_pool_cache_init(c->closures, COORD_CLOSURE_CACHE);
	if (r < 0)
		goto err_pool;
	/* Free closures beyond the cache (a backlog drained, handles dropped
	 * at once): as many as the ring holds, then the pool's list. */
	r = coord_pool_spill_init(c->closures,
				  c->unbounded ? COORD_RING_DEFAULT : opts->ring_capacity);
	if (r < 0)
		goto err_pool;
	r = coord_bufs_init(&c->bufs);
	if (r < 0)
		goto err_pool;
	c->workers = aligned_alloc(CACHELINE, sizeof(*c->workers) * nw);
	if (!c->workers) {
		r = COORD_ENOMEM;
		goto err_bufs;
	}
	memset(c->workers, 0, sizeof(*c->workers) * nw);
	c->created_ns = coord_now_ns();
	for (unsigned i = 0; i < nw; i++) {
		c->workers[i].c = c;
		c->workers[i].index = (int)i;
		c->workers[i].start_at_ns = c->created_ns + coord_stagger_ns(&c->opts, i);
	}
	c->ndisp = tp->ndispatchers(c);
	c->disp = aligned_alloc(CACHELINE, sizeof(*c->disp) * c->ndisp);
	if (!c->disp) {
		r = COORD_ENOMEM;
		goto err_workers;
	}
	memset(c->disp, 0, sizeof(*c->disp) * c->ndisp);
	/* Q2: in-process dispatchers take inline entries into closures of
	 * their own, one per place of a take (opts.batch). */
	c->inline_q = tp == &coord_tp_inproc;
	for (unsigned i = 0; i < c->ndisp; i++) {
		c->disp[i].c = c;
		c->disp[i].index = i;
		if (c->inline_q && local_init(c, &c->disp[i]) < 0) {
			r = COORD_ENOMEM;
			goto err_disp;
		}
	}
	r = coord_ps_setup(c, spec, err); /* before start: tcp tells workers */
	if (r < 0)
		goto err_disp;
	/* The slow path (S10), if any, before the transport's threads start:
	 * they read c->recovery when they lose a worker (coord_worker_lost()),
	 * and every worker is UP until then, so the thread waits idle. */
	r = coord_recovery_start(c, err);
	if (r < 0)
		goto err_disp;
	c->spec = spec;
	r = tp->start(c, err);
	c->spec = NULL;
	if (r < 0) {
		coord_recovery_stop(c);
		goto err_disp;
	}
	*out = c;
	return 0;

err_disp:
	coord_ps_destroy(c->ps);
	for (unsigned i = 0; i < c->ndisp; i++) {
		free(c->disp[i].local);
		free(c->disp[i].ents);
	}
	free(c->disp);
err_workers:
	free(c->workers);
err_bufs:
	coord_bufs_fini(&c->bufs);
err_pool:
	coord_pool_destroy(c->closures);
err_ring:
	coord_ring_fini(&c->ring);
err_free:
	pthread_mutex_destroy(&c->ov_lock);
	free(c);
	if (r == COORD_ENOMEM)
		coord_seterr(err, r, "no memory for the coordinator");
	return r;
}

/* The last of a coordinator's memory: pools, buffers and itself. */
static void coord_free_memory(struct coord *c)
{
	coord_bufs_fini(&c->bufs);
	coord_pool_destroy(c->closures);
	free(c);
}

/* RemoteValues the user still holds: closures with a reference left. */
static uint64_t count_held(struct coord *c)
{
	struct coord_pool *p = c->closures;
	uint64_t held = 0;
	/* Relaxed: no other thread uses the coordinator now (destroy). */
	uint32_t nobj = atomic_load_explicit(&p->nslabs, memory_order_relaxed) << p->slab_shift;

	for (uint32_t i = 0; i < nobj; i++) {
		struct coord_closure *cl = coord_pool_obj(p, i);

		/* Relaxed: as above. */
		held += atomic_load_explicit(&cl->refs, memory_order_relaxed) != 0;
	}
	return held;
}

void coord_closure_release_dead(struct coord_closure *cl)
{
	coord_dead_put(cl->c);
}

void coord_dead_put(struct coord *c)
{
	/* acq_rel: the last put sees every other put's use of the memory. */
	if (atomic_fetch_sub_explicit(&c->held_after_destroy, 1, memory_order_acq_rel) == 1)
		coord_free_memory(c);
}

void coord_destroy(struct coord *c)
{
	uint64_t held, pw_held;

	if (!c)
		return;
	cancel_older(c, gen_bump(c)); /* queued: CANCELLED; in flight: finish */
	/* Relaxed: the signals below carry it (their fences order it, E1). */
	atomic_store_explicit(&c->stopping, 1, memory_order_relaxed);
	coord_ec_signal(&c->not_empty);
	coord_smp_mb(); /* stopping before the wake of stagger sleepers */
	coord_futex_wake_all(&c->stopping);
	coord_recovery_stop(c); /* no reconnect races the transport's stop */
	coord_pw_close(c);	/* no per-worker release wakes it either (pw.c P4) */
	c->tp->stop(c);
	coord_ps_destroy(c->ps); /* no function runs any more */
	c->ps = NULL;
	cancel_older(c, gen_bump(c)); /* anything left (none expected) */
	urcu_bp_barrier();	      /* every deferred closure release has run */
	pw_held = coord_pw_fini(c);   /* per-worker handles the user holds (pw.c P4) */
	coord_hq_destroy(c);
	coord_ring_fini(&c->ring);
	pthread_mutex_destroy(&c->ov_lock);
	free(c->workers);
	for (unsigned i = 0; i < c->ndisp; i++) {
		free(c->disp[i].local);
		free(c->disp[i].ents);
	}
	free(c->disp);
	c->workers = NULL;
	c->disp = NULL;
	c->nworkers = c->ndisp = 0;
	/*
	 * RemoteValues the caller still holds are final now (ready or
	 * cancelled) and stay readable: the pools live on until the last of
	 * them is put (coord_closure_release_dead()).
	 */
	held = count_held(c) + pw_held;
	if (held == 0) {
		coord_free_memory(c);
		return;
	}
	coord_log(COORD_LOG_INFO,
		  "coord_destroy: %llu RemoteValues or per-worker handles still held; "
		  "their memory is freed by the last put",
		  (unsigned long long)held);
	/* Relaxed: published to later puts by whatever hands them the handles
	 * (the caller's own synchronization after destroy returns). */
	atomic_store_explicit(&c->held_after_destroy, held, memory_order_relaxed);
	atomic_store_explicit(&c->dead, true, memory_order_relaxed);
}

unsigned coord_num_workers(const struct coord *c)
{
	return c->nworkers;
}
