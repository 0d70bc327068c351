/* SPDX-License-Identifier: MIT */
/*
 * runtime/core/internal.h - the coordinator's own structure (struct coord)
 * and what the core's files share beyond the transports' view
 * (runtime/core/dispatch.h): producer stashes, the hint queue, the main
 * queue's functions for sched.c, recovery, the ps ops and the table of
 * transports.  The closure and its lifetime: runtime/core/closure.h.
 */
#ifndef COORD_RUNTIME_INTERNAL_H
#define COORD_RUNTIME_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <urcu-bp.h>

#include <coord/coord.h>

#include "runtime/util/futex.h"
#include "runtime/core/pool.h"
#include "runtime/core/ring.h"
#include "runtime/util/util.h"

#include "runtime/core/dispatch.h"

struct coord_tp_ops;

/*
 * A stash of free closures for schedule() (schedule.c, coord_pvt.h C10): filled from
 * the pool a batch at a time, with the batch's first lines prefetched for
 * writing at once, so the one-at-a-time path pays one overlapped round of
 * misses per batch instead of one miss per call on a line the worker last
 * had.  Slot s belongs to the thread that owns it process-wide (schedule.c,
 * stash_slot_claim()), which alone reads and writes it; a thread without a
 * slot takes from the pool directly.
 */
#define COORD_PSTASH 16	      /* closures per stash */
#define COORD_PSTASH_SLOTS 4u /* stashes per coordinator */
struct coord_pstash {
	/* C1: closures its owners counted as outstanding (only grows). */
	_Atomic uint64_t added __cacheline_aligned;
	uint32_t n;
	struct coord_closure *cl[COORD_PSTASH];
};

struct coord {
	/* What a transport may read (dispatch.h), first: coord_view() is a
	 * cast.  The core names these fields directly (c->opts, c->gen). */
	union {
		struct coord_view view;
		struct {
			COORD_VIEW_FIELDS
		};
	};
	/* Hot, written by producers (C1: with pstash[].added, the number of
	 * closures scheduled and not final; see outstanding_total()). */
	_Atomic uint64_t outstanding __cacheline_aligned;
	/* S3 error slot: EMPTY -> WRITING -> SET -> TAKEN -> EMPTY. */
	_Atomic uint32_t err_state __cacheline_aligned;
	struct coord_error err;

	struct coord_ring ring;
	/* The overflow FIFO (queue.c): put-backs and, when unbounded,
	 * what does not fit in the ring.  Off the fast path. */
	_Atomic int64_t ov_count __cacheline_aligned;
	_Atomic(struct coord_closure *) ov_in;
	pthread_mutex_t ov_lock; /* guards ov_out */
	struct coord_closure *ov_out;
	bool unbounded;
	/* Q2: small closures without a handle travel inline in the ring
	 * (a transport with COORD_TP_INLINE, inproc: its dispatchers take
	 * them into their own closures, d->local). */
	bool inline_q;

	struct coord_ec not_empty __cacheline_aligned; /* dispatchers sleep */
	_Atomic uint32_t loop_sleepers;		       /* event loops asleep in the kernel */
	_Atomic bool unavailable;		       /* no worker left (transport) */
	struct coord_ec not_full;		       /* schedule sleeps (S1) */
	struct coord_ec idle;			       /* join: outstanding == 0 or error */
	struct coord_ec drained;		       /* canceller: inflight == 0 */
	/* After coord_destroy() with RemoteValues still held (see there). */
	_Atomic bool dead;
	_Atomic uint64_t held_after_destroy;

	struct coord_pool *closures;
	struct coord_bufs bufs;
	_Atomic uint64_t pw_next_uid;
	/* S9 (runtime/core/pw.c): per-worker handles not yet freed; threads in a
	 * release's wake, and whether such wakes are over (coord_destroy()). */
	_Atomic uint64_t pw_live;
	_Atomic uint32_t pw_wakers;
	_Atomic bool pw_closed;

	const struct coord_ps_ops *ps_ops; /* how c->ps is reached (coord_transports[]) */
	struct coord_recovery *recovery;   /* the slow path, or NULL (inproc) */
	_Atomic uint64_t cancelled;	   /* metrics (B7) */
	/* Deferred closure puts (cancel.c rcu_put()) not yet run: the end of
	 * urcu_bp_barrier() as TSan can see it (coord_destroy()). */
	_Atomic uint64_t rcu_puts;
	_Atomic uint64_t dep_failed; /* consumers failed by an input (B1, B7) */
	_Atomic bool dataflow;	     /* a consumer was scheduled (B1, DF3) */
	uint64_t created_ns;
	/* Free closures for producers (C10). */
	struct coord_pstash pstash[COORD_PSTASH_SLOTS];
	/* W1 (rv.c): moving average of recent RemoteValue waits, the base of
	 * the adaptive spin, and the waits and parks counted (B7); written by
	 * every fetch that had to wait. */
	_Atomic uint64_t wait_avg_ns __cacheline_aligned;
	_Atomic uint64_t waits, parked;
	/* B4 hints (runtime/core/sched.c H1, H2): the default path only reads
	 * hq_count; hinted schedules and takes write both. */
	_Atomic int64_t hq_count __cacheline_aligned;
	_Atomic uint64_t hq_ver;
	_Atomic(struct coord_hq *) hq;
};

/* --- releasing per-worker resources (runtime/core/pw.c, S9) ----------------- */

/* coord_pw_retire() - the last reference to @pw was dropped: have every
 * worker destroy its component, then free @pw.  Any thread. */
COORD_HIDDEN void coord_pw_retire(struct coord_pw *pw);
/* coord_pw_close() - coord_destroy(), before the transport stops: no
 * release wakes the transport from now on. */
COORD_HIDDEN void coord_pw_close(struct coord *c);
/* coord_pw_fini() - coord_destroy(), once no dispatcher runs and no
 * closure is left to release: free the released handles still queued;
 * returns how many handles are still held by the user. */
COORD_HIDDEN uint64_t coord_pw_fini(struct coord *c);
/* coord_dead_put() - one of the things that kept a destroyed coordinator's
 * memory alive (a RemoteValue or a per-worker handle) is gone. */
COORD_HIDDEN void coord_dead_put(struct coord *c);

/* --- the hint queue (runtime/core/sched.c, B4) ---------------------------------- */

struct coord_hq;
/* Validate @call's hints (making the queue on first use). */
COORD_HIDDEN int coord_hq_check(struct coord *c, const struct coord_call *call,
				struct coord_error *err);
/* Copy @call's hints into @cl (CL_HINT). */
COORD_HIDDEN void coord_hq_fill(struct coord_closure *cl, const struct coord_call *call);
/* Queue hinted @cl (lock-free); the caller wakes the dispatchers. */
COORD_HIDDEN void coord_hq_push(struct coord *c, struct coord_closure *cl);
/* Take up to @max for @d: hinted closures and the main queue, in order. */
COORD_HIDDEN unsigned coord_hq_take(struct coord_dispatcher *d, struct coord_closure **out,
				    unsigned max);
/* Is there hinted work @d may take (H2)?  @d's thread only. */
COORD_HIDDEN bool coord_hq_work(struct coord_dispatcher *d);
/* Cancel hinted closures of a generation older than @g (S3). */
COORD_HIDDEN void coord_hq_drain(struct coord *c, uint64_t g);
/* The recovery thread: a worker was dropped (H3); back: dispatch.h. */
COORD_HIDDEN void coord_hq_worker_dropped(struct coord *c, unsigned w);
COORD_HIDDEN void coord_hq_destroy(struct coord *c);

/* queue.c and cancel.c, for sched.c: pop the main queue (ring and overflow,
 * without waiting), is it empty, cancel or fail a queued closure, wake
 * whoever takes after a seq_cst RMW made work visible (E3). */
COORD_HIDDEN unsigned coord_queue_pop(struct coord *c, struct coord_closure **out, unsigned max);
COORD_HIDDEN bool coord_main_queue_empty(struct coord *c);
COORD_HIDDEN void coord_cancel_queued(struct coord *c, struct coord_closure *cl);
COORD_HIDDEN void coord_fail_queued(struct coord *c, struct coord_closure *cl, int code, int worker,
				    const char *msg);
COORD_HIDDEN void coord_queue_wake(struct coord *c);

/* coord_stagger_ns() - the start delay of worker @i (S13). */
COORD_HIDDEN uint64_t coord_stagger_ns(const struct coord_opts *o, unsigned i);

/* --- recovery (runtime/core/recovery.c) ----------------------------------------- */

struct coord_recovery;
/* Start the recovery thread if the transport can reconnect; 0 or an error. */
COORD_HIDDEN int coord_recovery_start(struct coord *c, struct coord_error *err);
/* Stop and join it (before the transport stops). */
COORD_HIDDEN void coord_recovery_stop(struct coord *c);
/* Its struct stays for coord_worker_lost() until coord_recovery_free()
 * (after the transport stopped: no loop reads it then, recovery.c R3). */
COORD_HIDDEN void coord_recovery_free(struct coord *c);

/*
 * coord_transports[] - the transports coord_create() chooses from by
 * name (opts.transport), ended by a NULL name: the one table that knows
 * them all, transport/transports.c, above every transport.
 */
struct coord_transport {
	const char *name;
	const struct coord_tp_ops *tp;
	const struct coord_ps_ops *ps;
	/* A transport in a provider (rdma, tp NULL): its ops, loaded by
	 * coord_create() on first use; 0, or -errno with @err saying what
	 * is missing. */
	int (*load)(const struct coord_tp_ops **tp, struct coord_error *err);
};
extern const struct coord_transport coord_transports[];

/* Each transport's ops, for coord_transports[] only (rdma's are in the
 * provider: transport/rdma_provider.h). */
extern const struct coord_tp_ops coord_tp_inproc;
extern const struct coord_tp_ops coord_tp_tcp;

#endif /* COORD_RUNTIME_INTERNAL_H */
