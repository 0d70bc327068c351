// SPDX-License-Identifier: MIT
/*
 * transport/rdma/rdma.c - the rdma transport, coordinator side: workers are
 * coord-worker processes serving rdma (the spec's "worker" job addresses,
 * each on an RDMA device), one RC queue pair each (transport/rdma/rdma_chan.h).
 *
 * The design is tcp.c's, with channels in place of sockets and epoll in
 * place of io_uring (completions come through each channel's completion
 * channel fd and rdma_cm fd, which epoll watches):
 *   1. a few event loops (opts.tcp_loops, default: conn.c), each a
 *      dispatcher owning a share of the connections;
 *   2. a loop takes up to min(batch, credit) closures (credit: free
 *      in-flight slots, opts.window per connection), blocking on the queue's
 *      futex only when nothing is in flight; spreads them over its
 *      connections (least loaded first), encodes one REQ frame per
 *      connection into its output buffer and posts it: one chain of SENDs
 *      per connection per round (coord_rdma_chan_send_some(); what credits
 *      do not allow now goes out on a later round);
 *   3. reaps: every channel's completions, then its whole RES frames, read
 *      in place from the receive buffers (zero copy for frames within one
 *      buffer), whose results complete the RemoteValues; one
 *      coord_dispatch_finish() for all;
 *   4. with nothing to do, arms every channel and sleeps in epoll_wait()
 *      (registered in loop_sleepers: schedule() wakes it through an
 *      eventfd).
 * In flight: (slot, sequence) closure ids, checked against the attempt, as
 * over tcp.  Only the loop (its tok's holder, D1) touches its connections:
 * no locks, and no atomics on that state.
 *
 * Failure, as over tcp (tcp.c's header): a closed or broken channel, a bad
 * frame, heartbeat_misses heartbeat intervals of silence (a PING goes out
 * after one interval; the worker answers, or keeps a busy connection alive
 * with unsolicited PONGs, rdma_server.c P5), or a closure in flight past
 * opts.closure_timeout_ms (B6) fail the connection: the closures in flight
 * on it go back on the queue at once (attempt + 1, S2), the channel is shut
 * down (the worker sees the disconnection), its worker is handed to the
 * recovery thread (coord_worker_lost()), and the others go on (B2).
 *
 * Reconnection.  The recovery thread dials the worker again on its attempt
 * thread (conn_dial(): rdma_cm connect, handshake, tables, PING) and queues
 * the new channel on the loop's admission list; the loop installs it
 * (admit()) at the start of its next round.  Unlike a socket, a failed
 * channel has no completions in flight that the loop could still reap: it
 * left the epoll set when it failed, and only the loop touches it, so the
 * loop destroys it right there and the new one takes its place.
 *
 * Driving.  A thread waiting for a result (rv_wait(): a fetch) runs the
 * loop's rounds itself while the loop's thread sleeps, instead of waiting
 * for that thread to wake on the completion and then wake it in turn: the
 * reply is reaped by the thread that wants it, as a verbs ping-pong does.
 * With one closure at a time this takes the loop's thread off the round
 * trip's path (in the rig, where every wake-up costs hundreds of
 * microseconds, that was most of the round trip).
 *   D1  Whoever runs a round holds the loop's tok (TOK_HELD): the loop's
 *       thread while it is awake, a driver while it drives.  The loop's
 *       state (L1) is the tok holder's; tok's acquire/release hands it on.
 *   D2  A driver runs rounds until a closure finishes or its spin ends.
 *       While closures are out, a waiter spins (driving whenever the
 *       loop's thread sleeps) for up to twice the recent time from a
 *       closure's send to its result (rt_ns, DRIVE_MAX_NS at most), not
 *       just opts.spin_ns: else, with results slower than the loop's own
 *       spin, the loop would sleep, the waiter park, and the result need
 *       two wake-ups again.
 *   D3  A driver leaves the loop as its thread would go to sleep: every
 *       channel armed if closures or PINGs are out, after reaping what
 *       came meanwhile (coord_rdma_chan_arm() drains the old events).
 *   D4  The sleeping thread, woken by completions only while a driver
 *       holds the tok, sleeps again (the CQ fds are edge-triggered): the
 *       driver reaps them.  Woken by anything else (the eventfd, a
 *       connection event, its timeout), it waits for the tok (TOK_WANT, a
 *       futex), and the driver's release wakes it.
 *   D5  A user's schedule() that finds a loop asleep sends the closure
 *       itself (one round, under the tok) instead of waking the loop's
 *       thread, and wakes it only if something is left queued.  Only from
 *       schedule() itself (coord_wake_in_schedule()), never from a wake
 *       inside a round (tl_driving): a round may push (put-backs, B1
 *       dependents), and must not run another loop's round inside it.
 *   D6  Such a schedule() leaves the CQs unarmed (not as D3) and sets the
 *       loop's timer (tfd, in its epoll set) to twice the recent round
 *       trip (TIMER_MIN_NS..DRIVE_MAX_NS), unless it is set already: the
 *       fetch that usually follows drives (D2) and reaps the result, and
 *       any driver that leaves stops the timer (after arming the CQs if
 *       closures are still out, D3).  An armed CQ would wake the sleeping
 *       thread on the result only to find the tok held (D4): in the rig,
 *       0.7 context switches per round trip.  If nobody drives in time
 *       (the caller fetches late, or only joins), the timer wakes the
 *       thread, which takes the tok as for any other event and reaps.
 *       tpend is the tok holder's; a thread that goes to sleep arms every
 *       CQ and stops the timer.
 *
 *   L1  A connection's channel, buffers and slots belong to its loop; the
 *       recovery thread touches only the admission list (admit_lock) and
 *       the new channel it made, which it hands over with the list.
 *   L2  Every closure in a slot of a connection that fails is put back
 *       exactly once (conn_fail() empties the slots before anything else
 *       may refill them: the connection is down until admit()).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "runtime/core/internal.h"
#include "runtime/ps/ps.h"
#include "transport/engine/conn.h"
#include "transport/engine/place.h"
#include "transport/rdma/rdma_chan.h"

#define DRIVE_MAX_NS 2000000ull /* a waiter's spin, at most, while results are due (D2) */
#define TIMER_MIN_NS 100000ull	/* D6's timer, at least */

struct rdma_loop;

struct rdma_conn {
	COORD_CONN_EMBED; /* slots, output, liveness (conn.h); idle: counted in rdma_tp.idle */
	struct rdma_loop *loop;
	struct coord_rdma_chan *ch;
	size_t ooff; /* bytes [ooff, ow.len) of obuf are not posted yet */
	/* re-admission (L1): on its loop's admission list with a new channel */
	struct rdma_conn *admit_next;
	struct coord_rdma_chan *admit_ch;
};

struct rdma_loop {
	struct coord_dispatcher *d;
	struct rdma_tp *t;
	pthread_t thread;
	bool started;
	int epfd, efd;
	int tfd;    /* D6: a timerfd in epfd, for what a schedule() sent */
	bool tpend; /* D6: tfd is set (the tok holder's, D1) */
	struct rdma_conn **conns;
	unsigned nconns;
	struct coord_place place; /* over this loop's connections (place.h) */
	_Atomic bool armed;	  /* asleep in epoll; the next schedule writes efd */
	_Atomic uint32_t tok;	  /* D1: TOK_HELD by whoever runs rounds; TOK_WANT */
	uint64_t inflight;	  /* taken by this loop and not yet finished */
	uint64_t finished;	  /* closures finished, ever (a driver's progress) */
	uint64_t rt_ns;		  /* moving average: a closure's send to its result */
	struct coord_closure **batch, **done;
	unsigned ndone, done_cap;
	/* Re-admission of reconnected workers (the recovery thread pushes,
	 * the loop installs; L1): off the fast path, so a mutex. */
	pthread_mutex_t admit_lock;
	bool admit_lock_init;
	struct rdma_conn *admit;
	_Atomic bool admit_pending;
	uint64_t next_check_ns; /* heartbeats and closure deadlines */
	uint32_t cancel_gen;	/* S3: the generation our last CANCEL carried */
	/* when a round last took in what had arrived (coord_conn_check()) */
	uint64_t read_ns;
};

struct rdma_tp {
	struct coord *c;
	struct coord_key key;
	struct coord_rdma_opts copts;
	struct rdma_conn *conns;
	struct rdma_loop *loops;
	unsigned nloops;
	_Atomic unsigned up;
	_Atomic int idle;	  /* connections up with nothing in flight, all loops */
	_Atomic uint64_t rt_hint; /* the loops' rt_ns, for waiters (D2) */
};

/* ---- failure ---------------------------------------------------------------------- */

static void conn_fail(struct rdma_conn *k, const char *why)
{
	struct rdma_loop *l = k->loop;
	struct coord *c = l->t->c;
	unsigned total;

	if (!k->up)
		return;
	k->up = false;
	coord_place_down(&l->place, &k->conn);
	/* L2: every closure in flight here goes back once (S2, attempt + 1). */
	total = coord_conn_put_back_all(&k->conn, l->d);
	l->inflight -= total;
	/* A closed channel's fds may stay readable: out of the epoll set; and
	 * disconnect now, so a worker that is still alive (a missed heartbeat,
	 * a closure past its deadline) drops its side.  Destroyed by admit()
	 * or at stop (L1). */
	if (k->ch) {
		int cq_fd, cm_fd;

		coord_rdma_chan_fds(k->ch, &cq_fd, &cm_fd);
		epoll_ctl(l->epfd, EPOLL_CTL_DEL, cq_fd, NULL);
		epoll_ctl(l->epfd, EPOLL_CTL_DEL, cm_fd, NULL);
		coord_rdma_chan_shutdown(k->ch);
	}
	coord_wire_writer_init(&k->ow, k->obuf, k->ocap);
	k->ooff = 0;
	/* Relaxed: a count of live connections (logs). */
	atomic_fetch_sub_explicit(&l->t->up, 1, memory_order_relaxed);
	{
		char msg[COORD_ERRMSG_LEN];

		snprintf(msg, sizeof(msg), "%s (%s, rdma); %u closures put back", why, k->peer,
			 total);
		/* S10: the recovery thread brings it back, or drops it and,
		 * when none is left, reports UNAVAILABLE (runtime/core/recovery.c). */
		coord_worker_lost(c, k->w, msg);
	}
}

/* ---- results ---------------------------------------------------------------------- */

static void finish_done(struct rdma_loop *l)
{
	if (!l->ndone)
		return;
	coord_dispatch_finish(l->d, NULL, l->done, l->ndone);
	l->inflight -= l->ndone;
	l->finished += l->ndone;
	l->ndone = 0;
}

static int on_res_frame(struct rdma_conn *k, const struct coord_wire_hdr *h, const uint8_t *payload)
{
	struct rdma_loop *l = k->loop;
	struct coord_wire_iter it;
	struct coord_wire_res r;
	uint32_t slot;
	int rc;

	bool sampled = false;

	coord_wire_iter_init(&it, h, payload);
	while ((rc = coord_wire_next_res(&it, &r)) == 1) {
		struct coord_closure *cl = coord_conn_res_claim(&k->conn, &r, &slot, &rc);

		if (!cl)
			return rc;
		if (!sampled && k->last_rx_ns > k->sent_ns[slot]) { /* D2: one a frame */
			uint64_t ns = k->last_rx_ns - k->sent_ns[slot];

			sampled = true;
			/* over about 8 frames, a sample counting as at most
			 * DRIVE_MAX_NS (4 x its max/4) */
			l->rt_ns = coord_spin_avg(l->rt_ns, ns, DRIVE_MAX_NS / 4);
			/* Relaxed: a hint for waiters' spin (D2). */
			atomic_store_explicit(&l->t->rt_hint, l->rt_ns, memory_order_relaxed);
		}
		coord_place_result(&l->place, &k->conn, cl->fn, slot, coord_wire_run_ns(&r));
		if (!coord_conn_res_finish(&k->conn, l->d, cl, &r)) {
			l->inflight--; /* put back (S11) */
			continue;
		}
		l->done[l->ndone++] = cl;
		if (l->ndone == l->done_cap)
			finish_done(l);
	}
	return rc;
}

/* Post what @k's output buffer holds, as far as credits allow. */
static void flush_out(struct rdma_conn *k)
{
	size_t sent = 0;

	if (!k->up || k->ow.len == 0)
		return;
	if (k->ow.frame != SIZE_MAX)
		coord_wire_end(&k->ow);
	if (coord_rdma_chan_send_some(k->ch, k->obuf + k->ooff, k->ow.len - k->ooff, &sent) < 0) {
		conn_fail(k, "the channel closed");
		return;
	}
	k->ooff += sent;
	if (k->ooff == k->ow.len) {
		coord_wire_writer_init(&k->ow, k->obuf, k->ocap);
		k->ooff = 0;
	}
}

/* Reap @k's completions and every whole frame it holds; true if any came. */
static bool conn_reap(struct rdma_conn *k)
{
	struct coord_wire_hdr h;
	const uint8_t *payload;
	bool got = false;
	int r = 0;

	if (!k->up)
		return false;
	if (coord_rdma_chan_progress_fast(k->ch) < 0 && !coord_rdma_chan_readable(k->ch)) {
		conn_fail(k, "connection closed by the worker");
		return true;
	}
	/* Bounded: at most one window of frames per round, then the others' turn. */
	for (unsigned i = 0; i <= k->window; i++) {
		r = coord_rdma_chan_read(k->ch, 0, 0, &h, &payload);
		if (r == -ETIMEDOUT) {
			r = 0;
			break;
		}
		if (r < 0)
			break;
		got = true;
		k->last_rx_ns = coord_now_ns(); /* alive (heartbeats) */
		k->ping_ns = 0;
		if (h.type == COORD_WIRE_RES) {
			r = on_res_frame(k, &h, payload);
		} else if (h.type == COORD_WIRE_ERROR) {
			int32_t code;
			const char *m = "";
			uint16_t len = 0;
			char why[200];

			coord_wire_get_error(&h, payload, &code, &m, &len);
			snprintf(why, sizeof(why), "the worker closed: %.*s", (int)len, m);
			conn_fail(k, why);
			return true;
		} else if (h.type != COORD_WIRE_PONG) {
			r = -EPROTO;
		}
		if (r < 0)
			break;
	}
	if (r < 0) {
		char why[160];

		snprintf(why, sizeof(why), "%s",
			 r == -EPIPE ? "connection closed by the worker"
			 : r == -EBADSLT
				 ? "bad frame from the worker (a result for no closure sent)"
				 : strerror(-r));
		conn_fail(k, why);
		return true;
	}
	flush_out(k); /* credits may have come back */
	return got;
}

/* ---- requests --------------------------------------------------------------------- */

/* Add @cl to @k's output; false if it cannot be sent (too large). */
static bool enqueue_req(struct rdma_conn *k, struct coord_closure *cl, uint64_t now)
{
	uint32_t slot;

	if (coord_conn_put_req(&k->conn, cl, now, k->loop->t->c->opts.max_frame, &slot) < 0)
		return false;
	coord_place_sent(&k->loop->place, &k->conn, cl, slot, now);
	return true;
}

/* Send @cl on the channel its take aimed it at (B4), or where pick() says. */
static void place(struct rdma_loop *l, struct coord_closure *cl, uint64_t now)
{
	struct coord *c = l->t->c;
	struct rdma_conn *k;

	if (coord_dispatch_stale(c, cl)) {
		coord_dispatch_cancel(l->d, cl); /* S3: not started */
		l->inflight--;
		return;
	}
	k = coord_closure_target(cl) < 0
		    ? (struct rdma_conn *)coord_place_pick(&l->place, now) /* place.h PL1 */
		    : &l->t->conns[coord_closure_target(cl)];		   /* B4 */
	if (!k || !k->up || !k->nfree) {
		coord_dispatch_put_back(l->d, &cl, 1);
		l->inflight--;
		return;
	}
	if (!enqueue_req(k, cl, now)) {
		coord_dispatch_complete(l->d, cl, k->w->index, -EMSGSIZE, 0,
					"arguments too large for one frame");
		l->done[l->ndone++] = cl;
		if (l->ndone == l->done_cap)
			finish_done(l);
	}
}

/* ---- per-worker resources released (S9, runtime/pw.c) ---------------------------- */

static struct coord_conn *conn_at(void *l, unsigned i)
{
	return &((struct rdma_loop *)l)->conns[i]->conn;
}

static void pw_flush(struct coord_conn *k)
{
	flush_out((struct rdma_conn *)k); /* the connection is our first member */
}

/* PW_FREE frames to our workers for the resources released to us. */
static void pw_release(struct rdma_loop *l)
{
	if (coord_dispatch_pw_pending(l->d))
		coord_conn_pw_release(l->d, conn_at, l, l->nconns, pw_flush);
}

/* S3: CANCEL frames to our workers when the generation moved (conn.h). */
static void cancel_send(struct rdma_loop *l)
{
	coord_conn_cancel(l->d, &l->cancel_gen, conn_at, l, l->nconns, pw_flush);
}

static void dispatch(struct rdma_loop *l, unsigned n)
{
	uint64_t now = coord_now_ns();
	unsigned m = 0;

	pw_release(l); /* S9: before these REQs (runtime/pw.c P3) */
	l->inflight += n;
	/* B4: targeted closures first, as in transport/tcp/tcp.c dispatch(). */
	for (unsigned i = 0; i < n; i++)
		if (coord_closure_target(l->batch[i]) < 0)
			l->batch[m++] = l->batch[i];
		else
			place(l, l->batch[i], now);
	for (unsigned i = 0; i < m; i++)
		place(l, l->batch[i], now);
}

/* ---- liveness and re-admission ---------------------------------------------------- */

/* Append a PING (token: our heartbeat interval) to @k's output and post it. */
static void send_ping(struct rdma_conn *k, uint64_t token)
{
	if (k->ow.frame != SIZE_MAX)
		coord_wire_end(&k->ow);
	if (k->ow.cap - k->ow.len < COORD_WIRE_HDR + 8)
		return; /* output full: traffic is flowing anyway */
	coord_wire_put_ping(&k->ow, COORD_WIRE_PING, token);
	flush_out(k);
}

/* The liveness check's actions on our connections (conn.h); the
 * connection is the first member of ours. */
static void act_fail(struct coord_conn *k, const char *why)
{
	conn_fail((struct rdma_conn *)k, why);
}

static void act_ping(struct coord_conn *k, uint64_t token)
{
	send_ping((struct rdma_conn *)k, token);
}

static const struct coord_conn_act conn_act = { .fail = act_fail, .ping = act_ping };
_Static_assert(offsetof(struct rdma_conn, conn) == 0, "the casts above");

/*
 * Liveness of @l's connections, as tcp.c's check_conns(): ping a connection
 * silent for a heartbeat interval; fail one silent for heartbeat_misses
 * intervals (a stopped or partitioned machine, a peer whose QP is gone), or
 * one whose oldest closure has run past opts.closure_timeout_ms (B6).
 * All as of the loop's last read (read_ns, conn.h).  Rate-limited; returns
 * the next due time (0: no checks).
 */
static uint64_t check_conns(struct rdma_loop *l, uint64_t now)
{
	const struct coord_opts *o = &l->t->c->opts;
	uint64_t period = coord_conn_check_due(o, now, &l->next_check_ns);

	for (unsigned i = 0; period && i < l->nconns; i++)
		coord_conn_check(&l->conns[i]->conn, o, now, l->read_ns, period, &conn_act);
	return l->next_check_ns;
}

/* Loop thread: install the channels the recovery thread made (L1); their
 * fds are in our epoll set already (rdma_reconnect()). */
static void admit(struct rdma_loop *l)
{
	struct rdma_conn *list, *k;
	bool installed = false;

	/* Relaxed: a cheap look every round; the exchange below orders. */
	if (!atomic_load_explicit(&l->admit_pending, memory_order_relaxed))
		return;
	/* Acquire: pairs with rdma_reconnect()'s release: the new channel
	 * and the list it made happen-before our use of them (L1). */
	if (!atomic_exchange_explicit(&l->admit_pending, false, memory_order_acquire))
		return;
	pthread_mutex_lock(&l->admit_lock);
	list = l->admit;
	l->admit = NULL;
	pthread_mutex_unlock(&l->admit_lock);
	while ((k = list)) {
		list = k->admit_next;
		k->admit_next = NULL;
		if (k->up) { /* cannot happen (R1: one attempt while DOWN); be safe */
			coord_rdma_chan_destroy(k->admit_ch);
			k->admit_ch = NULL;
			continue;
		}
		coord_rdma_chan_destroy(k->ch); /* failed: out of epoll, shut down */
		k->ch = k->admit_ch;
		k->admit_ch = NULL;
		coord_wire_writer_init(&k->ow, k->obuf, k->ocap);
		k->ooff = 0;
		k->last_rx_ns = coord_now_ns();
		k->ping_ns = 0;
		k->up = true;
		coord_place_up(&l->place, &k->conn);
		/* Relaxed: a count of live connections (logs). */
		atomic_fetch_add_explicit(&l->t->up, 1, memory_order_relaxed);
		coord_log(COORD_LOG_INFO, "worker %d (%s) connected again over rdma", k->w->index,
			  k->peer);
		installed = true;
	}
	/* B4 (sched.c H2): closures bound to these workers may go now (see
	 * transport/tcp/tcp.c admit() for why the recovery thread's word is not
	 * enough). */
	if (installed)
		coord_hq_worker_up(l->t->c);
}

/* ---- the loop --------------------------------------------------------------------- */

/* Arm every channel; false if one has work already (do not sleep). */
static bool arm_all(struct rdma_loop *l)
{
	for (unsigned i = 0; i < l->nconns; i++) {
		struct rdma_conn *k = l->conns[i];

		if (k->up && coord_rdma_chan_arm(k->ch) != 0)
			return false;
	}
	return true;
}

/* What one round saw, for the sleep that may follow it. */
struct round {
	uint64_t now, next_start, due;
	unsigned took; /* closures taken from the queue */
	bool may_take, stop;
};

/*
 * One round of @l's work by the holder of its tok (D1): install reconnected
 * workers, check liveness, take and send what credit allows, reap every
 * channel.  @thread: the loop's own thread, which may block on the queue.
 * True if anything was sent or received.
 */
static bool loop_round(struct rdma_loop *l, struct round *ro, bool thread)
{
	struct coord *c = l->t->c;
	bool has_idle, has_down = false, got = false;
	unsigned cr, n = 0;
	int idle;

	ro->took = 0;
	admit(l);
	pw_release(l);
	cancel_send(l);
	ro->now = coord_now_ns();
	ro->due = check_conns(l, ro->now);
	/* has_down: a worker being recovered: its admission is ours to do
	 * (admit()), so do not sleep on the queue's futex meanwhile (B4:
	 * closures bound to it wait for that; tcp.c does the same). */
	cr = coord_place_credit(&l->place, ro->now, &ro->next_start, &has_idle, &has_down);
	/* Relaxed: a placement hint (rdma_tp.idle), read once per round. */
	idle = atomic_load_explicit(&l->t->idle, memory_order_relaxed);
	ro->may_take = cr > 0 && (has_idle || coord_queue_size(c) > (uint64_t)idle);
	/* Relaxed: stop is also signalled through the eventfd and not_empty. */
	ro->stop = atomic_load_explicit(&c->stopping, memory_order_relaxed);
	if (ro->stop)
		return false;
	if (ro->may_take) {
		unsigned max = cr < c->opts.batch ? cr : c->opts.batch;

		/* Block on the queue only with nothing in flight and no
		 * liveness check or staggered start due. */
		n = thread && l->inflight == 0 && !ro->next_start && !ro->due && !has_down
			    ? coord_dispatch_take(l->d, l->batch, max)
			    : coord_dispatch_try_take(l->d, l->batch, max);
		ro->took = n;
		/* Relaxed: a blocking take returns 0 only when stopping. */
		if (!n && atomic_load_explicit(&c->stopping, memory_order_relaxed)) {
			ro->stop = true;
			return false;
		}
		if (n)
			dispatch(l, n);
		for (unsigned i = 0; n && i < l->nconns; i++)
			flush_out(l->conns[i]);
	}
	for (unsigned i = 0; i < l->nconns; i++)
		got |= conn_reap(l->conns[i]);
	l->read_ns = ro->now; /* what came before ro->now is read (conn.h) */
	finish_done(l);
	return n || got;
}

/* ---- driving (D1-D4) ---------------------------------------------------------------- */

#define TOK_HELD 1u
#define TOK_WANT 2u

/* Take @l's tok if nobody holds it. */
static bool tok_try(struct rdma_loop *l)
{
	uint32_t v = 0;

	/* Acquire: pairs with tok_release(): the connections as the last
	 * holder left them (D1). */
	return atomic_compare_exchange_strong_explicit(&l->tok, &v, TOK_HELD, memory_order_acquire,
						       memory_order_relaxed);
}

/* Let go of @l's tok; the loop's thread, if it waits for it, goes on (D4). */
static void tok_release(struct rdma_loop *l)
{
	/* Release: pairs with tok_try()/tok_wait() (D1). */
	uint32_t v = atomic_exchange_explicit(&l->tok, 0, memory_order_release);

	if (v & TOK_WANT)
		coord_futex_wake_all(&l->tok);
}

/* The loop's thread: wait until the driver lets go, and take the tok (D4). */
static void tok_wait(struct rdma_loop *l)
{
	while (!tok_try(l)) {
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

/* D6: @l's timer, relative @ns from now (0: stop it); the tok holder's. */
static void timer_set(struct rdma_loop *l, uint64_t ns)
{
	struct itimerspec its = { .it_value = { .tv_sec = (time_t)(ns / 1000000000u),
						.tv_nsec = (long)(ns % 1000000000u) } };

	if (timerfd_settime(l->tfd, 0, &its, NULL) == 0)
		l->tpend = ns != 0;
}

/*
 * D3: a driver leaves as the loop's thread would go to sleep: the CQs
 * armed while closures (or a PING) are out, so that their completions wake
 * the thread; a completion that is already there is reaped first.  D6: a
 * schedule() that sent (@sent, D5) sets the loop's timer instead, unless
 * it is set already; any other driver stops it (the CQs armed, or nothing
 * out).
 */
static void drive_leave(struct rdma_loop *l, bool sent)
{
	struct round ro;
	bool out = l->inflight > 0;

	for (unsigned i = 0; !out && i < l->nconns; i++)
		out = l->conns[i]->up && l->conns[i]->ping_ns;
	if (out && sent) {
		uint64_t ns = 2 * l->rt_ns;

		if (!l->tpend)
			timer_set(l, ns < TIMER_MIN_NS	 ? TIMER_MIN_NS
				     : ns > DRIVE_MAX_NS ? DRIVE_MAX_NS
							 : ns);
		if (l->tpend) {
			tok_release(l);
			return;
		}
	}
	for (unsigned i = 0; out && i < 4 && !arm_all(l); i++)
		loop_round(l, &ro, false);
	if (l->tpend)
		timer_set(l, 0);
	tok_release(l);
}

/* The thread runs a round of some loop now (a driver): a wake it causes
 * must not drive another one from inside this one (D5). */
static __thread bool tl_driving;

static bool rdma_drive(struct coord *c, uint64_t since, uint64_t *until)
{
	struct rdma_tp *t = c->tp_state;
	bool drove = false;

	/* Relaxed: a stopping coordinator's loops finish alone. */
	if (!t || tl_driving || atomic_load_explicit(&c->stopping, memory_order_relaxed))
		return false;
	/* D2, relaxed: hints.  Closures are out while some connection up is
	 * not idle; then spin as long as results have recently taken. */
	if (atomic_load_explicit(&t->idle, memory_order_relaxed) <
	    (int)atomic_load_explicit(&t->up, memory_order_relaxed)) {
		uint64_t rt = atomic_load_explicit(&t->rt_hint, memory_order_relaxed);
		uint64_t ext = 2 * rt < DRIVE_MAX_NS ? 2 * rt : DRIVE_MAX_NS;

		if (since + ext > *until)
			*until = since + ext;
	}
	for (unsigned i = 0; i < t->nloops; i++) {
		struct rdma_loop *l = &t->loops[i];
		uint64_t fin, now = coord_now_ns();
		struct round ro;

		if (!tok_try(l))
			continue;
		drove = true;
		tl_driving = true;
		fin = l->finished;
		while (l->finished == fin && now < *until) {
			loop_round(l, &ro, false);
			if (ro.stop)
				break;
			if (!l->inflight && l->finished == fin)
				break; /* nothing of ours here */
			now = coord_now_ns();
		}
		drive_leave(l, false);
		tl_driving = false;
	}
	return drove;
}

/*
 * Nothing to do: sleep in epoll until a completion, new work (if we have
 * room for it), a re-admission (the eventfd), the next staggered start or
 * the next liveness check.  Waiters may drive meanwhile (D1); we take the
 * tok back when we wake, unless only completions woke us while a driver
 * reaps them (D4).
 */
static void loop_sleep(struct rdma_loop *l, const struct round *ro)
{
	struct coord *c = l->t->c;
	uint64_t next = ro->next_start;
	struct epoll_event ev[16];
	bool reg = false, timer = false;
	int ms = -1, m;

	if (!arm_all(l))
		return;
	if (l->tpend)
		timer_set(l, 0); /* D6: the CQs are armed now */
	if (ro->may_take) {
		/* Relaxed: ordered by coord_loop_sleep()'s RMW and fence;
		 * rdma_wake() exchanges it. */
		atomic_store_explicit(&l->armed, true, memory_order_relaxed);
		reg = coord_loop_sleep(l->d);
		if (!reg) {
			/* Relaxed: disarm; a racing wake only costs a spurious
			 * eventfd read. */
			atomic_store_explicit(&l->armed, false, memory_order_relaxed);
			return; /* work arrived: go round */
		}
	}
	if (ro->due && (!next || ro->due < next))
		next = ro->due;
	if (ro->may_take && coord_dispatch_due(l->d) && (!next || coord_dispatch_due(l->d) < next))
		next = coord_dispatch_due(l->d); /* B4: a fallback */
	tok_release(l);
	for (;;) {
		uint64_t now = coord_now_ns();
		bool other = false;

		if (next)
			ms = next > now ? (int)((next - now) / 1000000 + 1) : 0;
		m = epoll_wait(l->epfd, ev, 16, ms);
		for (int i = 0; i < m; i++) {
			if (ev[i].data.ptr == l) {
				uint64_t v;

				(void)!read(l->efd, &v, sizeof(v));
				other = true;
			} else if (ev[i].data.ptr == &l->tfd) {
				uint64_t v;

				/* D6: a schedule() sent and nobody reaped in time:
				 * ours, once a driver (if any) lets go. */
				(void)!read(l->tfd, &v, sizeof(v));
				other = timer = true;
			} else if ((uintptr_t)ev[i].data.ptr & 1) {
				other = true; /* a connection event */
			}
		}
		if (tok_try(l))
			break;
		if (other || m <= 0) {
			tok_wait(l); /* D4: ours to look at once the driver is done */
			break;
		}
		/* D4: completions only, and a driver holds the tok: it reaps
		 * them, and arms the CQs again before it leaves if closures are
		 * still out (D3).  The CQ fds are edge-triggered, so this does
		 * not spin. */
	}
	if (timer)
		l->tpend = false; /* read: it fired; the tok is ours now */
	if (reg) {
		coord_loop_wake_done(c);
		/* Relaxed: as above. */
		atomic_store_explicit(&l->armed, false, memory_order_relaxed);
	}
}

static void *loop_main(void *arg)
{
	struct rdma_loop *l = arg;
	struct coord *c = l->t->c;
	uint64_t spin_until = 0;

	tok_wait(l); /* D1: the round's state is the tok holder's */
	/* Silence is counted from now, not from each connection's open: the
	 * connections opened one after another, and a slow start (many
	 * workers, a slow handshake) must not count as missed heartbeats. */
	l->read_ns = coord_now_ns();
	for (unsigned i = 0; i < l->nconns; i++)
		l->conns[i]->last_rx_ns = l->read_ns;
	for (;;) {
		struct round ro;

		if (loop_round(l, &ro, true)) {
			spin_until = coord_now_ns() + c->opts.spin_ns;
			continue;
		}
		if (ro.stop)
			break;
		if (coord_now_ns() < spin_until) {
			cpu_relax(); /* busy-poll a little: a result is often close */
			continue;
		}
		loop_sleep(l, &ro);
	}
	finish_done(l);
	tok_release(l);
	return NULL;
}

/* ---- set-up and tear-down --------------------------------------------------------- */

/*
 * Connect to @k's worker (k->peer), run the handshake and send what a
 * worker needs first: the function table, the ps tasks' addresses, and a
 * PING whose token is our heartbeat interval (so it keeps a busy connection
 * alive, rdma_server.c P5).  Used at start and by the recovery thread's
 * attempt (reads only what never changes after start); *@out on success,
 * owned by the caller.
 */
static int conn_dial(struct rdma_tp *t, struct rdma_conn *k, struct coord_rdma_chan **out,
		     struct coord_error *err)
{
	struct coord *c = t->c;
	struct coord_rdma_chan *ch = NULL;
	struct coord_frame_io io;
	const char *addr = k->peer;
	uint8_t *fb;
	size_t fcap = 64;
	struct coord_wire_writer fw;
	int r;

	*out = NULL;
	r = coord_rdma_connect(addr, &t->copts, c->opts.connect_timeout_ms, &ch, err);
	if (r < 0)
		return r;
	coord_rdma_chan_io(&io, ch);
	r = coord_handshake_client_io(&io, &t->key, COORD_ROLE_COORDINATOR, COORD_ROLE_WORKER,
				      (uint32_t)k->w->index, c->opts.connect_timeout_ms, addr, err);
	if (r < 0)
		goto fail;
	for (uint32_t i = 0; i < c->reg->n; i++)
		fcap += 6 + strlen(c->reg->fns[i].name);
	fcap += coord_psc_table_len(c->ps);
	fb = malloc(fcap + 3 * COORD_WIRE_HDR + 8);
	if (!fb) {
		r = coord_seterr(err, COORD_ENOMEM, "no memory");
		goto fail;
	}
	coord_wire_writer_init(&fw, fb, fcap + 3 * COORD_WIRE_HDR + 8);
	coord_wire_begin(&fw, COORD_WIRE_FN_TABLE);
	for (uint32_t i = 0; i < c->reg->n; i++)
		coord_wire_put_fn(&fw, i, c->reg->fns[i].name);
	coord_wire_end(&fw);
	coord_psc_put_table(&fw, c->ps); /* PS_OPTS, PS_TABLE */
	if (c->opts.heartbeat_ms > 0)
		coord_wire_put_ping(&fw, COORD_WIRE_PING, (uint64_t)c->opts.heartbeat_ms);
	r = coord_rdma_chan_send(ch, fb, fw.len, c->opts.connect_timeout_ms);
	free(fb);
	if (r < 0) {
		r = coord_seterr(err, r, "%s: cannot send the function table: %s", addr,
				 strerror(-r));
		goto fail;
	}
	*out = ch;
	return 0;
fail:
	coord_rdma_chan_destroy(ch);
	return r;
}

static int conn_open(struct rdma_tp *t, struct rdma_conn *k, struct coord_worker *w,
		     struct coord_error *err)
{
	struct coord *c = t->c;
	const char *addr;
	int r;

	k->w = w;
	r = coord_spec_task_address(c->spec, "worker", w->index, &addr, err);
	if (r < 0)
		return r;
	snprintf(k->peer, sizeof(k->peer), "%s", addr);
	r = conn_dial(t, k, &k->ch, err);
	if (r < 0)
		return r;
	if (coord_conn_init(&k->conn, w, c->opts.window, 64 * 1024))
		return coord_seterr(err, COORD_ENOMEM, "no memory for a connection");
	/* Relaxed: before the loops start (pthread_create orders it). */
	atomic_fetch_add_explicit(&t->idle, 1, memory_order_relaxed);
	return 0;
}

/* Watch @ch's two fds in @k's loop's epoll set (epoll_ctl is thread-safe). */
static int chan_watch(struct rdma_conn *k, struct coord_rdma_chan *ch)
{
	/* The completion channel edge-triggered (D4: a thread that leaves
	 * its events to a driver must not find them again at once); the
	 * rdma_cm channel tagged with bit 0 (loop_sleep()). */
	struct epoll_event ev = { .events = EPOLLIN | EPOLLET, .data.ptr = k };
	struct epoll_event cm = { .events = EPOLLIN, .data.ptr = (char *)k + 1 };
	int cq_fd, cm_fd;

	coord_rdma_chan_fds(ch, &cq_fd, &cm_fd);
	if (epoll_ctl(k->loop->epfd, EPOLL_CTL_ADD, cq_fd, &ev) < 0)
		return -errno;
	if (epoll_ctl(k->loop->epfd, EPOLL_CTL_ADD, cm_fd, &cm) < 0) {
		int r = -errno;

		epoll_ctl(k->loop->epfd, EPOLL_CTL_DEL, cq_fd, NULL);
		return r;
	}
	return 0;
}

static int conn_watch(struct rdma_conn *k)
{
	return chan_watch(k, k->ch);
}

/*
 * The recovery thread's reconnect (S10): dial the lost worker again, put
 * the new channel's fds in the loop's epoll set (events for it only wake
 * the loop until it is installed) and hand it to the loop, which installs
 * it at its next round (admit(); L1).
 */
static int rdma_reconnect(struct coord *c, struct coord_worker *w, struct coord_error *err)
{
	struct rdma_tp *t = c->tp_state;
	struct rdma_conn *k = &t->conns[w->index];
	struct rdma_loop *l = k->loop;
	struct coord_rdma_chan *ch;
	uint64_t one = 1;
	int r = conn_dial(t, k, &ch, err);

	if (r < 0)
		return r;
	r = chan_watch(k, ch);
	if (r < 0) {
		coord_rdma_chan_destroy(ch);
		return coord_seterr(err, r, "%s: epoll_ctl: %s", k->peer, strerror(-r));
	}
	pthread_mutex_lock(&l->admit_lock);
	k->admit_ch = ch;
	k->admit_next = l->admit;
	l->admit = k;
	pthread_mutex_unlock(&l->admit_lock);
	/* Release: pairs with admit()'s acquire; the list (under the mutex)
	 * and the channel before the flag the loop polls (L1). */
	atomic_store_explicit(&l->admit_pending, true, memory_order_release);
	(void)!write(l->efd, &one, sizeof(one));
	return 0;
}

static void rdma_free(struct rdma_tp *t)
{
	struct coord *c = t->c;

	for (unsigned i = 0; t->loops && i < t->nloops; i++) {
		struct rdma_loop *l = &t->loops[i];

		if (l->epfd >= 0)
			close(l->epfd);
		if (l->efd >= 0)
			close(l->efd);
		if (l->tfd >= 0)
			close(l->tfd);
		for (struct rdma_conn *k = l->admit; k; k = k->admit_next) {
			coord_rdma_chan_destroy(k->admit_ch); /* reconnected, never installed */
			k->admit_ch = NULL;
		}
		if (l->admit_lock_init)
			pthread_mutex_destroy(&l->admit_lock);
		free(l->conns);
		free(l->batch);
		free(l->done);
		coord_place_fini(&l->place);
	}
	for (unsigned i = 0; t->conns && i < c->nworkers; i++) {
		struct rdma_conn *k = &t->conns[i];

		coord_rdma_chan_destroy(k->ch);
		coord_conn_fini(&k->conn);
	}
	free(t->conns);
	free(t->loops);
	coord_key_wipe(&t->key);
	free(t);
	c->tp_state = NULL;
}

/*
 * D5: a user's schedule() found a loop asleep: send what it queued from
 * this thread, one round of a sleeping loop whose tok is free, rather than
 * wake the loop's thread to do it.  True if that took everything queued.
 */
static bool wake_drive(struct coord *c, struct rdma_tp *t)
{
	for (unsigned i = 0; i < t->nloops; i++) {
		struct rdma_loop *l = &t->loops[i];
		struct round ro;
		unsigned took;

		/* Relaxed: a hint (asleep in epoll); the tok decides. */
		if (!atomic_load_explicit(&l->armed, memory_order_relaxed) || !tok_try(l))
			continue;
		tl_driving = true;
		loop_round(l, &ro, false);
		took = ro.took;
		drive_leave(l, true);
		tl_driving = false;
		if (took && coord_queue_size(c) == 0)
			return true;
	}
	return false;
}

/* schedule() saw a loop asleep: one eventfd write per sleep (the exchange
 * disarms), unless the scheduling thread sent the work itself (D5). */
static void rdma_wake(struct coord *c)
{
	struct rdma_tp *t = c->tp_state;
	uint64_t one = 1;

	/* Relaxed: as in rdma_drive(). */
	if (t && !tl_driving && coord_wake_in_schedule() &&
	    !atomic_load_explicit(&c->stopping, memory_order_relaxed) && wake_drive(c, t))
		return;
	for (unsigned i = 0; t && i < t->nloops; i++)
		/* Acquire/release: pairs with the loop's store of armed; only
		 * one waker writes per sleep. */
		if (atomic_exchange_explicit(&t->loops[i].armed, false, memory_order_acq_rel))
			(void)!write(t->loops[i].efd, &one, sizeof(one));
}

/* Stopping, or a CANCEL to send (S3): wake every loop, armed or not. */
static void rdma_wake_all(struct rdma_tp *t)
{
	uint64_t one = 1;

	for (unsigned i = 0; i < t->nloops; i++)
		(void)!write(t->loops[i].efd, &one, sizeof(one));
}

/* ops->cancel (S3): every loop sends its CANCEL frames now (cancel_send()). */
static void rdma_cancel(struct coord *c)
{
	struct rdma_tp *t = c->tp_state;

	if (t)
		rdma_wake_all(t);
}

static void rdma_stop(struct coord *c)
{
	struct rdma_tp *t = c->tp_state;

	if (!t)
		return;
	rdma_wake_all(t);
	for (unsigned i = 0; i < t->nloops; i++)
		if (t->loops[i].started)
			pthread_join(t->loops[i].thread, NULL);
	for (unsigned i = 0; i < c->nworkers; i++) {
		struct rdma_conn *k = &t->conns[i];

		for (unsigned s = 0; k->slots && s < k->window; s++)
			if (k->slots[s]) {
				coord_dispatch_put_back(k->loop->d, &k->slots[s], 1);
				k->slots[s] = NULL;
			}
		if (k->up && k->ch) {
			struct coord_frame_io io;

			coord_rdma_chan_io(&io, k->ch);
			coord_send_error_io(&io, 0, "coordinator shutting down");
		}
	}
	rdma_free(t);
}

static int rdma_start(struct coord *c, struct coord_error *err)
{
	struct rdma_tp *t;
	int r;

	if (!c->spec)
		return coord_seterr(err, COORD_EINVAL,
				    "the rdma transport needs a spec with a \"worker\" job");
	if (c->opts.window == 0 || c->opts.window > 65536 || c->opts.max_frame < 4096 ||
	    c->opts.max_frame > COORD_WIRE_MAX_FRAME_LIMIT)
		return coord_seterr(err, COORD_EINVAL,
				    "rdma: window must be 1..65536 and max_frame 4 KiB..1 GiB");
	r = coord_rdma_available(err);
	if (r < 0)
		return r;
	t = calloc(1, sizeof(*t));
	if (!t)
		return coord_seterr(err, COORD_ENOMEM, "no memory");
	t->c = c;
	c->tp_state = t;
	t->copts.max_frame = c->opts.max_frame;
	r = coord_key_load(c->opts.key_file, &t->key, err);
	if (r < 0)
		goto fail;
	t->nloops = c->ndisp;
	t->conns = calloc(c->nworkers, sizeof(*t->conns));
	t->loops = calloc(t->nloops, sizeof(*t->loops));
	if (!t->conns || !t->loops) {
		r = coord_seterr(err, COORD_ENOMEM, "no memory");
		goto fail;
	}
	for (unsigned i = 0; i < t->nloops; i++)
		t->loops[i].efd = t->loops[i].epfd = t->loops[i].tfd = -1;
	for (unsigned i = 0; i < t->nloops; i++) {
		struct rdma_loop *l = &t->loops[i];
		unsigned nconn = (c->nworkers - i + t->nloops - 1) / t->nloops;
		struct epoll_event ev = { .events = EPOLLIN, .data.ptr = l };
		struct epoll_event tev = { .events = EPOLLIN, .data.ptr = &l->tfd };

		l->t = t;
		pthread_mutex_init(&l->admit_lock, NULL);
		l->admit_lock_init = true;
		l->d = &c->disp[i];
		l->d->tp = l;
		l->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
		l->epfd = epoll_create1(EPOLL_CLOEXEC);
		l->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
		l->conns = calloc(nconn, sizeof(*l->conns));
		l->batch = calloc(c->opts.batch, sizeof(*l->batch));
		l->done_cap = c->opts.batch;
		l->done = calloc(l->done_cap, sizeof(*l->done));
		if (l->efd < 0 || l->epfd < 0 || l->tfd < 0 || !l->conns || !l->batch || !l->done ||
		    coord_place_init(&l->place, nconn, c->reg->n, &t->idle) < 0 ||
		    epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->efd, &ev) < 0 ||
		    epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->tfd, &tev) < 0) {
			r = coord_seterr(err, COORD_ENOMEM, "no memory for an event loop");
			goto fail;
		}
	}
	for (unsigned i = 0; i < c->nworkers; i++) {
		struct rdma_loop *l = &t->loops[i % t->nloops];
		struct rdma_conn *k = &t->conns[i];

		k->loop = l;
		l->place.conns[l->nconns] = &k->conn;
		l->conns[l->nconns++] = k;
		r = conn_open(t, k, &c->workers[i], err);
		if (r < 0)
			goto fail;
		r = conn_watch(k);
		if (r < 0) {
			coord_seterr(err, r, "epoll_ctl: %s", strerror(-r));
			goto fail;
		}
	}
	for (unsigned i = 0; i < t->nloops; i++)
		coord_place_start(&t->loops[i].place);
	/* Relaxed: written before the loops start (pthread_create orders it). */
	atomic_store_explicit(&t->up, c->nworkers, memory_order_relaxed);
	for (unsigned i = 0; i < t->nloops; i++) {
		r = -pthread_create(&t->loops[i].thread, NULL, loop_main, &t->loops[i]);
		if (r < 0) {
			coord_seterr(err, r, "cannot start an event loop");
			rdma_stop(c);
			return r;
		}
		t->loops[i].started = true;
	}
	return 0;
fail:
	rdma_free(t);
	return r;
}

/* B4: room on worker @w for loop @d's takes (its thread only). */
static int rdma_room(struct coord_dispatcher *d, unsigned w)
{
	struct rdma_tp *t = d->c->tp_state;
	struct rdma_conn *k = &t->conns[w];

	uint64_t now = coord_now_ns();

	if (k->loop->d != d || !k->up || k->w->start_at_ns > now)
		return -1;
	return coord_place_room(&k->loop->place, &k->conn, now); /* place.h PL1 */
}

const struct coord_tp_ops coord_tp_rdma = {
	.name = "rdma",
	.caps = COORD_TP_PS_RDMA,
	.ndispatchers = coord_conn_ndispatchers,
	.start = rdma_start,
	.stop = rdma_stop,
	.wake = rdma_wake,
	.room = rdma_room,
	.cancel = rdma_cancel,
	.reconnect = rdma_reconnect,
	.drive = rdma_drive,
};
