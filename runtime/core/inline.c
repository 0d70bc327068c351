// SPDX-License-Identifier: MIT
/*
 * runtime/core/inline.c - calls that travel inline in their ring entry (Q2) and the
 * dispatcher that runs them straight from the entries (Q3): in-process
 * transport only (c->inline_q, d->exec_env).
 *
 * Invariants (and C1-C10 in coord_pvt.h)
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
 * Synchronization: struct coord's fields in coord_pvt.h's table; a ring
 * entry's words are published by the ring's release (ring.c I1-I3).
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/coord_pvt.h"

/* Q2: a pool closure for inline entry @e: without a handle, its generation
 * the entry's.  Only when memory is exhausted does this fail, and then no
 * closure could be queued anyway: the process dies. */
struct coord_closure *ent_closure(struct coord *c, const struct coord_ring_ent *e)
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
struct coord_closure *ent_taken(struct coord *c, struct coord_dispatcher *d, unsigned i,
				const struct coord_ring_ent *e)
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
unsigned ring_pop(struct coord *c, struct coord_closure **out, unsigned max,
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

/* Q3: pop up to @max ring entries as they are into @d->ents. */
unsigned ring_pop_raw(struct coord *c, struct coord_dispatcher *d, unsigned max)
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

/*
 * Q3: run the inline entries at the front of @d->ents[0..@n) (generation @g
 * current) in place; turn the rest into closures in @out, as ring_pop()
 * does.  Returns how many closures are in @out; *@own: how many entries
 * were finished or put back here, each of which dropped its own
 * reservation.  The reservations of the others run here (done, nothing
 * left of them) are the caller's to drop.
 */
unsigned direct_run(struct coord_dispatcher *d, struct coord_closure **out, unsigned n, uint64_t g,
		    unsigned *own)
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
