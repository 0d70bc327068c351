/* SPDX-License-Identifier: MIT */
/*
 * transport/server/srv_pvt.h - what the protocol engine's two files share,
 * private to transport/server/: srv_proto.c (frames in general, the RES /
 * VAR_RES frame being built and its flushes) and srv_var.c (VAR_REQ and
 * Give-up's VAR_SYNC).  Every function here is called by the thread that
 * drives the connection (srv_proto.h).
 */
#ifndef COORD_TRANSPORT_SRV_PVT_H
#define COORD_TRANSPORT_SRV_PVT_H

#include "transport/server/srv_proto.h"

/* srv_proto.c: send the frame being built (if it has records) and begin
 * another; 0 or -errno (the connection failed). */
COORD_HIDDEN int coord_srv_flush(struct coord_srv_conn *k);
/* The same, then make the buffer hold @need bytes (a header included). */
COORD_HIDDEN int coord_srv_flush_grow(struct coord_srv_conn *k, size_t need);
/* Append a RES (@res) or VAR_RES (@vres) record, flushing and growing. */
COORD_HIDDEN int coord_srv_add_record(struct coord_srv_conn *k, const struct coord_wire_res *res,
				      const struct coord_wire_vres *vres);
/* Begin a new frame in the emptied buffer (after a frame went out). */
COORD_HIDDEN void coord_srv_frame_reset(struct coord_srv_conn *k);

/* srv_var.c: VAR_SYNC and VAR_REQ frames: 0, or < 0 close the connection. */
COORD_HIDDEN int coord_srv_on_sync(struct coord_srv_conn *k, const struct coord_wire_hdr *h,
				   const uint8_t *payload);
COORD_HIDDEN int coord_srv_on_var_req(struct coord_srv_conn *k, const struct coord_wire_hdr *h,
				      const uint8_t *payload);

#endif
