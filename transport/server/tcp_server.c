// SPDX-License-Identifier: MIT
/*
 * transport/server/tcp_server.c - coord_worker_serve() and coord_ps_serve(): the
 * server side of the tcp transport, used by coord-worker, coord-ps and by
 * users' own binaries.
 *
 * A ps server holds one variable store (runtime/store/varstore.h) and answers
 * VAR_REQ frames from coordinators and workers with one VAR_RES frame each
 * (runtime/ps/ps.h has the operations).  A worker server learns where the ps
 * tasks are from its coordinator's PS_TABLE frame; the connections of one
 * process that name the same ps tasks share one client of them
 * (transport/psclient/ps_client.c), so their requests share frames.
 *
 * Threading: a small pool of threads per process serves every connection
 * through one epoll set, instead of a thread per connection.  A connection
 * is still one worker of one coordinator: it runs that worker's closures in
 * order (as an in-process worker does) and keeps that worker's per-worker
 * resources, so a process that accepts many connections serves many
 * workers.  Results go back in RES frames: one per REQ frame, flushed early
 * when a closure has run long enough that waiting for the rest of the batch
 * would hold its result back.
 *
 * Why a pool and not a thread per connection: docs/perf-history.md
 * ("tcp_server.c: the serving pool").  This file: the acceptor, a
 * connection's life (accept, handshake, serving its frames, finish, free)
 * and serve(); tcp_pool.c: the pool threads and the watchdog;
 * tcp_server_pvt.h: what the two share (struct conn, struct srv).
 *
 *   P1  A connection is held by at most one thread: the pool thread whose
 *       epoll_wait returned it (the acceptor adds it to the epoll set,
 *       EPOLLONESHOT, right after accept).  That thread reads without
 *       blocking (coord_frame_try_read()), serves at most 64 whole frames
 *       in order and re-arms it with EPOLL_CTL_MOD as its last touch.
 *       Frames of one connection are therefore served in order by one
 *       thread at a time.  The kernel orders the hand-over; `held`
 *       (exchanged with acquire on taking, stored with release right after
 *       the re-arm, and by the acceptor before the first arm) states that
 *       edge for TSan, which does not model epoll; a new holder that comes
 *       in between waits those few instructions.
 *   H1  The handshake runs on the same pool, one frame at a time
 *       (coord_hs_server_frame()), not on a thread of its own: a peer in
 *       it holds a struct conn and a reader buffer of 256 bytes that may
 *       grow to COORD_WIRE_HS_MAX_FRAME (4 KiB, checked from the header:
 *       a peer declaring 16 MiB is refused before any buffer grows), and
 *       nothing else (the result buffer comes with authentication).  At
 *       most o->max_handshakes are in it at once (`pending`); the acceptor
 *       refuses the connections beyond with an ERROR frame and a log line
 *       at most once a second.  The whole handshake has handshake_ms from
 *       accept (the watchdog's deadline, as tcp_pool.c P4's).
 *   A1  accept never spins: the listener is non-blocking and drained up to
 *       ACCEPT_BURST connections per wake-up; when descriptors run out
 *       (EMFILE, ENFILE) or memory (ENOBUFS, ENOMEM) the acceptor stops
 *       polling the listener for ACCEPT_PAUSE_MS and tries again, logging
 *       once per episode (pending peers wait in the listen backlog).  At
 *       start the soft descriptor limit is raised to the hard one.
 *   P3  A finished connection is freed by the acceptor only after its
 *       holder published `done`.
 *   W1  While a frame of 256 KiB or more comes in, SO_RCVLOWAT is its rest
 *       (at most 256 KiB), so epoll returns the connection a few times a
 *       MiB, not for every segment (rcv_lowat()); else 1.
 *   P2, P4, P5, I1, M1  The pool, and the watchdog that relieves a stuck
 *       pool thread, closes connections stalled mid-frame or idle, sends
 *       keepalive PONGs and trims freed memory: tcp_pool.c.
 *
 * Synchronization: the shared fields of a connection (struct conn) and of
 * the server (struct srv), who writes them, who reads them, and what orders
 * the two.  The holder is the one thread that serves a connection now (P1);
 * the acceptor thread is also the watchdog (tcp_pool.c P2, P4, P5, I1).  The
 * pool's own fields (struct pool_thread, s->threads, waiting, parked) are in
 * tcp_pool.c's table; P2, P4, P5 and I1 below are tcp_pool.c's rules.
 *   field            written by (how)                read by (how)           order
 *   k->fd, k->s      conn_new(), before the first    everyone (plain)        held's release
 *                    arm                                                     (P1); immutable
 *   k->rd, k->p,     the holder (plain)              the holder              P1: held's release
 *   k->hs, k->authed                                                         -> acquire (epoll
 *                                                                            hands it over)
 *   k->held          the holder (acquire exchange    the next holder         P1
 *                    to take, release store after
 *                    the re-arm); conn_new()
 *                    (release, before the first arm)
 *   k->open          the holder, once authenticated  the watchdog (relaxed)  none: a hint (I1)
 *                    (relaxed)
 *   k->last_active   conn_new(), the holder          the watchdog (relaxed)  none: a hint (I1)
 *                    (relaxed)
 *   k->held_since    the holder (relaxed)            the watchdog (relaxed)  none: a hint (P5;
 *                                                                            a stale read costs
 *                                                                            one PONG)
 *   k->last_sent_ns  senders, under send_lock        the watchdog (relaxed,  send_lock for the
 *                    (relaxed)                       before its trylock)     sends; the read is a
 *                                                                            hint (P5)
 *   k->p.hb_ms       the holder, from the PING       the watchdog (relaxed)  none: a hint (P5)
 *                    (relaxed, srv_proto.c)
 *   socket writes    the holder and the watchdog     -                       send_lock (P5)
 *   k->st, st_err    the holder, send_lock held from the holder                  P1; send_lock
 *                    tcp_io_stream() to                                      stays held between
 *                    tcp_io_stream_end()                                     the two (P5)
 *   k->lowat         the holder (W1)                 the holder              P1
 *   k->partial_      the holder (relaxed)            the watchdog (relaxed)  none: a hint; the
 *   deadline                                                                 holder decides (P4)
 *   k->stalled       the watchdog (relaxed CAS       the holder (relaxed),   the kernel: the
 *                    from 0 to the reason, then      after it reads EOF      shutdown before EOF
 *                    shutdown(RD))
 *   k->done          conn_finish() (release)         reap() (acquire)        P3
 *   k->next,         conn_new(), reap() (under       watch(), reap() (under  s->base.lock
 *   s->conns         s->base.lock)                   s->base.lock)
 *   s->pending       conn_new() (relaxed +), the     the acceptor (relaxed)  none: a count (H1);
 *                    holder (relaxed -, once)                                one more or less
 *                                                                            for a moment
 *   s->stopping      serve() at stop (relaxed)       conn_serve(), park()    the stop eventfd
 *                                                    (relaxed)               (epoll) and the
 *                                                                            broadcast under
 *                                                                            park_lock; joins
 *
 * Hostile input: every frame goes through the checked decoder (transport/wire/wire.c); a
 * frame that fails it, an unknown frame type, a function table that does
 * not parse, or a peer that stalls mid-frame closes that connection with an
 * ERROR frame and a logged reason.  Nothing a peer sends can stop the
 * server or another connection.
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <fcntl.h>
#include <sys/socket.h>
#include <unistd.h>

#include <coord/var.h>

#include "runtime/ps/ps.h"
#include "runtime/util/abi.h"
#include "runtime/util/fdlimit.h"
#include "transport/wire/sock.h"
#include "transport/server/tcp_server_pvt.h"

#define WATCH_IDLE_MS 20      /* the watchdog's tick while every pool thread is idle */
#define ACCEPT_BURST 64u      /* connections accepted per wake-up of the listener (A1) */
#define ACCEPT_PAUSE_MS 100   /* no descriptor or memory for a new one: wait (A1) */
#define HS_BUF 256	      /* a new peer's first reader buffer (H1) */
#define CONN_BUF (64 * 1024u) /* an authenticated connection's reader buffer */

void coord_server_opts_defaults(struct coord_server_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->listen = "127.0.0.1:0";
	o->max_frame = COORD_WIRE_MAX_FRAME_DEFAULT;
	o->handshake_ms = 5000;
	o->partial_ms = 10000;
	o->stop_fd = -1;
	o->task = -1;
	o->transport = "tcp";
	o->max_handshakes = 1024;
	o->idle_ms = 300000;
}

/* Every send on a serving connection (P5: never interleaved). */
static int conn_send(struct conn *k, const void *b, size_t len)
{
	int r;

	pthread_mutex_lock(&k->send_lock);
	r = coord_sock_send_all(k->fd, b, len);
	/* Relaxed (P5): a hint for the watchdog. */
	atomic_store_explicit(&k->last_sent_ns, coord_now_ns(), memory_order_relaxed);
	pthread_mutex_unlock(&k->send_lock);
	return r;
}

/* The engine's send interface over a socket (struct coord_srv_io). */
static int tcp_io_send(void *ctx, const void *b, size_t len)
{
	return conn_send(ctx, b, len);
}

/* A streamed result's time under its variable's stripes: the budget of
 * struct coord_srv_io @stream (srv_proto.h). */
#define STREAM_BASE_NS 2000000ull
#define STREAM_NS_PER_MIB 1000000ull

/* struct coord_srv_io @stream: send_lock is held until tcp_io_stream_end()
 * (P5: nothing interleaves), but on -ENOMEM. */
static int tcp_io_stream(void *ctx, const void *head, size_t hlen, const void *src, size_t len)
{
	struct conn *k = ctx;
	int r;

	pthread_mutex_lock(&k->send_lock);
	r = coord_sock_stream_start(k->fd, &k->st, head, hlen, src, len,
				    STREAM_BASE_NS + ((uint64_t)len * STREAM_NS_PER_MIB >> 20));
	if (r == -ENOMEM) {
		pthread_mutex_unlock(&k->send_lock);
		return r;
	}
	k->st_err = r;
	return r;
}

static int tcp_io_stream_end(void *ctx)
{
	struct conn *k = ctx;
	int r = k->st_err ? k->st_err : coord_sock_stream_finish(k->fd, &k->st);

	/* Relaxed (P5): a hint for the watchdog. */
	atomic_store_explicit(&k->last_sent_ns, coord_now_ns(), memory_order_relaxed);
	pthread_mutex_unlock(&k->send_lock);
	return r;
}

/* S3: the socket found empty this recently needs no new look (a round
 * trip's frame never pays a recv for it; a batch that ran longer does). */
#define PEEK_NS 20000ull

/*
 * S3 (struct coord_srv_io @peek): unless the socket was found empty within
 * PEEK_NS, read what has arrived into the reader's spare room, never moving
 * its buffer (the REQ frame being served points into it); then, if bytes
 * came in since the last look, pass on any CANCEL among the whole frames
 * the reader holds beyond this one (a frame read together with a CANCEL
 * learns of it before its first closure).  They stay unread and are served
 * in order later.  EOF and errors are left to the next
 * coord_frame_try_read() to report.  The holder's thread (P1).
 */
static void tcp_io_peek(void *ctx, uint64_t now)
{
	struct conn *k = ctx;
	struct coord_frame_reader *rd = &k->rd;
	size_t off = rd->off;
	ssize_t n;

	if (now - rd->drained_ns >= PEEK_NS && rd->cap > rd->len) {
		n = recv(k->fd, rd->buf + rd->len, rd->cap - rd->len, MSG_DONTWAIT);
		if (n > 0) {
			rd->len += (size_t)n;
			rd->rx_total += (uint64_t)n;
		}
		if ((n > 0 && rd->len < rd->cap) || (n < 0 && errno == EWOULDBLOCK))
			rd->drained_ns = now;
	}
	/* What the reader holds beyond this frame was looked at already
	 * unless bytes came in since (read here or by the serving loop). */
	if (rd->rx_total == k->peek_rx)
		return;
	k->peek_rx = rd->rx_total;
	while (rd->len - off >= COORD_WIRE_HDR) {
		struct coord_wire_hdr h;
		uint32_t gen;

		if (coord_wire_parse_hdr(rd->buf + off, rd->len - off, rd->max_frame, &h) < 0 ||
		    rd->len - off < COORD_WIRE_HDR + (size_t)h.len)
			break; /* not whole yet, or bad: the serving loop says */
		if (h.type == COORD_WIRE_CANCEL &&
		    coord_wire_get_cancel(&h, rd->buf + off + COORD_WIRE_HDR, &gen) == 0)
			coord_srv_conn_cancel(&k->p, gen);
		off += COORD_WIRE_HDR + (size_t)h.len;
	}
}

/* The frame at @off of @rd, if it is whole there: its header in @h. */
static bool frame_at(const struct coord_frame_reader *rd, size_t off, struct coord_wire_hdr *h)
{
	return rd->len - off >= COORD_WIRE_HDR &&
	       coord_wire_parse_hdr(rd->buf + off, rd->len - off, rd->max_frame, h) == 0 &&
	       rd->len - off >= COORD_WIRE_HDR + (size_t)h->len;
}

/*
 * Take-back (struct coord_srv_io @behind, srv_take.c T2; tcp_pool.c P6):
 * read what has arrived into the reader's spare room, never moving its
 * buffer (the running frame points into it), then show @visit every whole
 * frame behind the running one.  They stay unread, served in order later.
 * The watchdog's thread, while it holds the take (the holder touches
 * nothing of the reader until it is done: the claim word orders the two).
 */
static void tcp_io_behind(void *ctx, coord_srv_visit_fn visit, void *arg)
{
	struct conn *k = ctx;
	struct coord_frame_reader *rd = &k->rd;
	struct coord_wire_hdr h;
	size_t off = rd->off;

	while (rd->cap > rd->len) {
		ssize_t n = recv(k->fd, rd->buf + rd->len, rd->cap - rd->len, MSG_DONTWAIT);

		if (n <= 0)
			break; /* empty, EOF or an error: the holder's next read says */
		rd->len += (size_t)n;
		rd->rx_total += (uint64_t)n;
	}
	for (; frame_at(rd, off, &h); off += COORD_WIRE_HDR + (size_t)h.len)
		visit(arg, &h, rd->buf + off + COORD_WIRE_HDR);
}

static void conn_error(struct conn *k, int code, const char *why)
{
	pthread_mutex_lock(&k->send_lock);
	coord_send_error(k->fd, code, why);
	pthread_mutex_unlock(&k->send_lock);
}

/* The connection is over: nothing touches it after this but the acceptor. */
static void conn_finish(struct conn *k)
{
	if (!k->authed)
		/* Relaxed (H1): a count; the acceptor reads it as a limit. */
		atomic_fetch_sub_explicit(&k->s->pending, 1, memory_order_relaxed);
	if (k->polled)
		epoll_ctl(k->s->epfd, EPOLL_CTL_DEL, k->fd, NULL);
	/* Here, not in conn_free(): reap() holds s->lock, ps_release takes it. */
	coord_srv_conn_drop_ps(&k->p);
	shutdown(k->fd, SHUT_RDWR);
	/* P3 (release): pairs with the acquire in reap(): the acceptor frees
	 * the connection only after everything above. */
	atomic_store_explicit(&k->done, 1, memory_order_release);
}

/* The handshake's answers (H1) go out as every send does (P5). */
static int hs_io_write(void *ctx, const void *b, size_t len)
{
	return conn_send(ctx, b, len);
}

/*
 * H1: take the handshake frames @k has without blocking.  Return: 0 the
 * peer is authenticated (what came after is served next); -EAGAIN wait
 * for more; -1 refused (logged, told, finished).
 */
static int hs_serve(struct conn *k)
{
	struct srv *s = k->s;
	const struct coord_server_opts *o = s->base.o;
	struct coord_frame_io io = { .ctx = k, .write = hs_io_write };
	struct coord_wire_hdr h;
	const uint8_t *payload;
	struct coord_error err;
	int r;

	do {
		r = coord_frame_try_read(&k->rd, &h, &payload);
		if (r == -EAGAIN)
			return r;
		/* P4 (relaxed): the watchdog only asks; the holder decides. */
		if (r == -EPIPE && atomic_load_explicit(&k->stalled, memory_order_relaxed))
			r = -ETIMEDOUT; /* the watchdog shut our read side (H1) */
		if (r < 0) {
			coord_handshake_read_error(r, k->hs.want, o->handshake_ms, k->p.peer, &err);
			break;
		}
		r = coord_hs_server_frame(&k->hs, &io, &h, payload, k->p.peer, &err);
	} while (r == 0);
	if (r == 1)
		r = coord_srv_conn_start(&k->p, k->hs.task, "", &err);
	if (r == 0)
		r = coord_frame_reader_open(&k->rd, o->max_frame, CONN_BUF) < 0
			    ? coord_seterr(&err, COORD_ENOMEM, "%s: no memory for a connection",
					   k->p.peer)
			    : 0;
	if (r == 0) {
		k->authed = true;
		/* Relaxed (H1): a count; the acceptor reads it as a limit. */
		atomic_fetch_sub_explicit(&s->pending, 1, memory_order_relaxed);
		/* Relaxed (I1): a hint for the watchdog. */
		atomic_store_explicit(&k->open, 1, memory_order_relaxed);
		/* Relaxed (P4): the handshake's deadline is over. */
		atomic_store_explicit(&k->partial_deadline, 0, memory_order_relaxed);
		return 0;
	}
	coord_log(COORD_LOG_WARN, "refused %s", err.msg);
	if (r != -EPIPE && r != -EACCES) /* -EACCES already said so */
		conn_error(k, r, err.msg);
	conn_finish(k);
	return -1;
}

/* Why the watchdog closed @k (P4, I1); the reason for its ERROR frame. */
static const char *stall_why(struct conn *k, int *code)
{
	/* Relaxed (P4): read back by the holder after the EOF it caused. */
	int why = atomic_load_explicit(&k->stalled, memory_order_relaxed);

	*code = -ETIMEDOUT;
	return why == STALL_IDLE ? "idle: nothing received for too long"
				 : "stalled in the middle of a frame";
}

/*
 * conn_serve()'s read ended with @r (-EAGAIN: all read): is @k over?  A
 * stall the watchdog caused (P4, I1), the peer's close or a bad frame
 * header close it, with a log line and, but for the peer's close, an
 * ERROR frame.  The holder's thread (P1).
 */
static bool read_over(struct conn *k, int r)
{
	/* P4 (relaxed): the watchdog only asks; stalled is re-read here, by
 * the thread that holds the connection. */
	if (r == -EPIPE && atomic_load_explicit(&k->stalled, memory_order_relaxed)) {
		int code;
		const char *why = stall_why(k, &code);

		coord_log(COORD_LOG_WARN, "%s: closing: %s", k->p.peer, why);
		conn_error(k, code, why);
		return true;
	}
	if (r == -EPIPE) {
		coord_log(COORD_LOG_INFO, "%s: closed by the coordinator", k->p.peer);
		return true;
	}
	if (r < 0 && r != -EAGAIN) {
		const char *why = r == -EMSGSIZE ? "frame larger than the limit"
				  : r == -EPROTO ? "malformed frame header"
						 : strerror(-r);

		coord_log(COORD_LOG_WARN, "%s: closing: %s", k->p.peer, why);
		conn_error(k, r, why);
		return true;
	}
	return false;
}

/* W1: a frame this far from whole wakes its holder after LOWAT_STEP more bytes. */
#define LOWAT_MIN (256u << 10)
#define LOWAT_STEP (256u << 10)

/*
 * W1: while a large frame comes in (an assign's data), the re-armed
 * connection is returned by epoll only once LOWAT_STEP more bytes (or the
 * frame's rest) have arrived (SO_RCVLOWAT), not for every segment: a few
 * wake-ups and reads per MiB, not dozens.  Else 1, the default, so a small
 * frame wakes it at once.  A shut read side (P4) wakes it whatever the mark.
 * The holder's thread (P1), before the re-arm.
 */
static void rcv_lowat(struct conn *k)
{
	struct coord_wire_hdr h;
	size_t have = k->rd.len - k->rd.off, want = 1;
	int v;

	/* (a whole frame buffered, served next: 1) */
	if (coord_wire_parse_hdr(k->rd.buf + k->rd.off, have, k->rd.max_frame, &h) == 0 &&
	    COORD_WIRE_HDR + (size_t)h.len > have &&
	    COORD_WIRE_HDR + (size_t)h.len - have >= LOWAT_MIN) {
		want = COORD_WIRE_HDR + (size_t)h.len - have;
		want = want < LOWAT_STEP ? want : LOWAT_STEP;
	}
	if (want == k->lowat || (want == 1 && k->lowat == 0))
		return;
	v = (int)want;
	if (setsockopt(k->fd, SOL_SOCKET, SO_RCVLOWAT, &v, sizeof(v)) == 0)
		k->lowat = want;
}

/*
 * Serve what @k has to read without blocking: the handshake (H1), then
 * every whole frame (at most a bounded number, so one busy connection does
 * not hold a thread while others wait), then re-arm it in the pool's epoll
 * (P1).  Called by the pool thread @t whose epoll_wait returned @k.
 */
void conn_serve(struct pool_thread *t, struct conn *k)
{
	const struct coord_server_opts *o = k->s->base.o;
	struct epoll_event ev = { .events = EPOLLIN | EPOLLONESHOT, .data.ptr = k };
	struct coord_wire_hdr h;
	const uint8_t *payload;
	unsigned frames = 0;
	uint64_t now;
	int r = 0;

	/* P1 (acquire): pairs with the release below in the previous holder's
	 * conn_serve(), which it makes right after its re-arm (or conn_new()'s
	 * before the first arm): everything it did to @k (the re-arm too)
	 * happens-before ours.  The event can come a few instructions before
	 * that store: wait for it, as for a ring slot claimed and not yet
	 * published. */
	for (unsigned i = 1; atomic_exchange_explicit(&k->held, 1, memory_order_acquire); i++)
		coord_spin_pause(i);
	/* Relaxed (P5): a hint for the watchdog. */
	atomic_store_explicit(&k->held_since, coord_now_ns(), memory_order_relaxed);

	if (!k->authed) {
		r = hs_serve(k);
		if (r == -1)
			return; /* finished */
	}
	/* At most 64 frames, and then those already whole in the reader (a
	 * look for a CANCEL or a take-back read them ahead: no epoll event
	 * would come for them). */
	for (; k->authed && (frames < 64 || frame_at(&k->rd, k->rd.off, &h)); frames++) {
		r = coord_frame_try_read(&k->rd, &h, &payload);
		if (r < 0)
			break;
		/* Relaxed (P2): read by the watchdog as a hint.  Only a frame's
		 * service (a closure, a ps round trip, a send to a peer that
		 * does not read) can hold a thread long: the handshake and the
		 * reads are not timed, so a thread preempted there (a loaded
		 * machine) does not make the watchdog add one. */
		atomic_store_explicit(&t->busy_since, coord_now_ns(), memory_order_relaxed);
		r = coord_srv_conn_frame(&k->p, &h, payload);
		/* Relaxed (P2): as above. */
		atomic_store_explicit(&t->busy_since, 0, memory_order_relaxed);
		if (r == 1)
			goto out;
		if (r < 0) {
			const char *why = r == -EPROTO ? "malformed or unexpected frame"
						       : coord_strerror(r);

			coord_log(COORD_LOG_WARN, "%s: closing: %s (%s frame)", k->p.peer, why,
				  coord_wire_type_name(h.type));
			conn_error(k, r, why);
			goto out;
		}
		if (k->rd.off == k->rd.len) {
			/* All read was served: re-arm rather than recv() again
			 * for an EAGAIN; the level-triggered re-arm reports
			 * whatever came meanwhile.  One syscall less per frame. */
			frames++;
			r = -EAGAIN;
			break;
		}
	}
	if (read_over(k, r))
		goto out;
	now = coord_now_ns();
	if (!k->authed) {
		/* H1: the handshake's deadline, set at accept, stands. */
	} else if (k->rd.len > k->rd.off) {
		/* A frame started: it has partial_ms from its first bytes (a
		 * frame completed here means the buffered rest is a new one).
		 * Relaxed (P4): ours; the watchdog reads it as a hint. */
		if (frames || !atomic_load_explicit(&k->partial_deadline, memory_order_relaxed))
			/* Relaxed (P4): as above. */
			atomic_store_explicit(&k->partial_deadline,
					      now + (uint64_t)o->partial_ms * 1000000ull,
					      memory_order_relaxed);
	} else {
		/* Relaxed (P4): as above. */
		atomic_store_explicit(&k->partial_deadline, 0, memory_order_relaxed);
	}
	if (k->authed)
		rcv_lowat(k);
	/* Relaxed: a poll flag; stop also wakes every pool thread. */
	if (atomic_load_explicit(&k->s->stopping, memory_order_relaxed))
		goto out;
	/* Relaxed (I1): a hint for the watchdog. */
	atomic_store_explicit(&k->last_active, now, memory_order_relaxed);
	/* Relaxed (P5): not held from here; a stale read costs one PONG. */
	atomic_store_explicit(&k->held_since, 0, memory_order_relaxed);
	if (epoll_ctl(k->s->epfd, EPOLL_CTL_MOD, k->fd, &ev) == 0) {
		/* P1 (release): pairs with the acquire above in the next
		 * holder; the last touch of @k. */
		atomic_store_explicit(&k->held, 0, memory_order_release);
		return;
	}
	coord_log(COORD_LOG_ERROR, "%s: epoll_ctl: %s", k->p.peer, strerror(errno));
out:
	conn_finish(k);
}

static void conn_free(struct conn *k)
{
	close(k->fd);
	pthread_mutex_destroy(&k->send_lock);
	coord_frame_reader_fini(&k->rd);
	coord_srv_conn_fini(&k->p);
	free(k->st.tail);
	free(k);
}

/* Free finished connections; with @all, every connection (the pool has
 * stopped). */
static void reap(struct srv *s, bool all)
{
	struct conn **pp, *k, *dead = NULL;

	pthread_mutex_lock(&s->base.lock);
	for (pp = &s->conns; (k = *pp);) {
		/* P3 (acquire): pairs with the release in conn_finish(). */
		if (all || atomic_load_explicit(&k->done, memory_order_acquire)) {
			*pp = k->next;
			k->next = dead;
			dead = k;
			s->nconns--;
		} else {
			pp = &k->next;
		}
	}
	pthread_mutex_unlock(&s->base.lock);
	while ((k = dead)) {
		dead = k->next;
		/* Off the lock: ps_release() takes it.  Relaxed: the pool has
		 * stopped (@all), or done was acquired above. */
		if (!atomic_load_explicit(&k->done, memory_order_relaxed))
			coord_srv_conn_drop_ps(&k->p);
		conn_free(k);
		s->freed++;
		s->freed_ns = coord_now_ns();
	}
}

/* H1: a new connection, in the handshake, handed to the pool; 0 or -errno. */
static int conn_new(struct srv *s, int fd, const char *peer)
{
	struct coord_srv_io io = { .send = tcp_io_send,
				   .peek = tcp_io_peek,
				   .stream = tcp_io_stream,
				   .stream_end = tcp_io_stream_end,
				   .behind = tcp_io_behind };
	struct epoll_event ev = { .events = EPOLLIN | EPOLLONESHOT };
	uint64_t now = coord_now_ns();
	struct conn *k;
	int one = 1;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
	k = calloc(1, sizeof(*k));
	if (!k || coord_frame_reader_init_cap(&k->rd, fd, COORD_WIRE_HS_MAX_FRAME, HS_BUF) < 0) {
		free(k);
		return -ENOMEM;
	}
	k->s = s;
	k->fd = fd;
	pthread_mutex_init(&k->send_lock, NULL);
	io.ctx = k;
	snprintf(k->p.peer, sizeof(k->p.peer), "%s", peer);
	coord_srv_conn_init(&k->p, &s->base, &io);
	coord_hs_server_init(&k->hs, &s->base.key, s->base.role);
	/* Relaxed (H1, I1): hints for the watchdog; the release below
	 * publishes them to the first holder too. */
	atomic_store_explicit(&k->partial_deadline,
			      now + (uint64_t)s->base.o->handshake_ms * 1000000ull,
			      memory_order_relaxed);
	/* Relaxed (I1): as above. */
	atomic_store_explicit(&k->last_active, now, memory_order_relaxed);
	/* Relaxed (H1): a count; the acceptor reads it as a limit. */
	atomic_fetch_add_explicit(&s->pending, 1, memory_order_relaxed);
	k->polled = true;
	pthread_mutex_lock(&s->base.lock);
	k->next = s->conns;
	s->conns = k;
	s->nconns++;
	pthread_mutex_unlock(&s->base.lock);
	/* P1 (release): pairs with the first holder's acquire in
	 * conn_serve(): everything above happens-before it (epoll orders it
	 * too, which TSan does not see). */
	atomic_store_explicit(&k->held, 0, memory_order_release);
	ev.data.ptr = k;
	if (epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev) < 0) {
		int r = -errno;

		k->polled = false;
		conn_finish(k); /* reap() frees it */
		return r;
	}
	return 0;
}

/* H1: too many handshakes: say so to the peer, close, log at most once a
 * second (with how many were refused). */
static void refuse(struct srv *s, int fd, const char *peer, unsigned pending)
{
	char m[96];
	uint64_t now = coord_now_ns();

	snprintf(m, sizeof(m), "server busy: %u connections in the handshake", pending);
	coord_send_error(fd, -EBUSY, m);
	close(fd);
	s->refused++;
	if (now - s->refused_logged_ns >= 1000000000ull) {
		coord_log(COORD_LOG_WARN,
			  "refused %u connection%s in the last second (the last from %s): %u "
			  "in the handshake, the limit (max_handshakes) is %u",
			  s->refused, s->refused == 1 ? "" : "s", peer, pending,
			  s->base.o->max_handshakes);
		s->refused_logged_ns = now;
		s->refused = 0;
	}
}

/* A1: accept what is waiting, up to ACCEPT_BURST; on running out of
 * descriptors or memory, pause the listener (logged once per episode). */
static void accept_some(struct srv *s, int lfd)
{
	for (unsigned i = 0; i < ACCEPT_BURST; i++) {
		struct sockaddr_storage ss;
		socklen_t len = sizeof(ss);
		int fd = accept4(lfd, (struct sockaddr *)&ss, &len, SOCK_CLOEXEC), r;
		unsigned pending;
		char peer[80];

		if (fd < 0) {
			r = errno;
			if (r == EMFILE || r == ENFILE || r == ENOBUFS || r == ENOMEM) {
				s->accept_paused_until = coord_now_ns() +
							 ACCEPT_PAUSE_MS * 1000000ull;
				if (!s->out_of_fds)
					coord_log(COORD_LOG_WARN,
						  "cannot accept: %s with %u connections open; "
						  "not accepting for %d ms at a time until one "
						  "closes (descriptor limit: %lu, ulimit -n)",
						  strerror(r), s->nconns, ACCEPT_PAUSE_MS,
						  coord_fd_limit());
				s->out_of_fds = true;
				return;
			}
			if (r == EAGAIN || r == EWOULDBLOCK)
				return;
			continue; /* ECONNABORTED, EINTR, a peer's error: the next */
		}
		if (s->out_of_fds) {
			coord_log(COORD_LOG_WARN, "accepting again (%u connections open)",
				  s->nconns);
			s->out_of_fds = false;
		}
		coord_sock_name((struct sockaddr *)&ss, len, peer, sizeof(peer));
		/* Relaxed (H1): a count; one more or less for a moment is fine. */
		pending = atomic_load_explicit(&s->pending, memory_order_relaxed);
		if (pending >= s->base.o->max_handshakes) {
			refuse(s, fd, peer, pending);
			continue;
		}
		r = conn_new(s, fd, peer);
		if (r == -ENOMEM) {
			coord_log(COORD_LOG_ERROR, "out of memory for a connection from %s", peer);
			close(fd);
		} else if (r < 0) {
			coord_log(COORD_LOG_ERROR, "%s: epoll_ctl: %s", peer, strerror(-r));
		}
	}
}

/* The log line that the server is up, and the on_listen callback. */
static void say_serving(struct srv *s, unsigned port)
{
	const struct coord_server_opts *o = s->base.o;

	if (s->base.role == COORD_ROLE_PS)
		coord_log(COORD_LOG_INFO, "serving ps task %d on port %u (%s)", o->task, port,
			  s->base.key.set ? "cluster key required"
					  : "no cluster key: loopback only");
	else
		coord_log(COORD_LOG_INFO, "serving %u functions on port %u (%s)", o->registry->n,
			  port,
			  s->base.key.set ? "cluster key required"
					  : "no cluster key: loopback only");
	if (o->on_listen)
		o->on_listen(port, o->arg);
}

static int serve(const struct coord_server_opts *o, uint8_t role, struct coord_varstore *vs,
		 struct coord_error *err)
{
	struct srv s = { .epfd = -1, .stop_efd = -1 };
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = NULL };
	bool busy = false;
	unsigned port;
	int lfd, r;

	r = coord_srv_init(&s.base, o, role, vs, err);
	if (r < 0)
		return r;
	if (o->transport && strcmp(o->transport, "tcp") != 0) {
		/* The same engine over rdma channels (rdma_server.c). */
		if (strcmp(o->transport, "rdma") == 0)
			r = coord_rdma_serve(&s.base, err);
		else
			r = coord_seterr(err, COORD_EINVAL,
					 "unknown server transport \"%s\" (tcp or rdma)",
					 o->transport);
		coord_srv_fini(&s.base);
		return r;
	}
	coord_fd_limit_raise(role == COORD_ROLE_PS ? "coord_ps_serve" : "coord_worker_serve");
	r = coord_sock_listen(o->listen, &s.base.key, &lfd, &port, err);
	if (r < 0) {
		coord_srv_fini(&s.base);
		return r;
	}
	fcntl(lfd, F_SETFL, fcntl(lfd, F_GETFL) | O_NONBLOCK); /* A1: accept_some() drains it */
	pthread_mutex_init(&s.park_lock, NULL);
	pthread_cond_init(&s.park_cv, NULL);
	s.target = pool_target();
	s.epfd = epoll_create1(EPOLL_CLOEXEC);
	s.stop_efd = eventfd(0, EFD_CLOEXEC);
	if (s.epfd < 0 || s.stop_efd < 0 || epoll_ctl(s.epfd, EPOLL_CTL_ADD, s.stop_efd, &ev) < 0) {
		r = coord_seterr(err, -errno, "cannot set up the serving pool: %s",
				 strerror(errno));
		goto out;
	}
	for (unsigned i = 0; i < s.target; i++)
		if (pool_spawn(&s) < 0) {
			r = coord_seterr(err, COORD_ENOMEM, "cannot start the serving pool");
			goto out;
		}
	say_serving(&s, port);
	for (;;) {
		/* A1: a paused listener is left out of the poll (fd -1). */
		bool paused = s.accept_paused_until > coord_now_ns();
		struct pollfd p[2] = { { .fd = paused ? -1 : lfd, .events = POLLIN },
				       { .fd = o->stop_fd, .events = POLLIN } };

		/* The watchdog's tick: fine while a pool thread is busy (a
		 * stuck one is relieved within about STUCK_NS + 1 ms), coarse
		 * when all are idle (partial frames: partial_ms). */
		if (poll(p, 2, busy ? 1 : WATCH_IDLE_MS) > 0) {
			if (p[1].revents & (POLLIN | POLLHUP))
				break;
			if (p[0].revents & POLLIN)
				accept_some(&s, lfd);
		}
		busy = watch(&s);
		reap(&s, false);
		trim(&s);
	}
	r = 0;
out:
	/* Relaxed: pool threads see the stop eventfd; parked ones the broadcast. */
	atomic_store_explicit(&s.stopping, 1, memory_order_relaxed);
	if (s.stop_efd >= 0) {
		uint64_t one = 1;

		(void)!write(s.stop_efd, &one, sizeof(one));
	}
	pthread_mutex_lock(&s.park_lock);
	pthread_cond_broadcast(&s.park_cv);
	pthread_mutex_unlock(&s.park_lock);
	for (unsigned i = 0; i < s.nthreads; i++) {
		pthread_join(s.threads[i]->thread, NULL);
		free(s.threads[i]);
	}
	free(s.threads);
	close(lfd);
	reap(&s, true);
	if (s.epfd >= 0)
		close(s.epfd);
	if (s.stop_efd >= 0)
		close(s.stop_efd);
	pthread_cond_destroy(&s.park_cv);
	pthread_mutex_destroy(&s.park_lock);
	coord_srv_fini(&s.base);
	return r;
}

int coord_worker_serve(const struct coord_server_opts *o, struct coord_error *err)
{
	struct coord_server_opts so; /* @o as this library's struct (runtime/abi.h) */

	if (o && coord_server_opts_in(&so, o, err) < 0)
		return COORD_EINVAL;
	o = o ? &so : NULL;
	if (!o || !o->registry || !o->listen || o->max_frame < 4096 ||
	    o->max_frame > COORD_WIRE_MAX_FRAME_LIMIT || !o->max_handshakes || o->idle_ms < 0)
		return coord_seterr(err, COORD_EINVAL,
				    "coord_worker_serve: a registry, a listen "
				    "address, a max_frame of 4 KiB..1 GiB, max_handshakes >= 1 "
				    "and idle_ms >= 0 are required");
	return serve(o, COORD_ROLE_WORKER, NULL, err);
}

int coord_ps_serve(const struct coord_server_opts *o, struct coord_error *err)
{
	struct coord_server_opts so; /* @o as this library's struct (runtime/abi.h) */
	struct coord_varstore *vs;
	int r;

	if (o && coord_server_opts_in(&so, o, err) < 0)
		return COORD_EINVAL;
	o = o ? &so : NULL;
	if (!o || !o->listen || o->max_frame < 4096 || o->max_frame > COORD_WIRE_MAX_FRAME_LIMIT ||
	    !o->max_handshakes || o->idle_ms < 0)
		return coord_seterr(err, COORD_EINVAL,
				    "coord_ps_serve: a listen address, a max_frame of "
				    "4 KiB..1 GiB, max_handshakes >= 1 and idle_ms >= 0 are "
				    "required");
	r = coord_varstore_create(NULL, &vs, err);
	if (r < 0)
		return r;
	r = coord_varstore_set_ckpt_root(vs, o->ckpt_root ? o->ckpt_root : ".",
					 o->ckpt_root ? o->task : -1, err);
	if (r == 0)
		r = serve(o, COORD_ROLE_PS, vs, err);
	coord_varstore_destroy(vs);
	return r;
}
