// SPDX-License-Identifier: MIT
/*
 * transport/ps_rdma.c - the ps client's rdma connections and one-sided
 * variable reads (ps_rdma.h).
 *
 * A channel (rdma_chan.h) belongs to one thread at a time; here three kinds
 * of thread want it: the ps client's reader (VAR_RES frames), its senders
 * (flat-combined VAR_REQ frames, ps_client.c flush()) and the callers of
 * one-sided reads.
 *   P1  Every use of the channel holds chan_lock.  Nobody sleeps holding
 *       it except for a bounded wait inside the channel (a send's credits,
 *       a READ chain's completion, the rest of a started frame).
 *   P2  The reader looks for a frame under the lock without waiting, arms
 *       the channel, lets go and sleeps in poll() on the completion and
 *       rdma_cm fds and wake_fd.  A sender or reader that holds the lock may
 *       reap a completion the reader was waiting for (the channel polls its
 *       CQ while it waits); if a frame is then buffered it writes wake_fd
 *       before letting go (kick()), so the reader never sleeps on one.
 *   P3  Shutdown sets `stop`, writes wake_fd and disconnects under the
 *       lock; the reader then returns -EPIPE and ps_client.c joins it
 *       before coord_psr_destroy().
 * The payload coord_psr_next() returns stays valid until the reader's next
 * call: only a read moves the channel past a frame (other lock holders
 * post sends and READs, which leave the received frames alone).
 *
 * One-sided reads follow runtime/varstore.c S2: a chain of three RDMA READs
 * (the write counts, the data, the begun count again) in one round trip,
 * into a registered bounce buffer, retried while a writer overlaps.
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

#include "runtime/internal.h"
#include "transport/ps_rdma.h"
#include "transport/rdma_chan.h"
#include "transport/sock.h"

#define PSR_SEND_MS 10000    /* a send's wait for credits */
#define PSR_PARTIAL_MS 10000 /* the rest of a started frame */
#define PSR_READ_MS 5000     /* a READ chain's completion */
#define PSR_IDLE_MS 1000     /* the reader looks at `stop` at least this often */
#define PSR_DATA_OFF 128     /* bounce buffer: counts at 0 and 64, data here */

struct coord_psr {
	pthread_mutex_t chan_lock; /* P1 */
	struct coord_rdma_chan *ch;
	int wake_fd;	   /* P2 */
	_Atomic bool stop; /* P3 */
	uint8_t *buf;	   /* the bounce buffer of one-sided reads (under chan_lock) */
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
	r->buf = aligned_alloc(CACHELINE, PSR_DATA_OFF + COORD_PSR_READ_MAX);
	if (r->wake_fd < 0 || !r->buf) {
		rc = coord_seterr(err, COORD_ENOMEM, "no memory for a ps connection");
		goto fail;
	}
	rc = coord_rdma_connect(addr, &o, timeout_ms, &r->ch, err);
	if (rc < 0)
		goto fail;
	coord_rdma_chan_io(&io, r->ch);
	rc = coord_handshake_client_io(&io, key, role, COORD_ROLE_PS, task, timeout_ms, addr, err);
	if (rc < 0)
		goto fail;
	rc = coord_rdma_reg(r->ch, r->buf, PSR_DATA_OFF + COORD_PSR_READ_MAX, false, &r->mr);
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

int coord_psr_next(struct coord_psr *r, struct coord_wire_hdr *h, const uint8_t **payload)
{
	int cq_fd, cm_fd;

	coord_rdma_chan_fds(r->ch, &cq_fd, &cm_fd);
	for (;;) {
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
		if (poll(p, 3, PSR_IDLE_MS) > 0 && p[2].revents) {
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

int coord_psr_read_var(struct coord_psr *r, const struct coord_ps_map *m, uint64_t off, uint64_t n,
		       void *dst, unsigned *tries)
{
	struct coord_rdma_rseg seg[3] = {
		/* S2: the counts, then the data, then begun again, in order */
		{ .loff = 0, .raddr = m->ver_addr, .rkey = m->ver_rkey, .len = 16 },
		{ .loff = PSR_DATA_OFF,
		  .raddr = m->data_addr + off * sizeof(float),
		  .rkey = m->data_rkey,
		  .len = n * sizeof(float) },
		{ .loff = 64, .raddr = m->ver_addr, .rkey = m->ver_rkey, .len = 8 },
	};
	unsigned t = 0;
	int rc = -EAGAIN;

	*tries = 0;
	if (off > m->nelem || n > m->nelem - off)
		return -EINVAL;
	if (n > COORD_PSR_READ_MAX / sizeof(float))
		return -E2BIG;
	if (n == 0)
		return 0;
	pthread_mutex_lock(&r->chan_lock);
	while (t < COORD_PSR_TRIES) {
		t++;
		rc = coord_rdma_readv(r->ch, r->mr, seg, 3, PSR_READ_MS);
		if (rc < 0)
			break;
		if (ld64(r->buf) == ld64(r->buf + 8) && ld64(r->buf + 64) == ld64(r->buf)) {
			memcpy(dst, r->buf + PSR_DATA_OFF, n * sizeof(float));
			break; /* S2: no write overlapped the data READ */
		}
		rc = -EAGAIN;
	}
	kick(r);
	pthread_mutex_unlock(&r->chan_lock);
	*tries = t;
	return rc;
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
}

void coord_psr_destroy(struct coord_psr *r)
{
	if (!r)
		return;
	coord_rdma_dereg(r->mr);
	coord_rdma_chan_destroy(r->ch);
	if (r->wake_fd >= 0)
		close(r->wake_fd);
	pthread_mutex_destroy(&r->chan_lock);
	free(r->buf);
	free(r);
}
