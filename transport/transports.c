// SPDX-License-Identifier: MIT
/*
 * transport/transports.c - the table coord_create() chooses a transport
 * from (struct coord_transport, runtime/core/internal.h): each transport's
 * ops and how its coordinator reaches the ps tasks.  The one place that
 * names every transport; it sits above them all (docs/layout.md), so the
 * core below meets them only through this table.
 */
#include <stddef.h>

#include "runtime/core/internal.h"
#include "runtime/ps/ps.h"
#include "transport/rdma_provider.h"

const struct coord_transport coord_transports[] = {
	{ "inproc", &coord_tp_inproc, &coord_ps_local_ops, NULL },
	{ "tcp", &coord_tp_tcp, &coord_ps_remote_ops, NULL },
	/* libcoord-rdma.so, loaded on first use (rdma_load.c) */
	{ "rdma", NULL, &coord_ps_remote_ops, coord_rdma_tp_load },
	{ NULL, NULL, NULL, NULL },
};
