// SPDX-License-Identifier: MIT
/*
 * transport/rdma/rdma_chan.c - a frame channel over one RC queue pair (rdma_chan.h).
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
 *   C4  A caller may ask for more than C2 (coord_rdma_chan_send_min()):
 *       the coordinator's REQ frames leave two credits, so that a CANCEL
 *       can always reach a worker whose receives all hold REQ frames it has
 *       not started and so returns no credit (transport/rdma/rdma.c, S3).
 *       The CANCEL, one SEND, may take the last credit: like a credit-only
 *       message it carries every owed credit, and in the argument below it
 *       counts as one (its peer reads it as it reads everything).
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
 * times their average (coord_spin_budget(), runtime/util/util.h), up to
 * spin_max_us: a worker's thread serving one request
 * at a time then meets the next one spinning instead of paying a sleep
 * and a wake-up for each (in the rig, where a wake-up costs hundreds of
 * microseconds, bench_rdma's round trip went from 580-920 to ~300 us with
 * a fixed 2 ms budget; a channel quiet for longer than spin_max_us spins
 * only spin_us).  Event loops use coord_rdma_chan_arm()/_progress() and
 * the fds.
 *   Often.  A sleep's wake-up can cost more than spin_max_us: in the rig
 *   (TCG on a loaded 2-core host) 3-8 ms, a tick or a host time slice.
 *   Then a ping-pong whose two sides both sleep never gets back under
 *   spin_max_us by itself: each side's wait is the other's wake-up, so
 *   the budget stays at spin_us (bench_rdma's chan_pingpong: 4-7 ms a
 *   round trip against 38 us with both sides spinning).  So while events
 *   come often, their average period (per_ns, wait end to wait end)
 *   within OFTEN_PER x spin_max_us, a wait spins for up to twice that
 *   period, at most OFTEN_SPIN x spin_max_us: one side then outlasts the
 *   other's wake-up, answers at once, and both are back to short waits.
 *   A thread whose events come less often than that (an idle worker,
 *   heartbeats) keeps the budget above; one that sees them often spins at
 *   most one OFTEN_SPIN after the last.
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
#include "transport/rdma/rdma_chan_pvt.h"

#define OFTEN_PER 10 /* "Often": events within 10 x spin_max_us on average */
#define OFTEN_SPIN 5 /* then spin up to 5 x spin_max_us */

/* ---- completions ------------------------------------------------------------------ */

void chan_break(struct coord_rdma_chan *ch, int r, const char *why)
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
void cq_events_drain(struct coord_rdma_chan *ch)
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
int post_chain(struct coord_rdma_chan *ch, unsigned n, bool sig_last)
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
void wr_fill(struct coord_rdma_chan *ch, unsigned k, uint64_t seq, uint32_t len)
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
	return coord_rdma_chan_send_min(ch, buf, len, 2, sent); /* C2 */
}

size_t coord_rdma_chan_room(struct coord_rdma_chan *ch, uint32_t min, size_t *mostp)
{
	uint32_t sends, slots, peer_t, most;

	if (ch->credits < min || ch->sq_head - ch->sq_done >= ch->o.nsend)
		poll_cq(ch);
	sends = ch->credits >= min ? ch->credits - min + 1 : 0; /* C4 */
	slots = ch->o.nsend - (uint32_t)(ch->sq_head - ch->sq_done);
	/* The peer returns credits once it owes T (C3, its T): a wait for
	 * more than peer_nrecv - T of them may never end. */
	peer_t = ch->peer_nrecv / 4 > 2 ? ch->peer_nrecv / 4 : 2;
	most = ch->peer_nrecv + 1 > min + peer_t ? ch->peer_nrecv + 1 - min - peer_t : 1;
	most = most < ch->o.nsend ? most : ch->o.nsend; /* and send slots */
	*mostp = (size_t)most * ch->chunk;
	return (size_t)(sends < slots ? sends : slots) * ch->chunk;
}

int coord_rdma_chan_send_min(struct coord_rdma_chan *ch, const void *buf, size_t len, uint32_t min,
			     size_t *sent)
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
	if (len && (ch->credits < min || ch->sq_head - ch->sq_done >= ch->o.nsend))
		poll_cq(ch);
	while (done < len) {
		uint32_t n = len - done < ch->chunk ? (uint32_t)(len - done) : ch->chunk;
		uint64_t seq = ch->sq_head + k;

		/* C2: the last one is for credit-only messages; C4: @min */
		if (ch->credits < min) {
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
uint64_t spin_budget_ns(const struct coord_rdma_chan *ch)
{
	uint64_t base = ch->o.spin_us > 0 ? (uint64_t)ch->o.spin_us * 1000 : 0;
	uint64_t max = ch->o.spin_max_us > 0 ? (uint64_t)ch->o.spin_max_us * 1000 : 0;
	uint64_t b = coord_spin_budget(ch->gap_ns, base, max), o;

	/* "Often": events within OFTEN_PER x max of each other, on average. */
	if (base && max > base && ch->per_ns && ch->per_ns <= OFTEN_PER * max) {
		o = 2 * ch->per_ns < OFTEN_SPIN * max ? 2 * ch->per_ns : OFTEN_SPIN * max;
		b = o > b ? o : b;
	}
	return b;
}

/* Fold one wait of @ns, ending at @now (with an event, or timed out),
 * into gap_ns (an average over about 8 waits) and per_ns ("Often"). */
static void gap_note(struct coord_rdma_chan *ch, uint64_t ns, uint64_t now, bool event)
{
	uint64_t max = ch->o.spin_max_us > 0 ? (uint64_t)ch->o.spin_max_us * 1000 : 0;

	ch->gap_ns = coord_spin_avg(ch->gap_ns, ns, max);
	/* A wait that timed out counts too, so that a quiet spell ends
	 * "often" after a few waits. */
	if (ch->last_ev_ns)
		ch->per_ns = coord_spin_avg(ch->per_ns, now - ch->last_ev_ns, OFTEN_PER * max);
	if (event)
		ch->last_ev_ns = now;
}

/*
 * Wait until something happens on @ch (a completion, a connection event) or
 * @deadline: spin for spin_budget_ns(), then sleep on the two fds.
 * Return: 0; -ETIMEDOUT.
 */
/* wait_event() spinning at most @budget ns before it sleeps. */
int wait_event_for(struct coord_rdma_chan *ch, uint64_t deadline, uint64_t budget)
{
	uint64_t start = coord_now_ns(), now = start;
	uint64_t spin_end = budget ? now + budget : 0;
	unsigned spins = 0;

	for (;;) {
		struct pollfd p[2] = { { .fd = ch->cc->fd, .events = POLLIN },
				       { .fd = ch->ech->fd, .events = POLLIN } };
		int ms, r;

		if (poll_cq(ch) > 0 || ch->err || ch->closed) {
			now = coord_now_ns();
			gap_note(ch, now - start, now, true);
			return 0;
		}
		now = coord_now_ns();
		if (now >= deadline) {
			gap_note(ch, now - start, now, false);
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
			now = coord_now_ns();
			gap_note(ch, now - start, now, true);
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

int wait_event(struct coord_rdma_chan *ch, uint64_t deadline)
{
	return wait_event_for(ch, deadline, spin_budget_ns(ch));
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

/* Copy @n bytes of the received, unread stream at entry @e, offset @off
 * into @dst (NULL: only skip them) and move (@e, @off) past them; false if
 * fewer are there. */
static bool stream_take(const struct coord_rdma_chan *ch, uint32_t *e, uint32_t *off, void *dst,
			size_t n)
{
	uint8_t *d = dst;

	while (n) {
		uint32_t len, k;

		if (*e == ch->rq_tail)
			return false;
		len = ch->rq_len[*e % ch->o.nrecv];
		if (*off >= len) {
			(*e)++;
			*off = 0;
			continue;
		}
		k = len - *off < n ? len - *off : (uint32_t)n;
		if (d) {
			memcpy(d, rbuf(ch, ch->rq_idx[*e % ch->o.nrecv]) + *off, k);
			d += k;
		}
		*off += k;
		n -= k;
	}
	return true;
}

/* The look of coord_rdma_chan_scan() (@type) and coord_rdma_chan_scan_all()
 * (@type 0: every frame, and one larger than @cap with payload NULL). */
static void scan(struct coord_rdma_chan *ch, uint16_t type,
		 void (*cb)(void *arg, const struct coord_wire_hdr *h, const uint8_t *payload),
		 void *arg, uint8_t *buf, size_t cap)
{
	uint8_t hb[COORD_WIRE_HDR];
	uint32_t e = ch->rq_head, off = ch->roff;

	if (ch->err || ch->assembling)
		return; /* nothing to add to what the next read says */
	poll_cq(ch);	/* receives go on the queue; none is consumed */
	for (;;) {
		struct coord_wire_hdr h;
		bool want;

		if (!stream_take(ch, &e, &off, hb, sizeof(hb)) ||
		    coord_wire_parse_hdr(hb, sizeof(hb), ch->o.max_frame, &h) < 0)
			return;
		want = !type || h.type == type;
		if (want && h.len <= cap) {
			if (!stream_take(ch, &e, &off, buf, h.len))
				return;
			cb(arg, &h, buf);
			continue;
		}
		if (!stream_take(ch, &e, &off, NULL, h.len))
			return; /* not whole yet */
		if (want && !type)
			cb(arg, &h, NULL);
	}
}

void coord_rdma_chan_scan(struct coord_rdma_chan *ch, uint16_t type,
			  void (*cb)(void *arg, const struct coord_wire_hdr *h,
				     const uint8_t *payload),
			  void *arg, size_t max)
{
	uint8_t pb[64];

	if (max <= sizeof(pb))
		scan(ch, type, cb, arg, pb, max);
}

void coord_rdma_chan_scan_all(struct coord_rdma_chan *ch,
			      void (*cb)(void *arg, const struct coord_wire_hdr *h,
					 const uint8_t *payload),
			      void *arg, uint8_t *buf, size_t cap)
{
	scan(ch, 0, cb, arg, buf, cap);
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
