/* SPDX-License-Identifier: MIT */
/*
 * transport/engine/engine.h - the connection engine: what a network
 * transport does for the coordinator, once, over a backend that only moves
 * bytes (tcp: transport/tcp/tcp.c, io_uring; rdma: transport/rdma/rdma.c,
 * verbs channels).  The backend fills a struct coord_eng_ops (mercury's
 * na_class_ops, rdma-core's provider ops are the models); the engine owns
 * the rest: the event loops (one per dispatcher, each owning a share of
 * the connections), their rounds and sleeps, REQ batching and the window,
 * placement (place.h), results and put-back, liveness, the CANCEL of S3,
 * per-worker resource releases (S9), admission and re-admission after
 * recovery (S10), and the coord_tp_ops entries that reach them.
 *
 * Layout.  A backend's connection begins with COORD_CONN_EMBED (conn.h)
 * and its loop with struct coord_eloop; the engine allocates them
 * (ops->conn_size, ops->loop_size) and hands them to the ops as the
 * embedded part, which the backend casts back.
 *
 * What the engine keeps true:
 *   E1  A loop's connections, slots, output and lists are touched only by
 *       whoever holds the loop's tok (TOK_HELD, engine.c): its thread while
 *       awake, or a backend's driver (rdma.c D1).  The recovery thread
 *       touches only the admission list (admit_lock) and the new
 *       connection state its ops->dial() made, handed over with the list.
 *   E2  Every closure in a slot of a connection that fails is put back
 *       exactly once (coord_eng_fail() empties the slots before anything
 *       may refill them: the connection is down until admitted again).
 *   E3  A round sends a CANCEL to every live connection whenever the
 *       generation moved since its last (conn.h coord_conn_cancel()), and
 *       ops->cancel wakes every loop for it.
 *
 * Synchronization: the shared fields of struct coord_eloop and struct
 * coord_eng (tok, armed, admit, admit_pending, up, idle, rt_hint): engine.c's
 * table; the rest belongs to the tok's holder (E1).
 */
#ifndef COORD_TRANSPORT_ENGINE_H
#define COORD_TRANSPORT_ENGINE_H

#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "runtime/core/dispatch.h"
#include "transport/engine/conn.h"
#include "transport/engine/place.h"
#include "transport/wire/auth.h"
#include "transport/wire/sock.h"

struct coord_eng;

/* One event loop (a dispatcher); a backend's loop begins with it. */
struct coord_eloop {
	struct coord_dispatcher *d;
	struct coord_eng *e;
	pthread_t thread;
	bool started;
	int efd;	      /* the eventfd wakes write (the backend makes it) */
	_Atomic bool armed;   /* asleep; the next schedule writes efd */
	_Atomic uint32_t tok; /* E1: TOK_HELD by whoever runs rounds; TOK_WANT */
	uint64_t inflight;    /* taken by this loop and not yet finished */
	uint64_t finished;    /* closures finished, ever (a driver's progress) */
	uint64_t rt_ns;	      /* moving average: a closure's send to its result */
	struct coord_closure **batch, **done;
	unsigned ndone, done_cap;
	struct coord_place place; /* its connections (place.conns) and placement */
	struct coord_conn *dirty; /* the connections given closures this round */
	/* Re-admission (E1): the recovery thread pushes, the loop installs. */
	pthread_mutex_t admit_lock;
	bool admit_lock_init;
	struct coord_conn *admit;
	_Atomic bool admit_pending;
	uint64_t next_check_ns; /* heartbeats and closure deadlines */
	uint32_t cancel_gen;	/* S3: the generation our last CANCEL carried */
	uint64_t read_ns;	/* when a round last took in what had arrived */
};

/* The transport: c->tp_state of tcp and rdma. */
struct coord_eng {
	struct coord *c;
	const struct coord_eng_ops *ops;
	struct coord_key key;
	char *conns, *loops; /* nworkers x conn_size, nloops x loop_size */
	unsigned nloops;
	_Atomic unsigned up;
	_Atomic int idle;	  /* connections up with nothing in flight, all loops */
	_Atomic uint64_t rt_hint; /* the loops' rt_ns, for a backend's waiters */
};

/*
 * struct coord_eng_ops - a backend.  Every op but dial runs with the loop's
 * tok held (E1), on the loop's connections only.
 * @conn_size, @loop_size: sizes of the backend's connection and loop.
 * @cork_frames: REQ frames a connection may have unanswered before the
 *        closures placed on it wait for a result (engine.c "Frames"); 0:
 *        never corked.
 * @spin: after a busy round, busy-poll for opts.spin_ns before sleeping.
 * @available: can the backend run here at all (NULL: yes).
 * @loop_init: make the loop's own state and l->efd; @loop_fini undoes it
 *        (also after a failed init).  @loop_start: first thing in the
 *        loop's thread (NULL: nothing).
 * @dial: connect to k->peer, then coord_eng_greet() over the connection;
 *        @again (the recovery thread): keep it aside for @install.
 * @install: the re-admitted connection takes the old one's place; false:
 *        not yet (the old one has I/O in flight; asked again next round).
 * @drop: free a dialled connection that was never installed.
 * @down: the connection failed (@code < 0: a bad frame, tell the peer).
 * @close: tear down (@bye: tell a live peer we are shutting down).
 * @send: start sending k->ow's frames (end the open one); false if a
 *        send is running (the engine asks again when it ends).
 * @submit: hand what was queued to the kernel before blocking (NULL).
 * @poll: take in every completion and frame that is there, without
 *        blocking; true if any came.
 * @arm: before a sleep; false if something came meanwhile (NULL: true).
 * @wait: sleep until I/O, a write to efd, or @deadline (0: none); called
 *        with the tok released, returns with it held.
 */
struct coord_eng_ops {
	const char *name;
	size_t conn_size, loop_size;
	unsigned cork_frames;
	bool spin;
	int (*available)(struct coord_error *err);
	int (*loop_init)(struct coord_eloop *l, unsigned nconns, struct coord_error *err);
	void (*loop_fini)(struct coord_eloop *l);
	void (*loop_start)(struct coord_eloop *l);
	int (*dial)(struct coord_conn *k, bool again, struct coord_error *err);
	bool (*install)(struct coord_conn *k);
	void (*drop)(struct coord_conn *k);
	void (*down)(struct coord_conn *k, int code, const char *why);
	void (*close)(struct coord_conn *k, bool bye);
	bool (*send)(struct coord_conn *k);
	void (*submit)(struct coord_eloop *l);
	bool (*poll)(struct coord_eloop *l);
	bool (*arm)(struct coord_eloop *l);
	void (*wait)(struct coord_eloop *l, uint64_t deadline);
};

/* What one round saw, for the sleep that may follow it. */
struct coord_eng_round {
	uint64_t now, next_start, due, cork_until;
	unsigned took; /* closures taken from the queue */
	bool may_take, stop;
};

/* The coord_tp_ops of a backend: start with @ops; the rest are generic. */
COORD_PROV int coord_eng_start(struct coord *c, const struct coord_eng_ops *ops,
			       struct coord_error *err);
COORD_PROV void coord_eng_stop(struct coord *c);
COORD_PROV void coord_eng_wake(struct coord *c);
COORD_PROV void coord_eng_cancel(struct coord *c);
COORD_PROV int coord_eng_reconnect(struct coord *c, struct coord_worker *w,
				   struct coord_error *err);
COORD_PROV int coord_eng_room(struct coord_dispatcher *d, unsigned w);

/* The coord_tp_ops entries every engine transport shares; it adds .name,
 * .wake (coord_eng_wake, or its own) and whatever else it has. */
#define COORD_ENG_TP_OPS(start_fn)                                                                 \
	.ndispatchers = coord_conn_ndispatchers, .start = (start_fn), .stop = coord_eng_stop,      \
	.reconnect = coord_eng_reconnect, .room = coord_eng_room, .cancel = coord_eng_cancel

/* The backend's loop @i / connection @i. */
static inline struct coord_eloop *coord_eng_loop(struct coord_eng *e, unsigned i)
{
	return (struct coord_eloop *)(void *)(e->loops + (size_t)i * e->ops->loop_size);
}

static inline struct coord_conn *coord_eng_conn(struct coord_eng *e, unsigned i)
{
	return (struct coord_conn *)(void *)(e->conns + (size_t)i * e->ops->conn_size);
}

/* For ops->dial: the handshake over @io, then the function table, the ps
 * tasks' addresses and a PING carrying our heartbeat interval. */
COORD_PROV int coord_eng_greet(struct coord_conn *k, const struct coord_frame_io *io,
			       struct coord_error *err);

/* For ops->poll: @k received something (liveness). */
static inline void coord_eng_rx(struct coord_conn *k, uint64_t now)
{
	k->last_rx_ns = now;
	k->ping_ns = 0;
}

/* For ops->poll: one whole frame from @k's worker; false if @k failed on
 * it (a bad frame, or the worker's ERROR).  Then coord_eng_flush(). */
COORD_PROV bool coord_eng_frame(struct coord_conn *k, const struct coord_wire_hdr *h,
				const uint8_t *payload);
/* @k's frames are bad or its link broke (-errno @r): fail it, saying why. */
COORD_PROV void coord_eng_bad(struct coord_conn *k, int r);
/* Fail @k (E2): closures put back, its worker to the recovery thread. */
COORD_PROV void coord_eng_fail(struct coord_conn *k, int code, const char *why);
/* Send what @k's output holds, unless corked or a send is running. */
COORD_PROV void coord_eng_flush(struct coord_conn *k);

/*
 * For a backend that lets other threads run rounds (rdma.c D1-D6): one
 * round by the tok's holder: take in what came, install re-admitted
 * workers, CANCEL and PW_FREE frames, liveness, then take and send what
 * credit allows.  @thread: the loop's own thread (it may block on the
 * queue).  True if anything was taken or received.
 */
COORD_PROV bool coord_eng_round(struct coord_eloop *l, struct coord_eng_round *ro, bool thread);
COORD_PROV bool coord_eng_tok_try(struct coord_eloop *l);
COORD_PROV void coord_eng_tok_release(struct coord_eloop *l);
COORD_PROV void coord_eng_tok_wait(struct coord_eloop *l);

#endif /* COORD_TRANSPORT_ENGINE_H */
