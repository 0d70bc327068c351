// SPDX-License-Identifier: MIT
/*
 * transport/tcp/tcp.c - the tcp transport, coordinator side: workers are
 * coord-worker processes (or coord_worker_serve() in users' binaries).
 *
 * Threading model.  A few io_uring event loops (opts.tcp_loops, default
 * one per 4 CPUs: conn.c), each a dispatcher that owns a share of the
 * worker connections and does all their I/O, rather than a thread per
 * worker: on these 2-core machines the thread count, not the work, is what
 * a few hundred workers would cost, and one loop keeps many connections
 * busy with one submit per batch.  A loop:
 *   1. takes up to min(batch, credit) closures, credit being what its
 *      connections can start soon (transport/engine/place.h PL1: one per
 *      idle connection, the free slots of the one being packed);
 *      it blocks on the queue's futex only when nothing is in flight and no
 *      liveness check is due (heartbeats off), and otherwise takes without
 *      waiting; while batches come whole, credit
 *      is left and there is more work than idle workers, it takes more
 *      before sending, so a connection gets one frame per round;
 *   2. places them on its connections (coord_place_pick(), place.h), encodes
 *      one REQ frame per connection into that connection's output buffer
 *      and starts the sends of the connections given closures (a list,
 *      not a scan; a corked one waits, "Frames" below): one
 *      io_uring_submit() for the whole batch;
 *   3. sleeps in io_uring for completions (registered in loop_sleepers so
 *      that schedule() wakes it through an eventfd when new work arrives);
 *   4. reaps every completion at once: RECV completions are parsed into RES
 *      frames whose results complete the RemoteValues directly (the result
 *      bytes are copied once, from the receive buffer into the closure);
 *      then one coord_dispatch_finish() for all of them.
 * Receives use one buffer per connection (grown to the largest frame), not
 * provided-buffer rings: a frame may span many segments and must be whole
 * before it is parsed; liburing 2.3's fixed buffers do not apply to recv.
 *
 * In flight (transport/conn.c, shared with rdma.c).  Each connection has
 * `window` slots; a request carries (slot, sequence) as its closure id, and
 * a result must name a slot in use with the same sequence and the closure's
 * attempt, or the worker is misbehaving and its connection is failed.  Only
 * the loop touches its connections: no locks, no atomics on this state.
 *
 * Placement is the engine's, shared with rdma.c: transport/engine/place.h
 * (PL1-PL5: a closure goes only where it can start soon, packed behind
 * known-short ones within a round trip's worth of work).
 *
 * Frames.  So a connection does not send a REQ frame while CORK_FRAMES (2)
 * of its REQ frames are unanswered (no RES frame yet): the closures placed
 * on it meanwhile wait in obuf, and the RES frame that uncorks it sends
 * them as one frame (on_recv()).  Its worker runs one frame while the next
 * is on its way, and a frame carries what came during a round trip, not
 * during one loop round.  A closure held back waits only behind what it
 * would have waited behind in the worker's socket (the short closures
 * already on the connection: packing decided that); an idle connection is
 * never corked, nor a PING.  The worker answers a REQ frame with one RES
 * frame, or with several (an early flush, tcp_server.c), so the count can
 * only run low (uncorking early, not late), and everything sent being
 * answered uncorks whatever the count says.  While its packed connection
 * is corked and results are coming, a loop also leaves the queue alone
 * for up to W (cork_wait()): what it took could only wait in obuf, and
 * this way it costs no loop round and no eventfd write by the caller, and
 * the other loop may take it.  A loop takes past its first batch only
 * while the queue holds more than the other loops' idle connections
 * (loop_main()).
 *
 * Other choices: io_uring is set up with COOP_TASKRUN | TASKRUN_FLAG (a
 * completion does not IPI the loop); the sends take a list of the
 * connections given closures, not a scan; one loop is the default on 2 CPUs (conn.c); a
 * loop does not spin after a send.  The measurements behind each of these
 * and of the two paragraphs above, with what was tried and dropped:
 * docs/perf-history.md, "transport/tcp/tcp.c".
 *
 * Failure.  EOF, a socket error, a bad frame, heartbeat_misses heartbeat
 * intervals of silence (a PING goes out after one interval; the worker
 * answers, or keeps a busy connection alive with unsolicited PONGs, see
 * tcp_server.c P5), or a closure in flight past opts.closure_timeout_ms
 * (B6) fail the connection: the closures in flight on it go back on the
 * queue at once (attempt + 1, S2), its worker is handed to the recovery
 * thread (coord_worker_lost()), and the others go on (B2).  The recovery
 * thread dials it again (conn_dial(): handshake, tables, PING) and queues
 * the new socket on the loop's admission list; the loop installs it
 * (admit()) once the old socket's last completions are in, so no stale
 * completion meets the new connection.  When every worker is past the
 * recovery limit the coordinator reports UNAVAILABLE (runtime/recovery.c).
 */
#include <errno.h>
#include <limits.h>
#include <liburing.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include "runtime/core/internal.h"
#include "runtime/ps/ps.h"
#include "transport/engine/conn.h"
#include "transport/engine/place.h"
#include "transport/wire/sock.h"

enum { OP_RECV = 0, OP_SEND = 1, OP_EFD = 2, OP_MASK = 3 };

/* W: expected run time a closure may wait behind (place.c PACK_WAIT_NS):
 * how long a loop leaves the queue alone for a corked connection. */
#define CORK_WAIT_NS 50000u
#define CORK_FRAMES 2u /* REQ frames a connection may have unanswered */

struct tcp_loop;

struct tcp_conn {
	COORD_CONN_EMBED; /* slots, output, liveness (conn.h); idle: counted in tcp.idle */
	struct tcp_loop *loop;
	int fd;
	unsigned pending; /* submitted sqes not yet completed */
	/* receiving: bytes [0, rlen) of rbuf are unparsed */
	uint8_t *rbuf;
	size_t rcap, rlen;
	/* sending: sbuf is in the kernel's hands while sending; obuf fills */
	uint8_t *sbuf;
	size_t scap, slen, ssent;
	bool sending;
	struct tcp_conn *admit_next; /* on its loop's admission list */
	int admit_fd;
	struct tcp_conn *dirty_next; /* on its loop's list of outputs to send */
	bool dirty;
	/* Corking ("Frames" in the file header): REQ frames and closures in
	 * obuf, REQ frames sent and not yet answered by a RES frame, and
	 * whether obuf holds a PING (never held back). */
	unsigned ow_reqs, ow_cl, reqs_out;
	bool ping_waiting;
};

struct tcp_loop {
	struct coord_dispatcher *d;
	struct tcp *t;
	pthread_t thread;
	bool started;
	struct io_uring ring;
	struct tcp_conn **conns;
	unsigned nconns, rr;
	int efd;
	uint64_t efd_val;
	_Atomic bool armed; /* asleep in io_uring; the next schedule writes efd */
	uint64_t inflight;  /* taken by this loop and not yet finished */
	struct coord_closure **batch, **done;
	unsigned ndone, done_cap;
	/* Re-admission of reconnected workers (the recovery thread pushes,
	 * the loop installs): off the fast path, so a mutex. */
	pthread_mutex_t admit_lock;
	struct tcp_conn *admit;
	_Atomic bool admit_pending;
	uint64_t next_check_ns; /* heartbeats and closure deadlines */
	uint32_t cancel_gen;	/* S3: the generation our last CANCEL carried */
	/* when a round last took in its completions (coord_conn_check()) */
	uint64_t read_ns;
	struct coord_place place; /* over this loop's connections (place.h) */
	/* the connections given closures this round */
	struct tcp_conn *dirty;
};

struct tcp {
	struct coord *c;
	struct coord_key key;
	struct tcp_conn *conns;
	struct tcp_loop *loops;
	unsigned nloops;
	_Atomic unsigned up;
	_Atomic int idle; /* connections up with nothing in flight, all loops */
};

static inline uint64_t ud(void *p, unsigned op)
{
	return (uint64_t)(uintptr_t)p | op;
}

/* ---- sqes ------------------------------------------------------------------------ */

static struct io_uring_sqe *get_sqe(struct tcp_loop *l)
{
	struct io_uring_sqe *sqe = io_uring_get_sqe(&l->ring);

	if (!sqe) { /* full: hand what we have to the kernel and retry */
		io_uring_submit(&l->ring);
		sqe = io_uring_get_sqe(&l->ring);
		if (!sqe)
			coord_die("io_uring sqe", EBUSY);
	}
	return sqe;
}

static void arm_recv(struct tcp_conn *k)
{
	struct io_uring_sqe *sqe = get_sqe(k->loop);

	io_uring_prep_recv(sqe, k->fd, k->rbuf + k->rlen, k->rcap - k->rlen, 0);
	io_uring_sqe_set_data64(sqe, ud(k, OP_RECV));
	k->pending++;
}

static void arm_send(struct tcp_conn *k)
{
	struct io_uring_sqe *sqe = get_sqe(k->loop);

	io_uring_prep_send(sqe, k->fd, k->sbuf + k->ssent, k->slen - k->ssent, MSG_NOSIGNAL);
	io_uring_sqe_set_data64(sqe, ud(k, OP_SEND));
	k->pending++;
}

static void arm_efd(struct tcp_loop *l)
{
	struct io_uring_sqe *sqe = get_sqe(l);

	io_uring_prep_read(sqe, l->efd, &l->efd_val, sizeof(l->efd_val), 0);
	io_uring_sqe_set_data64(sqe, ud(l, OP_EFD));
}

/* Swap the filled output buffer in and send it, if no send is running. */
static void kick_send(struct tcp_conn *k)
{
	uint8_t *b;
	size_t cap;

	if (k->sending || !k->up || k->ow.len == 0)
		return;
	if (k->reqs_out >= CORK_FRAMES && !k->ping_waiting)
		return; /* corked: the next RES frame sends it, as one frame */
	k->reqs_out += k->ow_reqs;
	k->ow_reqs = k->ow_cl = 0;
	k->ping_waiting = false;
	if (k->ow.frame != SIZE_MAX)
		coord_wire_end(&k->ow);
	b = k->sbuf;
	cap = k->scap;
	k->sbuf = k->obuf;
	k->scap = k->ocap;
	k->slen = k->ow.len;
	k->ssent = 0;
	k->obuf = b;
	k->ocap = cap;
	coord_wire_writer_init(&k->ow, k->obuf, k->ocap);
	k->sending = true;
	arm_send(k);
}

/* ---- per-worker resources released (S9, runtime/pw.c) ------------------------------ */

static struct coord_conn *conn_at(void *l, unsigned i)
{
	return &((struct tcp_loop *)l)->conns[i]->conn;
}

static void pw_flush(struct coord_conn *k)
{
	kick_send((struct tcp_conn *)k); /* the connection is our first member */
}

/* PW_FREE frames to our workers for the resources released to us, sent
 * now (the loop may block on the queue's futex next). */
static void pw_release(struct tcp_loop *l)
{
	if (!coord_dispatch_pw_pending(l->d))
		return;
	coord_conn_pw_release(l->d, conn_at, l, l->nconns, pw_flush);
	io_uring_submit(&l->ring);
}

/* S3: a CANCEL goes out at once, whatever the cork holds back (as a PING). */
static void cancel_flush(struct coord_conn *k)
{
	((struct tcp_conn *)k)->ping_waiting = true;
	kick_send((struct tcp_conn *)k);
}

/* S3: CANCEL frames to our workers when the generation moved (conn.h). */
static void cancel_send(struct tcp_loop *l)
{
	coord_conn_cancel(l->d, &l->cancel_gen, conn_at, l, l->nconns, cancel_flush);
}

/* ---- failure ------------------------------------------------------------------------ */

static void conn_fail(struct tcp_conn *k, const char *why)
{
	struct tcp_loop *l = k->loop;
	struct coord *c = l->t->c;
	unsigned total;

	if (!k->up)
		return;
	k->up = false;
	coord_place_down(&l->place, &k->conn);
	total = coord_conn_put_back_all(&k->conn, l->d);
	l->inflight -= total;
	shutdown(k->fd, SHUT_RDWR); /* pending recv/send complete now */
	/* Relaxed: a count of live connections (logs). */
	atomic_fetch_sub_explicit(&l->t->up, 1, memory_order_relaxed);
	{
		char msg[COORD_ERRMSG_LEN];

		snprintf(msg, sizeof(msg), "%s (%s); %u closures put back", why, k->peer, total);
		/* S10: the recovery thread brings it back, or drops it and,
		 * when none is left, reports UNAVAILABLE (runtime/recovery.c). */
		coord_worker_lost(c, k->w, msg);
	}
}

/* ---- results ------------------------------------------------------------------------ */

/* Retire the completed closures in one go (counts, references, wakes). */
static void finish_done(struct tcp_loop *l)
{
	if (!l->ndone)
		return;
	coord_dispatch_finish(l->d, NULL, l->done, l->ndone);
	l->inflight -= l->ndone;
	l->ndone = 0;
}

static int on_res_frame(struct tcp_conn *k, const struct coord_wire_hdr *h, const uint8_t *payload)
{
	struct tcp_loop *l = k->loop;
	struct coord_wire_iter it;
	struct coord_wire_res r;
	uint32_t slot;
	int rc;

	coord_wire_iter_init(&it, h, payload);
	/* Each REQ frame is answered by one RES frame, or by several when the
	 * worker flushes early (tcp_server.c): the count may only run low,
	 * which uncorks early, never late. */
	if (k->reqs_out)
		k->reqs_out--;
	while ((rc = coord_wire_next_res(&it, &r)) == 1) {
		struct coord_closure *cl = coord_conn_res_claim(&k->conn, &r, &slot, &rc);

		if (!cl)
			return rc;
		coord_place_result(&l->place, &k->conn, cl->fn, slot, coord_wire_run_ns(&r));
		if (!coord_conn_res_finish(&k->conn, l->d, cl, &r)) {
			l->inflight--; /* put back (S11) */
			continue;
		}
		l->done[l->ndone++] = cl;
		if (l->ndone == l->done_cap)
			finish_done(l);
	}
	/* Everything sent is answered: nothing can hold the output back (a
	 * peer that answered two REQ frames with one RES frame). */
	if (k->window - k->nfree == k->ow_cl)
		k->reqs_out = 0;
	return rc;
}

/* Parse every whole frame received on @k; then receive more. */
static void on_recv(struct tcp_conn *k, int res)
{
	struct coord *c = k->loop->t->c;
	size_t off = 0;
	int r = 0;

	if (res <= 0) {
		conn_fail(k, res == 0 ? "connection closed by the worker" : strerror(-res));
		return;
	}
	k->last_rx_ns = coord_now_ns(); /* alive (heartbeats) */
	k->ping_ns = 0;
	k->rlen += (size_t)res;
	for (;;) {
		struct coord_wire_hdr h;
		size_t need;

		r = coord_wire_parse_hdr(k->rbuf + off, k->rlen - off, c->opts.max_frame, &h);
		if (r == -EAGAIN) {
			r = 0;
			break;
		}
		if (r < 0)
			break;
		need = COORD_WIRE_HDR + (size_t)h.len;
		if (k->rlen - off < need) {
			if (need > k->rcap) { /* a frame larger than the buffer */
				uint8_t *b;

				memmove(k->rbuf, k->rbuf + off, k->rlen - off);
				k->rlen -= off;
				off = 0;
				b = realloc(k->rbuf, need);
				if (!b) {
					r = -ENOMEM;
					break;
				}
				k->rbuf = b;
				k->rcap = need;
			}
			break;
		}
		switch (h.type) {
		case COORD_WIRE_RES:
			r = on_res_frame(k, &h, k->rbuf + off + COORD_WIRE_HDR);
			break;
		case COORD_WIRE_PONG:
			break;
		case COORD_WIRE_ERROR: {
			int32_t code;
			const char *m = "";
			uint16_t len = 0;
			char why[200];

			coord_wire_get_error(&h, k->rbuf + off + COORD_WIRE_HDR, &code, &m, &len);
			snprintf(why, sizeof(why), "the worker closed: %.*s", (int)len, m);
			conn_fail(k, why);
			return;
		}
		default:
			r = -EPROTO;
		}
		if (r < 0)
			break;
		off += need;
	}
	if (r < 0) {
		char why[160];

		snprintf(why, sizeof(why), "bad frame from the worker (%s)",
			 r == -EBADSLT ? "a result for no closure sent" : strerror(-r));
		coord_send_error(k->fd, r, why);
		conn_fail(k, why);
		return;
	}
	memmove(k->rbuf, k->rbuf + off, k->rlen - off);
	k->rlen -= off;
	arm_recv(k);
	kick_send(k); /* what the cork held back, if anything */
}

static void on_send(struct tcp_conn *k, int res)
{
	if (res < 0) {
		conn_fail(k, strerror(-res));
		return;
	}
	k->ssent += (size_t)res;
	if (k->ssent < k->slen) {
		arm_send(k); /* partial send: the rest */
		return;
	}
	k->sending = false;
	kick_send(k);
}

/* ---- requests ------------------------------------------------------------------------- */

/* Add @cl to @k's output; false if it cannot be sent (too large). */
static bool enqueue_req(struct tcp_conn *k, struct coord_closure *cl, uint64_t now)
{
	struct tcp_loop *l = k->loop;
	uint32_t slot;
	int r = coord_conn_put_req(&k->conn, cl, now, l->t->c->opts.max_frame, &slot);

	if (r < 0)
		return false;
	k->ow_reqs += (unsigned)r; /* a new REQ frame (corking) */
	k->ow_cl++;
	if (!k->dirty) { /* sent at the end of the round */
		k->dirty = true;
		k->dirty_next = l->dirty;
		l->dirty = k;
	}
	coord_place_sent(&l->place, &k->conn, cl, slot, now);
	return true;
}

/*
 * Should the loop leave the queue alone until its packed connection's next
 * result ("Frames" in the file header)?  While that connection is packable
 * and corked, what the loop took now could only wait in obuf for that
 * result; left in the queue, it costs no round, the caller no eventfd
 * write, and the other loop may take it.  Only while results are coming
 * (one within the last 2 W), and for at most W: the deadline, or 0.
 */
static uint64_t cork_wait(const struct tcp_loop *l, uint64_t now)
{
	const struct tcp_conn *k = (const struct tcp_conn *)l->place.pack;

	if (!k || k->reqs_out < CORK_FRAMES || k->ping_waiting ||
	    !coord_place_packable(&l->place, &k->conn, now) ||
	    now - k->last_rx_ns > 2 * (uint64_t)CORK_WAIT_NS)
		return 0;
	return now + CORK_WAIT_NS;
}

/* Send @cl on the connection its take aimed it at (B4), or where pick() says. */
static void place(struct tcp_loop *l, struct coord_closure *cl, uint64_t now)
{
	struct coord *c = l->t->c;
	struct tcp_conn *k;

	if (coord_dispatch_stale(c, cl)) {
		coord_dispatch_cancel(l->d, cl); /* S3: not started */
		l->inflight--;
		return;
	}
	k = coord_closure_target(cl) < 0
		    ? (struct tcp_conn *)coord_place_pick(&l->place, now) /* place.h PL1 */
		    : &l->t->conns[coord_closure_target(cl)];		  /* B4 */
	if (!k || !k->up || !k->nfree) { /* lost meanwhile: back on the queue */
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

static void dispatch(struct tcp_loop *l, unsigned n)
{
	uint64_t now = coord_now_ns();
	unsigned m = 0;

	pw_release(l); /* S9: before these REQs (runtime/pw.c P3) */
	l->inflight += n;
	/* B4: first the closures a take aimed at a worker: it counted on
	 * their slots (runtime/sched.c), which pick() must not give to the
	 * others (that put them back, attempt + 1, B8); then the rest, in
	 * order, compacted to the front of the batch. */
	for (unsigned i = 0; i < n; i++)
		if (coord_closure_target(l->batch[i]) < 0)
			l->batch[m++] = l->batch[i];
		else
			place(l, l->batch[i], now);
	for (unsigned i = 0; i < m; i++)
		place(l, l->batch[i], now);
}

/* ---- the loop ------------------------------------------------------------------------- */

static void admit(struct tcp_loop *l);
static uint64_t check_conns(struct tcp_loop *l, uint64_t now);

/* Start of a round: install reconnected workers, check liveness; now. */
static uint64_t loop_tick(struct tcp_loop *l)
{
	uint64_t now;

	admit(l);
	pw_release(l);
	cancel_send(l);
	now = coord_now_ns();
	check_conns(l, now);
	return now;
}

static void *loop_main(void *arg)
{
	struct tcp_loop *l = arg;
	struct coord *c = l->t->c;
	unsigned max_batch = c->opts.batch;

	arm_efd(l);
	/* Silence is counted from the loop's start, not from each
	 * connection's open: they opened one after another, and a slow start
	 * (many workers, slow handshakes) is not a missed heartbeat. */
	l->read_ns = coord_now_ns();
	for (unsigned i = 0; i < l->nconns; i++) {
		struct tcp_conn *k = l->conns[i];

		k->last_rx_ns = l->read_ns;
		arm_recv(k);
	}
	coord_place_start(&l->place);
	io_uring_submit(&l->ring);
	for (;;) {
		struct io_uring_cqe *cqe;
		uint64_t now = loop_tick(l), next_start, due = l->next_check_ns;
		bool has_idle, has_down;
		unsigned cr = coord_place_credit(&l->place, now, &next_start, &has_idle, &has_down),
			 head, seen = 0, n = 0;
		/* Relaxed: a placement hint (tcp.idle), read once per round. */
		int idle = atomic_load_explicit(&l->t->idle, memory_order_relaxed);
		/* Placement across loops: a loop whose workers are all busy
		 * queues more on them only when there is more work than idle
		 * workers elsewhere, so a closure does not wait behind a long
		 * one while another worker is idle (S2). */
		bool may_take = cr > 0 && (has_idle || coord_queue_size(c) > (uint64_t)idle);
		uint64_t cork_until = may_take ? cork_wait(l, now) : 0;

		/* Relaxed: stop is also signalled through the eventfd and not_empty. */
		if (atomic_load_explicit(&c->stopping, memory_order_relaxed))
			break;
		if (cork_until)
			may_take = false; /* wait for the packed connection's result */
		if (may_take) {
			unsigned max = cr < max_batch ? cr : max_batch;

			/* Not on the futex while a connection is down: only this
			 * loop installs its worker when it comes back (admit()),
			 * and closures bound to it (B4) wait for that. */
			n = l->inflight == 0 && !next_start && !due && !has_down
				    ? coord_dispatch_take(l->d, l->batch, max)
				    : coord_dispatch_try_take(l->d, l->batch, max);
			if (n)
				dispatch(l, n);
			/* Relaxed: a blocking take returns 0 only when stopping. */
			else if (atomic_load_explicit(&c->stopping, memory_order_relaxed))
				break;
			/* While whole batches come and credit is left, take more
			 * before sending: one frame (one send) per connection per
			 * round, not one per batch.  Past the first batch only
			 * while there is more work than idle workers elsewhere:
			 * on other loops (this loop's own idle ones are its to
			 * place on; counting them too cut every frame at one
			 * batch with many connections, see "Frames"). */
			for (unsigned got = n; got == max && cr > got;) {
				cr -= got;
				max = cr < max_batch ? cr : max_batch;
				idle = coord_place_idle_elsewhere(&l->place);
				if (coord_queue_size(c) <= (uint64_t)(idle > 0 ? idle : 0))
					break;
				got = coord_dispatch_try_take(l->d, l->batch, max);
				if (got)
					dispatch(l, got);
				n += got;
			}
			/* Send on the connections given closures this round,
			 * not a scan of all of them. */
			while (l->dirty) {
				struct tcp_conn *k = l->dirty;

				l->dirty = k->dirty_next;
				k->dirty = false;
				kick_send(k);
			}
		}
		if (n == 0) {
			/* Nothing taken: wait for completions, or new work if we
			 * have room for it, or the next staggered start. */
			bool reg = false;
			struct __kernel_timespec ts;

			if (may_take) {
				/* Relaxed: ordered by coord_loop_sleep()'s RMW and
				 * fence; tcp_wake() exchanges it. */
				atomic_store_explicit(&l->armed, true, memory_order_relaxed);
				reg = coord_loop_sleep(l->d);
			}
			if (may_take && !reg) {
				/* Relaxed: disarm; a racing wake only costs a
				 * spurious eventfd read. */
				atomic_store_explicit(&l->armed, false, memory_order_relaxed);
				io_uring_submit(&l->ring); /* work arrived: go round */
				l->read_ns = now;
				goto reap;
			}
			if (due && (!next_start || due < next_start))
				next_start = due; /* the next liveness check */
			if (cork_until && (!next_start || cork_until < next_start))
				next_start = cork_until; /* corked: at most W */
			due = may_take ? coord_dispatch_due(l->d) : 0;
			if (due && (!next_start || due < next_start))
				next_start = due; /* B4: a preferred closure's fallback */
			if (next_start) {
				uint64_t d = next_start > now ? next_start - now : 0;

				ts.tv_sec = (long long)(d / 1000000000ull);
				ts.tv_nsec = (long long)(d % 1000000000ull);
				io_uring_submit_and_wait_timeout(&l->ring, &cqe, 1, &ts, NULL);
			} else {
				io_uring_submit_and_wait(&l->ring, 1);
			}
			/* What arrived before now is in the CQ (coord_conn_check()). */
			l->read_ns = coord_now_ns();
			if (reg) {
				coord_loop_wake_done(c);
				/* Relaxed: as above. */
				atomic_store_explicit(&l->armed, false, memory_order_relaxed);
			}
		} else {
			io_uring_submit(&l->ring);
			l->read_ns = now;
		}
	reap:
		io_uring_for_each_cqe(&l->ring, head, cqe)
		{
			uint64_t u = io_uring_cqe_get_data64(cqe);
			unsigned op = u & OP_MASK;
			void *p = (void *)(uintptr_t)(u & ~(uint64_t)OP_MASK);

			seen++;
			if (op == OP_EFD) {
				arm_efd(l);
				continue;
			}
			((struct tcp_conn *)p)->pending--;
			if (op == OP_RECV) {
				if (((struct tcp_conn *)p)->up)
					on_recv(p, cqe->res);
			} else if (((struct tcp_conn *)p)->up) {
				on_send(p, cqe->res);
			}
		}
		io_uring_cq_advance(&l->ring, seen);
		finish_done(l);
	}
	finish_done(l);
	return NULL;
}

/* ---- set-up and tear-down --------------------------------------------------------- */

/*
 * Connect to @k's worker, run the handshake and send what a worker needs
 * first: the function table, the ps tasks' addresses, and a PING whose
 * token is our heartbeat interval (so it keeps a busy connection alive,
 * see tcp_server.c).  Used at start and by the recovery thread; *@fd on
 * success.
 */
static int conn_dial(struct tcp *t, struct tcp_conn *k, int *fd, struct coord_error *err)
{
	struct coord *c = t->c;
	struct coord_frame_reader rd;
	const char *addr = k->peer;
	uint8_t *fb;
	size_t fcap = 64;
	struct coord_wire_writer fw;
	int r;

	*fd = -1;
	r = coord_sock_connect(addr, c->opts.connect_timeout_ms, fd, err);
	if (r < 0)
		return r;
	r = coord_frame_reader_init(&rd, *fd, c->opts.max_frame);
	if (r < 0) {
		r = coord_seterr(err, r, "no memory");
		goto fail;
	}
	r = coord_handshake_client(&rd, &t->key, COORD_ROLE_COORDINATOR, COORD_ROLE_WORKER,
				   (uint32_t)k->w->index, c->opts.connect_timeout_ms, addr, err);
	coord_frame_reader_fini(&rd);
	if (r < 0)
		goto fail;
	/* The function table: our ids, by name (the worker maps them). */
	for (uint32_t i = 0; i < c->reg->n; i++)
		fcap += 6 + strlen(c->reg->fns[i].name);
	/* Then where the ps tasks are (runtime/ps.h), if there are any. */
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
	r = coord_sock_send_all(*fd, fb, fw.len);
	free(fb);
	if (r < 0) {
		r = coord_seterr(err, r, "%s: cannot send the function table: %s", addr,
				 strerror(-r));
		goto fail;
	}
	return 0;
fail:
	close(*fd);
	*fd = -1;
	return r;
}

static int conn_open(struct tcp *t, struct tcp_conn *k, struct coord_worker *w,
		     struct coord_error *err)
{
	struct coord *c = t->c;
	const char *addr;
	int r;

	k->w = w;
	k->fd = -1;
	r = coord_spec_task_address(c->spec, "worker", w->index, &addr, err);
	if (r < 0)
		return r;
	snprintf(k->peer, sizeof(k->peer), "%s", addr);
	r = conn_dial(t, k, &k->fd, err);
	if (r < 0)
		return r;
	k->rcap = k->scap = 64 * 1024;
	k->rbuf = malloc(k->rcap);
	k->sbuf = malloc(k->scap);
	if (coord_conn_init(&k->conn, w, c->opts.window, 64 * 1024) || !k->rbuf || !k->sbuf)
		return coord_seterr(err, COORD_ENOMEM, "no memory for a connection");
	/* Relaxed: before the loops start (pthread_create orders it). */
	atomic_fetch_add_explicit(&t->idle, 1, memory_order_relaxed);
	return 0;
}

/*
 * The recovery thread's reconnect (S10): dial the lost worker again and
 * hand the new connection to its loop, which installs it once the old
 * connection's last completions are in (admit()).
 */
static int tcp_reconnect(struct coord *c, struct coord_worker *w, struct coord_error *err)
{
	struct tcp *t = c->tp_state;
	struct tcp_conn *k = &t->conns[w->index];
	struct tcp_loop *l = k->loop;
	uint64_t one = 1;
	int fd, r = conn_dial(t, k, &fd, err);

	if (r < 0)
		return r;
	pthread_mutex_lock(&l->admit_lock);
	k->admit_fd = fd;
	k->admit_next = l->admit;
	l->admit = k;
	pthread_mutex_unlock(&l->admit_lock);
	/* Release: the list (under the mutex) before the flag the loop polls. */
	atomic_store_explicit(&l->admit_pending, true, memory_order_release);
	(void)!write(l->efd, &one, sizeof(one));
	return 0;
}

/* Loop thread: install the reconnected connections whose old one is
 * quiet (no sqe of it still in the kernel). */
static void admit(struct tcp_loop *l)
{
	struct tcp_conn *list, *k, *later = NULL;
	uint64_t now = coord_now_ns();
	bool installed = false;

	/* Acquire: pairs with tcp_reconnect()'s release. */
	if (!atomic_exchange_explicit(&l->admit_pending, false, memory_order_acquire))
		return;
	pthread_mutex_lock(&l->admit_lock);
	list = l->admit;
	l->admit = NULL;
	pthread_mutex_unlock(&l->admit_lock);
	while ((k = list)) {
		list = k->admit_next;
		if (k->pending) { /* the old fd's completions first */
			k->admit_next = later;
			later = k;
			continue;
		}
		close(k->fd);
		k->fd = k->admit_fd;
		k->rlen = 0;
		k->sending = false;
		k->slen = k->ssent = 0;
		k->ow_reqs = k->ow_cl = k->reqs_out = 0;
		k->ping_waiting = false;
		coord_wire_writer_init(&k->ow, k->obuf, k->ocap);
		k->last_rx_ns = now;
		k->ping_ns = 0;
		k->up = true;
		coord_place_up(&l->place, &k->conn);
		arm_recv(k);
		/* Relaxed: a count of live connections (logs). */
		atomic_fetch_add_explicit(&l->t->up, 1, memory_order_relaxed);
		coord_log(COORD_LOG_INFO, "worker %d (%s) connected again", k->w->index, k->peer);
		installed = true;
	}
	/* B4 (sched.c H2): closures bound to these workers may go now.  The
	 * recovery thread says so too when it marks them UP, but that may
	 * come before this (a take in between saw no room and stopped
	 * looking), or the installation may wait for the old fd here. */
	if (installed)
		coord_hq_worker_up(l->t->c);
	if (later) {
		pthread_mutex_lock(&l->admit_lock);
		for (k = later; k->admit_next; k = k->admit_next)
			;
		k->admit_next = l->admit;
		l->admit = later;
		pthread_mutex_unlock(&l->admit_lock);
		/* Release: as in tcp_reconnect(); pending completions wake us. */
		atomic_store_explicit(&l->admit_pending, true, memory_order_release);
	}
}

/* Append a PING (token: our heartbeat interval) to @k's output. */
static void send_ping(struct tcp_conn *k, uint64_t token)
{
	if (k->ow.frame != SIZE_MAX)
		coord_wire_end(&k->ow);
	if (k->ow.cap - k->ow.len < COORD_WIRE_HDR + 8)
		return; /* output full: traffic is flowing anyway */
	coord_wire_put_ping(&k->ow, COORD_WIRE_PING, token);
	k->ping_waiting = true;
	kick_send(k);
}

/* The liveness check's actions on our connections (conn.h); the
 * connection is the first member of ours. */
static void act_fail(struct coord_conn *k, const char *why)
{
	conn_fail((struct tcp_conn *)k, why);
}

static void act_ping(struct coord_conn *k, uint64_t token)
{
	send_ping((struct tcp_conn *)k, token);
}

static const struct coord_conn_act conn_act = { .fail = act_fail, .ping = act_ping };
_Static_assert(offsetof(struct tcp_conn, conn) == 0, "the casts above");

/*
 * Liveness of @l's connections (issue 4): ping a connection silent for a
 * heartbeat interval; fail one silent for heartbeat_misses intervals (a
 * stopped or partitioned machine), or one whose oldest closure has run past
 * opts.closure_timeout_ms (B6), all as of the loop's last read (read_ns,
 * conn.h).  Rate-limited; returns the next due time.
 */
static uint64_t check_conns(struct tcp_loop *l, uint64_t now)
{
	const struct coord_opts *o = &l->t->c->opts;
	uint64_t period = coord_conn_check_due(o, now, &l->next_check_ns);

	for (unsigned i = 0; period && i < l->nconns; i++)
		coord_conn_check(&l->conns[i]->conn, o, now, l->read_ns, period, &conn_act);
	return l->next_check_ns;
}

static void conn_close(struct tcp_conn *k)
{
	if (k->fd >= 0)
		close(k->fd);
	free(k->rbuf);
	free(k->sbuf);
	coord_conn_fini(&k->conn);
}

static void tcp_free(struct tcp *t)
{
	struct coord *c = t->c;

	for (unsigned i = 0; t->loops && i < t->nloops; i++) {
		struct tcp_loop *l = &t->loops[i];

		if (l->ring.ring_fd > 0)
			io_uring_queue_exit(&l->ring);
		if (l->efd >= 0)
			close(l->efd);
		for (struct tcp_conn *k = l->admit; k; k = k->admit_next)
			close(k->admit_fd); /* reconnected, never installed */
		pthread_mutex_destroy(&l->admit_lock);
		free(l->conns);
		free(l->batch);
		free(l->done);
		coord_place_fini(&l->place);
	}
	for (unsigned i = 0; t->conns && i < c->nworkers; i++)
		conn_close(&t->conns[i]);
	free(t->conns);
	free(t->loops);
	coord_key_wipe(&t->key);
	free(t);
	c->tp_state = NULL;
}

/* schedule() saw a loop asleep in the kernel: one eventfd write per sleep,
 * not per schedule (the exchange disarms it). */
static void tcp_wake(struct coord *c)
{
	struct tcp *t = c->tp_state;
	uint64_t one = 1;

	for (unsigned i = 0; t && i < t->nloops; i++)
		/* Acquire/release: pairs with the loop's store of armed; only
		 * one waker writes per sleep. */
		if (atomic_exchange_explicit(&t->loops[i].armed, false, memory_order_acq_rel))
			(void)!write(t->loops[i].efd, &one, sizeof(one));
}

/* Stopping, or a CANCEL to send (S3): wake every loop, armed or not. */
static void tcp_wake_all(struct tcp *t)
{
	uint64_t one = 1;

	for (unsigned i = 0; i < t->nloops; i++)
		(void)!write(t->loops[i].efd, &one, sizeof(one));
}

/* ops->cancel (S3): every loop sends its CANCEL frames now (cancel_send()). */
static void tcp_cancel(struct coord *c)
{
	struct tcp *t = c->tp_state;

	if (t)
		tcp_wake_all(t);
}

static void tcp_stop(struct coord *c)
{
	struct tcp *t = c->tp_state;

	if (!t)
		return;
	tcp_wake_all(t);
	for (unsigned i = 0; i < t->nloops; i++)
		if (t->loops[i].started)
			pthread_join(t->loops[i].thread, NULL);
	/* Anything still in flight will never complete: put it back, so
	 * destroy's final cancel retires it. */
	for (unsigned i = 0; i < c->nworkers; i++) {
		struct tcp_conn *k = &t->conns[i];

		for (unsigned s = 0; k->slots && s < k->window; s++)
			if (k->slots[s]) {
				coord_dispatch_put_back(k->loop->d, &k->slots[s], 1);
				k->slots[s] = NULL;
			}
		if (k->up && k->fd >= 0)
			coord_send_error(k->fd, 0, "coordinator shutting down");
	}
	tcp_free(t);
}

static int tcp_start(struct coord *c, struct coord_error *err)
{
	struct tcp *t;
	int r;

	if (!c->spec)
		return coord_seterr(err, COORD_EINVAL,
				    "the tcp transport needs a spec with a "
				    "\"worker\" job");
	if (c->opts.window == 0 || c->opts.window > 65536 || c->opts.max_frame < 4096 ||
	    c->opts.max_frame > COORD_WIRE_MAX_FRAME_LIMIT)
		return coord_seterr(err, COORD_EINVAL,
				    "tcp: window must be 1..65536 and "
				    "max_frame 4 KiB..1 GiB");
	t = calloc(1, sizeof(*t));
	if (!t)
		return coord_seterr(err, COORD_ENOMEM, "no memory");
	t->c = c;
	c->tp_state = t;
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
	for (unsigned i = 0; i < c->nworkers; i++)
		t->conns[i].fd = -1;
	for (unsigned i = 0; i < t->nloops; i++) {
		struct tcp_loop *l = &t->loops[i];
		unsigned nconn = (c->nworkers - i + t->nloops - 1) / t->nloops;
		unsigned entries = 8;

		while (entries < 2 * nconn + 8)
			entries <<= 1;
		l->t = t;
		pthread_mutex_init(&l->admit_lock, NULL);
		l->d = &c->disp[i];
		l->d->tp = l;
		l->efd = eventfd(0, EFD_CLOEXEC);
		l->conns = calloc(nconn, sizeof(*l->conns));
		l->batch = calloc(c->opts.batch, sizeof(*l->batch));
		l->done_cap = c->opts.batch;
		l->done = calloc(l->done_cap, sizeof(*l->done));
		if (l->efd < 0 || !l->conns || !l->batch || !l->done ||
		    coord_place_init(&l->place, nconn, c->reg->n, &t->idle) < 0) {
			r = coord_seterr(err, COORD_ENOMEM, "no memory for an event loop");
			goto fail;
		}
		/* COOP_TASKRUN: a completion does not interrupt the loop with an
		 * IPI (costly on a VM); its task work runs at the loop's next
		 * io_uring_enter(), which TASKRUN_FLAG makes liburing's submit
		 * call when work is pending.  Measured (bench_tcp scale, 256
		 * connections): coordinator CPU per closure 12.7-13.4 -> 10.7-11.3
		 * us, rate +30%.  Older kernels: plain. */
		r = io_uring_queue_init(entries, &l->ring,
					IORING_SETUP_COOP_TASKRUN | IORING_SETUP_TASKRUN_FLAG);
		if (r == -EINVAL)
			r = io_uring_queue_init(entries, &l->ring, 0);
		if (r < 0) {
			l->ring.ring_fd = -1;
			coord_seterr(err, r, "io_uring_queue_init: %s", strerror(-r));
			goto fail;
		}
	}
	for (unsigned i = 0; i < c->nworkers; i++) {
		struct tcp_loop *l = &t->loops[i % t->nloops];
		struct tcp_conn *k = &t->conns[i];

		k->loop = l;
		l->place.conns[l->nconns] = &k->conn;
		l->conns[l->nconns++] = k;
		r = conn_open(t, k, &c->workers[i], err);
		if (r < 0)
			goto fail;
	}
	/* Relaxed: written before the loops start (pthread_create orders it). */
	atomic_store_explicit(&t->up, c->nworkers, memory_order_relaxed);
	for (unsigned i = 0; i < t->nloops; i++) {
		r = -pthread_create(&t->loops[i].thread, NULL, loop_main, &t->loops[i]);
		if (r < 0) {
			coord_seterr(err, r, "cannot start an event loop");
			tcp_stop(c);
			return r;
		}
		t->loops[i].started = true;
	}
	return 0;
fail:
	tcp_free(t);
	return r;
}

/* B4: room on worker @w for loop @d's takes (its thread only). */
static int tcp_room(struct coord_dispatcher *d, unsigned w)
{
	struct tcp *t = d->c->tp_state;
	struct tcp_conn *k = &t->conns[w];

	uint64_t now = coord_now_ns();

	if (k->loop->d != d || !k->up || k->w->start_at_ns > now)
		return -1;
	return coord_place_room(&k->loop->place, &k->conn, now); /* place.h PL1 */
}

const struct coord_tp_ops coord_tp_tcp = {
	.name = "tcp",
	.ndispatchers = coord_conn_ndispatchers,
	.start = tcp_start,
	.stop = tcp_stop,
	.wake = tcp_wake,
	.reconnect = tcp_reconnect,
	.room = tcp_room,
	.cancel = tcp_cancel,
};
