// SPDX-License-Identifier: MIT
/*
 * transport/rdma/rdma_conn.c - the frame channel's set-up and tear-down:
 * the per-device protection domains, options and the private data of
 * rdma_cm, connect / listen / accept, closing.  The channel itself (its
 * protocol, credits, threading): rdma_chan.c.
 */
#include "transport/rdma/rdma_chan_pvt.h"

/* ---- the per-device protection domains (slow path, under a mutex) ---------------- */

#define PD_MAX 16
static struct {
	struct ibv_context *ctx;
	struct ibv_pd *pd;
	unsigned refs;
} pds[PD_MAX];
static pthread_mutex_t pd_lock = PTHREAD_MUTEX_INITIALIZER;

struct ibv_pd *pd_get(struct ibv_context *ctx)
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

void pd_put(struct ibv_pd *pd)
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
void cm_drain(struct coord_rdma_chan *ch)
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

void repost_add(struct coord_rdma_chan *ch, uint32_t idx)
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
int repost_flush(struct coord_rdma_chan *ch)
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
