/* SPDX-License-Identifier: MIT */
/*
 * tests/rdma/raw_peer.h - a raw verbs peer for the rdma tests: an RC queue
 * pair over rdma_cm that says what a coord channel says in its private data
 * (struct coord_rdma_priv) and then does only what a test makes it do: post
 * some receives or none, send raw bytes, or nothing at all.  For hostile
 * and broken peers (tests/rdma/test_rdma_chan.c, test_rdma_hostile.c).
 */
#ifndef COORD_TESTS_RDMA_RAW_PEER_H
#define COORD_TESTS_RDMA_RAW_PEER_H

#include <stddef.h>
#include <stdint.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#define T_RAW_BUF 1024 /* bytes of each receive it posts, and of its send buffer */

struct t_raw_peer {
	struct rdma_event_channel *ech;
	struct rdma_cm_id *id;
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	uint8_t buf[5 * T_RAW_BUF]; /* 4 receive buffers, then the send buffer */
};

/*
 * t_raw_connect() - connect @rp (zeroed by the caller) to the coord channel
 * listener at @ip:@port, announcing @nrecv receives of T_RAW_BUF bytes
 * while posting only @posted (at most 4) and asking for infinite RNR
 * retries.  Every wait is bounded by @wait_ms.  0 or -errno; on failure,
 * t_raw_close() frees what was made.
 */
int t_raw_connect(struct t_raw_peer *rp, const char *ip, unsigned port, uint32_t nrecv,
		  uint32_t posted, int wait_ms);
/* t_raw_connect_start() - the same up to the connect request, without
 * reading the reply: librdmacm sends the last message of the connect (the
 * RTU) only when the reply is read, so the server's accept is held
 * half-open until its own deadline (or t_raw_close()). */
int t_raw_connect_start(struct t_raw_peer *rp, const char *ip, unsigned port, uint32_t nrecv,
			uint32_t posted, int wait_ms);
/* t_raw_send() - one plain SEND (no immediate: returns no credits) of
 * @len <= T_RAW_BUF bytes; waits (bounded) for its completion.  0 or -errno. */
int t_raw_send(struct t_raw_peer *rp, const void *p, size_t len, int wait_ms);
/* t_raw_wait_disconnect() - 0 if the peer disconnected within @wait_ms. */
int t_raw_wait_disconnect(struct t_raw_peer *rp, int wait_ms);
/* t_raw_close() - disconnect and free (safe after a failed connect). */
void t_raw_close(struct t_raw_peer *rp);

#endif
