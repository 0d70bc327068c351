// SPDX-License-Identifier: MIT
/*
 * transport/psclient/ps_conn.c - the ps client's connections, one per ps
 * task: creating and destroying the client, dialling (and redialling after
 * a loss, at most once a ping interval), the reader thread that completes
 * requests from VAR_RES frames, the heartbeat and the Give-up rule below,
 * and losing a connection (conn_down(): its requests fail with
 * COORD_EUNAVAILABLE).  The request path is ps_client.c's; what the two
 * share is ps_client_pvt.h.
 *
 * Heartbeat (tcp and rdma).  The reader sends a VAR_SYNC asking for an echo every
 * ping interval (at most the heartbeat, a third of heartbeat x misses and a
 * quarter of the window below), without ever blocking: queued behind a
 * sender at work, else sent with MSG_DONTWAIT under k->lock, what does not
 * fit left queued in order.  The ps answers with a PONG; while a long op
 * holds the connection, its watchdog sends keepalive PONGs (tcp_pool.c
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
 * frame) is outside this.  A request the ps applied whose reply is lost
 * with the connection fails here though its update was made: its closure
 * is put back, and the key it carries keeps its update to once
 * (runtime/ps/ps_once.c); the coordinator's own calls carry keys of their
 * own and are sent again until answered (ps.h, coord_psc_run_sure()).
 *
 * Over rdma the same holds on the frame channel (ps_rdma.h): the same
 * VAR_SYNC first and at every ping, the same count (transport/wire/giveup.c
 * keeps it for both), pings posted as far as credits allow now
 * (coord_psr_send_some()); any receive completed is the sign of life
 * (frames, and the ps's credit returns while it takes in a large frame of
 * ours); a silent connection is shut down (both channels: one-sided reads
 * stop too) and redialled.  A request that starts late on the ps because
 * the ps was busy (it READs a large rendezvous update for seconds under
 * TCG, or takes in a large frame) though we had not given up, is answered
 * COORD_ETIMEDOUT and certainly not applied: coord_psc_run() sends it
 * again, with a VAR_SYNC naming a newer frame, while its own timeout is a
 * window away (ps_client.c "Late").  The kernel's limit over rdma is the
 * queue pair's (retry_count 7 x the ack timeout, seconds, not minutes):
 * with a heartbeat it comes after the heartbeat's silence, which ends the
 * connection first; without one (heartbeat_ms 0, the window then the op
 * timeout) a request whose ack was lost, still queued on a ps busy for
 * longer than that limit, is the case Give-up does not cover (its key
 * still keeps it to once).
 *
 * Synchronization: the client's set-up, a connection's socket or channel
 * and its reader thread; the fields under k->lock and a caller's batch are
 * in ps_client.c's table.  The reader is a connection's reader thread
 * (reader_main()).
 *   field            written by (how)                read by (how)           order
 *   struct coord_psc coord_psc_create(), and         everyone (plain)        before the first
 *   (nps .. rdma),   coord_psc_use_rdma() before                             call (ps.h); after
 *   k->p/task/addr   the first call                                          that, immutable
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
 */
#include <endian.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "transport/wire/sock.h"
#include "transport/psclient/ps_client_pvt.h"

/* ---- the heartbeat and Give-up's VAR_SYNC ------------------------------------------- */

/*
 * Give-up: queue a VAR_SYNC naming the frames counted so far (under
 * k->lock); @echo: ask for a PONG (the reader's ping, which also
 * keeps an idle connection's count moving).  Ends the open frame.
 */
int put_sync(struct psc_conn *k, bool echo)
{
	struct coord_wire_sync y;
	int r;

	if (k->open)
		coord_wire_end(&k->w);
	k->open = false;
	r = out_room(k, COORD_WIRE_HDR + 24);
	if (r < 0)
		return r;
	coord_gu_cli_sync(&k->gu, &k->p->gc, echo, &y);
	(void)coord_wire_put_sync(&k->w, &y); /* room was made above */
	return 0;
}

/*
 * Send what is queued without blocking (under k->lock, no sender at work:
 * nobody else writes the socket or the frame channel, and k->r is not
 * replaced under k->lock); what does not fit stays queued, in order, for
 * the next sender or the next ping.
 */
static void drain_nb(struct psc_conn *k)
{
	ssize_t n;

	if (k->r) {
		size_t sent = 0;

		n = coord_psr_send_some(k->r, k->out, k->w.len, &sent) < 0 ? -1 : (ssize_t)sent;
		if (n < 0) {
			conn_down(k, "send failed");
			return;
		}
	} else {
		n = send(k->fd, k->out, k->w.len, MSG_DONTWAIT | MSG_NOSIGNAL);
		if (n < 0) {
			if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)
				conn_down(k, "send failed");
			return;
		}
	}
	memmove(k->out, k->out + n, k->w.len - (size_t)n);
	k->w.len -= (size_t)n;
}

/* The reader's ping: a VAR_SYNC asking for an echo; never blocks. */
static void sync_ping(struct psc_conn *k)
{
	pthread_mutex_lock(&k->lock);
	if (k->up && put_sync(k, true) == 0 && !k->flushing)
		drain_nb(k);
	pthread_mutex_unlock(&k->lock);
}

/* ---- the reader ------------------------------------------------------------------------ */

/* The reader's clock: bytes (tcp) or receives (rdma) seen, when the last
 * came, the next ping. */
struct psc_beat {
	uint64_t rx_bytes, rx_ns, ping_at;
};

/* The connection is lost: fail what is pending, wake the reader. */
void conn_down(struct psc_conn *k, const char *why)
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
	op->fate = COORD_PS_ANSWERED;
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

/*
 * A VAR_RES frame of PSC_RX_DIRECT_MIN bytes or more (tcp; its header read, the
 * rest not): record by record, a result's data straight into its caller's
 * buffer, the slot busy meanwhile (no copy, and k->lock not held across
 * the data); anything else (an error, a reply nobody waits for) through
 * on_result() with what fits of its data.  Waits for more at most
 * @partial_ms.  0, or -errno: the connection is unusable.
 */
static int read_direct(struct psc_conn *k, struct coord_frame_reader *rd,
		       const struct coord_wire_hdr *h, int partial_ms)
{
	uint64_t left = h->len;
	int r = 0;

	for (uint32_t c = 0; c < h->count && r == 0; c++) {
		uint8_t fx[COORD_WIRE_VRES_FIXED], msg[256];
		struct coord_wire_vres res;
		uint32_t idx, gen;
		uint8_t *dst = NULL;

		if (left < sizeof(fx))
			return -EPROTO;
		r = coord_frame_read_into(rd, fx, sizeof(fx), partial_ms);
		if (r < 0)
			return r;
		left -= sizeof(fx);
		memcpy(&res.rid, fx, 8);
		res.rid = le64toh(res.rid);
		memcpy(&res.code, fx + 8, 4);
		res.code = (int32_t)le32toh((uint32_t)res.code);
		memcpy(&res.len, fx + 12, 4);
		res.len = le32toh(res.len);
		if (res.len > left)
			return -EPROTO;
		left -= res.len;
		idx = (uint32_t)res.rid;
		gen = (uint32_t)(res.rid >> 32);
		pthread_mutex_lock(&k->lock);
		if (res.code == 0 && idx < k->nslots && k->slots[idx].w &&
		    k->slots[idx].gen == gen && res.len <= k->slots[idx].op->cap) {
			k->slots[idx].busy = true;
			dst = k->slots[idx].op->dst;
		}
		pthread_mutex_unlock(&k->lock);
		if (dst) {
			r = coord_frame_read_into(rd, dst, res.len, partial_ms);
			pthread_mutex_lock(&k->lock);
			k->slots[idx].busy = false;
			if (r == 0) {
				k->slots[idx].op->dst_len = res.len;
				k->slots[idx].op->code = 0;
				k->slots[idx].op->fate = COORD_PS_ANSWERED;
			} else {
				k->slots[idx].op->code = COORD_EUNAVAILABLE;
				wait_error(k->slots[idx].w, COORD_EUNAVAILABLE,
					   "ps connection lost while receiving a reply", 43);
			}
			slot_done(k, idx);
			pthread_mutex_unlock(&k->lock);
			continue;
		}
		res.data = msg;
		r = coord_frame_read_into(rd, msg, res.len < sizeof(msg) ? res.len : sizeof(msg),
					  partial_ms);
		if (r == 0 && res.len > sizeof(msg))
			r = coord_frame_read_into(rd, NULL, res.len - sizeof(msg), partial_ms);
		if (r < 0)
			return r;
		if (res.code != 0 && res.len > sizeof(msg))
			res.len = sizeof(msg); /* an error message: what fits */
		pthread_mutex_lock(&k->lock);
		(void)on_result(k, &res);
		pthread_mutex_unlock(&k->lock);
	}
	if (r == 0 && left)
		return -EPROTO;
	if (r == 0) { /* Give-up: a VAR_RES frame, counted */
		pthread_mutex_lock(&k->lock);
		coord_gu_cli_rx(&k->gu, coord_now_ns());
		pthread_mutex_unlock(&k->lock);
	}
	return r;
}

/* The reader's next frame; it pings and judges silence between frames
 * (Give-up): -ETIMEDOUT when nothing came for dead_ns.  k->r is not
 * replaced while this reader runs (conn_up() joins it first). */
static int reader_next(struct psc_conn *k, struct coord_frame_reader *rd, struct psc_beat *b,
		       struct coord_wire_hdr *h, const uint8_t **payload)
{
	const struct coord_psc *p = k->p;

	for (;;) {
		uint64_t now = coord_now_ns(), until = UINT64_MAX;
		int r, wait = -1;

		/* any byte (tcp) or receive (rdma: the ps's credit returns too, while
		 * it takes in a large frame of ours) is a sign of life */
		uint64_t rx = k->r ? coord_psr_rx(k->r) : rd->rx_total;

		if (rx != b->rx_bytes) {
			b->rx_bytes = rx;
			b->rx_ns = now;
		}
		if (p->gc.dead_ns && now - b->rx_ns >= p->gc.dead_ns)
			return -ETIMEDOUT;
		if (p->gc.ping_ns && now >= b->ping_at) {
			sync_ping(k);
			b->ping_at = now + p->gc.ping_ns;
		}
		if (p->gc.ping_ns)
			until = b->ping_at;
		if (p->gc.dead_ns && b->rx_ns + p->gc.dead_ns < until)
			until = b->rx_ns + p->gc.dead_ns;
		if (until != UINT64_MAX)
			wait = (int)((until - now) / 1000000u) + 1;
		if (k->r) {
			r = coord_psr_next(k->r, h, payload, wait);
		} else {
			r = coord_frame_read(rd, wait, wait < 0 ? 10000 : wait, h, payload);
		}
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

	b.ping_at = b.rx_ns + k->p->gc.ping_ns;
	if (!k->r && coord_frame_reader_init(&rd, k->fd, k->p->max_frame) < 0) {
		pthread_mutex_lock(&k->lock);
		conn_down(k, "no memory");
		pthread_mutex_unlock(&k->lock);
		return NULL;
	}
	if (!k->r)
		rd.big = PSC_RX_DIRECT_MIN; /* large replies: read_direct() */
	for (;;) {
		struct coord_wire_iter it;
		struct coord_wire_vres res;
		uint64_t tok;

		r = reader_next(k, &rd, &b, &h, &payload);
		if (r == -ETIMEDOUT && k->p->gc.dead_ns) {
			snprintf(why, sizeof(why), "nothing from the ps for %llu ms (heartbeat)",
				 (unsigned long long)(k->p->gc.dead_ns / 1000000u));
			pthread_mutex_lock(&k->lock);
			k->quiet_until = coord_now_ns() + k->p->gc.ping_ns;
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
			if (tok & COORD_GU_ECHO) { /* the echo of our VAR_SYNC: counted */
				pthread_mutex_lock(&k->lock);
				coord_gu_cli_rx(&k->gu, coord_now_ns());
				pthread_mutex_unlock(&k->lock);
			}
			continue; /* else a keepalive (tcp_pool.c P5): alive */
		}
		if (h.type == COORD_WIRE_ERROR) {
			snprintf(why, sizeof(why), "the ps sent ERROR and closed");
			break;
		}
		if (h.type != COORD_WIRE_VAR_RES) {
			snprintf(why, sizeof(why), "unexpected frame from the ps");
			break;
		}
		if (!payload) { /* a large one (tcp): its data into the callers' buffers */
			r = read_direct(k, &rd, &h,
					k->p->gc.dead_ns ? (int)(k->p->gc.dead_ns / 1000000u)
							 : 10000);
			if (r < 0) {
				snprintf(why, sizeof(why), "%s",
					 r == -EPIPE ? "connection closed by the ps"
						     : "read failed or bad frame");
				break;
			}
			continue;
		}
		coord_wire_iter_init(&it, &h, payload);
		pthread_mutex_lock(&k->lock);
		coord_gu_cli_rx(&k->gu, coord_now_ns());
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

/* Give-up: the first frame of a new connection (a socket @fd, or the
 * channel @pr), before any request: VAR_SYNC naming frame 0 (the
 * handshake), no echo. */
static int first_sync(struct psc_conn *k, int fd, struct coord_psr *pr, struct coord_error *err)
{
	struct coord_gu_cli g;
	struct coord_wire_sync y;
	uint8_t b[COORD_WIRE_HDR + 24];
	struct coord_wire_writer w;
	int r;

	coord_gu_cli_reset(&g, 0);
	coord_gu_cli_sync(&g, &k->p->gc, false, &y);
	coord_wire_writer_init(&w, b, sizeof(b));
	(void)coord_wire_put_sync(&w, &y);
	r = pr ? coord_psr_send(pr, b, w.len) : coord_sock_send_all(fd, b, w.len);
	return r < 0 ? coord_seterr(err, r, "%s: %s", k->addr, strerror(-r)) : 0;
}

/* A lost connection whose reader has ended: join the reader, close the
 * connection with a reset, forget its maps.  Under conn_lock. */
static void conn_retire(struct psc_conn *k)
{
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

/*
 * Dial ps task k->task within @tmo ms: over rdma, the channel (into k->r);
 * over tcp, a socket into *@fd, authenticated, with Give-up's first
 * VAR_SYNC sent.  0 or -errno (@err says why; an *@fd opened is the
 * caller's to close).  Under conn_lock.
 */
static int conn_dial(struct psc_conn *k, int tmo, int *fd, struct coord_error *err)
{
	struct coord_frame_reader rd;
	int r;

	if (k->p->rdma) {
		struct coord_psr *pr;

		r = coord_psr_connect(k->addr, &k->p->key, k->p->role, k->task, k->p->max_frame,
				      tmo, &pr, err);
		if (r == 0 && k->p->gc.window_ns && (r = first_sync(k, -1, pr, err)) < 0)
			coord_psr_destroy(pr);
		if (r == 0) {
			pthread_rwlock_wrlock(&k->use_lock);
			pthread_mutex_lock(&k->lock);
			k->r = pr;
			pthread_mutex_unlock(&k->lock);
			pthread_rwlock_unlock(&k->use_lock);
		}
		return r;
	}
	r = coord_sock_connect(k->addr, tmo, fd, err);
	if (r == 0) {
		r = coord_frame_reader_init(&rd, *fd, k->p->max_frame);
		if (r == 0) {
			r = coord_handshake_client(&rd, &k->p->key, k->p->role, COORD_ROLE_PS,
						   k->task, tmo, k->addr, err);
			coord_frame_reader_fini(&rd);
		}
		if (r == 0 && k->p->gc.window_ns)
			r = first_sync(k, *fd, NULL, err);
	}
	return r;
}

/* The reader thread of a connection just made did not start: it is down
 * again, its requests fail.  Under conn_lock. */
static void reader_failed(struct psc_conn *k, int fd)
{
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
}

int conn_up(struct psc_conn *k, struct coord_error *err)
{
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
	if (k->was_up && k->p->gc.dead_ns) {
		int half = (int)(k->p->gc.dead_ns / 2000000u);

		if (half < 100)
			half = 100;
		if (half < tmo)
			tmo = half;
	}
	if (k->reader_started) /* a lost connection: its reader has ended */
		conn_retire(k);
	r = conn_dial(k, tmo, &fd, err);
	k->refused = r == -ECONNREFUSED;
	if (r < 0) {
		if (fd >= 0)
			close(fd);
		snprintf(k->dial_why, sizeof(k->dial_why), "%s",
			 err && err->msg[0] ? err->msg : strerror(-r));
		k->retry_at = k->p->gc.ping_ns ? coord_now_ns() + k->p->gc.ping_ns : 0;
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
	k->next = 0; /* what a lost connection left queued is dropped whole */
	coord_gu_cli_reset(&k->gu, coord_now_ns()); /* frame 0: the handshake */
	pthread_mutex_unlock(&k->lock);
	pthread_rwlock_unlock(&k->use_lock);
	if (pthread_create(&k->reader, NULL, reader_main, k) != 0) {
		reader_failed(k, fd);
		pthread_mutex_unlock(&k->conn_lock);
		return coord_seterr(err, COORD_ENOMEM, "cannot start a ps reader thread");
	}
	k->reader_started = true;
	pthread_mutex_unlock(&k->conn_lock);
	return 0;
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
	coord_gu_clock_init(&p->gc, op_timeout_ms, hb_ms, misses); /* Give-up's clock */
	for (unsigned i = 0; i < nps; i++) {
		struct psc_conn *k = &p->conns[i];

		k->p = p;
		k->task = i;
		k->fd = -1;
		pthread_mutex_init(&k->conn_lock, NULL);
		pthread_mutex_init(&k->lock, NULL);
		pthread_rwlock_init(&k->use_lock, NULL);
		pthread_cond_init(&k->idle, NULL);
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
		pthread_cond_destroy(&k->idle);
		free(k->out);
		free(k->spare);
		free(k->slots);
		free(k->freel);
	}
	coord_key_wipe(&p->key);
	free(p->conns);
	free(p);
}
