/* SPDX-License-Identifier: MIT */
/*
 * transport/rdma/rdma_chan_pvt.h - the frame channel's own structures,
 * shared by its two halves: rdma_chan.c (the data path: completions,
 * credits, sends, reads, one-sided READs) and rdma_conn.c (set-up over
 * rdma_cm, connect / listen / accept, closing).  The protocol, credits and
 * threading: rdma_chan.c's header.
 */
#ifndef COORD_TRANSPORT_RDMA_CHAN_PVT_H
#define COORD_TRANSPORT_RDMA_CHAN_PVT_H

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
	bool connected;	     /* ESTABLISHED seen and not yet disconnected by us */
	bool closed;	     /* the peer disconnected */
	int err;	     /* sticky: why the channel broke (-errno), or 0 */
	uint64_t gap_ns;     /* moving average of a blocking wait's length (spin) */
	uint64_t per_ns;     /* moving average of the time between events ("often") */
	uint64_t last_ev_ns; /* when a blocking wait last ended with an event */
	uint64_t events_ns;  /* the event channels' last drain (progress_fast) */
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

/* rdma_conn.c */
COORD_HIDDEN struct ibv_pd *pd_get(struct ibv_context *ctx);
COORD_HIDDEN void pd_put(struct ibv_pd *pd);
COORD_HIDDEN void cm_drain(struct coord_rdma_chan *ch);
COORD_HIDDEN void repost_add(struct coord_rdma_chan *ch, uint32_t idx);
COORD_HIDDEN int repost_flush(struct coord_rdma_chan *ch);

/* rdma_chan.c */
COORD_HIDDEN void cq_events_drain(struct coord_rdma_chan *ch);
COORD_HIDDEN int post_chain(struct coord_rdma_chan *ch, unsigned n, bool sig_last);
COORD_HIDDEN int wait_event(struct coord_rdma_chan *ch, uint64_t deadline);
COORD_HIDDEN void wr_fill(struct coord_rdma_chan *ch, unsigned k, uint64_t seq, uint32_t len);
COORD_HIDDEN void chan_break(struct coord_rdma_chan *ch, int r, const char *why);
COORD_HIDDEN uint64_t spin_budget_ns(const struct coord_rdma_chan *ch);
COORD_HIDDEN int wait_event_for(struct coord_rdma_chan *ch, uint64_t deadline, uint64_t budget);

static inline uint8_t *rbuf(const struct coord_rdma_chan *ch, uint32_t idx)
{
	return ch->mem + (size_t)idx * ch->o.buf;
}

static inline uint8_t *sbuf(const struct coord_rdma_chan *ch, uint32_t slot)
{
	return ch->mem + (size_t)(ch->o.nrecv + slot) * ch->o.buf;
}

static inline uint64_t deadline_ms(int ms)
{
	return ms < 0 ? FOREVER : coord_now_ns() + (uint64_t)ms * 1000000ull;
}
#endif /* COORD_TRANSPORT_RDMA_CHAN_PVT_H */
