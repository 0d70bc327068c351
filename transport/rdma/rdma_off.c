// SPDX-License-Identifier: MIT
/*
 * transport/rdma/rdma_off.c - the "rdma" transport of a build without libibverbs
 * or librdmacm: it only says why it is not there.
 */
#include "runtime/core/dispatch.h"
#include "transport/rdma/ps_rdma.h"
#include "transport/rdma/rdma_chan.h"

int coord_rdma_available(struct coord_error *err)
{
	return coord_seterr(err, -ENODEV, "rdma: coord was built without libibverbs/librdmacm");
}

static unsigned rdma_off_ndispatchers(const struct coord *c)
{
	return 1;
}

static int rdma_off_start(struct coord *c, struct coord_error *err)
{
	return coord_seterr(err, COORD_EINVAL,
			    "built without rdma (libibverbs/librdmacm not found at build time)");
}

static void rdma_off_stop(struct coord *c)
{
}

static void rdma_off_wake(struct coord *c)
{
}

const struct coord_tp_ops coord_tp_rdma = {
	.name = "rdma",
	.caps = COORD_TP_PS_RDMA,
	.ndispatchers = rdma_off_ndispatchers,
	.start = rdma_off_start,
	.stop = rdma_off_stop,
	.wake = rdma_off_wake,
};

/* transport/rdma/ps_rdma.h without verbs: ps tasks cannot be reached over rdma. */
int coord_psr_connect(const char *addr, const struct coord_key *key, uint8_t role, unsigned task,
		      uint32_t max_frame, int timeout_ms, struct coord_psr **out,
		      struct coord_error *err)
{
	(void)key;
	(void)role;
	(void)task;
	(void)max_frame;
	(void)timeout_ms;
	*out = NULL;
	return coord_seterr(err, -ENODEV, "%s: coord was built without rdma", addr);
}

int coord_psr_send(struct coord_psr *r, const void *buf, size_t len)
{
	(void)r;
	(void)buf;
	(void)len;
	return -EPIPE;
}

int coord_psr_send_some(struct coord_psr *r, const void *buf, size_t len, size_t *sent)
{
	(void)r;
	(void)buf;
	(void)len;
	*sent = 0;
	return -EPIPE;
}

uint64_t coord_psr_rx(struct coord_psr *r)
{
	(void)r;
	return 0;
}

int coord_psr_next(struct coord_psr *r, struct coord_wire_hdr *h, const uint8_t **payload,
		   int wait_ms)
{
	(void)r;
	(void)h;
	(void)payload;
	(void)wait_ms;
	return -EPIPE;
}

int coord_psr_read_var(struct coord_psr *r, const struct coord_ps_map *m, uint64_t off, uint64_t n,
		       void *dst, unsigned *tries)
{
	(void)r;
	(void)m;
	(void)off;
	(void)n;
	(void)dst;
	*tries = 0;
	return -EPIPE;
}

void coord_psr_shutdown(struct coord_psr *r)
{
	(void)r;
}

void coord_psr_destroy(struct coord_psr *r)
{
	(void)r;
}
