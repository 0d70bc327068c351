// SPDX-License-Identifier: MIT
/*
 * transport/rdma_chan.c - a frame channel over one RC queue pair (rdma_chan.h).
 *
 * Overview
 *   rdma_cm sets the connection up (resolve address and route, connect /
 *   listen, accept) and tells each side the other's receive geometry in its
 *   private data (struct coord_rdma_priv: how many receives are posted, how
 *   big each is).  The data path is verbs only: every byte goes through one
 *   memory region registered at set-up, nrecv receive buffers followed by
 *   nsend send buffers of opts.buf bytes each, so nothing is registered on
 *   the fast path.  The channel is a byte stream, like a TCP connection: a
 *   send copies the caller's frames into send buffers, at most `chunk` =
 *   min(our buf, the peer's buf) bytes per SEND, and posts the SENDs as one
 *   chain; the receiver hands out frames that lie inside one receive buffer
 *   in place (zero copy) and copies a frame that spans buffers into a
 *   reassembly buffer, reposting each receive as soon as its bytes are used.
 *   RC delivers SENDs in order and completes receives in order, so the bytes
 *   come out as they went in.
 *
 * Messages.  Every SEND is SEND_WITH_IMM: its immediate data (big-endian)
 * is the number of credits it returns; its bytes (0..chunk) continue the
 * frame stream.  A SEND of zero bytes is a credit-only message.
 *
 * Credits.  credits = receives the peer has posted for us that we have not
 * used yet; it starts at the peer's nrecv.  Every SEND (data or credit-only)
 * uses one.  A receive that we repost is owed to the peer; owed credits
 * ride on our next SEND (its immediate data) and reset to 0.
 *   C1  We post a SEND only with credits >= 1, so the peer always has a
 *       receive posted for it: no RNR in normal operation (an RNR, or a
 *       credit count above the peer's nrecv, means a broken peer: the
 *       channel breaks, rnr_retry is finite).
 *   C2  A data SEND needs credits >= 2: the last credit is reserved for a
 *       credit-only message.
 *   C3  A credit-only message is sent when owed >= T (T = max(2, nrecv/4),
 *       and nrecv >= 4 > T) and data does not carry them sooner.
 *   No deadlock: say side X has data to send and credits_X <= 1, nothing is
 *   in flight and both applications read what they got.  Then the peer Y
 *   holds nrecv_Y - credits_X >= nrecv_Y - 1 >= T owed credits (C3: Y wants
 *   to send a credit-only message) and can do so unless credits_Y = 0.  A
 *   side reaches 0 only by a credit-only message (C2).  If both were at 0,
 *   take each side's last credit-only message, M_X and M_Y: they cannot
 *   both have arrived before the other was sent, so one, say M_Y, arrived
 *   after X sent M_X, bringing X >= T >= 1 credits that X never spent to 0
 *   again (M_X was its last credit-only message; data keeps one, C2).  So
 *   at most one side is at 0, and the other returns its credits.
 *   Ping-pong: a credit-only message earns the sender one credit back, and
 *   its peer answers only once it owes T >= 2, so idle channels fall
 *   silent.  Flow control is real back-pressure: a receive is reposted when
 *   the application has read its bytes, so a slow reader stops a fast
 *   sender (it waits for credits, bounded by its timeout) instead of
 *   buffering without bound.
 *
 * Send slots and selective signalling.  The send queue is a ring of nsend
 * slots, one per work request (a credit-only message or an RDMA READ takes
 * a slot too, its buffer unused); wr_id is the slot's sequence number.  Only
 * every nsend/2-th request (by sequence number) is signalled, and RDMA
 * READs; a signalled completion retires every slot up to it (a send queue
 * completes in order).  So a full ring always holds a signalled request
 * whose completion frees slots.  A graceful close signals the tail (a
 * signalled credit-only message) and waits for it before disconnecting
 * (rdma_disconnect() flushes what is still queued).
 *
 * Completions.  One CQ for sends and receives.  A blocking wait polls it
 * for a spin budget, then arms it (ibv_req_notify_cq), polls once more
 * (a completion between the last poll and the arming would otherwise not
 * wake us) and sleeps in poll() on the completion channel's fd and the
 * rdma_cm event channel's fd (disconnection), so an idle channel costs no
 * CPU.  The budget is opts.spin_us, or, while the channel's recent waits
 * (a moving average over about 8) ended within opts.spin_max_us, four
 * times their average (coord_spin_budget(), runtime/util.h), up to
 * spin_max_us: a worker's thread serving one request
 * at a time then meets the next one spinning instead of paying a sleep
 * and a wake-up for each (in the rig, where a wake-up costs hundreds of
 * microseconds, bench_rdma's round trip went from 580-920 to ~300 us with
 * a fixed 2 ms budget; a channel quiet for longer than spin_max_us spins
 * only spin_us).  Event loops use coord_rdma_chan_arm()/_progress() and
 * the fds.
 *
 * Threading.  A channel belongs to one thread at a time: no field here is
 * shared, so there are no atomics and no locks on the data path (the
 * provider's own ibv_poll_cq / ibv_post_* locks aside).  The protection
 * domain of a device is shared by all channels of the process (so a region
 * registered once serves every connection, as the ps needs); that table is
 * guarded by a mutex, taken only when channels are made and destroyed.
 *
 * Closing.  The peer's rdma_disconnect() shows as RDMA_CM_EVENT_DISCONNECTED
 * on our event channel (or flushed receives): what was received before can
 * still be read, then reads fail with -EPIPE.  A protocol error (bad
 * header, too many credits, a failed work request) breaks the channel: it
 * disconnects at once, so the peer sees -EPIPE, and reports the error.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "runtime/util/util.h"
#include "transport/rdma/rdma_chan.h"

#define RECV_TAG (1ull << 63)
#define POLL_BATCH 16
#define FOREVER UINT64_MAX
#define CLOSE_DRAIN_MS 1000
#define RD_ATOM_MAX 16

struct coord_rdma_chan {
	struct rdma_event_channel *ech;
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_comp_channel *cc;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	uint8_t *mem; /* nrecv receive buffers, then nsend send buffers */
	struct coord_rdma_opts o;
	uint32_t chunk;	     /* bytes per SEND: min(ours, the peer's buf) */
	uint32_t peer_nrecv; /* credits can never exceed it */
	uint32_t thresh;     /* T of C3 */
	/* credits (file header) */
	uint32_t credits;
	uint32_t owed;
	/* send ring: seqs [sq_done, sq_head) are posted and not retired */
	uint64_t sq_head, sq_done;
	uint64_t sig_head; /* 1 + the seq of the last signalled request */
	struct ibv_send_wr *swr;
	struct ibv_sge *ssge;
	/* completed receives, in order: ring of nrecv (free-running u32) */
	uint32_t *rq_idx, *rq_len;
	uint32_t rq_head, rq_tail, roff;
	/* receives to repost, as one chain */
	struct ibv_recv_wr *rwr;
	struct ibv_sge *rsge;
	uint32_t nrepost;
	/* reassembly of a frame that spans receive buffers */
	uint8_t *abuf;
	size_t acap, alen, aneed;
	bool assembling;
	bool connected;	    /* ESTABLISHED seen and not yet disconnected by us */
	bool closed;	    /* the peer disconnected */
	int err;	    /* sticky: why the channel broke (-errno), or 0 */
	uint64_t gap_ns;    /* moving average of a blocking wait's length (spin) */
	uint64_t events_ns; /* the event channels' last drain (progress_fast) */
	struct coord_rdma_stats st;
	char peer[80];
};

struct coord_rdma_listener {
	struct rdma_event_channel *ech;
	struct rdma_cm_id *id;
	struct coord_rdma_opts o;
};

struct coord_rdma_mr {
	struct ibv_mr *mr;
	struct ibv_pd *pd;
};

/* ---- the per-device protection domains (slow path, under a mutex) ---------------- */

#define PD_MAX 16
static struct {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	unsigned refs;
} pds[PD_MAX];
static pthread_mutex_t pd_lock = PTHREAD_MUTEX_INITIALIZER;

static struct ibv_pd *pd_get(struct ibv_context *ctx)
{
	struct ibv_pd *pd = NULL;
	int free_i = -1;

	pthread_mutex_lock(&pd_lock);
	for (int i = 0; i < PD_MAX; i++) {
		if (pds[i].ctx == ctx && pds[i].refs) {
			pds[i].refs++;
			pd = pds[i].pd;
			goto out;
		}
		if (!pds[i].refs && free_i < 0)
			free_i = i;
	}
	if (free_i >= 0) {
		pd = ibv_alloc_pd(ctx);
		if (pd) {
			pds[free_i].ctx = ctx;
			pds[free_i].pd = pd;
			pds[free_i].refs = 1;
		}
	}
out:
	pthread_mutex_unlock(&pd_lock);
	return pd;
}

static void pd_put(struct ibv_pd *pd)
{
	pthread_mutex_lock(&pd_lock);
	for (int i = 0; i < PD_MAX; i++) {
		if (pds[i].refs && pds[i].pd == pd) {
			if (--pds[i].refs == 0) {
				ibv_dealloc_pd(pd);
				pds[i].ctx = NULL;
				pds[i].pd = NULL;
			}
			break;
		}
	}
	pthread_mutex_unlock(&pd_lock);
}

/* ---- options ---------------------------------------------------------------------- */

static int opts_fill(struct coord_rdma_opts *o, const struct coord_rdma_opts *in,
		     struct coord_error *err)
{
	memset(o, 0, sizeof(*o));
	if (in)
		*o = *in;
	if (!o->buf)
		o->buf = COORD_RDMA_BUF_DEFAULT;
	if (!o->nrecv)
		o->nrecv = COORD_RDMA_NRECV_DEFAULT;
	if (!o->nsend)
		o->nsend = COORD_RDMA_NSEND_DEFAULT;
	if (!o->max_frame)
		o->max_frame = COORD_WIRE_MAX_FRAME_DEFAULT;
	if (!o->spin_us)
		o->spin_us = COORD_RDMA_SPIN_US_DEFAULT;
	if (!o->spin_max_us)
		o->spin_max_us = COORD_RDMA_SPIN_MAX_US_DEFAULT;
	if (!o->rnr_retry)
		o->rnr_retry = 3;
	if (!o->io_timeout_ms)
		o->io_timeout_ms = 10000;
	if (o->buf < COORD_RDMA_BUF_MIN || o->buf > COORD_RDMA_BUF_MAX || o->nrecv < 4 ||
	    o->nrecv > COORD_RDMA_QUEUE_MAX || o->nsend < 4 || o->nsend > COORD_RDMA_QUEUE_MAX ||
	    o->rnr_retry < 0 || o->rnr_retry > 6 || o->max_frame > COORD_WIRE_MAX_FRAME_LIMIT)
		return coord_seterr(
			err, -EINVAL,
			"rdma: buf must be %u..%u, nrecv and nsend 4..%u, rnr_retry 0..6",
			COORD_RDMA_BUF_MIN, COORD_RDMA_BUF_MAX, COORD_RDMA_QUEUE_MAX);
	return 0;
}

static void priv_encode(struct coord_rdma_priv *p, const struct coord_rdma_opts *o)
{
	memset(p, 0, sizeof(*p));
	p->magic = htole32(COORD_RDMA_MAGIC);
	p->version = htole16(COORD_RDMA_VERSION);
	p->nrecv = htole32(o->nrecv);
	p->buf = htole32(o->buf);
}

/* The peer's geometry from rdma_cm private data; -EPROTO if it is not ours. */
static int priv_decode(const void *data, uint8_t len, struct coord_rdma_priv *p)
{
	if (!data || len < sizeof(*p))
		return -EPROTO;
	memcpy(p, data, sizeof(*p));
	p->magic = le32toh(p->magic);
	p->version = le16toh(p->version);
	p->nrecv = le32toh(p->nrecv);
	p->buf = le32toh(p->buf);
	if (p->magic != COORD_RDMA_MAGIC || p->version != COORD_RDMA_VERSION || p->nrecv < 4 ||
	    p->nrecv > COORD_RDMA_QUEUE_MAX || p->buf < COORD_RDMA_BUF_MIN ||
	    p->buf > COORD_RDMA_BUF_MAX)
		return -EPROTO;
	return 0;
}

/* ---- rdma_cm events --------------------------------------------------------------- */

static int set_nonblock(int fd)
{
	int fl = fcntl(fd, F_GETFL);

	return fl < 0 || fcntl(fd, F_SETFL, fl | O_NONBLOCK) < 0 ? -errno : 0;
}

/* A non-blocking CM event channel in *@ech and an RC id on it in *@id (with
 * @ctx), for a connecting channel or a listener; 0 or an error in @err.  On
 * failure the caller's cleanup frees whichever was made. */
static int cm_open(struct rdma_event_channel **ech, struct rdma_cm_id **id, void *ctx,
		   struct coord_error *err)
{
	int r;

	*ech = rdma_create_event_channel();
	if (!*ech)
		return coord_seterr(err, -ENODEV, "rdma: rdma_create_event_channel: %s",
				    strerror(errno));
	r = set_nonblock((*ech)->fd);
	if (r < 0 || rdma_create_id(*ech, id, ctx, RDMA_PS_TCP))
		return coord_seterr(err, r < 0 ? r : -errno, "rdma: rdma_create_id: %s",
				    strerror(r < 0 ? -r : errno));
	return 0;
}

/*
 * Wait until @deadline for the next event on @ech; it must be @want.
 * @priv (if not NULL) gets the peer's geometry from the event's private
 * data; @id (if not NULL) the event's id (a CONNECT_REQUEST's new id).
 */
static int cm_wait(struct rdma_event_channel *ech, enum rdma_cm_event_type want, uint64_t deadline,
		   struct coord_rdma_priv *priv, struct rdma_cm_id **id,
		   struct rdma_conn_param *param, const char *peer, struct coord_error *err)
{
	struct rdma_cm_event *ev;
	int r;

	for (;;) {
		struct pollfd p = { .fd = ech->fd, .events = POLLIN };
		uint64_t now = coord_now_ns();
		int ms = deadline == FOREVER ? -1
			 : now >= deadline   ? 0
					     : (int)((deadline - now + 999999) / 1000000);

		if (rdma_get_cm_event(ech, &ev) == 0)
			break;
		if (errno != EAGAIN && errno != EINTR)
			return coord_seterr(err, -errno, "rdma_cm %s: %s", peer, strerror(errno));
		if (ms == 0)
			return coord_seterr(err, -ETIMEDOUT, "rdma_cm %s: no %s in time", peer,
					    rdma_event_str(want));
		r = poll(&p, 1, ms);
		if (r < 0 && errno != EINTR)
			return coord_seterr(err, -errno, "poll: %s", strerror(errno));
	}
	r = 0;
	if (ev->event != want) {
		switch (ev->event) {
		case RDMA_CM_EVENT_REJECTED:
			r = -ECONNREFUSED;
			break;
		case RDMA_CM_EVENT_ADDR_ERROR:
		case RDMA_CM_EVENT_ROUTE_ERROR:
		case RDMA_CM_EVENT_UNREACHABLE:
			r = ev->status == -ETIMEDOUT ? -ETIMEDOUT : -EHOSTUNREACH;
			break;
		default:
			r = -EPROTO;
		}
		coord_seterr(err, r, "rdma_cm %s: %s (status %d: %s) instead of %s", peer,
			     rdma_event_str(ev->event), ev->status,
			     ev->status < 0 ? strerror(-ev->status) : "-", rdma_event_str(want));
		if (ev->event == RDMA_CM_EVENT_ADDR_ERROR)
			coord_seterr(err, r,
				     "rdma_cm %s: address resolution failed (status %d: %s): no "
				     "RDMA device reaches it",
				     peer, ev->status,
				     ev->status < 0 ? strerror(-ev->status) : "-");
	} else {
		/* private_data lives in the event: decoded before the ack. */
		if (priv) {
			r = priv_decode(ev->param.conn.private_data,
					ev->param.conn.private_data_len, priv);
			if (r < 0)
				coord_seterr(err, r,
					     "rdma %s: the peer is not a coord channel "
					     "(bad private data)",
					     peer);
		}
		if (id)
			*id = ev->id;
		if (param) {
			*param = ev->param.conn;
			param->private_data = NULL;
			param->private_data_len = 0;
		}
	}
	rdma_ack_cm_event(ev);
	return r;
}

/* Non-blocking: take the connection events that came (disconnection). */
static void cm_drain(struct coord_rdma_chan *ch)
{
	struct rdma_cm_event *ev;

	while (ch->ech && rdma_get_cm_event(ch->ech, &ev) == 0) {
		switch (ev->event) {
		case RDMA_CM_EVENT_DISCONNECTED:
			ch->closed = true;
			break;
		case RDMA_CM_EVENT_DEVICE_REMOVAL:
			if (!ch->err)
				ch->err = -ENODEV;
			ch->closed = true;
			break;
		default:
			break;
		}
		rdma_ack_cm_event(ev);
	}
}

/* ---- set-up ----------------------------------------------------------------------- */

static inline uint8_t *rbuf(const struct coord_rdma_chan *ch, uint32_t idx)
{
	return ch->mem + (size_t)idx * ch->o.buf;
}

static inline uint8_t *sbuf(const struct coord_rdma_chan *ch, uint32_t slot)
{
	return ch->mem + (size_t)(ch->o.nrecv + slot) * ch->o.buf;
}

int coord_rdma_available(struct coord_error *err)
{
	struct ibv_device **devs;
	struct rdma_event_channel *ech;
	int n = 0;

	devs = ibv_get_device_list(&n);
	if (devs)
		ibv_free_device_list(devs);
	if (!devs || n == 0)
		return coord_seterr(err, -ENODEV,
				    "rdma: no RDMA device here (ibv_get_device_list found none; "
				    "a NIC with RDMA, or `rdma link add rxe0 type rxe netdev "
				    "IFACE`)");
	ech = rdma_create_event_channel();
	if (!ech)
		return coord_seterr(err, -ENODEV,
				    "rdma: no rdma_cm (/dev/infiniband/rdma_cm: %s; load rdma_ucm)",
				    strerror(errno));
	rdma_destroy_event_channel(ech);
	return 0;
}

static struct coord_rdma_chan *chan_alloc(const struct coord_rdma_opts *o)
{
	struct coord_rdma_chan *ch = calloc(1, sizeof(*ch));

	if (!ch)
		return NULL;
	ch->o = *o;
	ch->thresh = o->nrecv / 4 > 2 ? o->nrecv / 4 : 2;
	ch->swr = calloc(o->nsend, sizeof(*ch->swr));
	ch->ssge = calloc(o->nsend, sizeof(*ch->ssge));
	ch->rwr = calloc(o->nrecv, sizeof(*ch->rwr));
	ch->rsge = calloc(o->nrecv, sizeof(*ch->rsge));
	ch->rq_idx = calloc(o->nrecv, sizeof(*ch->rq_idx));
	ch->rq_len = calloc(o->nrecv, sizeof(*ch->rq_len));
	ch->acap = 64 * 1024;
	ch->abuf = malloc(ch->acap);
	if (!ch->swr || !ch->ssge || !ch->rwr || !ch->rsge || !ch->rq_idx || !ch->rq_len ||
	    !ch->abuf) {
		coord_rdma_chan_destroy(ch);
		return NULL;
	}
	return ch;
}

static void repost_add(struct coord_rdma_chan *ch, uint32_t idx)
{
	struct ibv_sge *sge = &ch->rsge[ch->nrepost];
	struct ibv_recv_wr *wr = &ch->rwr[ch->nrepost];

	sge->addr = (uintptr_t)rbuf(ch, idx);
	sge->length = ch->o.buf;
	sge->lkey = ch->mr->lkey;
	wr->wr_id = RECV_TAG | idx;
	wr->sg_list = sge;
	wr->num_sge = 1;
	wr->next = NULL;
	if (ch->nrepost > 0)
		ch->rwr[ch->nrepost - 1].next = wr;
	ch->nrepost++;
}

/* Post the collected receives as one chain; they become owed credits. */
static int repost_flush(struct coord_rdma_chan *ch)
{
	struct ibv_recv_wr *bad;
	int r;

	if (ch->nrepost == 0)
		return 0;
	r = ibv_post_recv(ch->id->qp, ch->rwr, &bad);
	if (r) {
		if (!ch->err)
			ch->err = -r;
		return -r;
	}
	ch->owed += ch->nrepost;
	ch->nrepost = 0;
	return 0;
}

/* PD, completion channel, CQ, QP, the registered buffers, all receives posted. */
static int chan_setup(struct coord_rdma_chan *ch, struct coord_error *err)
{
	struct ibv_context *ctx = ch->id->verbs;
	struct ibv_qp_init_attr qa = {
		.qp_type = IBV_QPT_RC, /* 0 is not a valid type: rdma_create_qp gives EINVAL */
		.cap = { .max_send_wr = ch->o.nsend,
			 .max_recv_wr = ch->o.nrecv,
			 .max_send_sge = 1,
			 .max_recv_sge = 1 },
		.sq_sig_all = 0,
	};
	size_t len = (size_t)(ch->o.nrecv + ch->o.nsend) * ch->o.buf;
	int r;

	if (!ctx)
		return coord_seterr(err, -ENODEV, "rdma %s: the address is on no RDMA device",
				    ch->peer);
	ch->pd = pd_get(ctx);
	if (!ch->pd)
		return coord_seterr(err, -ENOMEM, "rdma: ibv_alloc_pd: %s", strerror(errno));
	ch->cc = ibv_create_comp_channel(ctx);
	if (!ch->cc)
		return coord_seterr(err, -errno, "rdma: ibv_create_comp_channel: %s",
				    strerror(errno));
	r = set_nonblock(ch->cc->fd);
	if (r < 0)
		return coord_seterr(err, r, "rdma: fcntl: %s", strerror(-r));
	ch->cq = ibv_create_cq(ctx, (int)(ch->o.nsend + ch->o.nrecv), ch, ch->cc, 0);
	if (!ch->cq)
		return coord_seterr(err, -errno, "rdma: ibv_create_cq(%u): %s",
				    ch->o.nsend + ch->o.nrecv, strerror(errno));
	ch->mem = aligned_alloc(4096, (len + 4095) & ~(size_t)4095);
	if (!ch->mem)
		return coord_seterr(err, -ENOMEM, "rdma: no memory for %zu bytes of buffers", len);
	memset(ch->mem, 0, len);
	ch->mr = ibv_reg_mr(ch->pd, ch->mem, len, IBV_ACCESS_LOCAL_WRITE);
	if (!ch->mr)
		return coord_seterr(err, -errno,
				    "rdma: ibv_reg_mr of %zu bytes: %s (ulimit -l too small?)", len,
				    strerror(errno));
	qa.send_cq = ch->cq;
	qa.recv_cq = ch->cq;
	if (rdma_create_qp(ch->id, ch->pd, &qa))
		return coord_seterr(err, -errno, "rdma: rdma_create_qp (%u send, %u recv): %s",
				    ch->o.nsend, ch->o.nrecv, strerror(errno));
	for (uint32_t i = 0; i < ch->o.nrecv; i++)
		repost_add(ch, i);
	r = repost_flush(ch);
	ch->owed = 0; /* the initial receives are announced in the private data */
	if (r < 0)
		return coord_seterr(err, r, "rdma: ibv_post_recv: %s", strerror(-r));
	r = set_nonblock(ch->ech->fd);
	if (r < 0)
		return coord_seterr(err, r, "rdma: fcntl: %s", strerror(-r));
	return 0;
}

static void chan_connected(struct coord_rdma_chan *ch, const struct coord_rdma_priv *peer)
{
	ch->peer_nrecv = peer->nrecv;
	ch->credits = peer->nrecv;
	ch->chunk = peer->buf < ch->o.buf ? peer->buf : ch->o.buf;
	ch->connected = true;
	coord_sock_name(rdma_get_peer_addr(ch->id), sizeof(struct sockaddr_storage), ch->peer,
			sizeof(ch->peer));
}

static void conn_param(struct rdma_conn_param *cp, const struct coord_rdma_chan *ch,
		       struct coord_rdma_priv *priv)
{
	struct ibv_device_attr da;
	int rd = RD_ATOM_MAX, init = RD_ATOM_MAX;

	if (ibv_query_device(ch->id->verbs, &da) == 0) {
		rd = da.max_qp_rd_atom < rd ? da.max_qp_rd_atom : rd;
		init = da.max_qp_init_rd_atom < init ? da.max_qp_init_rd_atom : init;
	}
	memset(cp, 0, sizeof(*cp));
	priv_encode(priv, &ch->o);
	cp->private_data = priv;
	cp->private_data_len = sizeof(*priv);
	cp->responder_resources = (uint8_t)rd;
	cp->initiator_depth = (uint8_t)init;
	cp->retry_count = 7; /* transport retries; a dead peer fails in seconds */
	cp->rnr_retry_count = (uint8_t)ch->o.rnr_retry;
}

int coord_rdma_connect(const char *hostport, const struct coord_rdma_opts *o, int timeout_ms,
		       struct coord_rdma_chan **out, struct coord_error *err)
{
	struct coord_rdma_opts oo;
	struct coord_rdma_chan *ch;
	struct coord_rdma_priv mine, peer;
	struct rdma_conn_param cp;
	struct sockaddr_storage ss;
	socklen_t sl;
	uint64_t deadline = timeout_ms < 0 ? FOREVER
					   : coord_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	int tmo = timeout_ms < 0 ? 10000 : timeout_ms > 0 ? timeout_ms : 1;
	int r;

	*out = NULL;
	r = opts_fill(&oo, o, err);
	if (r < 0)
		return r;
	r = coord_sock_addr(hostport, &ss, &sl, err);
	if (r < 0)
		return r;
	r = coord_rdma_available(err);
	if (r < 0)
		return r;
	ch = chan_alloc(&oo);
	if (!ch)
		return coord_seterr(err, -ENOMEM, "rdma: no memory for a channel");
	snprintf(ch->peer, sizeof(ch->peer), "%s", hostport);
	r = cm_open(&ch->ech, &ch->id, ch, err);
	if (r < 0)
		goto fail;
	if (rdma_resolve_addr(ch->id, NULL, (struct sockaddr *)&ss, tmo)) {
		r = coord_seterr(err, -errno, "rdma %s: rdma_resolve_addr: %s", hostport,
				 strerror(errno));
		goto fail;
	}
	r = cm_wait(ch->ech, RDMA_CM_EVENT_ADDR_RESOLVED, deadline, NULL, NULL, NULL, hostport,
		    err);
	if (r < 0)
		goto fail;
	if (rdma_resolve_route(ch->id, tmo)) {
		r = coord_seterr(err, -errno, "rdma %s: rdma_resolve_route: %s", hostport,
				 strerror(errno));
		goto fail;
	}
	r = cm_wait(ch->ech, RDMA_CM_EVENT_ROUTE_RESOLVED, deadline, NULL, NULL, NULL, hostport,
		    err);
	if (r < 0)
		goto fail;
	r = chan_setup(ch, err);
	if (r < 0)
		goto fail;
	conn_param(&cp, ch, &mine);
	if (rdma_connect(ch->id, &cp)) {
		r = coord_seterr(err, -errno, "rdma %s: rdma_connect: %s", hostport,
				 strerror(errno));
		goto fail;
	}
	r = cm_wait(ch->ech, RDMA_CM_EVENT_ESTABLISHED, deadline, &peer, NULL, NULL, hostport, err);
	if (r == -ECONNREFUSED)
		coord_seterr(err, r,
			     "rdma %s: connection refused (nobody listens, or the peer "
			     "rejected us)",
			     hostport);
	if (r < 0)
		goto fail;
	chan_connected(ch, &peer);
	*out = ch;
	return 0;
fail:
	coord_rdma_chan_destroy(ch);
	return r;
}

int coord_rdma_listen(const char *hostport, const struct coord_rdma_opts *o,
		      struct coord_rdma_listener **out, unsigned *port, struct coord_error *err)
{
	struct coord_rdma_listener *l;
	struct sockaddr_storage ss;
	socklen_t sl;
	int r;

	*out = NULL;
	r = coord_sock_addr(hostport, &ss, &sl, err);
	if (r < 0)
		return r;
	r = coord_rdma_available(err);
	if (r < 0)
		return r;
	l = calloc(1, sizeof(*l));
	if (!l)
		return coord_seterr(err, -ENOMEM, "no memory");
	r = opts_fill(&l->o, o, err);
	if (r < 0)
		goto fail;
	r = cm_open(&l->ech, &l->id, l, err);
	if (r < 0)
		goto fail;
	if (rdma_bind_addr(l->id, (struct sockaddr *)&ss) || rdma_listen(l->id, 64)) {
		r = coord_seterr(err, -errno, "rdma: cannot listen on %s: %s", hostport,
				 strerror(errno));
		goto fail;
	}
	*port = ntohs(rdma_get_src_port(l->id));
	*out = l;
	return 0;
fail:
	coord_rdma_listener_destroy(l);
	return r;
}

int coord_rdma_listener_fd(const struct coord_rdma_listener *l)
{
	return l->ech->fd;
}

int coord_rdma_accept(struct coord_rdma_listener *l, int timeout_ms, struct coord_rdma_chan **out,
		      struct coord_error *err)
{
	uint64_t deadline = timeout_ms < 0 ? FOREVER
					   : coord_now_ns() + (uint64_t)timeout_ms * 1000000ull;
	struct coord_rdma_priv peer, mine;
	struct rdma_conn_param req, cp;
	struct rdma_cm_id *id = NULL;
	struct coord_error e2;
	struct coord_rdma_chan *ch;
	int r, pr;

	*out = NULL;
	memset(&e2, 0, sizeof(e2));
	/* A request with bad private data still hands us its id, to reject. */
	r = cm_wait(l->ech, RDMA_CM_EVENT_CONNECT_REQUEST, deadline, &peer, &id, &req, "listener",
		    &e2);
	if (r < 0 && !id)
		return coord_seterr(err, r, "%s", e2.msg);
	pr = r;
	ch = chan_alloc(&l->o);
	if (!ch) {
		rdma_reject(id, NULL, 0);
		rdma_destroy_id(id);
		return coord_seterr(err, -ENOMEM, "rdma: no memory for a channel");
	}
	ch->id = id;
	id->context = ch;
	coord_sock_name(rdma_get_peer_addr(id), sizeof(struct sockaddr_storage), ch->peer,
			sizeof(ch->peer));
	if (pr < 0) {
		rdma_reject(id, NULL, 0);
		r = coord_seterr(err, -EPROTO,
				 "rdma %s: connection request refused: not a coord channel (bad "
				 "private data)",
				 ch->peer);
		goto fail;
	}
	ch->ech = rdma_create_event_channel();
	if (!ch->ech || rdma_migrate_id(id, ch->ech)) {
		rdma_reject(id, NULL, 0);
		r = coord_seterr(err, -errno, "rdma: a channel's event channel: %s",
				 strerror(errno));
		goto fail;
	}
	r = chan_setup(ch, err);
	if (r < 0) {
		rdma_reject(id, NULL, 0);
		goto fail;
	}
	conn_param(&cp, ch, &mine);
	/* Accept no more RDMA READs in flight than the peer asked for, and ask no more. */
	if (cp.responder_resources > req.initiator_depth)
		cp.responder_resources = req.initiator_depth;
	if (cp.initiator_depth > req.responder_resources)
		cp.initiator_depth = req.responder_resources;
	if (rdma_accept(id, &cp)) {
		r = coord_seterr(err, -errno, "rdma %s: rdma_accept: %s", ch->peer,
				 strerror(errno));
		goto fail;
	}
	r = cm_wait(ch->ech, RDMA_CM_EVENT_ESTABLISHED, deadline, NULL, NULL, NULL, ch->peer, err);
	if (r < 0)
		goto fail;
	chan_connected(ch, &peer);
	*out = ch;
	return 0;
fail:
	coord_rdma_chan_destroy(ch);
	return r;
}

void coord_rdma_listener_destroy(struct coord_rdma_listener *l)
{
	if (!l)
		return;
	if (l->id)
		rdma_destroy_id(l->id);
	if (l->ech)
		rdma_destroy_event_channel(l->ech);
	free(l);
}

/* ---- completions ------------------------------------------------------------------ */

static void chan_break(struct coord_rdma_chan *ch, int r, const char *why)
{
	if (ch->err)
		return;
	ch->err = r;
	coord_log(COORD_LOG_WARN, "rdma %s: channel closed: %s", ch->peer, why);
	if (ch->connected) {
		rdma_disconnect(ch->id); /* the peer sees DISCONNECTED: -EPIPE */
		ch->connected = false;
	}
}

static void on_wc(struct coord_rdma_chan *ch, const struct ibv_wc *wc)
{
	char why[128];

	if (wc->status != IBV_WC_SUCCESS) {
		if (wc->status == IBV_WC_WR_FLUSH_ERR) {
			ch->closed = true; /* our QP went to error: disconnected */
			return;
		}
		snprintf(why, sizeof(why), "%s failed: %s",
			 wc->wr_id & RECV_TAG ? "a receive" : "a send or RDMA READ",
			 ibv_wc_status_str(wc->status));
		chan_break(ch, -EIO, why);
		return;
	}
	if (!(wc->wr_id & RECV_TAG)) {
		/* A signalled send: it and every request before it are done. */
		ch->sq_done = wc->wr_id + 1;
		return;
	}
	ch->st.recvs++;
	if (wc->opcode != IBV_WC_RECV) {
		chan_break(ch, -EPROTO, "the peer used RDMA WRITE with immediate");
		return;
	}
	if (wc->wc_flags & IBV_WC_WITH_IMM) {
		uint32_t c = ntohl(wc->imm_data);

		if (c > ch->peer_nrecv - ch->credits) {
			snprintf(why, sizeof(why),
				 "the peer returned %u credits, %u more than it granted", c,
				 c - (ch->peer_nrecv - ch->credits));
			chan_break(ch, -EPROTO, why);
			return;
		}
		ch->credits += c;
	}
	if (wc->byte_len == 0) { /* credit-only: the receive goes straight back */
		repost_add(ch, (uint32_t)(wc->wr_id & ~RECV_TAG));
		return;
	}
	ch->rq_idx[ch->rq_tail % ch->o.nrecv] = (uint32_t)(wc->wr_id & ~RECV_TAG);
	ch->rq_len[ch->rq_tail % ch->o.nrecv] = wc->byte_len;
	ch->rq_tail++;
}

/* Reap what the CQ holds now; the number of completions. */
static int poll_cq(struct coord_rdma_chan *ch)
{
	struct ibv_wc wc[POLL_BATCH];
	int n, total = 0;

	do {
		n = ibv_poll_cq(ch->cq, POLL_BATCH, wc);
		if (n < 0) {
			chan_break(ch, -EIO, "ibv_poll_cq failed");
			return total;
		}
		for (int i = 0; i < n; i++)
			on_wc(ch, &wc[i]);
		total += n;
	} while (n == POLL_BATCH);
	return total;
}

/* Take the completion channel's events (the fd is non-blocking). */
static void cq_events_drain(struct coord_rdma_chan *ch)
{
	struct ibv_cq *cq;
	void *ctx;
	unsigned n = 0;

	while (ibv_get_cq_event(ch->cc, &cq, &ctx) == 0)
		n++;
	if (n)
		ibv_ack_cq_events(ch->cq, n);
}

/*
 * Post one chain of send work requests [0, n) built in ch->swr (the last
 * one signalled if @sig_last).  Sets the chain's links.
 */
static int post_chain(struct coord_rdma_chan *ch, unsigned n, bool sig_last)
{
	struct ibv_send_wr *bad;
	int r;

	if (n == 0)
		return 0;
	for (unsigned i = 0; i + 1 < n; i++)
		ch->swr[i].next = &ch->swr[i + 1];
	ch->swr[n - 1].next = NULL;
	if (sig_last && !(ch->swr[n - 1].send_flags & IBV_SEND_SIGNALED)) {
		ch->swr[n - 1].send_flags |= IBV_SEND_SIGNALED;
		ch->sig_head = ch->swr[n - 1].wr_id + 1;
		ch->st.signalled++;
	}
	r = ibv_post_send(ch->id->qp, ch->swr, &bad);
	if (r) {
		chan_break(ch, -r, "ibv_post_send failed");
		return -r;
	}
	return 0;
}

/* Fill the next send work request of a chain: @len bytes at slot of @seq. */
static void wr_fill(struct coord_rdma_chan *ch, unsigned k, uint64_t seq, uint32_t len)
{
	struct ibv_send_wr *wr = &ch->swr[k];
	struct ibv_sge *sge = &ch->ssge[k];
	uint32_t sig_every = ch->o.nsend / 2;

	memset(wr, 0, sizeof(*wr));
	sge->addr = (uintptr_t)sbuf(ch, (uint32_t)(seq % ch->o.nsend));
	sge->length = len;
	sge->lkey = ch->mr->lkey;
	wr->wr_id = seq;
	wr->sg_list = len ? sge : NULL;
	wr->num_sge = len ? 1 : 0;
	wr->opcode = IBV_WR_SEND_WITH_IMM;
	wr->imm_data = htonl(ch->owed);
	ch->owed = 0;
	/* Within a long chain, every sig_every-th is signalled too (file header). */
	if (seq % sig_every == sig_every - 1) {
		wr->send_flags = IBV_SEND_SIGNALED;
		ch->sig_head = seq + 1;
		ch->st.signalled++;
	}
	ch->st.sends++;
	ch->credits--;
}

/* C3: a credit-only message when many credits are owed. */
static void maybe_return_credits(struct coord_rdma_chan *ch)
{
	if (ch->err || ch->closed || !ch->connected || repost_flush(ch) < 0)
		return;
	if (ch->owed < ch->thresh || ch->credits < 1)
		return;
	if (ch->sq_head - ch->sq_done >= ch->o.nsend) {
		poll_cq(ch);
		if (ch->sq_head - ch->sq_done >= ch->o.nsend)
			return; /* a signalled request is in the ring: retried after it */
	}
	wr_fill(ch, 0, ch->sq_head, 0);
	ch->st.credit_msgs++;
	if (post_chain(ch, 1, false) == 0)
		ch->sq_head++;
}

int coord_rdma_chan_send_some(struct coord_rdma_chan *ch, const void *buf, size_t len, size_t *sent)
{
	const uint8_t *p = buf;
	unsigned k = 0;
	size_t done = 0;
	int r;

	*sent = 0;
	if (ch->err || ch->closed || !ch->connected)
		return -EPIPE;
	r = repost_flush(ch); /* so the owed credits we return are real */
	if (r < 0)
		return -EPIPE;
	if (len && (ch->credits < 2 || ch->sq_head - ch->sq_done >= ch->o.nsend))
		poll_cq(ch);
	while (done < len) {
		uint32_t n = len - done < ch->chunk ? (uint32_t)(len - done) : ch->chunk;
		uint64_t seq = ch->sq_head + k;

		if (ch->credits < 2) { /* C2: the last one is for credit-only messages */
			ch->st.credit_waits++;
			break;
		}
		if (seq - ch->sq_done >= ch->o.nsend)
			break;
		memcpy(sbuf(ch, (uint32_t)(seq % ch->o.nsend)), p + done, n);
		wr_fill(ch, k++, seq, n);
		done += n;
	}
	r = post_chain(ch, k, false);
	if (r < 0)
		return -EPIPE;
	ch->sq_head += k;
	*sent = done;
	return 0;
}

/*
 * The busy-poll budget of a blocking wait: opts.spin_us, or, while waits
 * have been ending within opts.spin_max_us (the moving average gap_ns),
 * four times that average, up to spin_max_us ("Completions" above).
 */
static uint64_t spin_budget_ns(const struct coord_rdma_chan *ch)
{
	uint64_t base = ch->o.spin_us > 0 ? (uint64_t)ch->o.spin_us * 1000 : 0;
	uint64_t max = ch->o.spin_max_us > 0 ? (uint64_t)ch->o.spin_max_us * 1000 : 0;

	return coord_spin_budget(ch->gap_ns, base, max);
}

/* Fold one wait of @ns into gap_ns (an average over about 8 waits). */
static void gap_note(struct coord_rdma_chan *ch, uint64_t ns)
{
	uint64_t max = ch->o.spin_max_us > 0 ? (uint64_t)ch->o.spin_max_us * 1000 : 0;

	ch->gap_ns = coord_spin_avg(ch->gap_ns, ns, max);
}

/*
 * Wait until something happens on @ch (a completion, a connection event) or
 * @deadline: spin for spin_budget_ns(), then sleep on the two fds.
 * Return: 0; -ETIMEDOUT.
 */
static int wait_event(struct coord_rdma_chan *ch, uint64_t deadline)
{
	uint64_t start = coord_now_ns(), now = start;
	uint64_t budget = spin_budget_ns(ch);
	uint64_t spin_end = budget ? now + budget : 0;
	unsigned spins = 0;

	for (;;) {
		struct pollfd p[2] = { { .fd = ch->cc->fd, .events = POLLIN },
				       { .fd = ch->ech->fd, .events = POLLIN } };
		int ms, r;

		if (poll_cq(ch) > 0 || ch->err || ch->closed) {
			gap_note(ch, coord_now_ns() - start);
			return 0;
		}
		now = coord_now_ns();
		if (now >= deadline) {
			gap_note(ch, now - start);
			return -ETIMEDOUT;
		}
		if (now < spin_end) {
			coord_spin_pause(++spins);
			continue;
		}
		if (ibv_req_notify_cq(ch->cq, 0)) {
			chan_break(ch, -EIO, "ibv_req_notify_cq failed");
			return 0;
		}
		if (poll_cq(ch) > 0 || ch->err) {
			gap_note(ch, coord_now_ns() - start);
			return 0;
		}
		ms = deadline == FOREVER ? -1 : (int)((deadline - now + 999999) / 1000000);
		ch->st.sleeps++;
		r = poll(p, 2, ms);
		if (r < 0 && errno != EINTR) {
			chan_break(ch, -errno, "poll failed");
			return 0;
		}
		if (p[0].revents)
			cq_events_drain(ch);
		if (p[1].revents)
			cm_drain(ch);
		now = coord_now_ns();
		spin_end = 0;
	}
}

static uint64_t deadline_ms(int ms)
{
	return ms < 0 ? FOREVER : coord_now_ns() + (uint64_t)ms * 1000000ull;
}

int coord_rdma_chan_send(struct coord_rdma_chan *ch, const void *buf, size_t len, int timeout_ms)
{
	uint64_t deadline = deadline_ms(timeout_ms);
	const uint8_t *p = buf;
	size_t n;
	int r;

	for (;;) {
		r = coord_rdma_chan_send_some(ch, p, len, &n);
		if (r < 0)
			return r;
		p += n;
		len -= n;
		if (len == 0)
			return 0;
		r = wait_event(ch, deadline);
		if (r < 0) {
			coord_log(COORD_LOG_WARN,
				  "rdma %s: no credits from the peer within %d ms (%u credits, "
				  "%zu bytes left to send)",
				  ch->peer, timeout_ms, ch->credits, len);
			return r;
		}
		/* A peer blocked on us needs our credits to go on. */
		maybe_return_credits(ch);
	}
}

/* ---- reading ---------------------------------------------------------------------- */

static int ensure_abuf(struct coord_rdma_chan *ch, size_t need)
{
	uint8_t *b;

	if (need <= ch->acap)
		return 0;
	b = realloc(ch->abuf, need);
	if (!b)
		return -ENOMEM;
	ch->abuf = b;
	ch->acap = need;
	return 0;
}

/* The head receive buffer's bytes are all used: repost it. */
static void rq_pop(struct coord_rdma_chan *ch)
{
	repost_add(ch, ch->rq_idx[ch->rq_head % ch->o.nrecv]);
	ch->rq_head++;
	ch->roff = 0;
}

/* Copy queued bytes into the reassembly buffer; 1 when the frame is whole. */
static int assemble(struct coord_rdma_chan *ch, struct coord_wire_hdr *h)
{
	int r;

	while (ch->alen < ch->aneed && ch->rq_head != ch->rq_tail) {
		uint32_t len = ch->rq_len[ch->rq_head % ch->o.nrecv];
		const uint8_t *src = rbuf(ch, ch->rq_idx[ch->rq_head % ch->o.nrecv]) + ch->roff;
		size_t n = len - ch->roff;

		if (n > ch->aneed - ch->alen)
			n = ch->aneed - ch->alen;
		memcpy(ch->abuf + ch->alen, src, n);
		ch->alen += n;
		ch->roff += (uint32_t)n;
		if (ch->roff == len)
			rq_pop(ch); /* copied out: the receive goes back at once */
		if (ch->alen == COORD_WIRE_HDR && ch->aneed == COORD_WIRE_HDR) {
			r = coord_wire_parse_hdr(ch->abuf, ch->alen, ch->o.max_frame, h);
			if (r < 0)
				return r;
			ch->aneed = COORD_WIRE_HDR + (size_t)h->len;
			if (ensure_abuf(ch, ch->aneed) < 0)
				return -ENOMEM;
		}
	}
	if (ch->alen < ch->aneed)
		return 0;
	return coord_wire_parse_hdr(ch->abuf, ch->alen, ch->o.max_frame, h) == 0 ? 1 : -EPROTO;
}

int coord_rdma_chan_read(struct coord_rdma_chan *ch, int idle_ms, int partial_ms,
			 struct coord_wire_hdr *h, const uint8_t **payload)
{
	uint64_t idle_end = deadline_ms(idle_ms), part_end = 0;
	char why[96];
	int r;

	for (;;) {
		if (ch->err)
			return ch->err == -EPROTO || ch->err == -EMSGSIZE ? ch->err
			       : ch->err == -EIO			  ? -EIO
									  : -EPIPE;
		/* The previous frame's bytes (and any used up) go back now. */
		while (ch->rq_head != ch->rq_tail &&
		       ch->roff == ch->rq_len[ch->rq_head % ch->o.nrecv])
			rq_pop(ch);
		if (!ch->assembling && ch->rq_head != ch->rq_tail) {
			uint32_t len = ch->rq_len[ch->rq_head % ch->o.nrecv];
			const uint8_t *p = rbuf(ch, ch->rq_idx[ch->rq_head % ch->o.nrecv]) +
					   ch->roff;
			size_t avail = len - ch->roff;

			if (avail >= COORD_WIRE_HDR) {
				r = coord_wire_parse_hdr(p, avail, ch->o.max_frame, h);
				if (r < 0)
					goto bad;
				if (COORD_WIRE_HDR + (size_t)h->len <= avail) { /* zero copy */
					*payload = p + COORD_WIRE_HDR;
					ch->roff += COORD_WIRE_HDR + h->len;
					maybe_return_credits(ch);
					return 0;
				}
				ch->aneed = COORD_WIRE_HDR + (size_t)h->len;
			} else {
				ch->aneed = COORD_WIRE_HDR; /* the header spans buffers */
			}
			if (ensure_abuf(ch, ch->aneed) < 0)
				return -ENOMEM;
			ch->assembling = true;
			ch->alen = 0;
			part_end = deadline_ms(partial_ms);
		}
		if (ch->assembling) {
			r = assemble(ch, h);
			if (r < 0)
				goto bad;
			if (r == 1) {
				ch->assembling = false;
				*payload = ch->abuf + COORD_WIRE_HDR;
				maybe_return_credits(ch);
				return 0;
			}
			if (!part_end)
				part_end = deadline_ms(partial_ms);
		}
		maybe_return_credits(ch);
		if (ch->closed && ch->rq_head == ch->rq_tail) {
			poll_cq(ch); /* completions that came before the disconnection */
			if (ch->rq_head == ch->rq_tail)
				return -EPIPE;
			continue;
		}
		r = wait_event(ch, ch->assembling ? part_end : idle_end);
		if (r < 0)
			return r;
		if (!ch->closed && !ch->err) {
			struct pollfd p = { .fd = ch->ech->fd, .events = POLLIN };

			/* The disconnection is seen in a sleep; look when nothing came. */
			if (ch->rq_head == ch->rq_tail && poll(&p, 1, 0) == 1)
				cm_drain(ch);
		}
	}
bad:
	snprintf(why, sizeof(why), "bad frame header: %s",
		 r == -EMSGSIZE ? "length over max_frame" : "garbage");
	chan_break(ch, r, why);
	return r;
}

int coord_rdma_chan_progress(struct coord_rdma_chan *ch)
{
	cq_events_drain(ch);
	cm_drain(ch);
	ch->events_ns = coord_now_ns();
	poll_cq(ch);
	maybe_return_credits(ch);
	return ch->err || ch->closed ? -EPIPE : 0;
}

int coord_rdma_chan_progress_fast(struct coord_rdma_chan *ch)
{
	uint64_t now = coord_now_ns();

	/* The two event channels cost a system call each: at most once a
	 * millisecond here (coord_rdma_chan_arm() drains the CQ's anyway). */
	if (now - ch->events_ns >= 1000000) {
		cq_events_drain(ch);
		cm_drain(ch);
		ch->events_ns = now;
	}
	poll_cq(ch);
	maybe_return_credits(ch);
	return ch->err || ch->closed ? -EPIPE : 0;
}

void coord_rdma_chan_fds(const struct coord_rdma_chan *ch, int *cq_fd, int *cm_fd)
{
	*cq_fd = ch->cc->fd;
	*cm_fd = ch->ech->fd;
}

int coord_rdma_chan_arm(struct coord_rdma_chan *ch)
{
	if (ch->err || ch->closed)
		return -EPIPE;
	/* Events of completions already reaped go first: the channel's fd
	 * then becomes readable again only on the next one (an edge, for
	 * watchers that are edge-triggered). */
	cq_events_drain(ch);
	if (coord_rdma_chan_readable(ch) || poll_cq(ch) > 0)
		return 1;
	if (ibv_req_notify_cq(ch->cq, 0)) {
		chan_break(ch, -EIO, "ibv_req_notify_cq failed");
		return -EPIPE;
	}
	return poll_cq(ch) > 0 ? 1 : 0;
}

bool coord_rdma_chan_readable(const struct coord_rdma_chan *ch)
{
	/* Queued receives hold at least one byte each; the head may be used up. */
	return ch->rq_tail - ch->rq_head > 1 ||
	       (ch->rq_head != ch->rq_tail && ch->roff < ch->rq_len[ch->rq_head % ch->o.nrecv]);
}

bool coord_rdma_chan_partial(const struct coord_rdma_chan *ch)
{
	return ch->assembling;
}

const char *coord_rdma_chan_peer(const struct coord_rdma_chan *ch)
{
	return ch->peer;
}

void coord_rdma_chan_stats(const struct coord_rdma_chan *ch, struct coord_rdma_stats *st)
{
	*st = ch->st;
}

static int io_read(void *ctx, int idle_ms, int partial_ms, struct coord_wire_hdr *h,
		   const uint8_t **payload)
{
	return coord_rdma_chan_read(ctx, idle_ms, partial_ms, h, payload);
}

static int io_write(void *ctx, const void *buf, size_t len)
{
	struct coord_rdma_chan *ch = ctx;

	return coord_rdma_chan_send(ch, buf, len, ch->o.io_timeout_ms);
}

void coord_rdma_chan_io(struct coord_frame_io *io, struct coord_rdma_chan *ch)
{
	io->ctx = ch;
	io->read = io_read;
	io->write = io_write;
}

/* ---- closing ---------------------------------------------------------------------- */

void coord_rdma_chan_shutdown(struct coord_rdma_chan *ch)
{
	if (!ch)
		return;
	if (!ch->err)
		ch->err = -EPIPE; /* sticky: sends and reads fail, destroy does not drain */
	if (ch->connected) {
		rdma_disconnect(ch->id); /* the peer sees DISCONNECTED: -EPIPE */
		ch->connected = false;
	}
}

void coord_rdma_chan_destroy(struct coord_rdma_chan *ch)
{
	if (!ch)
		return;
	if (ch->connected && !ch->err && !ch->closed) {
		/* Graceful: what we posted reaches the peer before the disconnection
		 * (rdma_disconnect() flushes the send queue).  An unsignalled tail
		 * gets a signalled credit-only message after it (the reserved
		 * credit, C2), whose completion says it is all through. */
		uint64_t end = deadline_ms(CLOSE_DRAIN_MS);

		if (ch->sig_head < ch->sq_head && ch->credits >= 1 &&
		    ch->sq_head - ch->sq_done < ch->o.nsend) {
			wr_fill(ch, 0, ch->sq_head, 0);
			ch->st.credit_msgs++;
			if (post_chain(ch, 1, true) == 0)
				ch->sq_head++;
		}
		while (ch->sq_done < ch->sig_head && !ch->err && !ch->closed)
			if (wait_event(ch, end) < 0)
				break;
	}
	if (ch->connected)
		rdma_disconnect(ch->id);
	if (ch->id && ch->id->qp)
		rdma_destroy_qp(ch->id);
	if (ch->mr)
		ibv_dereg_mr(ch->mr);
	if (ch->cq) {
		cq_events_drain(ch);
		ibv_destroy_cq(ch->cq);
	}
	if (ch->cc)
		ibv_destroy_comp_channel(ch->cc);
	if (ch->pd)
		pd_put(ch->pd);
	if (ch->id)
		rdma_destroy_id(ch->id);
	if (ch->ech)
		rdma_destroy_event_channel(ch->ech);
	free(ch->mem);
	free(ch->swr);
	free(ch->ssge);
	free(ch->rwr);
	free(ch->rsge);
	free(ch->rq_idx);
	free(ch->rq_len);
	free(ch->abuf);
	free(ch);
}

/* ---- one-sided RDMA READ ---------------------------------------------------------- */

int coord_rdma_reg(struct coord_rdma_chan *ch, void *addr, size_t len, bool remote_read,
		   struct coord_rdma_mr **out)
{
	struct coord_rdma_mr *m = calloc(1, sizeof(*m));
	int access = IBV_ACCESS_LOCAL_WRITE | (remote_read ? IBV_ACCESS_REMOTE_READ : 0);

	*out = NULL;
	if (!m)
		return -ENOMEM;
	m->pd = pd_get(ch->id->verbs); /* a reference: the region may outlive @ch */
	if (!m->pd) {
		free(m);
		return -ENOMEM;
	}
	m->mr = ibv_reg_mr(m->pd, addr, len, access);
	if (!m->mr) {
		int r = -errno;

		pd_put(m->pd);
		free(m);
		return r;
	}
	*out = m;
	return 0;
}

void coord_rdma_dereg(struct coord_rdma_mr *mr)
{
	if (!mr)
		return;
	ibv_dereg_mr(mr->mr);
	pd_put(mr->pd);
	free(mr);
}

void coord_rdma_mr_export(const struct coord_rdma_mr *mr, uint64_t *addr, uint32_t *rkey)
{
	*addr = (uintptr_t)mr->mr->addr;
	*rkey = mr->mr->rkey;
}

int coord_rdma_readv(struct coord_rdma_chan *ch, struct coord_rdma_mr *local,
		     const struct coord_rdma_rseg *seg, unsigned n, int timeout_ms)
{
	uint64_t deadline = deadline_ms(timeout_ms), seq;
	struct ibv_send_wr *bad;
	int r;

	if (n == 0 || n > ch->o.nsend)
		return -EINVAL;
	for (unsigned i = 0; i < n; i++)
		if (seg[i].loff > local->mr->length ||
		    seg[i].len > local->mr->length - seg[i].loff || seg[i].len > UINT32_MAX)
			return -EINVAL;
	while (ch->sq_head - ch->sq_done + n > ch->o.nsend) {
		if (ch->err || ch->closed)
			return -EPIPE;
		if (wait_event(ch, deadline) < 0)
			return -ETIMEDOUT;
	}
	if (ch->err || ch->closed || !ch->connected)
		return -EPIPE;
	/* One chain, the last request signalled: the send queue completes in
	 * order, so its completion says every READ before it is in too. */
	for (unsigned i = 0; i < n; i++) {
		struct ibv_send_wr *wr = &ch->swr[i];
		struct ibv_sge *sge = &ch->ssge[i];

		memset(wr, 0, sizeof(*wr));
		sge->addr = (uintptr_t)local->mr->addr + seg[i].loff;
		sge->length = (uint32_t)seg[i].len;
		sge->lkey = local->mr->lkey;
		wr->wr_id = ch->sq_head + i;
		wr->sg_list = sge;
		wr->num_sge = 1;
		wr->opcode = IBV_WR_RDMA_READ;
		wr->send_flags = i == n - 1 ? IBV_SEND_SIGNALED : 0;
		wr->wr.rdma.remote_addr = seg[i].raddr;
		wr->wr.rdma.rkey = seg[i].rkey;
		wr->next = i + 1 < n ? &ch->swr[i + 1] : NULL;
	}
	seq = ch->sq_head + n - 1;
	ch->st.signalled++;
	ch->sig_head = seq + 1;
	r = ibv_post_send(ch->id->qp, &ch->swr[0], &bad);
	if (r) {
		chan_break(ch, -r, "ibv_post_send (RDMA READ) failed");
		return -EPIPE;
	}
	ch->sq_head += n;
	while (ch->sq_done <= seq) {
		if (ch->err)
			return ch->err == -EIO ? -EIO : -EPIPE;
		if (ch->closed)
			return -EPIPE;
		if (wait_event(ch, deadline) < 0)
			return -ETIMEDOUT;
	}
	return 0;
}

int coord_rdma_read(struct coord_rdma_chan *ch, struct coord_rdma_mr *local, size_t loff,
		    uint64_t raddr, uint32_t rkey, size_t len, int timeout_ms)
{
	struct coord_rdma_rseg seg = { .loff = loff, .raddr = raddr, .rkey = rkey, .len = len };

	return coord_rdma_readv(ch, local, &seg, 1, timeout_ms);
}

void coord_rdma_chan_verbs(struct coord_rdma_chan *ch, struct coord_rdma_mr *mr, struct ibv_qp **qp,
			   struct ibv_cq **cq, struct ibv_mr **vmr)
{
	if (qp)
		*qp = ch ? ch->id->qp : NULL;
	if (cq)
		*cq = ch ? ch->cq : NULL;
	if (vmr)
		*vmr = mr ? mr->mr : NULL;
}
