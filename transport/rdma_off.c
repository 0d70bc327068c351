// SPDX-License-Identifier: MIT
/*
 * transport/rdma_off.c - the "rdma" transport of a build without libibverbs
 * or librdmacm: it only says why it is not there.
 */
#include "runtime/internal.h"
#include "transport/rdma_chan.h"
#include "transport/srv_proto.h"

int coord_rdma_available(struct coord_error *err)
{
	return coord_seterr(err, -ENODEV, "rdma: coord was built without libibverbs/librdmacm");
}

int coord_rdma_serve(struct coord_srv *s, struct coord_error *err)
{
	(void)s;
	return coord_seterr(err, COORD_EINVAL,
			    "cannot serve rdma: coord was built without rdma (libibverbs/librdmacm "
			    "not found at build time; apt install libibverbs-dev librdmacm-dev "
			    "and rebuild)");
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
	.ndispatchers = rdma_off_ndispatchers,
	.start = rdma_off_start,
	.stop = rdma_off_stop,
	.wake = rdma_off_wake,
};
