// SPDX-License-Identifier: MIT
/*
 * transport/server/srv_take.c - the take-back: a worker gives back,
 * unstarted, the closures queued behind one that runs long on a connection,
 * so that the coordinator places them on a worker that is idle.  Part of
 * the server's protocol engine (srv_proto.c runs the closures and publishes
 * each in the claim word, srv_take.h); the backends only call
 * coord_srv_take_back() from their watcher thread and show it the frames
 * they hold (srv_proto.h io.behind).
 *
 * Why (issue 20, S2 placement).  The coordinator packs closures into a
 * busy worker's window only behind closures of a function known to be
 * short (transport/engine/place.h PL1, PL2, PL6); when one of those runs
 * long after all, what was packed behind it must not wait for it while
 * another worker could run it.  The connection's thread is inside that
 * closure and cannot read a recall, so the worker gives the work back on
 * its own: the backend's watcher thread (tcp: the acceptor's watchdog,
 * tcp_pool.c P6; rdma: the keeper, rdma_server.c Q3), which already ticks
 * while a connection is busy, answers the records behind a closure that
 * has run past COORD_SRV_TAKE_NS "returned, not started" (wire.h
 * COORD_WIRE_RETURNED), and the coordinator puts them back at the front of
 * its queue as they were (coord_dispatch_give_back(): attempt and ids
 * unchanged, not an error, not a put-back), where an idle worker takes
 * them.  Chosen over a recall sent by the coordinator on a control
 * connection of its own (a second socket and thread per worker, and the
 * same claim between the two threads anyway): the worker knows first that
 * a closure runs long, no round trip is spent, and nothing new connects.
 *   T1  Each REQ record of a connection has a number (tb_idx, in the order
 *       records arrive, REQ frames only).  Before it runs a record's
 *       closure the driving thread publishes the rest of the frame
 *       (tb_rest) and then the claim word, number << 3 | TB_RUN (release);
 *       after it, it swaps the word from that value back to 0 (one CAS,
 *       uncontended: the only atomic RMW per closure, no lock, no
 *       allocation).  Closures the engine does not run (cancelled, a
 *       function not here) publish nothing: nothing can wait behind them.
 *   T2  The watcher (coord_srv_take_back(), one thread per connection)
 *       takes a word it saw with TB_RUN and unchanged for TAKE_NS by a CAS
 *       to word | TB_TAKEN (acquire): from then on the driving thread
 *       touches neither the frame nor the connection's input until the
 *       word says TB_DONE.  The watcher answers every REQ record behind the
 *       running one, in number order: the rest of the running frame, then
 *       the whole REQ frames the backend holds behind it (io.behind, which
 *       may read what arrived, never moving the running frame), stopping at
 *       the first record it cannot return (a malformed one, a full answer
 *       frame); one a CANCEL drops (the connection's, or one received
 *       behind) is answered "not started" as the driving thread would
 *       (S3), the others "returned"; it sends the answers (io.send), records the end of the
 *       returned range in tb_end and stores word | TB_DONE (release).
 *       It takes a running closure's word again later (a CAS from
 *       TB_DONE back to TB_TAKEN) for what arrived since: the coordinator
 *       places nothing more behind a connection that returned work until
 *       it answers again (place.h PL7), but it may have held frames placed
 *       before back until the answers came (engine.c "Frames").  Again
 *       after TAKE_NS / 2 when the last take returned some, else after
 *       twice the last wait, at most TB_GAP_MAX.
 *   T3  Exactly one side has each record: the driving thread's CAS of T1
 *       fails once the watcher took the word; it then waits for TB_DONE
 *       and swaps the word to 0 (a CAS, acquire: a second take cannot
 *       slip in between), and skips every record numbered below tb_end, whether
 *       the answers reached the coordinator or not (a connection that
 *       failed mid-send is failed at the coordinator, which puts back what
 *       it did not hear about).  A record never started is returned at most
 *       once; one returned is never started here.
 *   T5  Only for a coordinator that asks for it: one with two workers or
 *       more (with one, nobody else could run what comes back, and it would
 *       run after what the worker still holds: FIFO on one worker is kept),
 *       and that knows the answer "returned" (an older one would fail the
 *       closure).  It says so with a PING of token COORD_WIRE_PING_TAKE_BACK
 *       in its greeting (engine.c hello(); an older worker answers the
 *       PONG and ignores it); until then the driving thread publishes
 *       nothing (no atomic per closure) and nothing is taken.
 *   T4  What is not taken back: a frame not whole yet when the watcher
 *       looks, and what arrives after its last look: they run here after
 *       the long closure.
 *
 * Synchronization: T1-T3 (tb_word: release / acquire as said there;
 * tb_rest, tb_idx, min_gen, cancelled: the driving thread's, read by the
 * watcher only while it holds the take; tb_end, tb_buf: the watcher's while it holds the take,
 * then the driving thread's after TB_DONE; tb_seen, tb_seen_ns, tb_gap: the
 * watcher's alone).
 */
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "transport/server/srv_take.h"

/* T2: the longest wait between two takes of one running closure: what the
 * coordinator sent late (a loaded machine) waits at most this long; a
 * connection running long costs its watcher a look this often. */
#define TB_GAP_MAX 8000000ull
/* The answer frame a take builds: at most this many bytes (the rest of the
 * records behind run here, T4). */
#define TB_FRAME (64u * 1024u)

/* T3: the watcher took record @idx's word: wait until it is done, then
 * skip what it returned.  Rare: once per closure that ran past TAKE_NS. */
void coord_srv_tb_wait(struct coord_srv_conn *k)
{
	for (unsigned i = 1;; i++) {
		/* T2 (relaxed): a look; the CAS below acquires. */
		uint64_t w = atomic_load_explicit(&k->tb_word, memory_order_relaxed);

		/* T2 (acquire): pairs with the watcher's release of TB_DONE:
		 * its answers sent, tb_end and the input it read published.  A
		 * CAS, not a store: the watcher may take the word again (T2). */
		if ((w & TB_DONE) &&
		    atomic_compare_exchange_weak_explicit(&k->tb_word, &w, 0, memory_order_acquire,
							  memory_order_relaxed))
			return;
		if (i < 64)
			coord_spin_pause(i);
		else
			sched_yield();
	}
}

/* A take being made (T2): the answer frame, the number of the next record
 * met and of the first to return (those before were returned by an earlier
 * take of the same closure), the records returned, and whether it stopped
 * (none after a stop is returned: the returned ones stay a range). */
struct tb_take {
	struct coord_wire_writer w;
	uint64_t next, first, n;
	bool stop;
	/* S3: a CANCEL seen (the connection's, or one queued behind) */
	bool cancelled;
	uint32_t min_gen;
};

/* T2: answer the REQ records of @it "returned" until one cannot be. */
static void tb_return_records(struct tb_take *t, struct coord_wire_iter *it)
{
	static const char m[] = "returned unstarted: queued behind a closure that ran long";
	static const char mc[] = "cancelled before it started (S3)";
	struct coord_wire_req q;
	int r;

	while (!t->stop) {
		struct coord_wire_res res = { .code = COORD_ECANCELLED,
					      .cause = COORD_WIRE_RETURNED,
					      .data = m,
					      .len = sizeof(m) };

		r = coord_wire_next_req(it, &q);
		if (r == 0)
			return;
		if (r < 0 || t->w.cap - t->w.len < COORD_WIRE_RES_FIXED + sizeof(m)) {
			t->stop = true; /* malformed (its reader closes), or full (T4) */
			return;
		}
		if (t->next++ < t->first)
			continue; /* returned by an earlier take */
		if (t->cancelled && coord_wire_gen_before(q.gen, t->min_gen)) {
			/* S3: what the driving thread would answer (wire.h CANCEL) */
			res.cause = COORD_ECANCELLED;
			res.data = mc;
			res.len = sizeof(mc);
		}
		res.closure_id = q.closure_id;
		res.attempt = q.attempt;
		coord_wire_put_res(&t->w, &res);
		t->n++;
	}
}

/* T2 (io.behind's visit, first pass): a CANCEL behind the running closure
 * applies to every record (wire.h CANCEL). */
static void tb_visit_cancel(void *arg, const struct coord_wire_hdr *h, const uint8_t *payload)
{
	struct tb_take *t = arg;
	uint32_t gen;

	if (h->type == COORD_WIRE_CANCEL && payload &&
	    coord_wire_get_cancel(h, payload, &gen) == 0 &&
	    (!t->cancelled || coord_wire_gen_before(t->min_gen, gen))) {
		t->cancelled = true;
		t->min_gen = gen;
	}
}

/* T2 (io.behind's visit): a whole frame behind the running one. */
static void tb_visit(void *arg, const struct coord_wire_hdr *h, const uint8_t *payload)
{
	struct tb_take *t = arg;
	struct coord_wire_iter it;

	if (h->type != COORD_WIRE_REQ || t->stop)
		return; /* served in order after the long closure */
	if (!payload) { /* one the backend could not show (rdma: too large) */
		t->stop = true;
		return;
	}
	coord_wire_iter_init(&it, h, payload);
	tb_return_records(t, &it);
}

unsigned coord_srv_take_back(struct coord_srv_conn *k, uint64_t now)
{
	/* T2 (relaxed): a look; the CAS below acquires. */
	uint64_t w = atomic_load_explicit(&k->tb_word, memory_order_relaxed);
	uint64_t run = w & ~(TB_TAKEN | TB_DONE), idx = run >> TB_SHIFT;
	struct tb_take t = { .next = idx + 1, .first = idx + 1 };
	struct coord_wire_iter rest;

	if (!(w & TB_RUN) || ((w & TB_TAKEN) && !(w & TB_DONE)) || !k->io.behind)
		return 0;
	if (run != k->tb_seen) { /* a closure we had not seen running */
		k->tb_seen = run;
		k->tb_seen_ns = now;
		k->tb_gap = COORD_SRV_TAKE_NS;
		return 0;
	}
	if (now - k->tb_seen_ns < k->tb_gap)
		return 0;
	/* T2 (acquire): pairs with tb_run()'s release (and, taken again, with
	 * nothing: the driving thread has not touched the input since): tb_rest
	 * and the input it left are ours to read until TB_DONE. */
	if (!atomic_compare_exchange_strong_explicit(&k->tb_word, &w, run | TB_TAKEN,
						     memory_order_acquire, memory_order_relaxed))
		return 0; /* it ended meanwhile */
	if (w & TB_TAKEN) /* taken before: what came since (T2) */
		t.first = k->tb_end;
	if (!k->tb_buf)
		k->tb_buf = malloc(TB_FRAME);
	if (k->tb_buf) {
		coord_wire_writer_init(&t.w, k->tb_buf, TB_FRAME);
		coord_wire_begin(&t.w, COORD_WIRE_RES);
		/* S3: a record a CANCEL drops is answered "not started", as
		 * the driving thread would (the coordinator cancels both). */
		t.cancelled = k->cancelled;
		t.min_gen = k->min_gen;
		k->io.behind(k->io.ctx, tb_visit_cancel, &t);
		rest = k->tb_rest;
		tb_return_records(&t, &rest);
		k->io.behind(k->io.ctx, tb_visit, &t);
	}
	if (t.n) {
		coord_wire_end(&t.w);
		/* T3: whatever the send's fate, these never start here. */
		(void)k->io.send(k->io.ctx, t.w.buf, t.w.len);
		coord_log(COORD_LOG_DEBUG, "%s: returned %llu closures queued behind a long one",
			  k->peer, (unsigned long long)t.n);
	}
	k->tb_end = t.first + t.n;
	/* T2: look again soon after a take that returned some (the
	 * coordinator may have held more frames back until these answers,
	 * engine.c "Frames"), less and less often after one that did not. */
	k->tb_seen_ns = now;
	k->tb_gap = t.n			     ? COORD_SRV_TAKE_NS / 2
		    : k->tb_gap < TB_GAP_MAX ? 2 * k->tb_gap
					     : TB_GAP_MAX;
	/* T2 (release): pairs with tb_wait()'s acquire: the answers sent,
	 * tb_end and what io.behind read before the driving thread goes on. */
	atomic_store_explicit(&k->tb_word, run | TB_TAKEN | TB_DONE, memory_order_release);
	return (unsigned)t.n;
}

void coord_srv_take_fini(struct coord_srv_conn *k)
{
	free(k->tb_buf);
	k->tb_buf = NULL;
}
