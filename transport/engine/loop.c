// SPDX-License-Identifier: MIT
/*
 * transport/engine/loop.c - the engine's event loop (engine.h): a few loops
 * (opts.tcp_loops, default: conn.c), each a dispatcher that owns a share of
 * the worker connections and does all their I/O through its backend,
 * rather than a thread per worker: on these 2-core machines the thread
 * count, not the work, is what a few hundred workers would cost.
 *
 * A round (coord_eng_round()):
 *   1. takes in what came (ops->poll): RES frames complete their closures
 *      (coord_eng_frame()), then one coord_dispatch_finish() for all;
 *   2. installs re-admitted workers, sends CANCEL (S3, E3) and PW_FREE (S9)
 *      frames, checks liveness;
 *   3. takes up to min(batch, credit) closures, credit being what its
 *      connections can start soon (place.h PL1); it blocks on the queue's
 *      futex only from the loop's thread, with nothing in flight and no
 *      liveness check, staggered start or worker being recovered due, and
 *      otherwise takes without waiting.  While batches come whole, credit
 *      is left and there is more work than idle workers on the other
 *      loops, it takes more before sending, so a connection gets one frame
 *      per round;
 *   4. places them (coord_place_pick(); a take's B4 target first), encodes
 *      one REQ frame per connection and sends on the connections given
 *      closures (a list, not a scan).
 * With nothing taken the loop sleeps in its backend (ops->wait), registered
 * in loop_sleepers when it has room, so that schedule() wakes it through
 * the eventfd (coord_eng_wake()); a spinning backend (ops->spin) first
 * busy-polls for opts.spin_ns while rounds find something.
 *
 * Frames (ops->cork_frames, tcp's 2).  A connection does not send a REQ
 * frame while that many of its REQ frames are unanswered: the closures
 * placed on it meanwhile wait in its output, and the RES frame that
 * uncorks it sends them as one frame.  Its worker runs one frame while
 * the next is on its way, and a frame carries what came during a round
 * trip, not during one round.  A closure held back waits only behind what
 * it would have waited behind in the worker's socket (packing decided
 * that); an idle connection is never corked, nor a PING or a CANCEL
 * (urgent).  While its packed connection is corked and results are
 * coming, a loop also leaves the queue alone for up to CORK_WAIT_NS
 * (cork_wait()): what it took could only wait in the output, and the
 * other loops may take it.  Measurements: docs/perf-history.md.
 *
 * The tok (E1).  Whoever runs a round holds it: the loop's thread, which
 * lets go only while it sleeps (ops->wait returns with it again), or a
 * backend's driver (rdma.c D1-D6).  Its acquire/release hands the loop's
 * state on.
 *
 * Synchronization: engine.c's table (tok, armed, admit_pending, the
 * counters); everything else a loop touches belongs to the tok's holder (E1).
 */
#include <errno.h>
#include <stdio.h>

#include "runtime/util/futex.h"
#include "transport/engine/engine.h"
#include "transport/engine/loop.h"

/* How long a loop leaves the queue alone for a corked connection: the
 * expected run time a closure may wait behind (place.c PACK_WAIT_NS). */
#define CORK_WAIT_NS 50000u

#define TOK_HELD 1u
#define TOK_WANT 2u

/* ---- the tok (E1) ---------------------------------------------------------------- */

bool coord_eng_tok_try(struct coord_eloop *l)
{
	uint32_t v = 0;

	/* Acquire: pairs with coord_eng_tok_release(): the connections as
	 * the last holder left them (E1). */
	return atomic_compare_exchange_strong_explicit(&l->tok, &v, TOK_HELD, memory_order_acquire,
						       memory_order_relaxed);
}

void coord_eng_tok_release(struct coord_eloop *l)
{
	/* Release: pairs with coord_eng_tok_try()/coord_eng_tok_wait() (E1). */
	uint32_t v = atomic_exchange_explicit(&l->tok, 0, memory_order_release);

	if (v & TOK_WANT)
		coord_futex_wake_all(&l->tok);
}

void coord_eng_tok_wait(struct coord_eloop *l)
{
	while (!coord_eng_tok_try(l)) {
		uint32_t v = TOK_HELD;

		/* Relaxed: the flag only asks for a wake; the futex word's
		 * value decides whether we sleep. */
		if (atomic_compare_exchange_strong_explicit(&l->tok, &v, TOK_HELD | TOK_WANT,
							    memory_order_relaxed,
							    memory_order_relaxed) ||
		    v == (TOK_HELD | TOK_WANT))
			coord_futex_wait(&l->tok, TOK_HELD | TOK_WANT, COORD_FOREVER);
	}
}

/* ---- output ---------------------------------------------------------------------- */

void coord_eng_finish(struct coord_eloop *l)
{
	if (!l->ndone)
		return;
	coord_dispatch_finish(l->d, NULL, l->done, l->ndone);
	l->inflight -= l->ndone;
	l->finished += l->ndone;
	l->ndone = 0;
}

void coord_eng_flush(struct coord_conn *k)
{
	unsigned cork = k->loop->e->ops->cork_frames;

	if (!k->up || k->ow.len == 0)
		return;
	if (cork && k->reqs_out >= cork && !k->urgent)
		return; /* corked: the next RES frame sends it, as one frame */
	if (!k->loop->e->ops->send(k))
		return; /* a send is running: its end sends this */
	k->reqs_out += k->ow_reqs;
	k->ow_reqs = k->ow_cl = 0;
	k->urgent = false;
}

static struct coord_conn *conn_at(void *l, unsigned i)
{
	return ((struct coord_eloop *)l)->place.conns[i];
}

/* S3: a CANCEL goes out at once, whatever the cork holds back. */
static void flush_urgent(struct coord_conn *k)
{
	k->urgent = true;
	coord_eng_flush(k);
}

/* S9: PW_FREE frames for the resources released to us, sent now (the loop
 * may block on the queue's futex next). */
static void pw_release(struct coord_eloop *l)
{
	if (!coord_dispatch_pw_pending(l->d))
		return;
	coord_conn_pw_release(l->d, conn_at, l, l->place.nconns, coord_eng_flush);
	if (l->e->ops->submit)
		l->e->ops->submit(l);
}

/* ---- placement ------------------------------------------------------------------- */

/* Put @cl in @k's output; false if it cannot be sent (too large). */
static bool enqueue_req(struct coord_eloop *l, struct coord_conn *k, struct coord_closure *cl,
			uint64_t now)
{
	uint32_t slot;
	int r = coord_conn_put_req(k, cl, now, coord_cview(l->e->c)->opts.max_frame, &slot);

	if (r < 0)
		return false;
	k->ow_reqs += (unsigned)r; /* a new REQ frame (corking) */
	k->ow_cl++;
	if (!k->dirty) { /* sent at the end of the round */
		k->dirty = true;
		k->dirty_next = l->dirty;
		l->dirty = k;
	}
	coord_place_sent(&l->place, k, cl, slot, now);
	return true;
}

/* @n closures taken and not sent go back to the queue as they were
 * (never started: place.h PL6); how many. */
static unsigned give_back(struct coord_eloop *l, struct coord_closure **cls, unsigned n)
{
	coord_dispatch_give_back(l->d, cls, n);
	l->inflight -= n;
	return n;
}

/* Send @cl where its take aimed it (B4), or where pick() says; false if
 * no connection may take it now (PL6): the caller gives it back. */
static bool place(struct coord_eloop *l, struct coord_closure *cl, uint64_t now)
{
	struct coord_conn *k;

	if (coord_dispatch_stale(l->e->c, cl)) {
		coord_dispatch_cancel(l->d, cl); /* S3: not started */
		l->inflight--;
		return true;
	}
	k = coord_closure_target(cl) < 0
		    ? coord_place_pick(&l->place, now)				/* place.h PL1 */
		    : coord_eng_conn(l->e, (unsigned)coord_closure_target(cl)); /* B4 */
	if (!k || !k->up || !k->nfree) /* lost meanwhile, or PL6 */
		return false;
	if (!enqueue_req(l, k, cl, now)) {
		coord_dispatch_complete(l->d, cl, k->w->index, -EMSGSIZE, 0,
					"arguments too large for one frame");
		coord_eng_done(l, cl);
	}
	return true;
}

/* Place the @n closures of l->batch; how many went back to the queue. */
static unsigned dispatch(struct coord_eloop *l, unsigned n)
{
	uint64_t now = coord_now_ns();
	unsigned m = 0, back = 0;

	pw_release(l); /* S9: before these REQs (runtime/core/pw.c P3) */
	l->inflight += n;
	/* B4: first the closures a take aimed at a worker: it counted on
	 * their slots (runtime/core/sched.c), which pick() must not give to
	 * the others; then the rest, in order, compacted to the front. */
	for (unsigned i = 0; i < n; i++)
		if (coord_closure_target(l->batch[i]) < 0)
			l->batch[m++] = l->batch[i];
		else if (!place(l, l->batch[i], now))
			back += give_back(l, &l->batch[i], 1);
	/* pick() does not look at the closure: once it finds no connection,
	 * the rest of the batch goes back, in order, at once. */
	for (unsigned i = 0; i < m; i++)
		if (!place(l, l->batch[i], now)) {
			back += give_back(l, &l->batch[i], m - i);
			break;
		}
	return back;
}

/* ---- a round --------------------------------------------------------------------- */

/*
 * Should the loop leave the queue alone until its packed connection's next
 * result ("Frames")?  Only while that connection is packable and corked,
 * and results are coming (one within the last 2 W); for at most W: the
 * deadline, or 0.
 */
static uint64_t cork_wait(const struct coord_eloop *l, uint64_t now)
{
	unsigned cork = l->e->ops->cork_frames;
	const struct coord_conn *k = l->place.pack;

	if (!cork || !k || k->reqs_out < cork || k->urgent ||
	    !coord_place_packable(&l->place, k, now) ||
	    now - k->last_rx_ns > 2 * (uint64_t)CORK_WAIT_NS)
		return 0;
	return now + CORK_WAIT_NS;
}

/* Take more while whole batches come and were placed whole, credit @cr
 * is left and there is more work than idle workers on the other loops
 * (this loop's own idle ones are its to place on). */
static unsigned take_more(struct coord_eloop *l, unsigned cr, unsigned got, unsigned max,
			  unsigned back)
{
	struct coord *c = l->e->c;
	unsigned batch = coord_cview(c)->opts.batch, n = 0;

	while (got == max && cr > got && !back) {
		int idle = coord_place_idle_elsewhere(&l->place);

		cr -= got;
		max = cr < batch ? cr : batch;
		if (coord_queue_size(c) <= (uint64_t)(idle > 0 ? idle : 0))
			break;
		got = coord_dispatch_try_take(l->d, l->batch, max);
		if (got)
			back = dispatch(l, got);
		n += got - back;
	}
	return n;
}

/* Step 3 and 4 of a round, with credit @cr; @block: on the queue's futex. */
static void take(struct coord_eloop *l, struct coord_eng_round *ro, unsigned cr, bool block)
{
	struct coord_view *c = coord_view(l->e->c);
	unsigned max = cr < c->opts.batch ? cr : c->opts.batch, n, back = 0;

	if (block && l->e->ops->submit)
		l->e->ops->submit(l);
	n = block ? coord_dispatch_take(l->d, l->batch, max)
		  : coord_dispatch_try_take(l->d, l->batch, max);
	/* Relaxed: a blocking take returns 0 only when stopping. */
	if (!n && atomic_load_explicit(&c->stopping, memory_order_relaxed)) {
		ro->stop = true;
		return;
	}
	if (n)
		back = dispatch(l, n);
	ro->took = n ? n - back + take_more(l, cr, n, max, back) : 0;
	while (l->dirty) { /* the connections given closures, not a scan */
		struct coord_conn *k = l->dirty;

		l->dirty = k->dirty_next;
		k->dirty = false;
		coord_eng_flush(k);
	}
}

bool coord_eng_round(struct coord_eloop *l, struct coord_eng_round *ro, bool thread)
{
	struct coord *c = l->e->c;
	uint64_t before = coord_now_ns();
	bool got = l->e->ops->poll(l), has_idle, has_down = false;
	unsigned cr;
	int idle;

	l->read_ns = before; /* what came before it is read (conn.h) */
	coord_eng_finish(l);
	coord_eng_admit(l);
	pw_release(l);
	coord_conn_cancel(l->d, &l->cancel_gen, conn_at, l, l->place.nconns, flush_urgent);
	ro->took = 0;
	ro->now = coord_now_ns();
	ro->due = coord_eng_check(l, ro->now);
	/* has_down: a worker being recovered: its admission is ours to do,
	 * so do not sleep on the queue's futex meanwhile (B4). */
	cr = coord_place_credit(&l->place, ro->now, &ro->next_start, &has_idle, &has_down);
	/* Relaxed: a placement hint (idle), read once per round.  A loop whose
	 * workers are all busy takes more only when there is more work than
	 * idle workers elsewhere (S2). */
	idle = atomic_load_explicit(&l->e->idle, memory_order_relaxed);
	ro->may_take = cr > 0 && (has_idle || coord_queue_size(c) > (uint64_t)idle);
	ro->cork_until = ro->may_take ? cork_wait(l, ro->now) : 0;
	ro->may_take = ro->may_take && !ro->cork_until;
	/* Relaxed: stop is also signalled through the eventfd and not_empty. */
	ro->stop = atomic_load_explicit(&coord_view(c)->stopping, memory_order_relaxed);
	if (!ro->stop && ro->may_take)
		take(l, ro, cr, thread && !l->inflight && !ro->next_start && !ro->due && !has_down);
	return !ro->stop && (ro->took || got);
}

/* ---- the loop's thread ------------------------------------------------------------ */

static uint64_t earliest(uint64_t a, uint64_t b)
{
	return a && (!b || a < b) ? a : b;
}

/*
 * Nothing taken: sleep in the backend until I/O, new work (if we have room
 * for it: registered as a sleeper), the next staggered start, liveness
 * check, corked wait or B4 fallback.
 */
static void loop_sleep(struct coord_eloop *l, const struct coord_eng_round *ro)
{
	struct coord *c = l->e->c;
	uint64_t next = earliest(earliest(ro->next_start, ro->due), ro->cork_until);
	bool reg = false;

	if (l->e->ops->arm && !l->e->ops->arm(l))
		return; /* something came meanwhile */
	if (ro->may_take) {
		/* Relaxed: ordered by coord_loop_sleep()'s RMW and fence;
		 * coord_eng_wake() exchanges it. */
		atomic_store_explicit(&l->armed, true, memory_order_relaxed);
		reg = coord_loop_sleep(l->d);
		if (!reg) {
			/* Relaxed: disarm; a racing wake only costs a spurious
			 * eventfd read. */
			atomic_store_explicit(&l->armed, false, memory_order_relaxed);
			return; /* work arrived: go round */
		}
		next = earliest(next, coord_dispatch_due(l->d)); /* B4: a fallback */
	}
	coord_eng_tok_release(l);
	l->e->ops->wait(l, next);
	if (reg) {
		coord_loop_wake_done(c);
		/* Relaxed: as above. */
		atomic_store_explicit(&l->armed, false, memory_order_relaxed);
	}
}

static void *loop_main(void *arg)
{
	struct coord_eloop *l = arg;
	const struct coord_eng_ops *ops = l->e->ops;
	uint64_t spin_ns = coord_cview(l->e->c)->opts.spin_ns, spin_until = 0;

	coord_eng_tok_wait(l);
	/* Silence is counted from now, not from each connection's open: they
	 * opened one after another, and a slow start is no missed heartbeat. */
	l->read_ns = coord_now_ns();
	for (unsigned i = 0; i < l->place.nconns; i++)
		l->place.conns[i]->last_rx_ns = l->read_ns;
	if (ops->loop_start)
		ops->loop_start(l);
	for (;;) {
		struct coord_eng_round ro;
		bool busy = coord_eng_round(l, &ro, true);

		if (ro.stop)
			break;
		if (ro.took || (busy && ops->spin)) {
			spin_until = coord_now_ns() + spin_ns;
			continue;
		}
		if (ops->spin && coord_now_ns() < spin_until) {
			cpu_relax(); /* busy-poll a little: a result is often close */
			continue;
		}
		loop_sleep(l, &ro);
	}
	coord_eng_finish(l);
	coord_eng_tok_release(l);
	return NULL;
}

int coord_eng_threads(struct coord_eng *e, struct coord_error *err)
{
	for (unsigned i = 0; i < e->nloops; i++) {
		struct coord_eloop *l = coord_eng_loop(e, i);
		int r = -pthread_create(&l->thread, NULL, loop_main, l);

		if (r < 0)
			return coord_seterr(err, r, "cannot start an event loop");
		l->started = true;
	}
	return 0;
}
