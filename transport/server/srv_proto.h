/* SPDX-License-Identifier: MIT */
/*
 * transport/server/srv_proto.h - the protocol engine of coord_worker_serve() and
 * coord_ps_serve(), whatever carries the frames: one established
 * connection's state (function map, ps client, per-worker resources, the
 * RES / VAR_RES frame being built) and what it does with each frame it is
 * given.  Frames go out through a small send interface, so the tcp server
 * (an epoll pool over sockets, tcp_server.c) and the rdma server (a thread
 * per channel, rdma_server.c) drive the same code.  The engine lives in
 * srv_proto.c.
 *
 * Concurrency: a connection is driven by one thread at a time (tcp_server.c
 * P1, rdma_server.c Q1); coord_srv_conn_frame() may call @io.send from that
 * thread.  The shared part (struct coord_srv) is guarded by its lock, taken
 * only on PS_TABLE frames and connection set-up / tear-down.
 */
#ifndef COORD_TRANSPORT_SRV_PROTO_H
#define COORD_TRANSPORT_SRV_PROTO_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include <coord/worker.h>

#include "runtime/core/exec.h"
#include "runtime/ps/ps.h"
#include "transport/wire/auth.h"
#include "transport/wire/giveup.h"
#include "transport/wire/wire.h"

struct coord_srv_ps;

/**
 * struct coord_srv - what every connection of one server shares.
 * @o:    the options (borrowed for the server's life).
 * @role: COORD_ROLE_WORKER or COORD_ROLE_PS.
 * @vs:   ps: the variables.
 * @key:  the cluster key (or none).
 * @lock: guards @pss (and the transport's own connection list).
 * @pss:  clients of ps tasks, shared by connections naming the same tasks.
 * @map_var: ps over rdma: register variable @id for remote reads and fill
 *        @out (a MAP op, ps.h); NULL elsewhere (MAP then fails).  Called by
 *        the thread that drives @k.
 * @unmap_var: ps over rdma: variable @id is about to be deleted: deregister
 *        it first, so no remote read reaches its freed memory.  NULL elsewhere.
 * @fetch: ps over rdma: see below.
 */
struct coord_srv_conn;
struct coord_srv {
	const struct coord_server_opts *o;
	uint8_t role;
	struct coord_varstore *vs;
	struct coord_ps_once *once; /* ps: at most once (runtime/ps/ps_once.c) */
	struct coord_key key;
	pthread_mutex_t lock;
	struct coord_srv_ps *pss;
	int (*map_var)(struct coord_srv_conn *k, uint32_t id, struct coord_ps_map *out,
		       struct coord_error *err);
	void (*unmap_var)(struct coord_srv *s, uint32_t id);
	void *map_ctx; /* the transport's, for map_var */
	/* ps over rdma: a rendezvous update's data (ps.h ASSIGN_RDV), @src,
	 * RDMA READ on @k's connection: into @dst, inside variable @id (whose
	 * stripes the caller holds), or @dst NULL into the connection's own
	 * buffer (*@out).  0 or a coord error code with @err; a failed READ
	 * also closes @k's connection (its queue pair is in error).  NULL
	 * elsewhere (the ops then fail).  Called by the thread that drives @k. */
	int (*fetch)(struct coord_srv_conn *k, const struct coord_ps_rsrc *src, uint32_t id,
		     void *dst, const void **out, struct coord_error *err);
};

/**
 * struct coord_srv_io - how the engine sends.
 * @send: write @len bytes of whole frames on the connection, in order;
 *        0 or -errno (the connection then closes).  Called by the thread
 *        that drives the connection.
 * @peek: optional: take in, without blocking and without moving the frame
 *        being served, what has arrived on the connection, and pass any
 *        CANCEL among it to coord_srv_conn_cancel() (S3: a worker that was
 *        busy learns of a cancellation queued behind it).  Called by the
 *        driving thread before each closure of a REQ frame starts, at
 *        @now; it may do nothing when it looked, or read, a moment ago.
 * @stream: optional (tcp): start sending a frame of @hlen bytes at @head
 *        followed by @len bytes at @src (a READ's result in its variable,
 *        whose stripes the caller holds: srv_var.c): send what the
 *        connection takes, waiting for the peer at most about 2 ms + 1 ms
 *        per MiB (the stripes' time), and copy the rest; @head stays
 *        untouched until @stream_end.  0: @stream_end must follow (no
 *        other send comes between); -ENOMEM: nothing was sent and
 *        @stream_end must not follow; other -errno: the connection failed
 *        (@stream_end follows and returns it).
 * @stream_end: send what @stream left (blocking); 0 or -errno.
 * @behind: optional (take-back, srv_take.c): take in, without
 *        blocking and without moving the frame being served, what has
 *        arrived on the connection, then call @visit for each whole frame
 *        received behind the one being served, in order, leaving them
 *        unread (payload NULL: one it cannot show; the take stops
 *        there).  Called by the backend's watcher thread from
 *        coord_srv_take_back(), while the driving thread runs a closure and
 *        has handed the connection's input over (it touches none of it
 *        until the take is done).  @send is then called from the watcher
 *        too: it must be safe beside the driving thread's sends.
 * @ctx:  passed to @send, @peek, @stream, @stream_end and @behind.
 */
typedef void (*coord_srv_visit_fn)(void *arg, const struct coord_wire_hdr *h,
				   const uint8_t *payload);
struct coord_srv_io {
	int (*send)(void *ctx, const void *buf, size_t len);
	void (*peek)(void *ctx, uint64_t now);
	int (*stream)(void *ctx, const void *head, size_t hlen, const void *src, size_t len);
	int (*stream_end)(void *ctx);
	void (*behind)(void *ctx, coord_srv_visit_fn visit, void *arg);
	void *ctx;
};

/* One connection's protocol state (transports embed it). */
struct coord_srv_conn {
	struct coord_srv *s;
	struct coord_srv_io io;
	/* the coordinator's heartbeat interval (its PING token), ms; 0 none.
	 * Written by the driving thread, read by a keepalive as a hint. */
	_Atomic uint32_t hb_ms;
	char peer[80];
	struct coord_exec_env env;
	uint32_t *fnmap; /* coordinator's function id -> our registry index */
	char **fnmiss;	 /* by id: the name of one not registered here, or NULL */
	uint32_t nfn;
	struct coord_srv_ps *ps;	 /* worker: the ps tasks (env.ps) */
	struct coord_ps_scratch scratch; /* ps: aligned copies of request data */
	/* the RES frame being built */
	uint8_t *out;
	size_t outcap;
	struct coord_wire_writer w;
	/* the current closure's result */
	uint8_t *res;
	size_t rescap, reslen;
	/* S3 (wire.h CANCEL): requests of a generation before @min_gen are not
	 * started, once @cancelled.  The driving thread's. */
	uint32_t min_gen;
	bool cancelled;
	/* Take-back (srv_take.c T1-T5): the claim word (the
	 * running record's number, TB_* flags); the driving thread's number
	 * of the next REQ record and the end of the records the watcher
	 * returned (tb_end: the watcher's while it holds the take); the
	 * running record's frame from the next record on (published by the
	 * word's RUN); the watcher's last look (the word and since when). */
	_Atomic uint64_t tb_word;
	bool tb_ok; /* T5: the coordinator takes closures back (the driving thread's) */
	uint64_t tb_idx, tb_end;
	struct coord_wire_iter tb_rest;
	uint64_t tb_seen, tb_seen_ns, tb_gap;
	uint8_t *tb_buf; /* the watcher's RES frame (allocated at the first take) */
	/* worker: the coordinator's PS_OPTS (zero: none came). */
	struct coord_wire_ps_opts ps_opts;
	/* ps: the client's give-up clock (wire.h VAR_SYNC; srv_proto.c
	 * "Give-up", transport/wire/giveup.h).  accept_ns by
	 * coord_srv_conn_init(), the rest by the driving thread. */
	struct coord_gu_srv sync;
};

/* S3: a CANCEL of generation @gen arrived (or was read ahead) on @k. */
COORD_PROV void coord_srv_conn_cancel(struct coord_srv_conn *k, uint32_t gen);

/**
 * coord_srv_init() - load the key, set up the shared part.
 * @s: filled in; @o: the options (borrowed); @role/@vs: as in struct coord_srv.
 * Return: 0 or -errno with @err.
 */
COORD_HIDDEN int coord_srv_init(struct coord_srv *s, const struct coord_server_opts *o,
				uint8_t role, struct coord_varstore *vs, struct coord_error *err);
/* coord_srv_fini() - every connection is gone: free the shared part. */
COORD_HIDDEN void coord_srv_fini(struct coord_srv *s);

/**
 * coord_srv_conn_init() - a new connection's state, before its handshake;
 * allocates nothing (an unauthenticated peer holds no buffer here).
 * @k: zeroed by the caller, then filled in; @s: its server; @io: its send
 *     interface (copied).
 */
COORD_PROV void coord_srv_conn_init(struct coord_srv_conn *k, struct coord_srv *s,
				    const struct coord_srv_io *io);
/* An authenticated connection's idle limit (opts.idle_ms) is at least this
 * many of its coordinator's heartbeat intervals (tcp_pool.c I1,
 * rdma_server.c Q5). */
#define COORD_SRV_IDLE_HB_MULT 4u

/* Room for the keepalive PONG coord_srv_keepalive() writes. */
#define COORD_SRV_PONG_LEN (COORD_WIRE_HDR + 8)

/**
 * coord_srv_keepalive() - the unsolicited PONG a connection owes its
 * coordinator at @now (tcp_pool.c P5, rdma_server.c Q3): due when it has
 * served one frame since @busy (0: it serves none) for half the
 * coordinator's heartbeat interval and nothing was sent since @last_sent.
 * Writes it into @b (COORD_SRV_PONG_LEN bytes).  Return: its length, or 0
 * when none is due.  Any thread; reads @k only through hints.
 */
COORD_PROV size_t coord_srv_keepalive(const struct coord_srv_conn *k, uint64_t busy,
				      uint64_t last_sent, uint64_t now, uint8_t *b);

/**
 * coord_srv_take_back() - take-back (srv_take.c T2): the watcher's look at
 * @k at @now: once the closure @k's driving thread runs has run past
 * COORD_SRV_TAKE_NS, answer every REQ record received behind it "returned,
 * not started" (wire.h), so that the coordinator places them elsewhere;
 * the driving thread then skips them.  Needs @io.behind.  One watcher
 * thread per connection (the backend's: tcp_pool.c P6, rdma_server.c Q3).
 * Return: how many were returned.
 */
#define COORD_SRV_TAKE_NS 2000000ull
COORD_PROV unsigned coord_srv_take_back(struct coord_srv_conn *k, uint64_t now);

/**
 * coord_srv_conn_start() - the handshake named @task: check it (a ps
 * started with a task takes no other), set up to serve frames from now and
 * log the connection (@how: appended, "" or " over rdma").
 * Return: 0, or < 0 refused with the reason in @err.
 */
COORD_PROV int coord_srv_conn_start(struct coord_srv_conn *k, uint32_t task, const char *how,
				    struct coord_error *err);
/**
 * coord_srv_conn_frame() - serve one frame of an established connection.
 * @k: the connection; @h/@payload: the frame (borrowed for the call).
 * Return: 0 go on; 1 the coordinator closed (logged); < 0 close with that
 * reason (-EPROTO: malformed or unexpected frame).
 */
COORD_PROV int coord_srv_conn_frame(struct coord_srv_conn *k, const struct coord_wire_hdr *h,
				    const uint8_t *payload);
/* coord_srv_conn_drop_ps() - let go of the ps client (takes s->lock: call
 * it without holding it). */
COORD_PROV void coord_srv_conn_drop_ps(struct coord_srv_conn *k);
/* coord_srv_conn_fini() - free the connection's state (after drop_ps). */
COORD_PROV void coord_srv_conn_fini(struct coord_srv_conn *k);

/**
 * coord_rdma_serve() - the rdma server (rdma_server.c, in the rdma
 * provider; transport/rdma_load.c forwards to it, or says why it cannot).
 * @s: the shared part, initialised; the caller finalises it.
 * Return: 0 after a stop; -errno with @err if it cannot listen.
 */
COORD_HIDDEN int coord_rdma_serve(struct coord_srv *s, struct coord_error *err);

#endif /* COORD_TRANSPORT_SRV_PROTO_H */
