/* SPDX-License-Identifier: MIT */
/*
 * transport/rdma/ps_rdma.h - the rdma side of the ps client (ps_client.c): one
 * frame channel to a ps task served over rdma (coord-ps --transport rdma),
 * shared by the client's sender and its reader thread, and one-sided
 * variable reads (RDMA READ, no ps CPU; runtime/store/varstore.c SNAP1-SNAP3).
 *
 * Threading (ps_rdma.c P1-P3): two channels to the ps task, each used by
 * one thread at a time (rdma_chan.h): frames (the reader thread takes its
 * lock only to look for a frame, never to sleep; senders for their send)
 * and one-sided reads (their own channel and lock, so their completions
 * wake no other thread).  The reader sleeps on the frame channel's fds and
 * an eventfd that a sender writes when a frame arrived while it held it.
 *
 * Built into the rdma provider; libcoord.so's callers reach these through
 * transport/rdma_load.c, which forwards them (connect: -ENODEV when the
 * provider cannot be loaded).
 *
 * Rendezvous updates (ps_rdma.c P5): an assign or assign_add of at least
 * COORD_PSR_PUT_MIN bytes sends a small request naming the caller's
 * registered buffer (coord_psr_put_reg()); the ps READs the data from it.
 */
#ifndef COORD_TRANSPORT_PS_RDMA_H
#define COORD_TRANSPORT_PS_RDMA_H

#include <stddef.h>
#include <stdint.h>

#include <coord/error.h>

#include "runtime/ps/ps.h"
#include "transport/wire/auth.h"
#include "transport/wire/wire.h"

struct coord_psr;

/* Reads of at most this many bytes land in a registered bounce buffer and are
 * copied out (the bounce buffer's size); larger ones go straight into the
 * caller's buffer, registered for the call (ps_rdma.c P4). */
#define COORD_PSR_READ_MAX (64u << 10)
/* A large read's RDMA READs are at most this long (rxe's port takes 8 MiB),
 * so a chain of done + data + begun fits the channel's send queue (32). */
#define COORD_PSR_CHUNK (4u << 20)
/* Reads of more bytes than this go two-sided. */
#define COORD_PSR_LARGE_MAX (30u * COORD_PSR_CHUNK)
/* A read takes the variable's whole block (runtime/store/varstore.h) in one RDMA
 * READ when the block is at most this many bytes more than the range (and
 * fits the bounce buffer); else the range, between its counts, in three. */
#define COORD_PSR_WHOLE_SLACK 4096u
/* Snapshots tried before a read goes two-sided (varstore.c SNAP2: a writer kept
 * overlapping). */
#define COORD_PSR_TRIES 8
/* Updates (assign, assign_add) of at least this many data bytes, and at most
 * COORD_PSR_LARGE_MAX, go rendezvous (ps_rdma.c P5): the ps RDMA READs
 * the data from the caller's buffer. */
#define COORD_PSR_PUT_MIN (64u << 10)

/**
 * coord_psr_connect() - a channel to ps task @task at @addr, handshake done.
 * @key/@role: as coord_handshake_client(); @max_frame: the largest frame.
 * @out: owned by the caller until coord_psr_destroy().
 * Return: 0 or -errno with @err (-ENODEV: no rdma in this build or host).
 */
COORD_HIDDEN int coord_psr_connect(const char *addr, const struct coord_key *key, uint8_t role,
				   unsigned task, uint32_t max_frame, int timeout_ms,
				   struct coord_psr **out, struct coord_error *err);
/* coord_psr_send() - send whole frames (bounded wait for credits); 0 or -errno. */
COORD_HIDDEN int coord_psr_send(struct coord_psr *r, const void *buf, size_t len);
/*
 * coord_psr_send_some() - post as much of the frame stream @buf as credits
 * allow now, never waiting (the reader's heartbeat, ps_conn.c); *@sent: how
 * much; the caller sends the rest later, in order.  0 or -EPIPE.
 */
COORD_HIDDEN int coord_psr_send_some(struct coord_psr *r, const void *buf, size_t len,
				     size_t *sent);
/*
 * coord_psr_rx() - receives completed on the frame channel so far: frames
 * and the ps's credit returns, so it moves while the ps takes in a large
 * frame of ours (the heartbeat's sign of life, like bytes over tcp).
 */
COORD_HIDDEN uint64_t coord_psr_rx(struct coord_psr *r);
/*
 * coord_psr_next() - the reader thread's next frame (valid until its next
 * call); sleeps while there is none, @wait_ms at most (-1: no bound).
 * Return: 0; -ETIMEDOUT no frame within @wait_ms; -EPIPE closed, shut down
 * or broken; another -errno.
 */
COORD_HIDDEN int coord_psr_next(struct coord_psr *r, struct coord_wire_hdr *h,
				const uint8_t **payload, int wait_ms);
/*
 * coord_psr_read_var() - read floats [@off, @off + @n) of the variable
 * @m maps into @dst with RDMA READs: a snapshot between two writes
 * (varstore.c SNAP2), up to COORD_PSR_TRIES attempts.  Return: 0; -EAGAIN no valid snapshot (a
 * writer kept overlapping, or the variable was deleted): read it two-sided;
 * -E2BIG over COORD_PSR_LARGE_MAX; -ENOMEM @dst cannot be registered; -EINVAL outside the variable; -EPIPE /
 * -EIO the channel failed.  *@tries: the attempts made.
 */
COORD_HIDDEN int coord_psr_read_var(struct coord_psr *r, const struct coord_ps_map *m, uint64_t off,
				    uint64_t n, void *dst, unsigned *tries);
/*
 * coord_psr_put_reg() - register @len bytes at @src (the data of a
 * rendezvous update, P5) for the ps to RDMA READ, and describe them in @d
 * (ps.h struct coord_ps_rsrc).  Any thread (it touches no channel state).
 * Return: 0 with *@out, to give to coord_psr_put_done() once the ps has
 * answered the request or the request was given up; -errno (the caller
 * sends the data two-sided).
 */
struct coord_rdma_mr;
COORD_HIDDEN int coord_psr_put_reg(struct coord_psr *r, const void *src, size_t len,
				   struct coord_rdma_mr **out, struct coord_ps_rsrc *d);
/* coord_psr_put_done() - deregister what coord_psr_put_reg() registered:
 * a READ of the ps after this fails, never reads the buffer (NULL is fine). */
COORD_HIDDEN void coord_psr_put_done(struct coord_rdma_mr *mr);
/* coord_psr_shutdown() - disconnect and wake the reader (any thread). */
COORD_HIDDEN void coord_psr_shutdown(struct coord_psr *r);
/* coord_psr_destroy() - free (the reader has returned; NULL is fine). */
COORD_HIDDEN void coord_psr_destroy(struct coord_psr *r);

#endif /* COORD_TRANSPORT_PS_RDMA_H */
