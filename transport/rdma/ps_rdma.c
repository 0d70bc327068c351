// SPDX-License-Identifier: MIT
/*
 * transport/rdma/ps_rdma.c - the ps client's rdma connections and one-sided
 * variable reads (ps_rdma.h).
 *
 * Two channels (rdma_chan.h) to the ps task, each used by one thread at a
 * time: `ch` carries frames, wanted by the ps client's reader thread
 * (VAR_RES frames) and its senders (flat-combined VAR_REQ frames,
 * ps_client.c flush()); `rch` carries only one-sided reads, so their
 * completions wake nobody else (on one channel, the reader thread, asleep
 * on the armed completion channel, woke for every READ completion and
 * fought the reading thread for the lock: about twice the round trip in
 * the rig).  The ps serves `rch` as a connection that never sends a frame.
 *   P1  Every use of `ch` holds chan_lock, of `rch` read_lock.  Nobody
 *       sleeps holding one except for a bounded wait inside the channel (a
 *       send's credits, a READ chain's completion, the rest of a started
 *       frame).
 *   P2  The reader looks for a frame under chan_lock without waiting, arms
 *       the channel, lets go and sleeps in poll() on the completion and
 *       rdma_cm fds and wake_fd.  A sender that holds the lock may reap a
 *       completion the reader was waiting for (the channel polls its CQ
 *       while it waits for credits); if a frame is then buffered it writes
 *       wake_fd before letting go (kick()), so the reader never sleeps on
 *       one.
 *   P3  Shutdown sets `stop`, writes wake_fd and disconnects both channels
 *       under their locks; the reader then returns -EPIPE and ps_conn.c
 *       joins it before coord_psr_destroy().
 *   P4  A read of more than COORD_PSR_READ_MAX bytes registers the caller's
 *       buffer for the call (ibv_reg_mr: no copy, no bounce) and READs the
 *       data straight into it, done and begun into the bounce buffer; the
 *       region is deregistered before the call returns, after the chain
 *       completed or the channel was shut down (a READ that timed out may
 *       still be in flight: only a dead queue pair stops it), so no READ
 *       ever lands in the buffer after the caller has it back.
 *   P5  Rendezvous updates (runtime/ps/ps.h ASSIGN_RDV): the ps client
 *       registers the caller's data read-only for remote READs
 *       (coord_psr_put_reg(): ibv_reg_mr on the device's protection
 *       domain, which every channel of this process to that device shares,
 *       so a connection replaced meanwhile changes nothing) and sends its
 *       address, length and rkey in a small request on the frame channel;
 *       the ps READs exactly that many bytes (straight into the variable for
 *       an assign, transport/server/rdma_server.c Q6) and answers.  The
 *       caller deregisters (coord_psr_put_done()) after the answer or
 *       after giving up on it: a READ of the ps after that fails (its
 *       request with it), it never sees the buffer the caller has back.
 *       No copy of the data on either side: the frame path copied it into
 *       the frame buffer, the send buffers, the ps's reassembly buffer and
 *       the variable, and waited for credits every 512 KiB.
 * Synchronization: ch (every user) under chan_lock; rch, buf and mr (the
 * reading threads) under read_lock (P1); stop: written by shutdown, read by
 * the reader each time it wakes (relaxed: the wake_fd write and the
 * disconnects that follow it order nothing else, P3); wake_fd: set at
 * create, then read-only.
 * The payload coord_psr_next() returns stays valid until the reader's next
 * call: only a read moves the channel past a frame (other lock holders
 * post sends and READs, which leave the received frames alone).
 *
 * One-sided reads follow runtime/store/varstore.c SNAP2: one RDMA READ of the
 * variable's whole block [done | data | begun] when it is at most
 * COORD_PSR_WHOLE_SLACK bytes more than the range, else a chain of three (done, the range, begun)
 * in one round trip; into a registered bounce buffer, retried while a
 * writer overlaps.  Larger reads: a chain of done, the range in
 * COORD_PSR_CHUNK pieces straight into the caller's buffer, begun (P4).
 */
#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include "runtime/util/util.h"
#include "transport/rdma/ps_rdma.h"
#include "transport/rdma/rdma_chan.h"
#include "transport/wire/sock.h"

#define PSR_SEND_MS 10000    /* a send's wait for credits */
#define PSR_PARTIAL_MS 10000 /* the rest of a started frame */
#define PSR_READ_MS 5000     /* a READ chain's completion */
#define PSR_IDLE_MS 1000     /* the reader looks at `stop` at least this often */
/* The bounce buffer: a whole block, or done / the data / begun of a chain. */
#define PSR_BUF_LEN (COORD_VAR_DATA_OFF + COORD_PSR_READ_MAX + 64)

struct coord_psr {
	pthread_mutex_t chan_lock; /* P1: ch */
	struct coord_rdma_chan *ch;
	pthread_mutex_t read_lock; /* P1: rch, buf */
	struct coord_rdma_chan *rch;
	int wake_fd;	   /* P2 */
	_Atomic bool stop; /* P3 */
	uint8_t *buf;	   /* the bounce buffer of one-sided reads (under read_lock) */
	struct coord_rdma_mr *mr;
};

/* P2: a frame is buffered that the reader may not have been woken for. */
static void kick(struct coord_psr *r)
{
	uint64_t one = 1;

	if (coord_rdma_chan_readable(r->ch))
		(void)!write(r->wake_fd, &one, sizeof(one));
}

int coord_psr_connect(const char *addr, const struct coord_key *key, uint8_t role, unsigned task,
		      uint32_t max_frame, int timeout_ms, struct coord_psr **out,
		      struct coord_error *err)
{
	struct coord_rdma_opts o = { .max_frame = max_frame };
	struct coord_psr *r = calloc(1, sizeof(*r));
	struct coord_frame_io io;
	int rc;

	*out = NULL;
	if (!r)
		return coord_seterr(err, COORD_ENOMEM, "no memory");
	r->wake_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	pthread_mutex_init(&r->chan_lock, NULL);
	pthread_mutex_init(&r->read_lock, NULL);
	r->buf = aligned_alloc(CACHELINE, PSR_BUF_LEN);
	if (r->wake_fd < 0 || !r->buf) {
		rc = coord_seterr(err, COORD_ENOMEM, "no memory for a ps connection");
		goto fail;
	}
	for (int i = 0; i < 2; i++) { /* ch, then rch (P1) */
		struct coord_rdma_chan **pc = i ? &r->rch : &r->ch;

		rc = coord_rdma_connect(addr, &o, timeout_ms, pc, err);
		if (rc < 0)
			goto fail;
		coord_rdma_chan_io(&io, *pc);
		rc = coord_handshake_client_io(&io, key, role, COORD_ROLE_PS, task, timeout_ms,
					       addr, err);
		if (rc < 0)
			goto fail;
	}
	rc = coord_rdma_reg(r->rch, r->buf, PSR_BUF_LEN, false, &r->mr);
	if (rc < 0) {
		coord_seterr(err, rc, "%s: cannot register a read buffer: %s", addr, strerror(-rc));
		goto fail;
	}
	*out = r;
	return 0;
fail:
	coord_psr_destroy(r);
	return rc;
}

int coord_psr_send(struct coord_psr *r, const void *buf, size_t len)
{
	int rc;

	pthread_mutex_lock(&r->chan_lock);
	rc = coord_rdma_chan_send(r->ch, buf, len, PSR_SEND_MS);
	kick(r);
	pthread_mutex_unlock(&r->chan_lock);
	return rc;
}

int coord_psr_send_some(struct coord_psr *r, const void *buf, size_t len, size_t *sent)
{
	int rc;

	pthread_mutex_lock(&r->chan_lock);
	rc = coord_rdma_chan_send_some(r->ch, buf, len, sent);
	kick(r);
	pthread_mutex_unlock(&r->chan_lock);
	return rc;
}

uint64_t coord_psr_rx(struct coord_psr *r)
{
	struct coord_rdma_stats st;

	pthread_mutex_lock(&r->chan_lock);
	coord_rdma_chan_stats(r->ch, &st);
	pthread_mutex_unlock(&r->chan_lock);
	return st.recvs;
}

int coord_psr_next(struct coord_psr *r, struct coord_wire_hdr *h, const uint8_t **payload,
		   int wait_ms)
{
	uint64_t until = wait_ms < 0 ? UINT64_MAX : coord_now_ns() + (uint64_t)wait_ms * 1000000u;
	int cq_fd, cm_fd;

	coord_rdma_chan_fds(r->ch, &cq_fd, &cm_fd);
	for (;;) {
		uint64_t now = coord_now_ns();
		int nap = PSR_IDLE_MS;
		struct pollfd p[3] = { { .fd = cq_fd, .events = POLLIN },
				       { .fd = cm_fd, .events = POLLIN },
				       { .fd = r->wake_fd, .events = POLLIN } };
		int rc, armed;

		/* P3, relaxed: a poll flag; the eventfd write after it wakes us. */
		if (atomic_load_explicit(&r->stop, memory_order_relaxed))
			return -EPIPE;
		pthread_mutex_lock(&r->chan_lock);
		rc = coord_rdma_chan_read(r->ch, 0, PSR_PARTIAL_MS, h, payload);
		if (rc != -ETIMEDOUT || coord_rdma_chan_partial(r->ch)) {
			pthread_mutex_unlock(&r->chan_lock);
			return rc == -ETIMEDOUT ? -EPROTO : rc; /* a frame stalled half-way */
		}
		armed = coord_rdma_chan_arm(r->ch);
		pthread_mutex_unlock(&r->chan_lock);
		if (armed < 0)
			return -EPIPE;
		if (armed == 1)
			continue; /* work arrived before the arming */
		if (now >= until)
			return -ETIMEDOUT;
		if (until - now < (uint64_t)PSR_IDLE_MS * 1000000u)
			nap = (int)((until - now) / 1000000u) + 1;
		if (poll(p, 3, nap) > 0 && p[2].revents) {
			uint64_t v;

			(void)!read(r->wake_fd, &v, sizeof(v));
		}
		pthread_mutex_lock(&r->chan_lock);
		(void)coord_rdma_chan_progress(r->ch); /* acks the events; a close shows on read */
		pthread_mutex_unlock(&r->chan_lock);
	}
}

static uint64_t ld64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, sizeof(v));
	return le64toh(v);
}

/* P4: @bytes (over COORD_PSR_READ_MAX) of floats from @off straight into @dst. */
static int read_large(struct coord_psr *r, const struct coord_ps_map *m, uint64_t off, size_t bytes,
		      void *dst, unsigned *tries)
{
	struct coord_rdma_rseg seg[2 + COORD_PSR_LARGE_MAX / COORD_PSR_CHUNK];
	uint64_t src = m->block_addr + COORD_VAR_DATA_OFF + off * sizeof(float);
	/* the READ's own bound, plus 1 s a MiB (soft-RoCE under TCG: ~20 MB/s) */
	int ms = PSR_READ_MS + (int)(bytes >> 20) * 1000;
	struct coord_rdma_mr *dmr = NULL;
	unsigned ns = 0, t = 0;
	int rc;

	if (bytes > COORD_PSR_LARGE_MAX)
		return -E2BIG;
	rc = coord_rdma_reg(r->rch, dst, bytes, false, &dmr);
	if (rc < 0)
		return rc;
	/* varstore.c SNAP2: done, the data in chunks, begun; in this order (RC) */
	seg[ns++] = (struct coord_rdma_rseg){
		.loff = 0, .raddr = m->block_addr, .rkey = m->rkey, .len = 8
	};
	for (size_t at = 0; at < bytes; at += COORD_PSR_CHUNK)
		seg[ns++] = (struct coord_rdma_rseg){ .mr = dmr,
						      .loff = at,
						      .raddr = src + at,
						      .rkey = m->rkey,
						      .len = bytes - at < COORD_PSR_CHUNK
								     ? bytes - at
								     : COORD_PSR_CHUNK };
	seg[ns++] = (struct coord_rdma_rseg){
		.loff = 8, .raddr = m->block_addr + m->block_len - 8, .rkey = m->rkey, .len = 8
	};
	pthread_mutex_lock(&r->read_lock);
	rc = -EAGAIN;
	while (t < COORD_PSR_TRIES) {
		t++;
		rc = coord_rdma_readv(r->rch, r->mr, seg, ns, ms);
		if (rc < 0)
			break;
		if (ld64(r->buf) == ld64(r->buf + 8))
			break; /* varstore.c SNAP2: no write overlapped the data */
		rc = -EAGAIN;
	}
	if (rc == -ETIMEDOUT)
		coord_rdma_chan_shutdown(r->rch); /* P4: READs may be in flight */
	pthread_mutex_unlock(&r->read_lock);
	coord_rdma_dereg(dmr);
	*tries = t;
	return rc;
}

int coord_psr_read_var(struct coord_psr *r, const struct coord_ps_map *m, uint64_t off, uint64_t n,
		       void *dst, unsigned *tries)
{
	size_t bytes = n * sizeof(float), tail = (bytes + 7) & ~(size_t)7;
	bool whole = m->block_len <= PSR_BUF_LEN && m->block_len <= bytes + COORD_PSR_WHOLE_SLACK;
	/* varstore.c SNAP2: done first, the data, begun last; one READ of the whole block
	 * (its bytes in address order) or a chain of three (in order). */
	struct coord_rdma_rseg seg[3] = {
		{ .loff = 0, .raddr = m->block_addr, .rkey = m->rkey, .len = 8 },
		{ .loff = COORD_VAR_DATA_OFF,
		  .raddr = m->block_addr + COORD_VAR_DATA_OFF + off * sizeof(float),
		  .rkey = m->rkey,
		  .len = bytes },
		{ .loff = COORD_VAR_DATA_OFF + tail,
		  .raddr = m->block_addr + m->block_len - 8,
		  .rkey = m->rkey,
		  .len = 8 },
	};
	const uint8_t *data = r->buf + COORD_VAR_DATA_OFF,
		      *begun = r->buf + COORD_VAR_DATA_OFF + tail;
	unsigned t = 0;
	int rc = -EAGAIN;

	*tries = 0;
	if (off > m->nelem || n > m->nelem - off || m->block_len < COORD_VAR_DATA_OFF + 8 ||
	    m->block_len - COORD_VAR_DATA_OFF - 8 < m->nelem * sizeof(float))
		return -EINVAL;
	if (n == 0)
		return 0;
	if (bytes > COORD_PSR_READ_MAX)
		return read_large(r, m, off, bytes, dst, tries);
	if (whole) {
		seg[0].len = m->block_len;
		data = r->buf + COORD_VAR_DATA_OFF + off * sizeof(float);
		begun = r->buf + m->block_len - 8;
	}
	pthread_mutex_lock(&r->read_lock);
	while (t < COORD_PSR_TRIES) {
		t++;
		rc = coord_rdma_readv(r->rch, r->mr, seg, whole ? 1 : 3, PSR_READ_MS);
		if (rc < 0)
			break;
		if (ld64(r->buf) == ld64(begun)) {
			memcpy(dst, data, bytes);
			break; /* varstore.c SNAP2: no write overlapped the data */
		}
		rc = -EAGAIN;
	}
	pthread_mutex_unlock(&r->read_lock);
	*tries = t;
	return rc;
}

int coord_psr_put_reg(struct coord_psr *r, const void *src, size_t len, struct coord_rdma_mr **out,
		      struct coord_ps_rsrc *d)
{
	int rc;

	*out = NULL;
	if (len == 0 || len > COORD_PSR_LARGE_MAX)
		return -EINVAL;
	/* P5: only the channel's device is used (immutable), no channel state. */
	rc = coord_rdma_reg_src(r->ch, src, len, out);
	if (rc < 0)
		return rc;
	coord_rdma_mr_export(*out, &d->addr, &d->rkey);
	d->len = len;
	d->reserved = 0;
	return 0;
}

void coord_psr_put_done(struct coord_rdma_mr *mr)
{
	coord_rdma_dereg(mr);
}

void coord_psr_shutdown(struct coord_psr *r)
{
	uint64_t one = 1;

	/* P3, relaxed: the eventfd write below wakes the reader to see it. */
	atomic_store_explicit(&r->stop, true, memory_order_relaxed);
	(void)!write(r->wake_fd, &one, sizeof(one));
	pthread_mutex_lock(&r->chan_lock);
	coord_rdma_chan_shutdown(r->ch);
	pthread_mutex_unlock(&r->chan_lock);
	pthread_mutex_lock(&r->read_lock);
	coord_rdma_chan_shutdown(r->rch);
	pthread_mutex_unlock(&r->read_lock);
}

void coord_psr_destroy(struct coord_psr *r)
{
	if (!r)
		return;
	coord_rdma_dereg(r->mr);
	coord_rdma_chan_destroy(r->rch);
	coord_rdma_chan_destroy(r->ch);
	if (r->wake_fd >= 0)
		close(r->wake_fd);
	pthread_mutex_destroy(&r->chan_lock);
	pthread_mutex_destroy(&r->read_lock);
	free(r->buf);
	free(r);
}
