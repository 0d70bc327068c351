/* SPDX-License-Identifier: MIT */
/*
 * runtime/core/dispatch.h - what a transport sees of the core: its workers
 * and dispatchers, the dispatch interface it drives (take, complete,
 * finish, cancel, put back), the ops table it provides (struct
 * coord_tp_ops) with its capability flags, the event-loop sleep protocol,
 * and the reports it makes (a worker lost, none left, stop), and the part
 * of struct coord it may read (struct coord_view).  A transport includes
 * this header and nothing of runtime/core/internal.h (docs/layout.md;
 * tools/check-includes.sh lists the files not there yet).
 */
#ifndef COORD_RUNTIME_CORE_DISPATCH_H
#define COORD_RUNTIME_CORE_DISPATCH_H

#include "runtime/core/closure.h"
#include "runtime/core/exec.h"

/*
 * One dispatcher's metrics: written only by that dispatcher's thread
 * (relaxed load + store, no RMW), read by coord_metrics() from any thread;
 * put_back (also from a stopping transport) uses an RMW.
 */
struct coord_dhist {
	_Atomic uint64_t sum, max;
	_Atomic uint64_t b[COORD_HIST_BUCKETS];
};

struct coord_dmetrics {
	_Atomic uint64_t finished, failed, put_back;
	struct coord_dhist exec, rt;
};

/* The coordinator's view of one worker. */
struct coord_worker {
	_Atomic uint64_t executed __cacheline_aligned; /* completed here (metrics) */
	struct coord *c __cacheline_aligned;
	int index;
	_Atomic int state;    /* enum coord_worker_state (runtime/core/recovery.c R1) */
	uint64_t start_at_ns; /* staggered start (S13) */
	void *tp;	      /* the transport's per-worker state */
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
	/* S9 (runtime/core/pw.c): per-worker resources whose last handle was
	 * put, for this dispatcher's workers to destroy: pushed by any thread,
	 * taken (exchanged) by this dispatcher's thread into @pw_taken, which
	 * is that thread's alone. */
	_Atomic(struct coord_pw_node *) pw_dead;
	struct coord_pw_node *pw_taken;
	/* B4 (runtime/core/sched.c H2), this dispatcher's thread only: the hint
	 * version it last found nothing at, when to look again regardless,
	 * workers of ours that had closures waiting but no room. */
	uint64_t hq_seen, hq_due;
	bool any_blocked;
	unsigned nblk;
	unsigned *blk;
	int32_t *room;
	void *cands;
	/* C9 (coord_pvt.h), used only when @defer_fin is set (by a
	 * transport whose dispatcher waits only in coord_dispatch_take()):
	 * @fin_done counts the closures this dispatcher finished, ever (its
	 * thread writes it, fin_add()); @fin_taken how many of them were taken
	 * off c->outstanding (a CAS by this thread or by a caller that settles
	 * them, fin_settle()).  The difference is final but still counted. */
	bool defer_fin;
	_Atomic uint64_t fin_done;
	_Atomic uint64_t fin_taken;
	/* How many closures coord_dispatch_take() last returned (idle_wait()
	 * in dispatch.c).  This dispatcher's thread only. */
	unsigned last_take;
	/* Q2 (inline.c): closures of its own that this dispatcher makes
	 * from entries carried inline in the ring (@nlocal of them, one per
	 * place in a take; none unless c->inline_q), and the sequence their
	 * ids take.  This dispatcher's thread only. */
	struct coord_closure *local;
	unsigned nlocal;
	uint32_t local_seq;
	/* Q3 (inline.c): set by a transport whose dispatcher thread runs
	 * the functions itself (inproc, with @defer_fin): inline entries run
	 * inside coord_dispatch_take() in this worker's environment, popped
	 * into @ents (@nlocal of them).  This dispatcher's thread only. */
	struct coord_exec_env *exec_env;
	struct coord_ring_ent *ents;
	/* RL1 (dispatch.c): closures whose runtime reference
	 * coord_dispatch_complete() dropped at once, in the order completed
	 * (room for @nlocal; NULL: none are); the finish that follows skips
	 * them.  This dispatcher's thread only. */
	struct coord_closure **released;
	unsigned nreleased;
	struct coord_dmetrics m __cacheline_aligned;
};

/*
 * struct coord_view - what a transport may read of its coordinator: the
 * head of struct coord (runtime/core/internal.h), reached by coord_view().
 * Set by coord_create() before ops->start and constant after, except:
 *   @gen       the cancellation generation (the canceller's, C2/C3 in
 *              runtime/core/coord_pvt.h): read it through
 *              coord_dispatch_stale();
 *   @stopping  set once by coord_stop_dispatchers() (relaxed: the wakes
 *              that follow order it), read relaxed in loops;
 *   @tp_state  the transport's own, written by its start and stop;
 *   @spec      valid only inside ops->start (borrowed from coord_create());
 *   @ps        set up before ops->start, freed after ops->stop.
 * The fields are declared once, here, for both struct coord_view and
 * struct coord's anonymous copy.
 */
#define COORD_VIEW_FIELDS                                                                          \
	/* Read on every push, written only by the canceller. */                                   \
	_Atomic uint64_t gen __cacheline_aligned;                                                  \
	_Atomic uint32_t stopping;                                                                 \
	const struct coord_registry *reg;                                                          \
	struct coord_opts opts;                                                                    \
	unsigned nworkers;                                                                         \
	struct coord_worker *workers;                                                              \
	unsigned ndisp;                                                                            \
	struct coord_dispatcher *disp;                                                             \
	const struct coord_tp_ops *tp; /* the transport's own ops */                               \
	void *tp_state;                                                                            \
	const struct coord_spec *spec; /* borrowed: valid only inside coord_create() */            \
	struct coord_ps *ps;	       /* parameter servers (runtime/ps/ps.h), or NULL */

struct coord_ps;
struct coord_spec;
struct coord_view {
	COORD_VIEW_FIELDS
};

static inline struct coord_view *coord_view(struct coord *c)
{
	return (struct coord_view *)(void *)c;
}

static inline const struct coord_view *coord_cview(const struct coord *c)
{
	return (const struct coord_view *)(const void *)c;
}

/* coord_dispatch_stale() - @cl belongs to a cancelled generation: do not
 * start it; coord_dispatch_cancel() it instead (S3). */
static inline bool coord_dispatch_stale(struct coord *c, struct coord_closure *cl)
{
	/* Relaxed: an early-out (C5); C2 is what guarantees nothing old runs
	 * after the canceller returns. */
	return cl->gen < atomic_load_explicit(&coord_view(c)->gen, memory_order_relaxed);
}

/*
 * coord_stop_dispatchers() - set stopping and wake every dispatcher and
 * every thread sleeping until its worker's start time (coord_destroy(), or
 * a transport whose start failed half-way).  Any thread.
 */
COORD_HIDDEN void coord_stop_dispatchers(struct coord *c);

/*
 * struct coord_ps_ops - how a coordinator reaches its ps tasks (the
 * variables of include/coord/var.h), provided from above the core: in
 * this process (runtime/ps/ps.c) or over the network
 * (transport/psclient/ps_client.c).
 *   setup:   from coord_create(), before the transport starts (tcp tells
 *            the workers where they are): sets c->ps (NULL: none); 0 or an
 *            error in @err.
 *   destroy: free c->ps (NULL allowed), after the transport stopped.
 *   failure: S11: count one failure report of ps task @task; the count so
 *            far, or 0 if this kind of ps counts none.  Any thread.
 */
struct coord_ps_ops {
	int (*setup)(struct coord *c, const struct coord_spec *spec, struct coord_error *err);
	void (*destroy)(struct coord_ps *ps);
	uint32_t (*failure)(struct coord_ps *ps, unsigned task);
};

/* --- the dispatch interface (runtime/core/dispatch.c) --------------------- */

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

/* Q2 (inline.c): a dispatcher's own closure, made from an inline ring
 * entry (pool indices stay far below this). */
#define CL_IDX_LOCAL 0x80000000u
static inline bool coord_closure_local(const struct coord_closure *cl)
{
	return cl->idx >= CL_IDX_LOCAL;
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
 * coord_dispatch_give_back() - S2 placement: @n closures taken by @d were
 * never started (never sent, or kept from waiting behind a long one while
 * another worker could run them): back on the queue as put back, but as
 * they were (attempt unchanged, not counted as put back).
 */
COORD_HIDDEN void coord_dispatch_give_back(struct coord_dispatcher *d, struct coord_closure **cls,
					   unsigned n);

/*
 * coord_dispatch_due() - B4: when this dispatcher should look at the queue
 * again even if nothing is pushed (a preferred closure's fallback, a
 * staggered start), in coord_now_ns() time; 0: no such time.  Event loops
 * that sleep in the kernel bound their sleep by it.
 */
COORD_HIDDEN uint64_t coord_dispatch_due(struct coord_dispatcher *d);

/* --- releasing per-worker resources (runtime/core/pw.c, S9) ----------------- */

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
	unsigned caps; /* COORD_TP_*: what the core may do with this transport */
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
	 * Two duties come with it (runtime/core/sched.c H2): when room goes from
	 * -1 to >= 0 for any reason but a start time (a connection installed
	 * again), call coord_hq_worker_up(); and place the closures a take
	 * targeted (coord_closure_target() >= 0) before the others, since
	 * the take counted on those workers' slots for them.
	 */
	int (*room)(struct coord_dispatcher *d, unsigned w);
	/*
	 * cancel: S3: the generation moved on (an error was taken, or the
	 * coordinator stops): have the event loops tell their workers at once
	 * (a CANCEL frame, wire.h), so closures sent to them and not started
	 * are answered "not started" instead of run.  Any thread.  NULL: the
	 * transport's closures never wait in a worker's window (inproc).
	 */
	void (*cancel)(struct coord *c);
	/*
	 * drive: a thread waiting for a result since @since (rv_wait())
	 * runs the transport's I/O itself, for as long as it would spin: a
	 * round or more of a dispatcher that nobody else runs right now,
	 * until a closure completes or *@until (which the transport may push
	 * out, to @since plus its own bound, while closures are in flight).
	 * False if it could not (every dispatcher busy): the caller then
	 * spins as usual.  NULL: the transport's threads do it all.
	 * Any thread; see transport/rdma/rdma.c "Driving".
	 */
	bool (*drive)(struct coord *c, uint64_t since, uint64_t *until);
};

/*
 * coord_worker_lost() - a transport lost @w (after putting its closures
 * back): UP -> DOWN once, logged with @why, and the recovery thread wakes.
 * Any thread.
 */
COORD_HIDDEN void coord_worker_lost(struct coord *c, struct coord_worker *w, const char *why);
/* coord_hq_worker_up() - a worker came back (H2, runtime/core/sched.c): the
 * recovery thread, or the loop that installs its connection again (the
 * duty ops->room names).  Any thread. */
COORD_HIDDEN void coord_hq_worker_up(struct coord *c);

/* coord_tp_ops.caps: */
/* The dispatchers run functions in this process: small calls travel inline
 * in their ring entries (Q2, runtime/core/inline.c). */
#define COORD_TP_INLINE (1u << 0)
/* The ps tasks are reached over rdma too (transport/rdma/ps_rdma.h). */
#define COORD_TP_PS_RDMA (1u << 1)
/*
 * Event loops that sleep in the kernel (io_uring) rather than on the queue's
 * futex: coord_loop_sleep() registers the caller and returns true if it may
 * sleep (the queue is still empty); producers then call ops->wake().  After
 * the sleep, coord_loop_wake_done().
 */
COORD_HIDDEN bool coord_loop_sleep(struct coord_dispatcher *d);
/* coord_queue_size() - closures waiting (a snapshot). */
COORD_PROV uint64_t coord_queue_size(struct coord *c);
COORD_HIDDEN void coord_loop_wake_done(struct coord *c);
/* True while this thread is in a user's schedule() pushing its closure:
 * ops->wake() may then do the transport's work on it (transport/rdma/rdma.c D5). */
COORD_PROV bool coord_wake_in_schedule(void);

/* coord_report_unavailable() - the transport lost its last worker: the next
 * caller gets COORD_EUNAVAILABLE (and schedule() refuses from now on). */
COORD_HIDDEN void coord_report_unavailable(struct coord *c, int worker, const char *msg);

#endif /* COORD_RUNTIME_CORE_DISPATCH_H */
