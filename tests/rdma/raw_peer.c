// SPDX-License-Identifier: MIT
/*
 * tests/rdma/raw_peer.c - a raw verbs peer for the rdma tests (raw_peer.h).
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

#include "transport/rdma/rdma_chan.h"
#include "raw_peer.h"

static int raw_wait(struct t_raw_peer *rp, enum rdma_cm_event_type want, int wait_ms)
{
	struct pollfd p = { .fd = rp->ech->fd, .events = POLLIN };
	struct rdma_cm_event *ev;
	int ok;

	if (poll(&p, 1, wait_ms) != 1 || rdma_get_cm_event(rp->ech, &ev))
		return -ETIMEDOUT;
	ok = ev->event == want;
	if (!ok)
		fprintf(stderr, "raw peer: %s, want %s\n", rdma_event_str(ev->event),
			rdma_event_str(want));
	rdma_ack_cm_event(ev);
	return ok ? 0 : -EPROTO;
}

int t_raw_connect_start(struct t_raw_peer *rp, const char *ip, unsigned port, uint32_t nrecv,
			uint32_t posted, int wait_ms)
{
	struct ibv_qp_init_attr qa = {
		.qp_type = IBV_QPT_RC,
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 }
	};
	struct coord_rdma_priv priv = { .magic = htole32(COORD_RDMA_MAGIC),
					.version = htole16(COORD_RDMA_VERSION),
					.nrecv = htole32(nrecv),
					.buf = htole32(T_RAW_BUF) };
	struct rdma_conn_param cp = { .private_data = &priv,
				      .private_data_len = sizeof(priv),
				      .responder_resources = 1,
				      .initiator_depth = 1,
				      .retry_count = 7,
				      .rnr_retry_count = 7 };
	struct sockaddr_in sin = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };

	inet_pton(AF_INET, ip, &sin.sin_addr);
	rp->ech = rdma_create_event_channel();
	if (!rp->ech || rdma_create_id(rp->ech, &rp->id, NULL, RDMA_PS_TCP))
		return -errno;
	if (rdma_resolve_addr(rp->id, NULL, (struct sockaddr *)&sin, wait_ms) ||
	    raw_wait(rp, RDMA_CM_EVENT_ADDR_RESOLVED, wait_ms) ||
	    rdma_resolve_route(rp->id, wait_ms) ||
	    raw_wait(rp, RDMA_CM_EVENT_ROUTE_RESOLVED, wait_ms))
		return -EHOSTUNREACH;
	rp->pd = ibv_alloc_pd(rp->id->verbs);
	rp->cq = rp->pd ? ibv_create_cq(rp->id->verbs, 16, NULL, NULL, 0) : NULL;
	rp->mr = rp->cq ? ibv_reg_mr(rp->pd, rp->buf, sizeof(rp->buf), IBV_ACCESS_LOCAL_WRITE)
			: NULL;
	if (!rp->mr)
		return -ENOMEM;
	qa.send_cq = qa.recv_cq = rp->cq;
	if (rdma_create_qp(rp->id, rp->pd, &qa))
		return -errno;
	for (uint32_t i = 0; i < posted && i < 4; i++) {
		struct ibv_sge sge = { .addr = (uintptr_t)(rp->buf + i * T_RAW_BUF),
				       .length = T_RAW_BUF,
				       .lkey = rp->mr->lkey };
		struct ibv_recv_wr wr = { .wr_id = i, .sg_list = &sge, .num_sge = 1 }, *bad;

		if (ibv_post_recv(rp->id->qp, &wr, &bad))
			return -EIO;
	}
	if (rdma_connect(rp->id, &cp))
		return -errno;
	return 0;
}

int t_raw_connect(struct t_raw_peer *rp, const char *ip, unsigned port, uint32_t nrecv,
		  uint32_t posted, int wait_ms)
{
	int r = t_raw_connect_start(rp, ip, port, nrecv, posted, wait_ms);

	return r ? r : raw_wait(rp, RDMA_CM_EVENT_ESTABLISHED, wait_ms);
}

int t_raw_send(struct t_raw_peer *rp, const void *p, size_t len, int wait_ms)
{
	uint8_t *b = rp->buf + 4 * T_RAW_BUF;
	struct ibv_sge sge = { .addr = (uintptr_t)b,
			       .length = (uint32_t)len,
			       .lkey = rp->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 100,
				  .sg_list = &sge,
				  .num_sge = 1,
				  .opcode = IBV_WR_SEND,
				  .send_flags = IBV_SEND_SIGNALED },
			   *bad;
	struct timespec t0, t;

	if (len > T_RAW_BUF)
		return -EMSGSIZE;
	memcpy(b, p, len);
	if (ibv_post_send(rp->id->qp, &wr, &bad))
		return -EIO;
	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		struct ibv_wc wc;
		int n = ibv_poll_cq(rp->cq, 1, &wc);

		if (n < 0)
			return -EIO;
		if (n == 1 && wc.wr_id == 100)
			return wc.status == IBV_WC_SUCCESS ? 0 : -EIO;
		clock_gettime(CLOCK_MONOTONIC, &t);
		if ((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000 > wait_ms)
			return -ETIMEDOUT;
	}
}

int t_raw_wait_disconnect(struct t_raw_peer *rp, int wait_ms)
{
	struct timespec t0, t;

	clock_gettime(CLOCK_MONOTONIC, &t0);
	for (;;) {
		struct pollfd p = { .fd = rp->ech->fd, .events = POLLIN };
		struct rdma_cm_event *ev;
		int ms;

		clock_gettime(CLOCK_MONOTONIC, &t);
		ms = wait_ms -
		     (int)((t.tv_sec - t0.tv_sec) * 1000 + (t.tv_nsec - t0.tv_nsec) / 1000000);
		if (ms <= 0 || poll(&p, 1, ms) != 1)
			return -ETIMEDOUT;
		if (rdma_get_cm_event(rp->ech, &ev))
			return -EIO;
		if (ev->event == RDMA_CM_EVENT_DISCONNECTED) {
			rdma_ack_cm_event(ev);
			return 0;
		}
		rdma_ack_cm_event(ev);
	}
}

void t_raw_close(struct t_raw_peer *rp)
{
	if (rp->id) {
		rdma_disconnect(rp->id);
		if (rp->id->qp)
			rdma_destroy_qp(rp->id);
	}
	if (rp->mr)
		ibv_dereg_mr(rp->mr);
	if (rp->cq)
		ibv_destroy_cq(rp->cq);
	if (rp->pd)
		ibv_dealloc_pd(rp->pd);
	if (rp->id)
		rdma_destroy_id(rp->id);
	if (rp->ech)
		rdma_destroy_event_channel(rp->ech);
	memset(rp, 0, sizeof(*rp));
}
