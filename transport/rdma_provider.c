// SPDX-License-Identifier: MIT
/*
 * transport/rdma_provider.c - the table libcoord-rdma.so exports, the one
 * symbol it exports (transport/rdma_provider.h; transport/rdma_provider.map):
 * the rdma transport, the rdma server and the ps client's rdma channel, as
 * this build made them (RP1: @abi and @version are checked by the loader).
 * Built into the provider only, never into libcoord.so.
 */
#include <coord/version.h>

#include "transport/rdma/rdma_chan.h"
#include "transport/rdma_provider.h"
#include "transport/server/srv_proto.h"

__attribute__((visibility("default"))) const struct coord_rdma_provider coord_rdma_provider = {
	.abi = COORD_RDMA_PROVIDER_ABI,
	.version = COORD_VERSION_STRING,
	.tp = &coord_tp_rdma,
	.available = coord_rdma_available,
	.serve = coord_rdma_serve,
	.psr_connect = coord_psr_connect,
	.psr_send = coord_psr_send,
	.psr_send_some = coord_psr_send_some,
	.psr_rx = coord_psr_rx,
	.psr_next = coord_psr_next,
	.psr_read_var = coord_psr_read_var,
	.psr_put_reg = coord_psr_put_reg,
	.psr_put_done = coord_psr_put_done,
	.psr_shutdown = coord_psr_shutdown,
	.psr_destroy = coord_psr_destroy,
};
