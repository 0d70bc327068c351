// SPDX-License-Identifier: MIT
/*
 * transport/server/rdma_server_off.c - the rdma server of a build without
 * libibverbs or librdmacm: it only says why it is not there (the
 * transport's side: transport/rdma/rdma_off.c).
 */
#include "transport/server/srv_proto.h"

int coord_rdma_serve(struct coord_srv *s, struct coord_error *err)
{
	(void)s;
	return coord_seterr(err, COORD_EINVAL,
			    "cannot serve rdma: coord was built without rdma (libibverbs/librdmacm "
			    "not found at build time; apt install libibverbs-dev librdmacm-dev "
			    "and rebuild)");
}
