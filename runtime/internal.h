/* SPDX-License-Identifier: MIT */
/*
 * runtime/internal.h - the coordinator's private structures and the dispatch
 * interface that the transports in transport/ drive.
 *
 * A closure is one scheduled call; its RemoteValue lives inline in it, so a
 * `struct coord_rv *` handed to the user is a `struct coord_closure *`.
 *
 * Lifetime of a closure (references in @refs):
 *   schedule:  taken from the pool, refs = 1 (runtime) + 1 if the caller wants
 *              the RemoteValue.  Queued on the ring (or the overflow FIFO).
 *   dispatch:  a dispatcher pops it (counted in its inflight), runs
 *              or sends it, and completes it: result, one state exchange,
 *              FUTEX_WAKE only if a fetcher parked.  Then the runtime ref goes.
 *   cancel:    a queued closure of an old generation is made CANCELLED by
 *              whoever pops it (canceller or dispatcher); its runtime ref is
 *              dropped through call_rcu (epoch reclamation).
 *   free:      refs == 0: buffers back to their size classes, the closure
 *              back to the pool.  Pool memory is type-stable: a stale pointer
 *              reads a recycled closure, never unmapped memory, and the
 *              closure id (index, reuse count) tells the two apart.
 *
 * What the epoch deferral protects, and what it does not (yet).  In-process,
 * only the thread that popped a closure ever touches it until it is final,
 * so no reader can race a recycle.  The networked transports resolve result
 * frames by closure id (pool index + reuse count): a late frame for a closure
 * that was cancelled, or put back and finished elsewhere, must not complete
 * the object's next life.  The rule they follow: look up and complete inside
 * urcu_bp_read_lock(), check the id and attempt, and complete with a CAS
 * from NOT_READY; every path that drops the runtime reference of a closure
 * that a transport may still resolve (cancel today; put-back and late-result
 * paths with the tcp transport) goes through call_rcu, so the object cannot
 * be recycled under such a reader.  coord_destroy() runs urcu_bp_barrier()
 * before it frees the pools.  A closure scheduled without a handle is not
 * made final at all when it succeeds (V4 in rv.c): no reader of its state
 * exists, and the transports complete only what they find in a slot they
 * own (tcp.c, rdma.c), so a late frame cannot complete it a second time.
 */
#ifndef COORD_RUNTIME_INTERNAL_H
#define COORD_RUNTIME_INTERNAL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include <urcu-bp.h>

#include <coord/coord.h>

#include "runtime/futex.h"
#include "runtime/pool.h"
#include "runtime/ring.h"
#include "runtime/util.h"

/* Free closures recycled through the pool's ring (pool.h) before its list:
 * enough for a few batches in flight, small enough to stay in cache. */
#define COORD_CLOSURE_CACHE 4096
#define CL_INLINE_ARGS 64
#define CL_INLINE_RES 64

/* RemoteValue state word: low bits one of enum coord_rv_state, plus
 * READY_ERR (READY with an error) and the parked-waiter bit. */
#define RV_STATE_MASK 0x7u
#define RV_READY_ERR 0x4u
#define RV_WAITER 0x8u
/* Dataflow (B1, coordinator.c DF1-DF3): a consumer may have registered on
 * this closure's dependents list (set with a CAS while NOT_READY; the final
 * CAS reads it for free, so a closure without consumers pays nothing). */
#define RV_DEPS 0x10u
/* This closure has inputs whose references it drops when it is final. */
#define RV_HASIN 0x20u

/* res_dirty bits (drop_contents resets what they name). */
#define CL_DIRTY_RES 0x1u  /* res_len or err_code written */
#define CL_DIRTY_DEPS 0x2u /* deps sealed: reset to NULL before reuse */
#define CL_HAS_IN 0x4u	   /* nin inputs in @in (read by the executor) */
#define CL_HINT 0x8u	   /* priority or affinity (B4): the hint fields are set */

/* The dependents list's sealed marker (never a valid edge address). */
#define COORD_DEPS_SEALED ((struct coord_dep *)(uintptr_t)1)

struct coord_pw;
struct coord;
struct coord_closure;

/*
 * One input edge of a consumer (B1): consumer->in[i] names input i; while
 * the input is NOT_READY the edge is linked on the input's dependents list
 * (@next), and the input's completer follows it to @consumer.
 */
struct coord_dep {
	struct coord_dep *next;
	struct coord_closure *consumer;
	struct coord_closure *input;
};

/*
 * Layout: the first cache line holds everything schedule() writes and the
 * worker reads and writes for a closure with up to 8 argument bytes, no
 * per-worker arguments and no result (inline_args begins in it), so such a
 * closure moves between the producer's and the worker's caches as one line.
 * The result fields are left clean by the previous life (see
 * coord_closure_drop_contents()) instead of being rewritten by schedule().
 */
struct coord_closure {
	/* RemoteValue (S7): the state word and the references. */
	_Atomic uint32_t state;
	_Atomic uint32_t refs;
	/* Written by schedule before the push (published by the ring's R1). */
	uint32_t fn;
	uint32_t args_len;
	uint32_t attempt; /* 1 + put-backs (B8); owner of the closure writes */
	uint32_t reuse;	  /* times this object was handed out */
	uint8_t args_cls;
	uint8_t res_cls;
	uint8_t npw;
	uint8_t res_dirty; /* CL_DIRTY_* / CL_HAS_IN: drop_contents cleans */
	uint32_t idx;	   /* pool index, fixed for the object's life */
	uint64_t gen;	   /* cancellation generation, taken when queued (S3) */
	uint64_t id;	   /* reuse << 32 | pool index: coord_rv_id() */
	void *args;
	char inline_args[CL_INLINE_ARGS];

	/* Result fields, written by the completer before its release CAS of
	 * @state and read after an acquire load. */
	uint32_t res_len;
	int err_code;
	void *res; /* the value, or the error message (NUL-terminated) */
	int err_cause;
	int err_worker;

	/* Fixed for the object's life, or off the fast path. */
	uint64_t t_sched, t_take; /* sampled closures only (coord_sampled()) */
	struct coord *c;
	struct coord_pw *pw[COORD_MAX_PW];
	struct coord_closure *next; /* overflow FIFO link */
	struct rcu_head rcu;

	/* Dataflow (B1; coordinator.c DF1-DF3), off the fast path. */
	_Atomic(struct coord_dep *) deps; /* dependents; NULL when handed out */
	_Atomic uint32_t pending;	  /* inputs not final yet, + 1 while registering */
	uint32_t nin;			  /* inputs (CL_HAS_IN) */
	struct coord_dep *in;		  /* nin edges, from c->bufs (in_cls) */
	uint8_t in_cls;

	/* Hints (B4, runtime/sched.c), meaningful when CL_HINT is set; the
	 * hint queue links closures through @next. */
	uint8_t lvl;	/* priority + 1: 0..3 */
	bool pref;	/* affinity preferred, not strict */
	uint32_t aff;	/* affinity set: 0 any, 1..N one worker, then named */
	int32_t target; /* the worker a take chose for it, or -1: any */
	uint64_t t_q;	/* when it was queued (aging, fallback) */

	char inline_res[CL_INLINE_RES];
};

/* The worker a take chose for @cl (B4), or -1: the transport places it. */
static inline int coord_closure_target(const struct coord_closure *cl)
{
	return unlikely(cl->res_dirty & CL_HINT) ? cl->target : -1;
}

/* A registered function or resource creator. */
struct coord_fn_entry {
	char name[COORD_FN_NAME_MAX];
	coord_fn_t fn;
	coord_res_create_t create;
	coord_res_destroy_t destroy;
};

struct coord_registry {
	struct coord_fn_entry *fns;
	uint32_t n, cap;
};

/* One dispatcher's link of a released per-worker resource (runtime/pw.c). */
struct coord_pw_node {
	struct coord_pw_node *next;
	struct coord_pw *pw;
};

/* A per-worker resource handle (S9).  Immutable after creation but refs. */
struct coord_pw {
	struct coord *c;
	uint64_t uid;	  /* unique for the coordinator's life */
	uint32_t creator; /* registry index of the creator */
	uint32_t len;
	void *args;
	_Atomic uint32_t refs;
	/* S7 for resources: made[w] = worker w's losses + 1 when a closure
	 * using it last ran there, so a loss makes it ABORTED until it is made
	 * again (coord_per_worker_state()).  Written by dispatchers. */
	unsigned nworkers;
	_Atomic uint64_t *made;
	/* Release (runtime/pw.c P1-P4): when @refs reaches 0, node[i] goes on
	 * dispatcher i's pw_dead list; @pending counts the dispatchers that
	 * have not taken theirs yet, and the last one frees @pw. */
	struct coord_pw_node *node;
	_Atomic uint32_t pending;
};

/* Worker states: enum coord_worker_state in coord.h; transitions are in
 * runtime/recovery.c (R1). */

/* Metrics sampling (B7): one closure in 64 is timed (by pool index and
 * use count, so fresh pools and reused objects are both sampled). */
#define COORD_SAMPLE_MASK 63u
static inline bool coord_sampled(const struct coord_closure *cl)
{
	return ((cl->idx + cl->reuse) & COORD_SAMPLE_MASK) == 0;
}

/*
 * One dispatcher's metrics: written only by that dispatcher's thread
 * (relaxed load + store, no RMW), read by coord_metrics() from any thread;
 * put_back (also from a stopping transport) uses an RMW.
 */
struct coord_dmetrics {
	_Atomic uint64_t finished, failed, put_back;
	_Atomic uint64_t exec[COORD_HIST_BUCKETS], rt[COORD_HIST_BUCKETS];
};

/* The coordinator's view of one worker. */
struct coord_worker {
	_Atomic uint64_t executed __cacheline_aligned; /* completed here (metrics) */
	struct coord *c __cacheline_aligned;
	int index;
	_Atomic int state;		     /* enum coord_worker_state (runtime/recovery.c R1) */
	uint64_t start_at_ns;		     /* staggered start (S13) */
	void *tp;			     /* the transport's per-worker state */
	_Atomic uint64_t losses, recoveries; /* metrics */
	/* The recovery thread's own bookkeeping (recovery.c). */
	bool rec_active, rec_busy;
	unsigned rec_tries;
	uint64_t rec_down_ns, rec_next_ns;
};

/*
 * A dispatcher: a thread (or event loop) that takes closures from the queue
 * and gets them run, for one worker (inproc) or many (tcp).  @inflight
 * counts the closures it took and has not finished, cancelled or put back;
 * the canceller sums it over all dispatchers (C2).
 */
struct coord_dispatcher {
	_Atomic uint64_t inflight __cacheline_aligned;
	struct coord *c __cacheline_aligned;
	unsigned index;
	void *tp; /* the transport's per-dispatcher state */
	/* S9 (runtime/pw.c): per-worker resources whose last handle was put,
	 * for this dispatcher's workers to destroy: pushed by any thread,
	 * taken (exchanged) by this dispatcher's thread into @pw_taken, which
	 * is that thread's alone. */
	_Atomic(struct coord_pw_node *) pw_dead;
	struct coord_pw_node *pw_taken;
	/* B4 (runtime/sched.c H2), this dispatcher's thread only: the hint
	 * version it last found nothing at, when to look again regardless,
	 * workers of ours that had closures waiting but no room. */
	uint64_t hq_seen, hq_due;
	bool any_blocked;
	unsigned nblk;
	unsigned *blk;
	int32_t *room;
	void *cands;
	/* C9 (coordinator.c), used only when @defer_fin is set (by a
	 * transport whose dispatcher waits only in coord_dispatch_take()):
	 * @fin_done counts the closures this dispatcher finished, ever (its
	 * thread writes it, fin_add()); @fin_taken how many of them were taken
	 * off c->outstanding (a CAS by this thread or by a caller that settles
	 * them, fin_settle()).  The difference is final but still counted. */
	bool defer_fin;
	_Atomic uint64_t fin_done;
	_Atomic uint64_t fin_taken;
	/* How many closures coord_dispatch_take() last returned (idle_wait()
	 * in coordinator.c).  This dispatcher's thread only. */
	unsigned last_take;
	/* Q2 (coordinator.c): closures of its own that this dispatcher makes
	 * from entries carried inline in the ring (@nlocal of them, one per
	 * place in a take; none unless c->inline_q), and the sequence their
	 * ids take.  This dispatcher's thread only. */
	struct coord_closure *local;
	unsigned nlocal;
	uint32_t local_seq;
	/* Q3 (coordinator.c): set by a transport whose dispatcher thread runs
	 * the functions itself (inproc, with @defer_fin): inline entries run
	 * inside coord_dispatch_take() in this worker's environment, popped
	 * into @ents (@nlocal of them).  This dispatcher's thread only. */
	struct coord_exec_env *exec_env;
	struct coord_ring_ent *ents;
	struct coord_dmetrics m __cacheline_aligned;
};

struct coord_tp_ops;

/*
 * A stash of free closures for schedule() (coordinator.c, C10): filled from
 * the pool a batch at a time, with the batch's first lines prefetched for
 * writing at once, so the one-at-a-time path pays one overlapped round of
 * misses per batch instead of one miss per call on a line the worker last
 * had.  A producer thread uses the stash its slot number names, while it
 * holds @busy; one that finds it busy takes from the pool directly.
 */
#define COORD_PSTASH 16	      /* closures per stash */
#define COORD_PSTASH_SLOTS 4u /* stashes per coordinator */
struct coord_pstash {
	_Atomic uint32_t busy __cacheline_aligned; /* owner flag (C10) */
	uint32_t n;
	/* C1: closures its holders counted as outstanding (only grows). */
	_Atomic uint64_t added;
	struct coord_closure *cl[COORD_PSTASH];
};

struct coord {
	/* Hot, written by producers (C1: with pstash[].added, the number of
	 * closures scheduled and not final; see outstanding_total()). */
	_Atomic uint64_t outstanding __cacheline_aligned;
	/* Read on every push, written only by the canceller. */
	_Atomic uint64_t gen __cacheline_aligned;
	/* S3 error slot: EMPTY -> WRITING -> SET -> TAKEN -> EMPTY. */
	_Atomic uint32_t err_state __cacheline_aligned;
	struct coord_error err;

	struct coord_ring ring;
	/* The overflow FIFO (coordinator.c): put-backs and, when unbounded,
	 * what does not fit in the ring.  Off the fast path. */
	_Atomic int64_t ov_count __cacheline_aligned;
	_Atomic(struct coord_closure *) ov_in;
	pthread_mutex_t ov_lock; /* guards ov_out */
	struct coord_closure *ov_out;
	bool unbounded;
	/* Q2: small closures without a handle travel inline in the ring
	 * (the inproc transport: its dispatchers take them into their own
	 * closures, d->local). */
	bool inline_q;

	struct coord_ec not_empty __cacheline_aligned; /* dispatchers sleep */
	_Atomic uint32_t loop_sleepers;		       /* event loops asleep in the kernel */
	_Atomic bool unavailable;		       /* no worker left (transport) */
	struct coord_ec not_full;		       /* schedule sleeps (S1) */
	struct coord_ec idle;			       /* join: outstanding == 0 or error */
	struct coord_ec drained;		       /* canceller: inflight == 0 */
	_Atomic uint32_t stopping;
	/* After coord_destroy() with RemoteValues still held (see there). */
	_Atomic bool dead;
	_Atomic uint64_t held_after_destroy;

	struct coord_pool *closures;
	struct coord_bufs bufs;
	const struct coord_registry *reg;
	struct coord_opts opts;
	_Atomic uint64_t pw_next_uid;
	/* S9 (runtime/pw.c): per-worker handles not yet freed; threads in a
	 * release's wake, and whether such wakes are over (coord_destroy()). */
	_Atomic uint64_t pw_live;
	_Atomic uint32_t pw_wakers;
	_Atomic bool pw_closed;

	unsigned nworkers;
	struct coord_worker *workers;
	unsigned ndisp;
	struct coord_dispatcher *disp;
	const struct coord_tp_ops *tp;
	void *tp_state;
	const struct coord_spec *spec;	 /* borrowed: valid only inside coord_create() */
	struct coord_ps *ps;		 /* parameter servers (runtime/ps.h), or NULL */
	struct coord_recovery *recovery; /* the slow path, or NULL (inproc) */
	_Atomic uint64_t cancelled;	 /* metrics (B7) */
	_Atomic uint64_t dep_failed;	 /* consumers failed by an input (B1, B7) */
	_Atomic bool dataflow;		 /* a consumer was scheduled (B1, DF3) */
	uint64_t created_ns;
	/* Free closures for producers (C10). */
	struct coord_pstash pstash[COORD_PSTASH_SLOTS];
	/* W1 (rv.c): moving average of recent RemoteValue waits, the base of
	 * the adaptive spin, and the waits and parks counted (B7); written by
	 * every fetch that had to wait. */
	_Atomic uint64_t wait_avg_ns __cacheline_aligned;
	_Atomic uint64_t waits, parked;
	/* B4 hints (runtime/sched.c H1, H2): the default path only reads
	 * hq_count; hinted schedules and takes write both. */
	_Atomic int64_t hq_count __cacheline_aligned;
	_Atomic uint64_t hq_ver;
	_Atomic(struct coord_hq *) hq;
};

static inline struct coord_closure *rv_cl(const struct coord_rv *rv)
{
	return (struct coord_closure *)rv;
}

/* --- the dispatch interface (runtime/coordinator.c) ------------------------ */

/*
 * coord_dispatch_take() - wait for work and take up to @max runnable
 * closures into @out.  Spins for opts.spin_ns, then sleeps.  Closures of an
 * old generation are cancelled here and not returned.  Each returned closure
 * counts in @d->inflight until it is finished, cancelled or put back.
 * Return: how many; 0 only when the coordinator is stopping or @d has
 * per-worker resources to release (coord_dispatch_pw_pending()).
 * Concurrency: the thread of @d only.
 */
COORD_HIDDEN unsigned coord_dispatch_take(struct coord_dispatcher *d, struct coord_closure **out,
					  unsigned max);
/* coord_dispatch_try_take() - the same without waiting: 0 when there is none. */
COORD_HIDDEN unsigned coord_dispatch_try_take(struct coord_dispatcher *d,
					      struct coord_closure **out, unsigned max);

/*
 * coord_dispatch_complete() - make @cl final with @code (0 = value already
 * set with coord_closure_result_buf(), else an error whose message, if any,
 * is @msg), run on worker @worker.  A failure records the coordinator's
 * first error (S3).  Does not drop counts: coord_dispatch_finish() does.
 */
COORD_HIDDEN void coord_dispatch_complete_slow(struct coord_dispatcher *d, struct coord_closure *cl,
					       int worker, int code, int cause, const char *msg);
static inline void coord_dispatch_complete(struct coord_dispatcher *d, struct coord_closure *cl,
					   int worker, int code, int cause, const char *msg)
{
	/* V4 (rv.c): a closure without a handle that succeeded, with no
	 * inputs, per-worker arguments or metrics sample, has nothing to make
	 * final (see coord_dispatch_complete_slow()).  Relaxed: refs of such a
	 * closure is 0 for its whole life and written by nobody (V4). */
	if (likely(code == 0) && !cl->npw && !(cl->res_dirty & CL_HAS_IN) && !coord_sampled(cl) &&
	    atomic_load_explicit(&cl->refs, memory_order_relaxed) == 0)
		return;
	coord_dispatch_complete_slow(d, cl, worker, code, cause, msg);
}

/*
 * Failure classes (typed, never by message): a lost connection or a missed
 * heartbeat is a worker failure (the transport puts the closures back); a
 * result with code COORD_EUNAVAILABLE and cause COORD_CAUSE_PS(t) > 0 is a
 * failure of ps task t (the function could not reach it); any other error
 * is the application's (fatal, S3).
 */
#define COORD_CAUSE_PS(task) ((int)(task) + 1)

/*
 * coord_dispatch_ps_retry() - S11: is this outcome a ps failure to take as
 * transient?  Counts it against its ps task; true for the first
 * opts.ps_failure_threshold of them: the caller puts @cl back instead of
 * completing it.
 */
COORD_HIDDEN bool coord_dispatch_ps_retry_slow(struct coord_dispatcher *d, struct coord_closure *cl,
					       int code, int cause);
static inline bool coord_dispatch_ps_retry(struct coord_dispatcher *d, struct coord_closure *cl,
					   int code, int cause)
{
	return unlikely(code == COORD_EUNAVAILABLE) &&
	       coord_dispatch_ps_retry_slow(d, cl, code, cause);
}

/* Q2 (coordinator.c): a dispatcher's own closure, made from an inline ring
 * entry (pool indices stay far below this). */
#define CL_IDX_LOCAL 0x80000000u
static inline bool coord_closure_local(const struct coord_closure *cl)
{
	return cl->idx >= CL_IDX_LOCAL;
}

/* coord_dispatch_stale() - @cl belongs to a cancelled generation: do not
 * start it; coord_dispatch_cancel() it instead (S3). */
static inline bool coord_dispatch_stale(struct coord *c, struct coord_closure *cl)
{
	/* Relaxed: an early-out (C5); C2 is what guarantees nothing old runs
	 * after the canceller returns. */
	return cl->gen < atomic_load_explicit(&c->gen, memory_order_relaxed);
}
/* coord_dispatch_cancel() - make a taken @cl CANCELLED and retire it,
 * inflight count included.  Every taken closure ends in exactly one of
 * coord_dispatch_finish() (after complete), this, or put back. */
COORD_HIDDEN void coord_dispatch_cancel(struct coord_dispatcher *d, struct coord_closure *cl);

/* coord_dispatch_finish() - @n closures taken by @d are final: drop inflight,
 * outstanding and their runtime references; wake joiners/cancellers.
 * @w (may be NULL) is credited with them in the metrics. */
COORD_HIDDEN void coord_dispatch_finish(struct coord_dispatcher *d, struct coord_worker *w,
					struct coord_closure **cls, unsigned n);

/*
 * coord_dispatch_put_back() - S2/S10: @n closures taken by @d did not run to
 * completion (their worker was lost): each goes back on the queue with its
 * attempt number raised (B8), unless its generation was cancelled meanwhile
 * (then it is cancelled).  Their RemoteValues stay NOT_READY.
 */
COORD_HIDDEN void coord_dispatch_put_back(struct coord_dispatcher *d, struct coord_closure **cls,
					  unsigned n);

/*
 * coord_dispatch_due() - B4: when this dispatcher should look at the queue
 * again even if nothing is pushed (a preferred closure's fallback, a
 * staggered start), in coord_now_ns() time; 0: no such time.  Event loops
 * that sleep in the kernel bound their sleep by it.
 */
COORD_HIDDEN uint64_t coord_dispatch_due(struct coord_dispatcher *d);

/* --- releasing per-worker resources (runtime/pw.c, S9) --------------------- */

/* coord_pw_retire() - the last reference to @pw was dropped: have every
 * worker destroy its component, then free @pw.  Any thread. */
COORD_HIDDEN void coord_pw_retire(struct coord_pw *pw);
/*
 * coord_dispatch_pw_pending() - has @d resources to release (uids to take
 * with coord_dispatch_pw_take())?  A look for @d's thread at the start of a
 * round and before it runs or sends a batch it took (P3 in pw.c).
 */
static inline bool coord_dispatch_pw_pending(struct coord_dispatcher *d)
{
	/* Relaxed: a look; the exchange in coord_dispatch_pw_take() orders
	 * (P3: a node pushed before a closure @d popped is seen here). */
	return unlikely(d->pw_taken != NULL ||
			atomic_load_explicit(&d->pw_dead, memory_order_relaxed) != NULL);
}
/* coord_dispatch_pw_take() - up to @max uids of resources @d's workers must
 * destroy now (and no closure of theirs runs before); 0: none.  @d's thread. */
COORD_HIDDEN unsigned coord_dispatch_pw_take(struct coord_dispatcher *d, uint64_t *uids,
					     unsigned max);
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

/* --- the hint queue (runtime/sched.c, B4) ---------------------------------- */

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
/* The recovery thread: a worker came back / was dropped (H2, H3). */
COORD_HIDDEN void coord_hq_worker_up(struct coord *c);
COORD_HIDDEN void coord_hq_worker_dropped(struct coord *c, unsigned w);
COORD_HIDDEN void coord_hq_destroy(struct coord *c);

/* coordinator.c, for sched.c: pop the main queue (ring and overflow,
 * without waiting), is it empty, cancel or fail a queued closure, wake
 * whoever takes after a seq_cst RMW made work visible (E3). */
COORD_HIDDEN unsigned coord_queue_pop(struct coord *c, struct coord_closure **out, unsigned max);
COORD_HIDDEN bool coord_main_queue_empty(struct coord *c);
COORD_HIDDEN void coord_cancel_queued(struct coord *c, struct coord_closure *cl);
COORD_HIDDEN void coord_fail_queued(struct coord *c, struct coord_closure *cl, int code, int worker,
				    const char *msg);
COORD_HIDDEN void coord_queue_wake(struct coord *c);

/* runtime/rv.c: make @cl final with state @st (a RemoteValue state, or
 * READY|RV_READY_ERR); false if it already was (late result: dropped).
 * Then, if the old word says so, drops @cl's inputs and hands its
 * dependents on (coord_deps_final()). */
COORD_HIDDEN bool coord_rv_set_final(struct coord_closure *cl, uint32_t st);
/* runtime/coordinator.c: the dataflow half of a final transition (B1):
 * @old is the state word the final CAS replaced (RV_DEPS / RV_HASIN). */
COORD_HIDDEN void coord_deps_final(struct coord_closure *cl, uint32_t old);
/* Drop one reference; the last one recycles the closure. */
COORD_HIDDEN void coord_closure_put(struct coord_closure *cl);
/* The two halves of coord_closure_put(), for batched returns: unref says
 * whether that was the last reference; drop_contents releases the buffers
 * and per-worker handles before the caller returns the object to the pool. */
COORD_HIDDEN bool coord_closure_unref(struct coord_closure *cl);
/* The last put of a closure outliving its coordinator (c->dead). */
COORD_HIDDEN void coord_closure_release_dead(struct coord_closure *cl);
COORD_HIDDEN void coord_closure_drop_contents(struct coord_closure *cl);

/* coord_closure_result_buf() - room for @len result bytes in @cl. */
COORD_HIDDEN void *coord_closure_result_buf(struct coord_closure *cl, size_t len);

/* coord_stagger_ns() - the start delay of worker @i (S13). */
COORD_HIDDEN uint64_t coord_stagger_ns(const struct coord_opts *o, unsigned i);
/* coord_env_int() - a non-negative integer from the environment variable
 * @name, else @def (a value that is not one is logged and ignored). */
COORD_HIDDEN int coord_env_int(const char *name, int def);

/* --- worker-side execution (runtime/exec.c), shared by all transports ----- */

/* One worker's table of per-worker resources, indexed by coord_pw uid. */
struct coord_res_slot {
	uint64_t uid;
	uint32_t creator;
	void *res;
	int code; /* 0 made, <0 creation failed (cached: later users fail too) */
	char msg[COORD_ERRMSG_LEN];
};

struct coord_exec_env {
	const struct coord_registry *reg;
	int worker;
	struct coord_ps *ps; /* the ps tasks its functions reach (runtime/ps.h) */
	struct coord_res_slot *res;
	uint32_t nres, capres;
};

/* A per-worker argument as a worker sees it: which resource, made how. */
struct coord_pw_ref {
	uint64_t uid;
	uint32_t creator; /* registry index of the creator on this worker */
	uint32_t len;
	const void *args;
};

/*
 * The inputs of a call (B1) as a worker reads them: input @i's bytes from
 * @src, which is a closure (inproc: the values in place) or a REQ record's
 * packed input section (transport/wire.c); struct coord_in_cursor and
 * coord_input_get_t are in runtime/util.h, shared with the wire layer.
 */
/* Input @i of consumer closure @src (a coord_input_get_t; cursor unused). */
COORD_HIDDEN const void *coord_closure_input(const void *src, uint32_t i, uint32_t *len,
					     struct coord_in_cursor *cur);

/* One call to run on a worker, whatever carried it there. */
struct coord_exec_call {
	uint64_t id;
	uint32_t fn; /* registry index on this worker */
	uint32_t attempt;
	const void *args;
	uint32_t len;
	unsigned npw;
	struct coord_pw_ref pw[COORD_MAX_PW];
	uint32_t nin; /* inputs (B1), read through in_get(in_src, ...) */
	coord_input_get_t in_get;
	const void *in_src;
};

/* Where a function's result bytes go: a closure (inproc) or a frame. */
typedef void *(*coord_result_buf_t)(void *sink, size_t len);

struct coord_ctx {
	struct coord_exec_env *env;
	const struct coord_exec_call *call;
	coord_result_buf_t result_buf;
	void *sink;
	void *pw[COORD_MAX_PW];
	int ps_failed; /* COORD_CAUSE_PS(task) of a ps it could not reach, or 0 */
	struct coord_in_cursor in_cur;
	int has_msg;
	char msg[COORD_ERRMSG_LEN];
};

/*
 * coord_exec() - run @call on @env's worker: make missing per-worker
 * resources first (S9), then call the function; its result goes through
 * @result_buf(@sink, len).  Returns the function's code, or COORD_EINPUT
 * with *cause and @ctx->msg set, or COORD_ENOFN for an index that is not a
 * function here.  The common call (a known function, no per-worker
 * arguments) runs inline here; the rest in coord_exec_slow().
 */
COORD_HIDDEN int coord_exec_slow(struct coord_exec_env *env, const struct coord_exec_call *call,
				 coord_result_buf_t result_buf, void *sink, struct coord_ctx *ctx,
				 int *cause);

static inline void coord_exec_ctx_init(struct coord_ctx *ctx, struct coord_exec_env *env,
				       const struct coord_exec_call *call,
				       coord_result_buf_t result_buf, void *sink)
{
	ctx->env = env;
	ctx->call = call;
	ctx->result_buf = result_buf;
	ctx->sink = sink;
	ctx->has_msg = 0;
	ctx->ps_failed = 0;
	ctx->in_cur.i = 0;
	ctx->in_cur.p = NULL;
}

/* Call function @f of @call in @ctx, made by coord_exec_ctx_init(). */
static inline int coord_exec_run(coord_fn_t f, const struct coord_exec_call *call,
				 struct coord_ctx *ctx, int *cause)
{
	int r = f(ctx, call->args, call->len);

	if (likely(r >= 0))
		return 0;
	if (ctx->ps_failed) {
		/* It failed after a ps could not be reached: a ps failure
		 * (S11), whatever code the function passed on. */
		*cause = ctx->ps_failed;
		return COORD_EUNAVAILABLE;
	}
	return r;
}

static inline int coord_exec(struct coord_exec_env *env, const struct coord_exec_call *call,
			     coord_result_buf_t result_buf, void *sink, struct coord_ctx *ctx,
			     int *cause)
{
	const struct coord_registry *reg = env->reg;

	if (unlikely(call->npw || call->fn >= reg->n || !reg->fns[call->fn].fn))
		return coord_exec_slow(env, call, result_buf, sink, ctx, cause);
	coord_exec_ctx_init(ctx, env, call, result_buf, sink);
	*cause = 0;
	return coord_exec_run(reg->fns[call->fn].fn, call, ctx, cause);
}

/* coord_exec_res_release() - S9: destroy @env's component of resource @uid
 * (its destroy callback), if it has one. */
COORD_HIDDEN void coord_exec_res_release(struct coord_exec_env *env, uint64_t uid);
COORD_HIDDEN void coord_exec_env_fini(struct coord_exec_env *env);

/* --- transports ------------------------------------------------------------ */

/*
 * The transport ops table (rdma-core verbs_context_ops style).  A transport
 * owns its threads; they call the dispatch interface above.
 *   ndispatchers: how many dispatchers (c->disp[]) it drives.
 *   wake:  an event loop registered with coord_loop_sleep() must look at
 *          the queue again (called by schedule(); keep it cheap).
 *   start: connect/launch every worker of @c; 0 or -errno with @err.
 *   stop:  the coordinator is stopping (stopping == 1, dispatchers woken);
 *          join the transport's threads and free its state.
 */
struct coord_tp_ops {
	const char *name;
	unsigned (*ndispatchers)(const struct coord *c);
	int (*start)(struct coord *c, struct coord_error *err);
	void (*stop)(struct coord *c);
	void (*wake)(struct coord *c);
	/*
	 * reconnect: bring DOWN worker @w back: connect, handshake, and hand
	 * the connection to its dispatcher; 0 once the dispatcher may send to
	 * it, else an error in @err.  Called by the recovery thread only.
	 * NULL: this transport's workers never fail (no recovery thread).
	 */
	int (*reconnect)(struct coord *c, struct coord_worker *w, struct coord_error *err);
	/*
	 * room: B4: how many more closures dispatcher @d can send worker @w
	 * now: -1 if @d does not serve @w or @w cannot take any (not up, not
	 * started: S13), else its free slots (0: full).  @d's thread only.
	 * Two duties come with it (runtime/sched.c H2): when room goes from
	 * -1 to >= 0 for any reason but a start time (a connection installed
	 * again), call coord_hq_worker_up(); and place the closures a take
	 * targeted (coord_closure_target() >= 0) before the others, since
	 * the take counted on those workers' slots for them.
	 */
	int (*room)(struct coord_dispatcher *d, unsigned w);
	/*
	 * drive: a thread waiting for a result since @since (rv_wait())
	 * runs the transport's I/O itself, for as long as it would spin: a
	 * round or more of a dispatcher that nobody else runs right now,
	 * until a closure completes or *@until (which the transport may push
	 * out, to @since plus its own bound, while closures are in flight).
	 * False if it could not (every dispatcher busy): the caller then
	 * spins as usual.  NULL: the transport's threads do it all.
	 * Any thread; see transport/rdma.c "Driving".
	 */
	bool (*drive)(struct coord *c, uint64_t since, uint64_t *until);
};

/* --- recovery (runtime/recovery.c) ----------------------------------------- */

struct coord_recovery;
/* Start the recovery thread if the transport can reconnect; 0 or an error. */
COORD_HIDDEN int coord_recovery_start(struct coord *c, struct coord_error *err);
/* Stop and join it (before the transport stops). */
COORD_HIDDEN void coord_recovery_stop(struct coord *c);
/*
 * coord_worker_lost() - a transport lost @w (after putting its closures
 * back): UP -> DOWN once, logged with @why, and the recovery thread wakes.
 * Any thread.
 */
COORD_HIDDEN void coord_worker_lost(struct coord *c, struct coord_worker *w, const char *why);

extern const struct coord_tp_ops coord_tp_inproc;
extern const struct coord_tp_ops coord_tp_tcp;
/* transport/rdma.c, or transport/rdma_off.c in a build without verbs. */
extern const struct coord_tp_ops coord_tp_rdma;

/*
 * Event loops that sleep in the kernel (io_uring) rather than on the queue's
 * futex: coord_loop_sleep() registers the caller and returns true if it may
 * sleep (the queue is still empty); producers then call ops->wake().  After
 * the sleep, coord_loop_wake_done().
 */
COORD_HIDDEN bool coord_loop_sleep(struct coord_dispatcher *d);
/* coord_queue_size() - closures waiting (a snapshot). */
COORD_HIDDEN uint64_t coord_queue_size(struct coord *c);
COORD_HIDDEN void coord_loop_wake_done(struct coord *c);
/* True while this thread is in a user's schedule() pushing its closure:
 * ops->wake() may then do the transport's work on it (transport/rdma.c D5). */
COORD_HIDDEN bool coord_wake_in_schedule(void);

/* coord_report_unavailable() - the transport lost its last worker: the next
 * caller gets COORD_EUNAVAILABLE (and schedule() refuses from now on). */
COORD_HIDDEN void coord_report_unavailable(struct coord *c, int worker, const char *msg);

#endif /* COORD_RUNTIME_INTERNAL_H */
