// SPDX-License-Identifier: MIT
/*
 * transport/rdma/rdma_read.c - one-sided RDMA READs on a frame channel
 * (rdma_chan.h "one-sided"): memory regions registered for the caller
 * (coord_rdma_reg*(), the ps's variables and a large read's or a
 * rendezvous update's buffer), and chains of READs posted on the channel's
 * queue pair and waited for with the channel's own completion handling
 * (rdma_chan.c).  Same threading as the channel: one thread at a time.
 */
#include "transport/rdma/rdma_chan_pvt.h"

#define READ_TICK_MS 20 /* coord_rdma_readv_tick(): @tick at least this often */

/* ---- one-sided RDMA READ ---------------------------------------------------------- */

/* Register @len bytes at @addr with @access (ibv_reg_mr's flags). */
static int reg(struct coord_rdma_chan *ch, void *addr, size_t len, int access,
	       struct coord_rdma_mr **out)
{
	struct coord_rdma_mr *m = calloc(1, sizeof(*m));

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

int coord_rdma_reg(struct coord_rdma_chan *ch, void *addr, size_t len, bool remote_read,
		   struct coord_rdma_mr **out)
{
	return reg(ch, addr, len,
		   IBV_ACCESS_LOCAL_WRITE | (remote_read ? IBV_ACCESS_REMOTE_READ : 0), out);
}

int coord_rdma_reg_src(struct coord_rdma_chan *ch, const void *addr, size_t len,
		       struct coord_rdma_mr **out)
{
	/* No local write: the pages are pinned as they are (read-only memory
	 * too); a peer's READ takes them, nothing writes them. */
	return reg(ch, (void *)addr, len, IBV_ACCESS_REMOTE_READ, out);
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
	return coord_rdma_readv_tick(ch, local, seg, n, timeout_ms, NULL, NULL);
}

int coord_rdma_readv_tick(struct coord_rdma_chan *ch, struct coord_rdma_mr *local,
			  const struct coord_rdma_rseg *seg, unsigned n, int timeout_ms,
			  void (*tick)(void *arg), void *arg)
{
	uint64_t deadline = deadline_ms(timeout_ms), seq, next;
	unsigned spun = 0;
	struct ibv_send_wr *bad;
	int r;

	if (n == 0 || n > ch->o.nsend)
		return -EINVAL;
	for (unsigned i = 0; i < n; i++) {
		const struct ibv_mr *m = (seg[i].mr ? seg[i].mr : local)->mr;

		if (seg[i].loff > m->length || seg[i].len > m->length - seg[i].loff ||
		    seg[i].len > UINT32_MAX)
			return -EINVAL;
	}
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
		const struct ibv_mr *m = (seg[i].mr ? seg[i].mr : local)->mr;

		memset(wr, 0, sizeof(*wr));
		sge->addr = (uintptr_t)m->addr + seg[i].loff;
		sge->length = (uint32_t)seg[i].len;
		sge->lkey = m->lkey;
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
	next = tick ? coord_now_ns() + READ_TICK_MS * 1000000ull : FOREVER;
	while (ch->sq_done <= seq) {
		uint64_t now;

		if (ch->err)
			return ch->err == -EIO ? -EIO : -EPIPE;
		if (ch->closed)
			return -EPIPE;
		now = coord_now_ns();
		if (now >= next) {
			/* @tick may use the channel (a send): its completions
			 * move sq_done as ours do, so the loop sees the READs'. */
			tick(arg);
			next = now + READ_TICK_MS * 1000000ull;
		}
		/* With @tick, spin once, before the first sleep: a long chain's
		 * later waits would spin at every tick, taking the CPU the
		 * transfer needs (soft-RoCE moves the bytes on the host's CPUs). */
		if (wait_event_for(ch, next < deadline ? next : deadline,
				   tick && spun++ ? 0 : spin_budget_ns(ch)) < 0 &&
		    coord_now_ns() >= deadline)
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
