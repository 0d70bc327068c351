// SPDX-License-Identifier: MIT
/*
 * transport/rdma.c - the rdma transport, coordinator side (placeholder: the
 * channel, transport/rdma_chan.c, is done; the event loop over channels is
 * next).  A build without libibverbs
 * or librdmacm uses rdma_off.c.
 */
#include <errno.h>

#include "runtime/internal.h"

static unsigned rdma_ndispatchers(const struct coord *c)
{
	return 1;
}

static int rdma_start(struct coord *c, struct coord_error *err)
{
	return coord_seterr(err, -ENOSYS,
			    "rdma: the coordinator side is not written yet (issue 5)");
}

static void rdma_stop(struct coord *c)
{
}

static void rdma_wake(struct coord *c)
{
}

const struct coord_tp_ops coord_tp_rdma = {
	.name = "rdma",
	.ndispatchers = rdma_ndispatchers,
	.start = rdma_start,
	.stop = rdma_stop,
	.wake = rdma_wake,
};
