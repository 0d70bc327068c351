/* SPDX-License-Identifier: MIT */
/*
 * transport/rdma/rdma_chan.h - a frame channel over one RC queue pair: what a TCP
 * connection is to the tcp transport, for the rdma transport and its
 * servers.  rdma_cm connects and accepts ("host:port" addresses, as
 * coord_sock_addr() parses them); the data path is plain verbs on
 * pre-registered buffers.  The protocol, the credit invariant and the
 * threading rules are in rdma_chan.c's header comment.
 *
 * A channel carries a byte stream of whole frames (wire.h), in order:
 * coord_rdma_chan_send() takes whole frames, coord_rdma_chan_read() returns
 * them one by one with coord_frame_read()'s contract.  The handshake of
 * sock.h runs over it with coord_rdma_chan_io().  One-sided RDMA READ of a
 * peer's registered memory: coord_rdma_reg(), coord_rdma_mr_export(),
 * coord_rdma_read().
 *
 * Concurrency: a channel is used by one thread at a time (its event loop or
 * a blocking caller); distinct channels are independent.  Nothing on the
 * data path takes a lock or allocates (the reassembly buffer grows to the
 * largest frame seen, then stays).
 */
#ifndef COORD_TRANSPORT_RDMA_CHAN_H
#define COORD_TRANSPORT_RDMA_CHAN_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <coord/error.h>

#include "transport/wire/sock.h"
#include "transport/wire/wire.h"

/* The defaults of struct coord_rdma_opts (0 in a field selects them). */
#define COORD_RDMA_BUF_DEFAULT (16u << 10)
#define COORD_RDMA_NRECV_DEFAULT 32u
#define COORD_RDMA_NSEND_DEFAULT 32u
#define COORD_RDMA_SPIN_US_DEFAULT 50
#define COORD_RDMA_SPIN_MAX_US_DEFAULT 2000
#define COORD_RDMA_BUF_MIN 64u
#define COORD_RDMA_BUF_MAX (1u << 20)
#define COORD_RDMA_QUEUE_MAX 4096u

/* What each side says in rdma_cm's private data at connect and accept. */
#define COORD_RDMA_MAGIC 0x414d4452u /* "RDMA" */
#define COORD_RDMA_VERSION 1

/**
 * struct coord_rdma_priv - the connect/accept private data (little-endian).
 * @magic:   COORD_RDMA_MAGIC.
 * @version: COORD_RDMA_VERSION.
 * @nrecv:   receives the sender has posted: the peer's initial credits.
 * @buf:     bytes of each of those receives: the largest SEND it takes.
 */
struct coord_rdma_priv {
	uint32_t magic;
	uint16_t version;
	uint16_t reserved;
	uint32_t nrecv;
	uint32_t buf;
};

/**
 * struct coord_rdma_opts - a channel's sizes and timeouts.
 * @buf:        bytes per registered buffer (COORD_RDMA_BUF_MIN..MAX); a SEND
 *              carries at most min(ours, the peer's) bytes of frames.
 * @nrecv:      receives kept posted (the credits we grant), 4..QUEUE_MAX.
 * @nsend:      send slots (buffers and send-queue entries), 4..QUEUE_MAX.
 * @max_frame:  largest payload coord_rdma_chan_read() accepts.
 * @spin_us:    busy-poll budget before a blocking wait sleeps on the
 *              completion channel (-1: never spin).  The budget adapts
 *              (rdma_chan.c, "Completions"): up to @spin_max_us when events
 *              have been coming that often.
 * @spin_max_us: the adaptive budget's bound (0: COORD_RDMA_SPIN_MAX_US_DEFAULT;
 *              -1 or at most @spin_us: no adaptation).
 * @rnr_retry:  RNR retries the peer's sends to us get (0..6; never 7,
 *              "infinite"; 0 selects 3).  rdma_cm hands it to the peer: in
 *              IB CM the receiver picks its senders' RNR retry count, so a
 *              raw peer may ask ours to retry for ever, and a peer that
 *              never posts receives is then caught by the send timeout.
 *              Credits keep RNR out of normal operation.
 * @io_timeout_ms: bound on coord_rdma_chan_io()'s writes (default 10 s).
 *
 * Caller-allocated plain data; zeros select the defaults.
 */
struct coord_rdma_opts {
	uint32_t buf;
	uint32_t nrecv;
	uint32_t nsend;
	uint32_t max_frame;
	int spin_us;
	int spin_max_us;
	int rnr_retry;
	int io_timeout_ms;
};

struct coord_rdma_chan;
struct coord_rdma_listener;
struct coord_rdma_mr;

/**
 * coord_rdma_available() - can this process use rdma_cm at all?
 * @err: on failure, why: no RDMA device, or no /dev/infiniband/rdma_cm.
 *
 * Return: 0; -ENODEV (with the reason in @err).
 */
COORD_HIDDEN int coord_rdma_available(struct coord_error *err);

/**
 * coord_rdma_connect() - connect to the listener at @hostport.
 * @hostport:   "host:port" of an address on an RDMA device.
 * @o:          sizes (borrowed for the call); NULL: defaults.
 * @timeout_ms: bound on address and route resolution and the connection.
 * @out:        the channel on success, owned by the caller until
 *              coord_rdma_chan_destroy().
 * @err:        optional detail.
 *
 * Return: 0; -ENODEV no RDMA here; -ETIMEDOUT; -ECONNREFUSED the peer
 * rejected or nobody listens; -EPROTO the peer is not a coord channel;
 * another -errno.
 */
COORD_HIDDEN int coord_rdma_connect(const char *hostport, const struct coord_rdma_opts *o,
				    int timeout_ms, struct coord_rdma_chan **out,
				    struct coord_error *err);

/**
 * coord_rdma_listen() - listen on @hostport for coord_rdma_connect().
 * @hostport: "host:port"; port 0 picks one (see @port).
 * @o:        the sizes of the accepted channels (copied).
 * @out:      the listener, owned by the caller until
 *            coord_rdma_listener_destroy().
 * @port:     the bound port.
 * @err:      optional detail.
 *
 * The cluster-key policy of a non-loopback address (coord_auth_check_bind())
 * is the server's to apply: rdma_cm has no loopback.
 * Return: 0 or -errno with @err.
 */
COORD_HIDDEN int coord_rdma_listen(const char *hostport, const struct coord_rdma_opts *o,
				   struct coord_rdma_listener **out, unsigned *port,
				   struct coord_error *err);

/**
 * coord_rdma_listener_fd() - readable when a connection request waits.
 * @l: the listener.
 *
 * Return: the fd of its rdma_cm event channel (non-blocking).
 */
COORD_HIDDEN int coord_rdma_listener_fd(const struct coord_rdma_listener *l);

/**
 * coord_rdma_accept() - accept the next connection.
 * @l:          the listener.
 * @timeout_ms: bound on the wait for a request and for its establishment
 *              (0: only a request already waiting).
 * @out:        the channel, owned by the caller until coord_rdma_chan_destroy().
 * @err:        optional detail.
 *
 * A request with bad private data is rejected and reported (-EPROTO).
 * Return: 0; -ETIMEDOUT nothing came; -EPROTO; another -errno.
 */
COORD_HIDDEN int coord_rdma_accept(struct coord_rdma_listener *l, int timeout_ms,
				   struct coord_rdma_chan **out, struct coord_error *err);

/**
 * coord_rdma_listener_destroy() - stop listening and free @l (NULL is fine).
 * @l: the listener; channels it accepted live on.
 */
COORD_HIDDEN void coord_rdma_listener_destroy(struct coord_rdma_listener *l);

/**
 * coord_rdma_chan_destroy() - disconnect and free @ch (NULL is fine).
 * @ch: the channel; memory regions registered through it must be
 *      deregistered first.
 */
COORD_HIDDEN void coord_rdma_chan_destroy(struct coord_rdma_chan *ch);

/**
 * coord_rdma_chan_shutdown() - disconnect @ch now, without waiting.
 * @ch: the channel; it stays allocated (its fds valid) until
 *      coord_rdma_chan_destroy(), which then skips the graceful drain.
 *
 * What was posted and not yet delivered may be lost (rdma_disconnect()
 * flushes the queues); the peer sees the disconnection (-EPIPE).  For a
 * peer given up on: a missed heartbeat, a closure past its deadline.
 */
COORD_HIDDEN void coord_rdma_chan_shutdown(struct coord_rdma_chan *ch);

/**
 * coord_rdma_chan_send() - send whole frames.
 * @ch:         the channel.
 * @buf/@len:   one or more whole frames (not checked here: the receiver
 *              checks), copied before return.
 * @timeout_ms: bound on the wait for credits and send slots (-1 forever).
 *
 * Return: 0 (all of @buf is posted, in order after earlier sends); -EPIPE
 * the channel is closed or broken; -ETIMEDOUT the peer returned no credits
 * in time (part of @buf may be posted: the channel is then unusable).
 */
COORD_HIDDEN int coord_rdma_chan_send(struct coord_rdma_chan *ch, const void *buf, size_t len,
				      int timeout_ms);

/**
 * coord_rdma_chan_send_some() - post as much of @buf as credits and send
 *                               slots allow now, never waiting.
 * @ch:      the channel.
 * @buf/@len: bytes of the frame stream.
 * @sent:    gets how many were posted; the caller posts the rest later
 *           (after coord_rdma_chan_progress()), in order.
 *
 * Return: 0 (possibly *@sent == 0); -EPIPE closed or broken.
 */
COORD_HIDDEN int coord_rdma_chan_send_some(struct coord_rdma_chan *ch, const void *buf, size_t len,
					   size_t *sent);
/* coord_rdma_chan_send_some() posting a SEND only while credits >= @min
 * (2 there: rdma_chan.c C2; C4 for the others). */
COORD_HIDDEN int coord_rdma_chan_send_min(struct coord_rdma_chan *ch, const void *buf, size_t len,
					  uint32_t min, size_t *sent);
/*
 * coord_rdma_chan_room() - how many bytes coord_rdma_chan_send_min(@min)
 * would post now, in whole SENDs (a call starts a new SEND), after taking
 * in the completions there are; *@most: the most it can count on posting
 * at once however long it waits (more: post part of it, C3).
 */
COORD_HIDDEN size_t coord_rdma_chan_room(struct coord_rdma_chan *ch, uint32_t min, size_t *most);

/**
 * coord_rdma_chan_read() - the next whole frame.
 * @ch:         the channel.
 * @idle_ms:    bound on the wait for its first byte (-1 forever, 0 none).
 * @partial_ms: bound on the wait for the rest once it started.
 * @h:          the frame's header.
 * @payload:    its payload, valid until the next read on @ch.
 *
 * The contract of coord_frame_read(): the header is checked with
 * coord_wire_parse_hdr() against opts.max_frame before anything is
 * buffered; a bad one breaks the channel (it disconnects, the peer sees
 * -EPIPE).
 * Return: 0; -ETIMEDOUT; -EPIPE the peer closed (after every frame it
 * sent); -EPROTO / -EMSGSIZE bad header; -EIO a failed work request.
 */
COORD_HIDDEN int coord_rdma_chan_read(struct coord_rdma_chan *ch, int idle_ms, int partial_ms,
				      struct coord_wire_hdr *h, const uint8_t **payload);

/**
 * coord_rdma_chan_scan() - S3: reap completions without waiting, then call
 *                          @cb for every whole frame of type @type among
 *                          the bytes received and not read yet, in order,
 *                          leaving them unread.
 * @ch:   the channel (between two reads: the frame last read stays valid).
 * @type: the frame type to look for (a small single-record frame).
 * @cb:   called with the header and a copy of the payload (@max bytes at
 *        most; larger frames are skipped).
 * @arg:  passed to @cb.
 * @max:  the largest payload @cb takes.
 */
COORD_HIDDEN void coord_rdma_chan_scan(struct coord_rdma_chan *ch, uint16_t type,
				       void (*cb)(void *arg, const struct coord_wire_hdr *h,
						  const uint8_t *payload),
				       void *arg, size_t max);
/*
 * coord_rdma_chan_scan_all() - the same for every whole frame, its payload
 * copied into @buf when it fits @cap bytes, else passed as NULL (the
 * take-back, transport/server/srv_take.c: which frames come behind the one
 * being served).
 */
COORD_HIDDEN void coord_rdma_chan_scan_all(struct coord_rdma_chan *ch,
					   void (*cb)(void *arg, const struct coord_wire_hdr *h,
						      const uint8_t *payload),
					   void *arg, uint8_t *buf, size_t cap);

/**
 * coord_rdma_chan_progress() - reap completions and connection events
 *                              without waiting; return credits if owed.
 * @ch: the channel.
 *
 * Return: 0; -EPIPE closed or broken (frames already received can still
 * be read).
 */
COORD_HIDDEN int coord_rdma_chan_progress(struct coord_rdma_chan *ch);

/**
 * coord_rdma_chan_progress_fast() - coord_rdma_chan_progress() for a
 *                                   thread that polls in a loop: the
 *                                   completion and rdma_cm event channels
 *                                   are drained at most once a millisecond
 *                                   (a disconnection shows within that).
 * @ch: the channel.
 *
 * Return: as coord_rdma_chan_progress().
 */
COORD_HIDDEN int coord_rdma_chan_progress_fast(struct coord_rdma_chan *ch);

/**
 * coord_rdma_chan_fds() - the fds an event loop polls for @ch.
 * @ch:    the channel.
 * @cq_fd: its completion channel (readable after coord_rdma_chan_arm()
 *         when a completion arrives).
 * @cm_fd: its rdma_cm event channel (readable on disconnection).
 * Both are non-blocking.  After either is readable, call
 * coord_rdma_chan_progress().
 */
COORD_HIDDEN void coord_rdma_chan_fds(const struct coord_rdma_chan *ch, int *cq_fd, int *cm_fd);

/**
 * coord_rdma_chan_arm() - ask for a completion event before sleeping.
 * @ch: the channel.
 *
 * Return: 1 if work already arrived (do not sleep: read or progress
 * first), 0 armed (the cq fd turns readable on the next completion),
 * -EPIPE closed or broken.
 */
COORD_HIDDEN int coord_rdma_chan_arm(struct coord_rdma_chan *ch);

/**
 * coord_rdma_chan_readable() - is a byte of a frame buffered?
 * @ch: the channel.
 *
 * Return: true if coord_rdma_chan_read(.., 0, ..) may make progress.
 */
COORD_HIDDEN bool coord_rdma_chan_readable(const struct coord_rdma_chan *ch);

/**
 * coord_rdma_chan_partial() - did the last read stop in the middle of a
 *                             frame?
 * @ch: the channel.
 *
 * Return: true if bytes of an unfinished frame are held (a -ETIMEDOUT of
 * coord_rdma_chan_read() then means partial_ms passed, not idle_ms).
 */
COORD_HIDDEN bool coord_rdma_chan_partial(const struct coord_rdma_chan *ch);

/**
 * coord_rdma_chan_peer() - "host:port" of the peer, for logs.
 * @ch: the channel.
 *
 * Return: a string owned by @ch.
 */
COORD_HIDDEN const char *coord_rdma_chan_peer(const struct coord_rdma_chan *ch);

/**
 * coord_rdma_chan_io() - the handshake's view of @ch (sock.h).
 * @io: filled in; borrows @ch.  Its write is coord_rdma_chan_send() bounded
 *      by opts.io_timeout_ms, its read coord_rdma_chan_read().
 * @ch: the channel.
 */
COORD_HIDDEN void coord_rdma_chan_io(struct coord_frame_io *io, struct coord_rdma_chan *ch);

/**
 * struct coord_rdma_stats - counters of one channel (for tests and logs).
 * @sends/@recvs:       SEND work requests posted / receives completed.
 * @credit_msgs:        credit-only SENDs among @sends.
 * @credit_waits:       times a send found no credit (it waited or stopped).
 * @signalled:          signalled send work requests.
 * @sleeps:             blocking waits that slept on the completion channel.
 */
struct coord_rdma_stats {
	uint64_t sends, recvs, credit_msgs, credit_waits, signalled, sleeps;
};

/**
 * coord_rdma_chan_stats() - a copy of @ch's counters.
 * @ch: the channel; @st: filled in.
 */
COORD_HIDDEN void coord_rdma_chan_stats(const struct coord_rdma_chan *ch,
					struct coord_rdma_stats *st);

/**
 * coord_rdma_reg() - register @len bytes at @addr on @ch's device.
 * @ch:          a channel of the device (the protection domain is shared by
 *               every channel of one device in this process).
 * @addr/@len:   the memory; borrowed until coord_rdma_dereg().
 * @remote_read: peers may RDMA READ it (coord_rdma_mr_export()).
 * @out:         the region, owned by the caller.
 *
 * Slow path (ibv_reg_mr): register once, read many times.
 * Return: 0 or -errno.
 */
COORD_HIDDEN int coord_rdma_reg(struct coord_rdma_chan *ch, void *addr, size_t len,
				bool remote_read, struct coord_rdma_mr **out);

/**
 * coord_rdma_reg_src() - register @len bytes at @addr for peers to RDMA
 *                        READ, and for nothing else (no local write: the
 *                        memory may be read-only, e.g. a const buffer).
 * @ch/@out: as coord_rdma_reg().
 *
 * For a buffer handed to a peer for one exchange (a rendezvous update,
 * transport/rdma/ps_rdma.c P5); coord_rdma_mr_export() names it.
 * Return: 0 or -errno.
 */
COORD_HIDDEN int coord_rdma_reg_src(struct coord_rdma_chan *ch, const void *addr, size_t len,
				    struct coord_rdma_mr **out);

/**
 * coord_rdma_dereg() - deregister and free @mr (NULL is fine).
 * @mr: no RDMA READ into or out of it may be in flight.
 */
COORD_HIDDEN void coord_rdma_dereg(struct coord_rdma_mr *mr);

/**
 * coord_rdma_mr_export() - what a peer needs to RDMA READ @mr.
 * @mr:   a region registered with @remote_read.
 * @addr: its address as the peer names it.
 * @rkey: its remote key.
 */
COORD_HIDDEN void coord_rdma_mr_export(const struct coord_rdma_mr *mr, uint64_t *addr,
				       uint32_t *rkey);

/**
 * coord_rdma_read() - read @len bytes of the peer's memory into @local.
 * @ch:         the channel to that peer.
 * @local:      a region registered on @ch's device; bytes [@loff, @loff +
 *              @len) receive the data.
 * @raddr/@rkey: what the peer exported (coord_rdma_mr_export()).
 * @timeout_ms: bound on the wait for the completion.
 *
 * One signalled RDMA READ work request; the peer's CPU is not involved.
 * Return: 0; -EINVAL outside @local; -EPIPE closed; -EIO the READ failed
 * (bad rkey or range: the channel is then broken, as RC makes it);
 * -ETIMEDOUT.
 */
COORD_HIDDEN int coord_rdma_read(struct coord_rdma_chan *ch, struct coord_rdma_mr *local,
				 size_t loff, uint64_t raddr, uint32_t rkey, size_t len,
				 int timeout_ms);

/**
 * struct coord_rdma_rseg - one RDMA READ of coord_rdma_readv().
 * @mr:    the local region the bytes go to; NULL: coord_rdma_readv()'s
 *         @local (a chain may land in several, e.g. a seqlock's counters in a
 *         bounce buffer and the data straight in the caller's buffer).
 * @loff:  where in that region the bytes go.
 * @raddr/@rkey: what the peer exported; @len: bytes.
 */
struct coord_rdma_rseg {
	struct coord_rdma_mr *mr;
	size_t loff;
	uint64_t raddr;
	uint32_t rkey;
	size_t len;
};

/**
 * coord_rdma_readv() - @n RDMA READs posted as one chain, waited for
 *                      together (one round trip).
 * @ch/@local/@timeout_ms: as coord_rdma_read().
 * @seg/@n: the reads, 1..nsend of them.
 *
 * The responder executes them in order (RC), so a later READ samples the
 * peer's memory after an earlier one did (what a seqlock reader needs,
 * runtime/store/varstore.c SNAP2).  Only the last is signalled.
 * Return: as coord_rdma_read().
 */
COORD_HIDDEN int coord_rdma_readv(struct coord_rdma_chan *ch, struct coord_rdma_mr *local,
				  const struct coord_rdma_rseg *seg, unsigned n, int timeout_ms);

/**
 * coord_rdma_readv_tick() - coord_rdma_readv() that calls @tick(@arg)
 *                           every 20 ms or so while it waits for the chain.
 * @tick: runs on the calling thread, which owns the channel: it may send on
 *        @ch (a keepalive, rdma_server.c Q3), nothing else.
 *
 * For long chains (a rendezvous update's READs, rdma_server.c Q6), during
 * which the thread that owns the channel must not fall silent.
 * Return: as coord_rdma_readv().
 */
COORD_HIDDEN int coord_rdma_readv_tick(struct coord_rdma_chan *ch, struct coord_rdma_mr *local,
				       const struct coord_rdma_rseg *seg, unsigned n,
				       int timeout_ms, void (*tick)(void *arg), void *arg);

/**
 * coord_rdma_chan_verbs() - @ch's queue pair and completion queue, and
 * @mr's verbs region, for a benchmark that times bare verbs on the same
 * queue pair beside the channel (tests/rdma/bench_rdma.c -t read).
 *
 * The caller may post a signalled request and reap its completion itself
 * only while nothing else uses @ch and no request of the channel is
 * outstanding (after the channel's own call returned); the channel then
 * never sees those completions.  Any argument may be NULL.
 */
struct ibv_qp;
struct ibv_cq;
struct ibv_mr;
COORD_HIDDEN void coord_rdma_chan_verbs(struct coord_rdma_chan *ch, struct coord_rdma_mr *mr,
					struct ibv_qp **qp, struct ibv_cq **cq,
					struct ibv_mr **vmr);

#endif /* COORD_TRANSPORT_RDMA_CHAN_H */
