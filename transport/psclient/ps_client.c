// SPDX-License-Identifier: MIT
/*
 * transport/psclient/ps_client.c - the network side of parameter-server variables: a
 * coordinator's or a worker's connections to the ps tasks (runtime/ps/ps.h).
 *
 * One connection per ps task, opened on first use and again after a loss.
 * Callers append their requests to the connection's frame buffer under a
 * short mutex (a memcpy); the first caller that finds no send in progress
 * becomes the sender and writes everything queued, again and again until
 * the buffer is empty, so concurrent callers (the connection threads of a
 * coord-worker process, a batch from coord_ctx_var_batch()) share frames and
 * system calls (flat combining).  Each request takes a slot of the pending
 * table; its rid = (slot generation << 32) | slot index, so a reply that
 * names no pending request (a confused or hostile ps) is detected, never
 * followed.  A reader thread per connection takes the VAR_RES frames, copies
 * each result into its caller's buffer and, when the last op of a caller's
 * batch is done, wakes it on a futex.  A lost connection fails its pending
 * requests with COORD_EUNAVAILABLE.
 *
 * Heartbeat (tcp).  The reader sends a VAR_SYNC asking for an echo every
 * ping interval (at most the heartbeat, a third of heartbeat x misses and a
 * quarter of the window below), without ever blocking: queued behind a
 * sender at work, else sent with MSG_DONTWAIT under k->lock, what does not
 * fit left queued in order.  The ps answers with a PONG; while a long op
 * holds the connection, its watchdog sends keepalive PONGs (tcp_server.c
 * P5; the VAR_SYNC tells it the interval).  A connection on which no byte
 * came for heartbeat_ms x heartbeat_misses is lost: its requests fail with
 * COORD_EUNAVAILABLE at once (not after the op timeout, nor after TCP's own
 * retransmissions), it is closed with a reset (nothing queued goes out
 * late), and the next request dials again.  A worker's client takes the
 * heartbeat and the op timeout from its coordinator (PS_OPTS, wire.h).
 *
 * Give-up: a request the client gave up on is never applied.  The ps counts
 * the frames it sends that we count (VAR_RES frames, echoes of our
 * VAR_SYNC: a PONG whose token has bit 63; frame 0 is the handshake), and a
 * VAR_SYNC names how many we had received when we wrote it (first on every
 * connection: 0; then each ping, and before a request when the last named
 * frame is older than a quarter window and newer ones came).  The ps
 * applies a request only if it starts less than the window after it sent
 * the frame the last VAR_SYNC before it names (srv_proto.c "Give-up").  We
 * give up on a request only
 *   - at its timeout: op_timeout after it was queued, which is after that
 *     VAR_SYNC was queued, which is after the frame it names came;
 *   - when the connection is lost to silence: heartbeat x misses after the
 *     last byte came, which is no earlier than that frame;
 *   - when the ps closed or reset the connection (EOF, ECONNRESET, EPIPE: it
 *     reads nothing more of it), or the kernel gave up on it (its own
 *     retransmission limit, minutes) - never on our own initiative sooner;
 * so window = min(op_timeout, heartbeat x misses) after receiving the frame
 * always comes before we give up, and the ps, which sent that frame before
 * we received it, never applies a request after we gave up.  Each side
 * measures a duration on its own clock: the hosts' clocks are never
 * compared, and may differ by any amount (the ps keeps 1/16 of the window
 * for rates that differ).  A ps that breaks the protocol (a malformed
 * frame) is outside this.  Not covered: a request the ps applied whose
 * reply is lost with the connection; its closure fails (or is put back)
 * though its update was made.  rdma: no heartbeat or VAR_SYNC yet (the ps
 * does not judge a connection that never sent one).
 *
 * Over rdma (coord_psc_use_rdma(): the coordinator or worker itself runs
 * over rdma, and so do the ps tasks) a connection is a frame channel
 * (ps_rdma.h) in place of the socket, and a READ goes one-sided when it
 * can: the variable is mapped once per connection (a MAP op, answered with
 * its address and rkeys), then read with RDMA READs that the ps CPU takes no
 * part in (runtime/store/varstore.c SNAP1-SNAP3: a snapshot between two writes, or a
 * retry; after COORD_PSR_TRIES, or on any failure, the READ goes two-sided
 * as before).  use_lock keeps the socket or channel open under a sender or
 * a one-sided reader while conn_up() closes or replaces a lost one.
 *
 * Why a mutex here when the closure path has none: a variable op is a round
 * trip to another process (tens of microseconds); the mutex covers a copy
 * into the frame buffer and the pending table, never a blocking system
 * call (the reader's ping is a send with MSG_DONTWAIT).
 *
 * Synchronization: who writes each shared field, who reads it, and what
 * orders the two.  Callers are any threads in coord_psc_run(); the reader
 * is a connection's reader thread (reader_main()).
 *   field            written by (how)                read by (how)           order
 *   struct coord_psc coord_psc_create(), and         everyone (plain)        before the first
 *   (nps .. rdma),   coord_psc_use_rdma() before                             call (ps.h); after
 *   k->p/task/addr   the first call                                          that, immutable
 *   k->up, flushing, callers, the reader,            the same                k->lock
 *   open, out/spare, conn_up() (under k->lock)
 *   w (the writer),
 *   slots[], freel,
 *   nfree, why,
 *   maps, nmaps,
 *   rx_count, rx_ns,
 *   synced, synced_ns,
 *   ping_seq
 *   k->fd, k->r,     conn_up() (under conn_lock,     senders in flush()      either lock excludes
 *   k->gen           use_lock for writing and        (use_lock for reading), the writers; a
 *                    k->lock: the close, the         conn_down(), the        sender sends only
 *                    replacement, gen + 1)           reader's ping, destroy  if gen is still the
 *                                                    (k->lock); one-sided    one it read with the
 *                                                    readers (use_lock); the bytes, under
 *                                                    reader (no lock: it is  k->lock: never
 *                                                    joined before a         another connection's
 *                                                    replacement)            (was Open: fixed)
 *   k->reader,       conn_up() (under conn_lock)     conn_up(), destroy      conn_lock; destroy
 *   reader_started                                                           has no caller inside
 *   w->left          the caller (relaxed: init,      the caller (acquire     slot_done()'s
 *                    and - for ops never queued);    load; futex wait)       release -> the
 *                    slot_done() (release -, under                           caller's acquire:
 *                    k->lock, reader or caller)                              the op's result
 *   w->has_err,      wait_error() (acq_rel CAS; the  the caller (acquire),   the CAS, then
 *   *w->err          winner writes the message)      after left reads 0      left's release ->
 *                                                                            acquire
 *   op->code, dst,   on_result() (the reader, under  the caller, after left  as w->left
 *   dst_len          k->lock); fail_pending();       reads 0
 *                    the caller (before queueing,
 *                    one-sided, or a withdrawal
 *                    under k->lock)
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "runtime/util/futex.h"
#include "runtime/core/dispatch.h"
#include "runtime/ps/ps.h"
#include "transport/rdma/ps_rdma.h"
#include "transport/wire/sock.h"

#define PSC_SPIN_NS 20000ull
#define SLOT_DONE (UINT32_MAX - 1) /* coord_psc_run(): done one-sided, not queued */

/* One caller's batch, on its stack. */
struct psc_wait {
	/* Ops not yet answered; the batch is done at 0 (futex word). */
	_Atomic uint32_t left;
	/* Set by whoever records the batch's first error message. */
	_Atomic int has_err;
	struct coord_error *err;
};

struct psc_slot {
	uint32_t gen;
	struct psc_wait *w; /* NULL when free */
	struct coord_ps_op *op;
};

struct psc_conn {
	struct coord_psc *p;
	unsigned task;
	char addr[COORD_WIRE_ADDR_MAX];
	/* Serialises connect / reconnect / teardown; never held by the reader. */
	pthread_mutex_t conn_lock;
	bool reader_started; /* under conn_lock */
	/* Redialling (under conn_lock): connected before (a redial is bounded
	 * by the heartbeat); after a failed dial, none before retry_at (the
	 * requests meanwhile fail at once, with dial_why). */
	bool was_up;
	uint64_t retry_at;
	char dial_why[COORD_ERRMSG_LEN];
	pthread_t reader;
	/* Everything below: under lock. */
	pthread_mutex_t lock;
	int fd;
	bool up;
	bool flushing;
	bool open; /* a frame is begun in out */
	uint8_t *out, *spare;
	size_t outcap, sparecap;
	struct coord_wire_writer w;
	struct psc_slot *slots;
	uint32_t nslots;
	uint32_t *freel;
	uint32_t nfree;
	char why[160]; /* why the connection went down */
	/* rdma: the channel (NULL over tcp); replaced only with use_lock
	 * held for writing, used with it held for reading. */
	pthread_rwlock_t use_lock;
	struct coord_psr *r;
	/* rdma: variables mapped for one-sided reads, by id (under lock);
	 * forgotten when the connection is replaced (a restarted ps). */
	struct psc_map *maps;
	uint32_t nmaps;
	/* connections made (under lock and use_lock for writing): a map, a
	 * sender's buffer, are of one of them */
	uint32_t gen;
	/* Give-up (tcp, under lock): frames counted on this connection (each
	 * VAR_RES frame, each PONG echoing our VAR_SYNC), when the newest came;
	 * the count the last VAR_SYNC queued named, and when that frame came;
	 * the last echo token. */
	uint64_t rx_count, rx_ns, synced, synced_ns, ping_seq;
	/* lost to silence: not dialled again before this (under lock) */
	uint64_t quiet_until;
};

/* A variable as this connection may read it one-sided. */
struct psc_map {
	uint8_t state; /* MAP_NONE, MAP_OK, MAP_NO (the ps cannot: read two-sided) */
	uint32_t tag;  /* of the handle it was mapped for: another one maps again */
	struct coord_ps_map m;
};

enum { MAP_NONE = 0, MAP_OK = 1, MAP_NO = 2 };

struct coord_psc {
	unsigned nps;
	uint8_t role;
	struct coord_key key;
	uint32_t max_frame;
	int connect_timeout_ms;
	int op_timeout_ms;
	int hb_ms, misses; /* the heartbeat: as coord_opts heartbeat_ms, _misses */
	/* Give-up (tcp): silent this long, a connection is lost (0: never);
	 * window: the least time from receiving the frame a VAR_SYNC names to
	 * giving up on a request after it (0: no VAR_SYNC); ping: VAR_SYNC
	 * with an echo this often (0: never). */
	uint64_t dead_ns, window_ns, ping_ns;
	bool rdma; /* the ps tasks are served over rdma (coord_psc_use_rdma()) */
	struct psc_conn *conns;
};

/* ---- completing requests (under k->lock) ---------------------------------------- */

static void wait_error(struct psc_wait *w, int code, const char *msg, size_t len)
{
	int no = 0;

	/* Acq_rel CAS: one writer of the message; the waiter reads it after
	 * left reaches 0 (release below, acquire in the waiter). */
	if (w->err && atomic_compare_exchange_strong_explicit(
			      &w->has_err, &no, 1, memory_order_acq_rel, memory_order_relaxed))
		coord_seterr(w->err, code, "%.*s", (int)(len < 200 ? len : 200), msg);
}

static void slot_done(struct psc_conn *k, uint32_t idx)
{
	struct psc_wait *w = k->slots[idx].w;

	k->slots[idx].w = NULL;
	k->slots[idx].op = NULL;
	k->slots[idx].gen++;
	k->freel[k->nfree++] = idx;
	/* Release: the op's result and the error message happen-before the
	 * waiter's acquire load of 0.  The wake is issued under k->lock, and
	 * a waiter that gives up takes k->lock first, so w is still there. */
	if (atomic_fetch_sub_explicit(&w->left, 1, memory_order_release) == 1)
		coord_futex_wake_all(&w->left);
}

static void fail_pending(struct psc_conn *k, int code, const char *why)
{
	for (uint32_t i = 0; i < k->nslots; i++) {
		struct psc_slot *s = &k->slots[i];

		if (!s->w)
			continue;
		s->op->code = code;
		wait_error(s->w, code, why, strlen(why));
		slot_done(k, i);
	}
}

/* The reader's clock (tcp): bytes seen, when the last came, the next ping. */
struct psc_beat {
	uint64_t rx_bytes, rx_ns, ping_at;
};

static void sync_ping(struct psc_conn *k);

/* The connection is lost: fail what is pending, wake the reader. */
static void conn_down(struct psc_conn *k, const char *why)
{
	char msg[COORD_ERRMSG_LEN];

	if (!k->up)
		return;
	k->up = false;
	snprintf(k->why, sizeof(k->why), "%s", why);
	snprintf(msg, sizeof(msg), "ps task %u (%.80s) unavailable: %.120s", k->task, k->addr, why);
	coord_log(COORD_LOG_WARN, "%s", msg);
	fail_pending(k, COORD_EUNAVAILABLE, msg);
	if (k->r)
		coord_psr_shutdown(k->r); /* wakes the reader (ps_rdma.c P3) */
	else
		shutdown(k->fd, SHUT_RDWR);
}

static int on_result(struct psc_conn *k, const struct coord_wire_vres *res)
{
	uint32_t idx = (uint32_t)res->rid, gen = (uint32_t)(res->rid >> 32);
	struct coord_ps_op *op;

	if (idx >= k->nslots || !k->slots[idx].w || k->slots[idx].gen != gen) {
		/* Nothing waits for it: a late answer to a request that timed
		 * out and was withdrawn (or a confused peer).  Never followed. */
		coord_log(COORD_LOG_DEBUG, "ps task %u: dropped a reply to no pending request",
			  k->task);
		return 0;
	}
	op = k->slots[idx].op;
	if (res->code < 0) {
		op->code = res->code;
		wait_error(k->slots[idx].w, res->code, res->data, res->len);
	} else if (res->code > 0 || res->len > op->cap) {
		op->code = -EPROTO;
		wait_error(k->slots[idx].w, -EPROTO, "malformed reply from the ps", 27);
	} else {
		if (res->len)
			memcpy(op->dst, res->data, res->len);
		op->dst_len = res->len;
		op->code = 0;
	}
	slot_done(k, idx);
	return 0;
}

/* The reader's next frame; over tcp, it pings and judges silence
 * between frames (Give-up): -ETIMEDOUT when nothing came for dead_ns. */
static int reader_next(struct psc_conn *k, struct coord_frame_reader *rd, struct psc_beat *b,
		       struct coord_wire_hdr *h, const uint8_t **payload)
{
	const struct coord_psc *p = k->p;

	if (k->r) /* k->r is not replaced while this reader runs (conn_up() joins it first) */
		return coord_psr_next(k->r, h, payload);
	for (;;) {
		uint64_t now = coord_now_ns(), until = UINT64_MAX;
		int r, wait = -1;

		if (rd->rx_total != b->rx_bytes) { /* any byte is a sign of life */
			b->rx_bytes = rd->rx_total;
			b->rx_ns = now;
		}
		if (p->dead_ns && now - b->rx_ns >= p->dead_ns)
			return -ETIMEDOUT;
		if (p->ping_ns && now >= b->ping_at) {
			sync_ping(k);
			b->ping_at = now + p->ping_ns;
		}
		if (p->ping_ns)
			until = b->ping_at;
		if (p->dead_ns && b->rx_ns + p->dead_ns < until)
			until = b->rx_ns + p->dead_ns;
		if (until != UINT64_MAX)
			wait = (int)((until - now) / 1000000u) + 1;
		r = coord_frame_read(rd, wait, wait < 0 ? 10000 : wait, h, payload);
		if (r != -ETIMEDOUT || until == UINT64_MAX)
			return r;
	}
}

static void *reader_main(void *arg)
{
	struct psc_conn *k = arg;
	struct coord_frame_reader rd;
	struct psc_beat b = { .rx_ns = coord_now_ns() };
	struct coord_wire_hdr h;
	const uint8_t *payload;
	char why[96] = "connection closed";
	int r;

	b.ping_at = b.rx_ns + k->p->ping_ns;
	if (!k->r && coord_frame_reader_init(&rd, k->fd, k->p->max_frame) < 0) {
		pthread_mutex_lock(&k->lock);
		conn_down(k, "no memory");
		pthread_mutex_unlock(&k->lock);
		return NULL;
	}
	for (;;) {
		struct coord_wire_iter it;
		struct coord_wire_vres res;
		uint64_t tok;

		r = reader_next(k, &rd, &b, &h, &payload);
		if (r == -ETIMEDOUT && !k->r && k->p->dead_ns) {
			snprintf(why, sizeof(why), "nothing from the ps for %llu ms (heartbeat)",
				 (unsigned long long)(k->p->dead_ns / 1000000u));
			pthread_mutex_lock(&k->lock);
			k->quiet_until = coord_now_ns() + k->p->ping_ns;
			pthread_mutex_unlock(&k->lock);
			break;
		}
		if (r < 0) {
			snprintf(why, sizeof(why), "%s",
				 r == -EPIPE ? "connection closed by the ps"
					     : "read failed or bad frame");
			break;
		}
		if (h.type == COORD_WIRE_PONG && coord_wire_get_ping(&h, payload, &tok) == 0) {
			if (tok >> 63) { /* the echo of our VAR_SYNC: counted */
				pthread_mutex_lock(&k->lock);
				k->rx_count++;
				k->rx_ns = coord_now_ns();
				pthread_mutex_unlock(&k->lock);
			}
			continue; /* else a keepalive (tcp_server.c P5): alive */
		}
		if (h.type == COORD_WIRE_ERROR) {
			snprintf(why, sizeof(why), "the ps sent ERROR and closed");
			break;
		}
		if (h.type != COORD_WIRE_VAR_RES) {
			snprintf(why, sizeof(why), "unexpected frame from the ps");
			break;
		}
		coord_wire_iter_init(&it, &h, payload);
		pthread_mutex_lock(&k->lock);
		k->rx_count++;
		k->rx_ns = coord_now_ns();
		while ((r = coord_wire_next_vres(&it, &res)) == 1)
			if (on_result(k, &res) < 0) {
				r = -EPROTO;
				break;
			}
		pthread_mutex_unlock(&k->lock);
		if (r < 0) {
			snprintf(why, sizeof(why), "malformed VAR_RES frame");
			break;
		}
	}
	pthread_mutex_lock(&k->lock);
	conn_down(k, why);
	pthread_mutex_unlock(&k->lock);
	if (!k->r)
		coord_frame_reader_fini(&rd);
	return NULL;
}

/* ---- connecting ------------------------------------------------------------------------ */

/* Close @fd with a reset: bytes still queued are dropped, never sent late. */
static void sock_abort(int fd)
{
	struct linger l = { .l_onoff = 1, .l_linger = 0 };

	if (fd < 0)
		return;
	setsockopt(fd, SOL_SOCKET, SO_LINGER, &l, sizeof(l));
	close(fd);
}

/* Give-up: the first frame of a new tcp connection, before any request:
 * VAR_SYNC naming frame 0 (the handshake), no echo. */
static int first_sync(struct psc_conn *k, int fd, struct coord_error *err)
{
	const struct coord_psc *p = k->p;
	struct coord_wire_sync y = { .window_ms = (uint32_t)(p->window_ns / 1000000u),
				     .hb_ms = (uint32_t)(p->ping_ns / 1000000u) };
	uint8_t b[COORD_WIRE_HDR + 24];
	struct coord_wire_writer w;
	int r;

	coord_wire_writer_init(&w, b, sizeof(b));
	(void)coord_wire_put_sync(&w, &y);
	r = coord_sock_send_all(fd, b, w.len);
	return r < 0 ? coord_seterr(err, r, "%s: %s", k->addr, strerror(-r)) : 0;
}

static int conn_up(struct psc_conn *k, struct coord_error *err)
{
	struct coord_frame_reader rd;
	int fd = -1, r, tmo = k->p->connect_timeout_ms;
	uint64_t now;
	bool up;

	pthread_mutex_lock(&k->conn_lock);
	pthread_mutex_lock(&k->lock);
	up = k->up;
	now = coord_now_ns();
	if (!up && now < k->quiet_until) { /* it just proved silent: no dial yet */
		snprintf(k->dial_why, sizeof(k->dial_why), "%s", k->why);
		k->retry_at = k->quiet_until;
	}
	pthread_mutex_unlock(&k->lock);
	if (up) {
		pthread_mutex_unlock(&k->conn_lock);
		return 0;
	}
	/* A partitioned ps fails its requests at once, not after a dial each:
	 * one dial per ping interval (the first a ping interval after the
	 * silence), each bounded by half the heartbeat's silence once we were
	 * connected (a lost ps is noticed by the heartbeat, not by partition
	 * length x connect timeouts). */
	if (now < k->retry_at) {
		r = coord_seterr(err, COORD_EUNAVAILABLE, "ps task %u unreachable: %s", k->task,
				 k->dial_why);
		pthread_mutex_unlock(&k->conn_lock);
		return r;
	}
	if (k->was_up && k->p->dead_ns) {
		int half = (int)(k->p->dead_ns / 2000000u);

		if (half < 100)
			half = 100;
		if (half < tmo)
			tmo = half;
	}
	if (k->reader_started) { /* a lost connection: its reader has ended */
		pthread_join(k->reader, NULL);
		k->reader_started = false;
		/* No one-sided reader or sender on it (use_lock); fd, r and gen
		 * change under both locks, so either one reads them. */
		pthread_rwlock_wrlock(&k->use_lock);
		pthread_mutex_lock(&k->lock);
		sock_abort(k->fd);
		k->fd = -1;
		coord_psr_destroy(k->r);
		k->r = NULL;
		if (k->maps)
			memset(k->maps, 0, k->nmaps * sizeof(*k->maps)); /* a new ps: map again */
		k->gen++;
		pthread_mutex_unlock(&k->lock);
		pthread_rwlock_unlock(&k->use_lock);
	}
	if (k->p->rdma) {
		struct coord_psr *pr;

		r = coord_psr_connect(k->addr, &k->p->key, k->p->role, k->task, k->p->max_frame,
				      tmo, &pr, err);
		if (r == 0) {
			pthread_rwlock_wrlock(&k->use_lock);
			pthread_mutex_lock(&k->lock);
			k->r = pr;
			pthread_mutex_unlock(&k->lock);
			pthread_rwlock_unlock(&k->use_lock);
		}
	} else {
		r = coord_sock_connect(k->addr, tmo, &fd, err);
	}
	if (r == 0 && !k->p->rdma) {
		r = coord_frame_reader_init(&rd, fd, k->p->max_frame);
		if (r == 0) {
			r = coord_handshake_client(&rd, &k->p->key, k->p->role, COORD_ROLE_PS,
						   k->task, tmo, k->addr, err);
			coord_frame_reader_fini(&rd);
		}
		if (r == 0 && k->p->window_ns)
			r = first_sync(k, fd, err);
	}
	if (r < 0) {
		if (fd >= 0)
			close(fd);
		snprintf(k->dial_why, sizeof(k->dial_why), "%s",
			 err && err->msg[0] ? err->msg : strerror(-r));
		k->retry_at = k->p->ping_ns ? coord_now_ns() + k->p->ping_ns : 0;
		r = coord_seterr(err, COORD_EUNAVAILABLE, "ps task %u unreachable: %s", k->task,
				 k->dial_why);
		pthread_mutex_unlock(&k->conn_lock);
		return r;
	}
	k->was_up = true;
	k->retry_at = 0;
	pthread_rwlock_wrlock(&k->use_lock);
	pthread_mutex_lock(&k->lock);
	k->fd = fd;
	k->up = true;
	k->open = false;
	coord_wire_writer_init(&k->w, k->out, k->outcap);
	k->rx_count = k->synced = 0; /* frame 0: the handshake */
	k->rx_ns = k->synced_ns = coord_now_ns();
	pthread_mutex_unlock(&k->lock);
	pthread_rwlock_unlock(&k->use_lock);
	if (pthread_create(&k->reader, NULL, reader_main, k) != 0) {
		pthread_rwlock_wrlock(&k->use_lock);
		pthread_mutex_lock(&k->lock);
		k->up = false;
		fail_pending(k, COORD_EUNAVAILABLE, "cannot start a ps reader thread");
		if (fd >= 0)
			close(fd);
		k->fd = -1;
		coord_psr_destroy(k->r);
		k->r = NULL;
		k->gen++;
		pthread_mutex_unlock(&k->lock);
		pthread_rwlock_unlock(&k->use_lock);
		pthread_mutex_unlock(&k->conn_lock);
		return coord_seterr(err, COORD_ENOMEM, "cannot start a ps reader thread");
	}
	k->reader_started = true;
	pthread_mutex_unlock(&k->conn_lock);
	return 0;
}

/* ---- queueing and sending (under k->lock) ------------------------------------------ */

static int slot_get(struct psc_conn *k, uint32_t *idx)
{
	if (k->nfree == 0) {
		uint32_t n = k->nslots ? 2 * k->nslots : 64;
		struct psc_slot *s = realloc(k->slots, n * sizeof(*s));
		uint32_t *f;

		if (!s)
			return COORD_ENOMEM;
		k->slots = s;
		f = realloc(k->freel, n * sizeof(*f));
		if (!f)
			return COORD_ENOMEM;
		k->freel = f;
		for (uint32_t i = n; i-- > k->nslots;) {
			memset(&k->slots[i], 0, sizeof(k->slots[i]));
			k->freel[k->nfree++] = i;
		}
		k->nslots = n;
	}
	*idx = k->freel[--k->nfree];
	return 0;
}

/* Make room for @need more bytes (a header included) in the frame buffer. */
static int out_room(struct psc_conn *k, size_t need)
{
	size_t cap = k->outcap;
	uint8_t *b;

	if (k->w.len + need <= k->outcap)
		return 0;
	while (cap < k->w.len + need)
		cap *= 2;
	b = realloc(k->out, cap);
	if (!b)
		return COORD_ENOMEM;
	k->out = b;
	k->outcap = cap;
	k->w.buf = b;
	k->w.cap = cap;
	return 0;
}

/*
 * Give-up: queue a VAR_SYNC naming the frames counted so far (under
 * k->lock, tcp); @echo: ask for a PONG (the reader's ping, which also
 * keeps an idle connection's count moving).  Ends the open frame.
 */
static int put_sync(struct psc_conn *k, bool echo)
{
	const struct coord_psc *p = k->p;
	struct coord_wire_sync y = { .seen = k->rx_count,
				     .window_ms = (uint32_t)(p->window_ns / 1000000u),
				     .hb_ms = (uint32_t)(p->ping_ns / 1000000u) };
	int r;

	if (k->open)
		coord_wire_end(&k->w);
	k->open = false;
	r = out_room(k, COORD_WIRE_HDR + 24);
	if (r < 0)
		return r;
	if (echo)
		y.seq = (1ull << 63) | ++k->ping_seq; /* bit 63: not a keepalive PONG */
	(void)coord_wire_put_sync(&k->w, &y);	      /* room was made above */
	k->synced = k->rx_count;
	k->synced_ns = k->rx_ns;
	return 0;
}

/*
 * Send what is queued without blocking (under k->lock, tcp, no sender at
 * work: nobody else writes the socket); what does not fit stays queued,
 * in order, for the next sender or the next ping.
 */
static void drain_nb(struct psc_conn *k)
{
	ssize_t n = send(k->fd, k->out, k->w.len, MSG_DONTWAIT | MSG_NOSIGNAL);

	if (n < 0) {
		if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
			conn_down(k, "send failed");
		return;
	}
	memmove(k->out, k->out + n, k->w.len - (size_t)n);
	k->w.len -= (size_t)n;
}

/* The reader's ping (tcp): a VAR_SYNC asking for an echo; never blocks. */
static void sync_ping(struct psc_conn *k)
{
	pthread_mutex_lock(&k->lock);
	if (k->up && put_sync(k, true) == 0 && !k->flushing)
		drain_nb(k);
	pthread_mutex_unlock(&k->lock);
}

static int queue_op(struct psc_conn *k, struct coord_ps_op *op, struct psc_wait *w, uint32_t *slot)
{
	struct coord_wire_vreq q = { .op = op->op,
				     .name_len = op->name_len,
				     .var = op->id,
				     .tag = op->tag,
				     .off = op->off,
				     .n = op->n,
				     .len = op->src_len + op->src2_len,
				     .name = op->name,
				     .data = op->src,
				     .data2 = op->src2,
				     .len2 = op->src2_len };
	size_t need = coord_wire_vreq_size(&q);
	uint32_t idx;
	int r;

	/* The request, and a read's reply, must each fit in one frame. */
	if ((uint64_t)op->src_len + op->src2_len > UINT32_MAX ||
	    need > k->p->max_frame - COORD_WIRE_HDR ||
	    op->cap > k->p->max_frame - COORD_WIRE_HDR - COORD_WIRE_VRES_FIXED)
		return COORD_EINVAL;
	if (k->open && k->w.len - k->w.frame + need > k->p->max_frame) {
		coord_wire_end(&k->w); /* this frame is full: start another */
		k->open = false;
	}
	r = out_room(k, need + COORD_WIRE_HDR);
	if (r < 0)
		return r;
	r = slot_get(k, &idx);
	if (r < 0)
		return r;
	q.rid = ((uint64_t)k->slots[idx].gen << 32) | idx;
	if (!k->open) {
		coord_wire_begin(&k->w, COORD_WIRE_VAR_REQ);
		k->open = true;
	}
	(void)coord_wire_put_vreq(&k->w, &q); /* room was made above */
	k->slots[idx].w = w;
	k->slots[idx].op = op;
	*slot = idx;
	return 0;
}

/* Become the sender if nobody is: write until nothing is queued. */
static void flush(struct psc_conn *k)
{
	if (k->flushing)
		return;
	k->flushing = true;
	while (k->up && k->w.len > 0) {
		uint8_t *b = k->out;
		size_t len, cap = k->outcap;
		uint32_t gen = k->gen; /* the connection these bytes are for */
		int r;

		if (k->open)
			coord_wire_end(&k->w);
		k->open = false;
		len = k->w.len;
		k->out = k->spare;
		k->outcap = k->sparecap;
		k->spare = b;
		k->sparecap = cap;
		coord_wire_writer_init(&k->w, k->out, k->outcap);
		pthread_mutex_unlock(&k->lock);
		/* use_lock: the fd or channel is not closed or replaced while
		 * we send; gen: it is still the connection of these bytes
		 * (never the next one: its requests were failed). */
		pthread_rwlock_rdlock(&k->use_lock);
		if (k->gen != gen)
			r = -EPIPE;
		else if (k->p->rdma)
			r = k->r ? coord_psr_send(k->r, b, len) : -EPIPE;
		else
			r = coord_sock_send_all(k->fd, b, len);
		pthread_rwlock_unlock(&k->use_lock);
		pthread_mutex_lock(&k->lock);
		if (r < 0 && k->gen == gen)
			conn_down(k, "send failed");
	}
	k->flushing = false;
}

/* ---- one-sided reads (rdma) ---------------------------------------------------------- */

/* Remember @id's map on @k (under k->lock), unless the connection changed. */
static void map_store(struct psc_conn *k, uint32_t id, uint32_t tag, uint32_t gen, uint8_t state,
		      const struct coord_ps_map *m)
{
	if (k->gen != gen)
		return; /* replaced meanwhile: its maps are of another ps */
	if (id >= k->nmaps) {
		uint32_t n = k->nmaps ? k->nmaps : 16;
		struct psc_map *b;

		while (n <= id)
			n *= 2;
		b = realloc(k->maps, n * sizeof(*b));
		if (!b)
			return;
		memset(b + k->nmaps, 0, (n - k->nmaps) * sizeof(*b));
		k->maps = b;
		k->nmaps = n;
	}
	k->maps[id].state = state;
	k->maps[id].tag = tag;
	if (m)
		k->maps[id].m = *m;
}

/*
 * Try the READ @op one-sided (rdma): map its variable if this connection
 * has not yet, then RDMA READ a snapshot (runtime/store/varstore.c SNAP2).  True if
 * @op is done (result in place, code 0); false: send it two-sided, which
 * also reports any error properly.
 */
static bool read_one_sided(struct coord_psc *p, struct coord_ps_op *op)
{
	struct psc_conn *k = &p->conns[op->task];
	struct coord_ps_map m;
	uint8_t state = MAP_NONE;
	unsigned tries = 0;
	uint32_t gen;
	int r;

	if (op->n > COORD_PSR_READ_MAX / sizeof(float) || op->n * sizeof(float) > op->cap ||
	    conn_up(k, NULL) < 0)
		return false;
	pthread_mutex_lock(&k->lock);
	gen = k->gen;
	if (op->id < k->nmaps && k->maps[op->id].tag == op->tag) {
		state = k->maps[op->id].state;
		m = k->maps[op->id].m;
	}
	pthread_mutex_unlock(&k->lock);
	if (state == MAP_NO)
		return false;
	if (state == MAP_NONE) {
		uint8_t b[COORD_PS_MAP_LEN];
		struct coord_ps_op mop = { .op = COORD_PS_MAP,
					   .task = op->task,
					   .id = op->id,
					   .tag = op->tag,
					   .dst = b,
					   .cap = sizeof(b) };

		r = coord_psc_run(p, &mop, 1, NULL);
		if (r == 0 && mop.dst_len == sizeof(b)) {
			coord_ps_map_get(b, &m);
			state = MAP_OK;
		} else if (r == COORD_EINVAL) {
			state = MAP_NO; /* this ps cannot map it: two-sided from now on */
		}
		pthread_mutex_lock(&k->lock);
		if (state != MAP_NONE)
			map_store(k, op->id, op->tag, gen, state, &m);
		pthread_mutex_unlock(&k->lock);
		if (state != MAP_OK)
			return false;
	}
	pthread_rwlock_rdlock(&k->use_lock);
	r = k->r ? coord_psr_read_var(k->r, &m, op->off, op->n, op->dst, &tries) : -EPIPE;
	pthread_rwlock_unlock(&k->use_lock);
	if (r != 0) {
		coord_log(COORD_LOG_DEBUG, "ps task %u: one-sided read of %u: %s after %u tries",
			  op->task, op->id, strerror(-r), tries);
		return false;
	}
	op->dst_len = op->n * sizeof(float);
	op->code = 0;
	return true;
}

/* ---- running a batch ------------------------------------------------------------------ */

/* rdma: READs one-sided where they can (no ps CPU); a delete through
 * us forgets its map (its registration goes with it). */
static void run_one_sided(struct coord_psc *p, struct coord_ps_op *ops, unsigned n, uint32_t *slot,
			  struct psc_wait *w)
{
	for (unsigned i = 0; p->rdma && i < n; i++) {
		if (ops[i].task >= p->nps)
			continue;
		if (ops[i].op == COORD_PS_DELETE) {
			struct psc_conn *k = &p->conns[ops[i].task];

			pthread_mutex_lock(&k->lock);
			if (ops[i].id < k->nmaps)
				k->maps[ops[i].id].state = MAP_NONE;
			pthread_mutex_unlock(&k->lock);
		}
		if (ops[i].op == COORD_PS_READ && read_one_sided(p, &ops[i])) {
			slot[i] = SLOT_DONE; /* done: nothing to send */
			/* Relaxed: our own counter, nobody waits on it yet. */
			atomic_fetch_sub_explicit(&w->left, 1, memory_order_relaxed);
		}
	}
}

/* Queue and send the ops of @ops for ps task @t that are still to go
 * (not done one-sided); an op that cannot go is answered with its error. */
static void send_to_task(struct coord_psc *p, unsigned t, struct coord_ps_op *ops, unsigned n,
			 uint32_t *slot, struct psc_wait *w)
{
	struct psc_conn *k = &p->conns[t];
	bool any = false;
	struct coord_error e;
	int r;

	for (unsigned i = 0; i < n && !any; i++)
		any = ops[i].task == t && slot[i] != SLOT_DONE;
	if (!any)
		return;
	r = conn_up(k, &e);
	pthread_mutex_lock(&k->lock);
	/* Give-up: the last VAR_SYNC names a frame received long ago (a
	 * quarter window) while newer ones came: name the newest before
	 * these requests, so the ps does not take them for given up. */
	if (r == 0 && k->up && !p->rdma && p->window_ns && k->rx_count != k->synced &&
	    coord_now_ns() - k->synced_ns >= p->window_ns / 4 && put_sync(k, false) < 0)
		r = coord_seterr(&e, COORD_ENOMEM, "no memory for a variable operation");
	for (unsigned i = 0; i < n; i++) {
		if (ops[i].task != t || slot[i] == SLOT_DONE)
			continue;
		if (r == 0 && !k->up)
			r = coord_seterr(&e, COORD_EUNAVAILABLE, "ps task %u (%s) unavailable: %s",
					 t, k->addr, k->why);
		if (r == 0) {
			int q = queue_op(k, &ops[i], w, &slot[i]);

			if (q == 0)
				continue;
			coord_seterr(&e, q,
				     q == COORD_EINVAL ? "variable operation larger than a frame "
							 "(max_frame): split it"
						       : "no memory for a variable operation");
			ops[i].code = q;
			wait_error(w, q, e.msg, strlen(e.msg));
		} else {
			ops[i].code = r;
			wait_error(w, r, e.msg, strlen(e.msg));
		}
		/* Relaxed: our own counter, nobody waits on it yet. */
		atomic_fetch_sub_explicit(&w->left, 1, memory_order_relaxed);
	}
	flush(k);
	pthread_mutex_unlock(&k->lock);
}

/* Wait for the replies: spin briefly, then sleep on the futex; at the
 * deadline, withdraw what is still pending. */
static void wait_replies(struct coord_psc *p, struct coord_ps_op *ops, unsigned n,
			 const uint32_t *slot, struct psc_wait *w)
{
	uint64_t t0 = coord_now_ns(),
		 deadline = coord_deadline((int64_t)p->op_timeout_ms * 1000000);

	for (unsigned step = 0;; step++) {
		/* Acquire: pairs with the release in slot_done(): results are
		 * in place once left reads 0. */
		uint32_t v = atomic_load_explicit(&w->left, memory_order_acquire);

		if (v == 0)
			break;
		if (coord_now_ns() - t0 < PSC_SPIN_NS) {
			coord_spin_pause(step);
			continue;
		}
		if (coord_futex_wait(&w->left, v, deadline) == -ETIMEDOUT) {
			/* Withdraw what is still pending, under each lock, so
			 * no reader touches w after we return. */
			for (unsigned i = 0; i < n; i++) {
				struct psc_conn *k = &p->conns[ops[i].task];

				if (slot[i] == UINT32_MAX || slot[i] == SLOT_DONE)
					continue;
				pthread_mutex_lock(&k->lock);
				if (k->slots[slot[i]].w == w && k->slots[slot[i]].op == &ops[i]) {
					ops[i].code = COORD_ETIMEDOUT;
					wait_error(w, COORD_ETIMEDOUT,
						   "no reply from the ps in time", 28);
					slot_done(k, slot[i]);
				}
				pthread_mutex_unlock(&k->lock);
			}
		}
	}
}

int coord_psc_run(struct coord_psc *p, struct coord_ps_op *ops, unsigned n, struct coord_error *err)
{
	struct psc_wait w = { .err = err };
	uint32_t small[16], *slot = small;
	int first = 0;

	if (n > 16 && !(slot = malloc(n * sizeof(*slot))))
		return coord_seterr(err, COORD_ENOMEM, "no memory");
	/* Relaxed: nobody else sees w before the ops are queued (under lock). */
	atomic_store_explicit(&w.left, n, memory_order_relaxed);
	for (unsigned i = 0; i < n; i++) {
		ops[i].code = 1; /* not answered */
		ops[i].dst_len = 0;
		slot[i] = UINT32_MAX;
	}
	run_one_sided(p, ops, n, slot, &w);
	for (unsigned t = 0; t < p->nps; t++)
		send_to_task(p, t, ops, n, slot, &w);
	wait_replies(p, ops, n, slot, &w);
	if (slot != small)
		free(slot);
	for (unsigned i = 0; i < n && !first; i++)
		if (ops[i].code < 0)
			first = ops[i].code;
	/* Acquire: pairs with wait_error()'s CAS. */
	if (first && err && !atomic_load_explicit(&w.has_err, memory_order_acquire))
		coord_seterr(err, first, "%s", coord_strerror(first));
	if (first && err)
		err->code = first;
	return first;
}

/* ---- creating and destroying ---------------------------------------------------------- */

int coord_psc_create(const char *const *addrs, unsigned nps, uint8_t role,
		     const struct coord_key *key, uint32_t max_frame, int connect_timeout_ms,
		     int op_timeout_ms, int hb_ms, int misses, struct coord_ps **out,
		     struct coord_error *err)
{
	struct coord_ps *ps = calloc(1, sizeof(*ps));
	struct coord_psc *p = calloc(1, sizeof(*p));

	if (!ps || !p || !(p->conns = calloc(nps ? nps : 1, sizeof(*p->conns)))) {
		free(ps);
		free(p);
		return coord_seterr(err, COORD_ENOMEM, "no memory");
	}
	ps->nps = p->nps = nps;
	ps->remote = p;
	p->role = role;
	if (key)
		p->key = *key;
	p->max_frame = max_frame;
	p->connect_timeout_ms = connect_timeout_ms;
	p->op_timeout_ms = op_timeout_ms;
	p->hb_ms = hb_ms > 0 ? hb_ms : 0;
	p->misses = misses > 0 ? misses : 1;
	/* Give-up: silent for heartbeat x misses, a connection is lost; a
	 * request is given up no sooner than that or the op timeout after
	 * the frame its VAR_SYNC names; ping well within both. */
	p->dead_ns = (uint64_t)p->hb_ms * (uint64_t)p->misses * 1000000u;
	p->window_ns = op_timeout_ms > 0 ? (uint64_t)op_timeout_ms * 1000000u : p->dead_ns;
	if (p->dead_ns && p->dead_ns < p->window_ns)
		p->window_ns = p->dead_ns;
	if (p->window_ns > 3600000000000ull)
		p->window_ns = 3600000000000ull;
	p->ping_ns = p->window_ns / 4;
	if (p->hb_ms && (uint64_t)p->hb_ms * 1000000u < p->ping_ns)
		p->ping_ns = (uint64_t)p->hb_ms * 1000000u;
	if (p->dead_ns && p->dead_ns / 3 < p->ping_ns)
		p->ping_ns = p->dead_ns / 3;
	if (p->ping_ns && p->ping_ns < 1000000u)
		p->ping_ns = 1000000u;
	for (unsigned i = 0; i < nps; i++) {
		struct psc_conn *k = &p->conns[i];

		k->p = p;
		k->task = i;
		k->fd = -1;
		pthread_mutex_init(&k->conn_lock, NULL);
		pthread_mutex_init(&k->lock, NULL);
		pthread_rwlock_init(&k->use_lock, NULL);
		if (!addrs[i] || strlen(addrs[i]) >= sizeof(k->addr)) {
			coord_ps_destroy(ps);
			return coord_seterr(err, COORD_EINVAL, "ps task %u: bad address", i);
		}
		snprintf(k->addr, sizeof(k->addr), "%s", addrs[i]);
		k->outcap = k->sparecap = 64 * 1024;
		k->out = malloc(k->outcap);
		k->spare = malloc(k->sparecap);
		if (!k->out || !k->spare) {
			coord_ps_destroy(ps);
			return coord_seterr(err, COORD_ENOMEM, "no memory");
		}
		coord_wire_writer_init(&k->w, k->out, k->outcap);
	}
	*out = ps;
	return 0;
}

void coord_psc_use_rdma(struct coord_ps *ps)
{
	if (ps && ps->remote)
		ps->remote->rdma = true;
}

void coord_psc_destroy(struct coord_psc *p)
{
	if (!p)
		return;
	for (unsigned i = 0; i < p->nps; i++) {
		struct psc_conn *k = &p->conns[i];

		if (k->reader_started) {
			/* Nothing is pending (no caller is inside): close quietly. */
			pthread_mutex_lock(&k->lock);
			if (k->up && k->r) {
				k->up = false;
				coord_psr_shutdown(k->r);
			} else if (k->up) {
				coord_send_error(k->fd, 0, "closing");
				k->up = false;
				shutdown(k->fd, SHUT_RDWR);
			}
			pthread_mutex_unlock(&k->lock);
			pthread_join(k->reader, NULL);
		}
		if (k->fd >= 0)
			close(k->fd);
		coord_psr_destroy(k->r);
		free(k->maps);
		pthread_rwlock_destroy(&k->use_lock);
		pthread_mutex_destroy(&k->conn_lock);
		pthread_mutex_destroy(&k->lock);
		free(k->out);
		free(k->spare);
		free(k->slots);
		free(k->freel);
	}
	coord_key_wipe(&p->key);
	free(p->conns);
	free(p);
}

/* ---- the coordinator's ps tasks --------------------------------------------------------- */

size_t coord_psc_table_len(const struct coord_ps *ps)
{
	size_t n = 2 * COORD_WIRE_HDR + 16;

	if (!ps || !ps->remote || !ps->nps)
		return 0;
	for (unsigned i = 0; i < ps->nps; i++)
		n += 6 + strlen(ps->remote->conns[i].addr);
	return n;
}

void coord_psc_put_table(struct coord_wire_writer *w, const struct coord_ps *ps)
{
	const struct coord_psc *p;
	struct coord_wire_ps_opts o;

	if (!ps || !ps->remote || !ps->nps)
		return;
	p = ps->remote;
	o.timeout_ms = (uint32_t)p->op_timeout_ms;
	o.hb_ms = (uint32_t)p->hb_ms;
	o.misses = (uint32_t)p->misses;
	coord_wire_put_ps_opts(w, &o);
	coord_wire_begin(w, COORD_WIRE_PS_TABLE);
	for (unsigned i = 0; i < ps->nps; i++)
		coord_wire_put_addr(w, i, p->conns[i].addr);
	coord_wire_end(w);
}

static int ps_remote_setup(struct coord *c, const struct coord_spec *spec, struct coord_error *err)
{
	struct coord_view *v = coord_view(c);
	const char **addrs;
	struct coord_key key;
	unsigned nps;
	int r = coord_ps_ntasks(spec, 0, &nps, err);

	v->ps = NULL;
	if (r < 0 || nps == 0)
		return r;
	addrs = calloc(nps ? nps : 1, sizeof(*addrs));
	if (!addrs)
		return coord_seterr(err, COORD_ENOMEM, "no memory");
	for (unsigned i = 0; i < nps; i++) {
		r = coord_spec_task_address(spec, "ps", i, &addrs[i], err);
		if (r < 0) {
			free(addrs);
			return r;
		}
	}
	r = coord_key_load(v->opts.key_file, &key, err);
	if (r == 0) {
		r = coord_psc_create(addrs, nps, COORD_ROLE_COORDINATOR, &key, v->opts.max_frame,
				     v->opts.connect_timeout_ms, v->opts.ps_timeout_ms,
				     v->opts.heartbeat_ms, v->opts.heartbeat_misses, &v->ps, err);
		coord_key_wipe(&key);
		if (r == 0 && (v->tp->caps & COORD_TP_PS_RDMA))
			coord_psc_use_rdma(v->ps); /* the ps tasks serve rdma too */
	}
	free(addrs);
	if (r == 0 && !(v->ps->failures = calloc(nps, sizeof(*v->ps->failures)))) {
		coord_ps_destroy(v->ps);
		v->ps = NULL;
		r = coord_seterr(err, COORD_ENOMEM, "no memory");
	}
	return r;
}

const struct coord_ps_ops coord_ps_remote_ops = {
	.setup = ps_remote_setup,
	.destroy = coord_ps_destroy,
	.failure = coord_ps_failure,
};
