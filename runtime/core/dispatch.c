// SPDX-License-Identifier: MIT
/*
 * runtime/core/dispatch.c - the dispatch interface the transports drive: take (with
 * the idle wait and the gather of a streaming producer), put back, cancel,
 * complete, finish.  Invariants: C1-C10 in coord_pvt.h, and
 *   RL1  A dispatcher with d->released (inproc) drops the runtime's
 *        reference of a closure that has a handle in
 *        coord_dispatch_complete(), with the final CAS (RV_RTREL in the
 *        final word, rv.c: no RMW on refs; the holders count it out), or,
 *        if a holder's drop raced that CAS (RV_ORPHAN), right after it,
 *        instead of in coord_dispatch_finish(); if that was not the last
 *        reference it records the closure in d->released, and the finish that follows
 *        (the closures it is given are the ones completed, in the same
 *        order) skips it without reading it: the user's put may have
 *        recycled it meanwhile.  If it was the last, refs is 0 and the
 *        finish recycles it as it does a closure without a handle (V4 in
 *        rv.c).  Only the counts (inflight, outstanding) wait for the
 *        finish, as before, so C1, C2 and C9 are unchanged.
 *   RL2  The same dispatcher returns an argument buffer (over the inline 64
 *        bytes) when it makes the closure final, before the final CAS: a
 *        final closure never runs again (a put-back happens instead of a
 *        completion, B8) and nothing reads its arguments after, so the
 *        next schedule() reuses the buffer while its lines are cached,
 *        however many closures the user keeps in flight.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/coord_pvt.h"

/* Polls of an idle wait that still count as a producer streaming (gather()). */
#define COORD_GATHER_POLLS 4
/* Pauses between two looks at the queue while a streaming dispatcher
 * spins idle (idle_wait()). */
#define COORD_IDLE_GAP 4

/* Wait for work (spin, then sleep); true if it came within
 * COORD_GATHER_POLLS polls.  @gap: pauses between two looks at the queue
 * while spinning; a look reads the ring's tail slot (work_hint()), whose
 * line a producer that is pushing writes next, so a dispatcher whose last
 * take found several closures (a producer streaming) looks less often
 * than one that took a lone closure (a round trip, which wants the
 * quickest response).  The sleep re-checks with work_for(), through the
 * head: E3 pairs that with the push's CAS. */
static bool idle_wait(struct coord_dispatcher *d, unsigned gap)
{
	struct coord *c = d->c;
	uint64_t until = coord_now_ns() + c->opts.spin_ns;

	for (unsigned i = 0;; i++) {
		/* Relaxed: stop is re-checked after every wake. */
		if ((i % gap) == 0 &&
		    (work_hint(d) || atomic_load_explicit(&c->stopping, memory_order_relaxed)))
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
	uint64_t q, last;
	unsigned spins = 2;

	/* Enough queued: the slot COORD_GATHER_MIN - 1 past the tail is
	 * published, a line the producer has left; no look at the head. */
	if (coord_ring_capacity(&c->ring) > COORD_GATHER_MIN &&
	    coord_ring_ready_ent(&c->ring, COORD_GATHER_MIN - 1))
		return;
	/* Few looks, pauses between them: reading the ring's head while the
	 * producer pushes takes its line from it.  The first look comes soon
	 * (2 pauses): a producer that stopped pushing (one waiting for a
	 * result this worker is to compute: a window of RemoteValues) is not
	 * kept waiting, and the rest every COORD_GATHER_SPINS pauses. */
	q = coord_ring_size(&c->ring);
	for (unsigned look = 0; q < COORD_GATHER_MIN && look < COORD_GATHER_LOOKS; look++) {
		for (unsigned i = 0; i < spins; i++)
			cpu_relax();
		spins = COORD_GATHER_SPINS;
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
	backlog = c->ndisp == 1 ? max : coord_queue_size(c) / c->ndisp;
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
		if (!work_hint(d)) {
			fin_settle(d); /* C9: before waiting for work */
			stream = idle_wait(d, gap);
			continue;
		}
		if (coord_dispatch_pw_pending(d)) {
			/* S9: the caller releases them first (runtime/core/pw.c). */
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
	struct coord_ring_ent e;
	struct coord_closure *cl;

	qe_encode(&e, l->fn, l->inline_args, l->args_len);
	e.w[2] = l->gen; /* the generation it was queued with (C3) */
	cl = ent_closure(c, &e);
	cl->attempt = l->attempt;
	cl->id = l->id;	  /* B8: the same closure to its function */
	if (l->res_dirty) /* a result of the failed run: drop it */
		coord_closure_drop_contents(l);
	return cl;
}

/* Put back (@again: attempt + 1, counted in put_back) or give back (not
 * started: as it was) @n closures taken by @d. */
static void back(struct coord_dispatcher *d, struct coord_closure **cls, unsigned n, bool again)
{
	struct coord *c = d->c;
	struct coord_closure *newest = NULL, *oldest = NULL;
	int64_t nb = 0, nov = 0; /* back on the queue; of them in the overflow */

	for (unsigned i = 0; i < n; i++) {
		struct coord_closure *cl = cls[i];

		if (coord_dispatch_stale(c, cl)) {
			cancel_one(c, cl);
			continue;
		}
		if (unlikely(coord_closure_local(cl)))
			cl = local_to_pool(c, cl); /* Q2: ours is reused by the next take */
		cl->attempt += again;		   /* B8: the next run sees attempt + 1 */
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
		nov++;
	}
	if (newest) /* only these: the hint queue counts its own */
		ov_push(c, newest, oldest, nov);
	/* Relaxed: a statistic (B7); an RMW, as a stopping transport's thread
	 * may put back too. */
	if (again)
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

void coord_dispatch_put_back(struct coord_dispatcher *d, struct coord_closure **cls, unsigned n)
{
	back(d, cls, n, true);
}

void coord_dispatch_give_back(struct coord_dispatcher *d, struct coord_closure **cls, unsigned n)
{
	back(d, cls, n, false);
}

bool coord_dispatch_ps_retry_slow(struct coord_dispatcher *d, struct coord_closure *cl, int code,
				  int cause)
{
	struct coord *c = d->c;
	uint32_t n;

	if (code != COORD_EUNAVAILABLE || cause <= 0 || !c->ps)
		return false;
	n = c->ps_ops->failure(c->ps, (unsigned)cause - 1);
	if (n == 0 || n > (uint32_t)c->opts.ps_failure_threshold)
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

		hist_record(&d->m.exec, now - cl->t_take);
		hist_record(&d->m.rt, now - cl->t_sched);
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
	if (d->released && unlikely(cl->args_cls != COORD_BUF_INLINE)) {
		/* RL2: nobody reads the arguments of a final closure: their
		 * buffer goes back now, while its lines are in this cache and
		 * the next schedule() can reuse it, not when the user puts. */
		coord_buf_put(&d->c->bufs, cl->args, cl->args_cls);
		cl->args_cls = COORD_BUF_INLINE;
		cl->args = cl->inline_args;
	}
	/* RL1: a dispatcher that runs functions itself (inproc: d->released)
	 * drops the runtime's reference with the final CAS itself (RV_RTREL),
	 * while the line is in its cache: the fetcher, who reads that line
	 * next, then drops the last reference with no RMW and recycles the
	 * closure where it will schedule the next (closure_stash_put()),
	 * instead of this thread taking the line back for its finish.  Not
	 * when every holder has gone already (RV_ORPHAN: the finish recycles
	 * it, as it does a closure without a handle), nor when the released
	 * list is full.  Relaxed: refs == 0 is V4, a closure nobody else
	 * holds (coord_closure_unref()). */
	if (d->released && d->nreleased < d->nlocal &&
	    atomic_load_explicit(&cl->refs, memory_order_relaxed) != 0) {
		if (coord_rv_set_final_rel(cl, st) > 0)
			d->released[d->nreleased++] = cl; /* not ours to touch again */
		else if (!coord_closure_unref(cl))
			d->released[d->nreleased++] = cl; /* the holders free it */
		/* else the last reference: finish recycles it (refs == 0, V4) */
		return;
	}
	coord_rv_set_final(cl, st);
}

void coord_dispatch_finish(struct coord_dispatcher *d, struct coord_worker *w,
			   struct coord_closure **cls, unsigned n)
{
	struct coord *c = d->c;
	uint32_t freed[64];
	unsigned nfree = 0, rel = 0;

	/* Drop the runtime's references; the closures that are now free go back
	 * to the pool in batches: one claim of its recycle ring (or one CAS on
	 * the free-list head) per 64 instead of one per closure. */
	for (unsigned i = 0; i < n; i++) {
		struct coord_closure *cl = cls[i];

		/* RL1: released at completion, in the same order: a user's put
		 * may have recycled it since, so not even a look. */
		if (rel < d->nreleased && cl == d->released[rel]) {
			rel++;
			continue;
		}
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
	d->nreleased = 0;
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

void coord_stop_dispatchers(struct coord *c)
{
	/* Relaxed: the signals below carry it (their fences order it, E1). */
	atomic_store_explicit(&c->stopping, 1, memory_order_relaxed);
	coord_ec_signal(&c->not_empty);
	coord_smp_mb(); /* stopping before the wake of stagger sleepers */
	coord_futex_wake_all(&c->stopping);
}
