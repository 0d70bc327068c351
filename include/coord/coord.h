/* SPDX-License-Identifier: MIT */
/*
 * coord/coord.h - the coordinator: schedule functions on workers, get
 * RemoteValues back, join, done (ClusterCoordinator semantics, design.md).
 *
 * Error rule (S3-S5): the first closure that fails makes the next
 * coord_schedule(), coord_join() or coord_done() return its error once.
 * Before returning it, that call cancels every queued closure (their
 * RemoteValues become CANCELLED) and waits for the closures in flight, so
 * when it returns nothing is executing.  The error is then cleared.
 */
#ifndef COORD_COORD_H
#define COORD_COORD_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <coord/error.h>
#include <coord/log.h>
#include <coord/spec.h>
#include <coord/version.h>
#include <coord/worker.h>

#ifdef __cplusplus
extern "C" {
#endif

struct coord;
struct coord_rv;
struct coord_pw;

/** Default closure ring capacity (S14). */
#define COORD_RING_DEFAULT 262144u

/**
 * struct coord_opts - coordinator options; fill with coord_opts_init().
 * @size:            sizeof(struct coord_opts) as the program was compiled;
 *                   set by coord_opts_init(), never by hand.  The struct
 *                   grows only at its end: a program built against an older,
 *                   smaller struct runs with a newer library (the options it
 *                   lacks take their defaults), and one built against a
 *                   newer struct runs with an older library as long as the
 *                   options that library lacks are left at their defaults
 *                   (else coord_create() fails with COORD_EINVAL).
 * @registry:        functions and resource creators; borrowed, must outlive
 *                   the coordinator.  Required.
 * @transport:       "inproc" (default) or "tcp" (workers are coord-worker
 *                   processes at the addresses of @spec's "worker" job);
 *                   "rdma" (RC queue pairs over librdmacm, when built with
 *                   libibverbs: coord-worker/coord-ps --transport rdma;
 *                   heartbeats, deadlines and reconnection as over tcp;
 *                   loaded from the provider libcoord-rdma.so on first
 *                   use, $COORD_RDMA_PROVIDER: -ENODEV naming the file
 *                   and the reason when it cannot be).
 * @inproc_workers:  workers of the in-process transport when @spec is NULL
 *                   (default 2).
 * @ring_capacity:   closure ring slots, rounded up to a power of two;
 *                   0 = unbounded (logged warning) (S14).
 * @start_delay_ms:  staggered start (S13): worker i waits
 *                   min(delay * i, max) before its first closure.  -1 (the
 *                   default) takes TF_COORDINATOR_SCHEDULE_START_DELAY
 *                   (seconds) from the environment, else 0.
 * @start_delay_max_ms: the cap; -1 (default) takes
 *                   TF_COORDINATOR_SCHEDULE_START_DELAY_MAX, else no cap.
 * @spin_ns:         how long a waiter spins before it sleeps on a futex
 *                   (default 50000).  Dispatchers use the same budget.
 *                   0: fetches never spin.
 * @spin_max_ns:     adaptive spin for fetch/wait (default 500000): while
 *                   the coordinator's recent waits for a RemoteValue ended
 *                   within this, a waiter spins up to 4x their average
 *                   (at least @spin_ns, at most this) before it sleeps.
 *                   Waits longer than this spin @spin_ns only.
 *                   <= @spin_ns: no adaptation.
 * @batch:           closures a dispatcher takes at once (default 32).
 * @tcp_loops:       tcp, rdma: event loops (threads), each owning a share
 *                   of the worker connections; 0 (default) = one per 4
 *                   CPUs the process may run on, 1 to 4, at most workers.
 * @window:          tcp: closures in flight per worker connection (128).
 * @max_frame:       tcp: largest frame sent or accepted (16 MiB).
 * @connect_timeout_ms: tcp: per worker, connect + handshake (5000).
 * @key_file:        tcp: cluster key file; NULL = $COORD_CLUSTER_KEY_FILE,
 *                   then $COORD_CLUSTER_KEY, then none (loopback workers).
 * @inproc_ps:       ps tasks of the inproc transport when @spec has no "ps"
 *                   job (default 1); see coord/var.h.
 * @ps_timeout_ms:   tcp: how long a variable operation waits for its ps
 *                   (default 30000), then fails with COORD_ETIMEDOUT; the
 *                   workers' operations too (the coordinator tells them).
 *                   Never applied after that (docs/guarantees.md).
 * @ps_failure_threshold: S11: a closure that fails because a ps task cannot
 *                   be reached is put back (run again) for the first K such
 *                   failures of that ps task; after K, the failure is
 *                   returned as COORD_EUNAVAILABLE by schedule/join/done.
 *                   -1 (default): $TF_COORDINATOR_IGNORE_TRANSIENT_PS_FAILURES,
 *                   else 3 (the seed's default).  0: every one is fatal.
 * @recovery_limit_ms: S10: how long a lost worker is tried again (with
 *                   exponential backoff) before it is dropped for good
 *                   (default 3600000, TF's hour).  When every worker is
 *                   dropped, queued closures are cancelled and
 *                   schedule/join/done return COORD_EUNAVAILABLE.
 * @heartbeat_ms:    tcp, rdma: a worker connection with nothing received for this
 *                   long is pinged (default 1000) ...
 * @heartbeat_misses: ... and one silent for heartbeat_ms * this (default 3;
 *                   at least 1), a PING to it unanswered meanwhile, is a
 *                   lost worker (a stopped or partitioned machine).  tcp:
 *                   the coordinator's and the workers' connections to the
 *                   ps tasks are watched the same way (a lost one fails
 *                   its operations with COORD_EUNAVAILABLE).
 * @closure_timeout_ms: B6: a closure running longer than this counts as a
 *                   failure of its worker (0, the default: no deadline).
 * @affinity_fallback_ms: B4: a closure with preferred affinity that waited
 *                   this long for its workers may run on any worker
 *                   (default 100).
 * @priority_aging_ms: B4: a queued closure competes one priority level
 *                   higher for every this-long it has waited (default 100),
 *                   so lower priorities are never starved.
 * @restart_exit_code: S12: when schedule/join/done would return a ps
 *                   failure, log it and exit(3) the process with this code
 *                   instead, so a supervisor restarts the coordinator (which
 *                   then restores its checkpoint).  -1 (default):
 *                   $TF_CLIENT_NON_FATAL_RESTART_EXIT_CODE, else never.
 * @flags:           reserved, 0.
 */
struct coord_opts {
	size_t size;
	const struct coord_registry *registry;
	const char *transport;
	unsigned inproc_workers;
	unsigned ring_capacity;
	int64_t start_delay_ms;
	int64_t start_delay_max_ms;
	uint64_t spin_ns;
	uint64_t spin_max_ns;
	unsigned batch;
	unsigned tcp_loops;
	unsigned window;
	uint32_t max_frame;
	int connect_timeout_ms;
	const char *key_file;
	unsigned inproc_ps;
	int ps_timeout_ms;
	int ps_failure_threshold;
	int restart_exit_code;
	int64_t recovery_limit_ms;
	int heartbeat_ms;
	int heartbeat_misses;
	int64_t closure_timeout_ms;
	int64_t affinity_fallback_ms;
	int64_t priority_aging_ms;
	uint64_t flags;
};

/**
 * coord_opts_init_size() - fill the first @size bytes at @o with the
 * defaults of struct coord_opts and @o->size with @size; what
 * coord_opts_init() calls.
 * @o:    the caller's options.
 * @size: sizeof(*@o) as the caller was compiled; at least sizeof(size_t).
 *
 * Concurrency: any thread.
 */
COORD_API void coord_opts_init_size(struct coord_opts *o, size_t size);

/**
 * coord_opts_init() - fill @o with the defaults of struct coord_opts, and
 * its size.
 * @o: the caller's options.
 *
 * An inline function, so that the size is the one the caller was compiled
 * with (struct coord_opts.size).
 */
static inline void coord_opts_init(struct coord_opts *o)
{
	coord_opts_init_size(o, sizeof(*o));
}

/**
 * coord_create() - start a coordinator and its workers.
 * @spec: the cluster (its "worker" job); NULL for @opts->inproc_workers
 *        in-process workers.  Borrowed: copied what is needed before return.
 * @opts: copied before return.
 * @out:  on success the coordinator; free with coord_destroy().
 *
 * Over tcp or rdma it raises the process's soft descriptor limit
 * (RLIMIT_NOFILE) to the hard one (logged).
 *
 * Return: 0; COORD_EINVAL (bad option, unknown transport, no worker,
 * @opts not filled by coord_opts_init(), or an option this library does not
 * know set to other than its default); COORD_ENOMEM; a thread-creation error;
 * -EMFILE when even the hard descriptor limit cannot hold a connection per
 * worker (the message says how many are needed and how to raise it).
 */
COORD_API COORD_NODISCARD int coord_create(const struct coord_spec *spec,
					   const struct coord_opts *opts, struct coord **out,
					   struct coord_error *err);

/**
 * coord_destroy() - stop the workers and free the coordinator.  Queued
 * closures are cancelled; those in flight finish first.  RemoteValues the
 * caller still holds outlive it: they are final (ready or cancelled), stay
 * readable, and the last coord_rv_put() frees the memory they share.
 * Per-worker handles (coord_per_worker_put()) outlive it too.  NULL is
 * ignored.
 *
 * Concurrency: no other call on @c may be running or start.  Handles put
 * after this returns may be put from any thread.
 */
COORD_API void coord_destroy(struct coord *c);

/** coord_num_workers() - the number of workers; 0 for a NULL @c. */
COORD_API unsigned coord_num_workers(const struct coord *c);

/* --- metrics (B7) ----------------------------------------------------------- */

/* Worker states, in struct coord_worker_metrics. */
enum coord_worker_state {
	COORD_WORKER_UP = 0,	  /* taking closures */
	COORD_WORKER_DOWN = 1,	  /* lost; the recovery thread is bringing it back */
	COORD_WORKER_DROPPED = 2, /* not back within opts.recovery_limit_ms */
};

/*
 * Latency histograms are log-linear, the HdrHistogram way: below
 * 2 * COORD_HIST_SUB ns one bucket per nanosecond; above, every power of two
 * is split into COORD_HIST_SUB equal buckets.  Bucket i >= 2 * COORD_HIST_SUB
 * holds [m << k, (m + 1) << k) ns with k = i / COORD_HIST_SUB - 1 and
 * m = COORD_HIST_SUB + i % COORD_HIST_SUB, so a bucket is at most 1/16 of its
 * lower edge wide and its midpoint within 1/32 (3.1%) of any value in it.
 * The last bucket also takes everything from 31 << 40 ns (9.4 h) up.
 */
#define COORD_HIST_SUB 16
#define COORD_HIST_BUCKETS 672

/**
 * struct coord_hist - a latency histogram (ns).
 * @count:  the sum of @bucket.
 * @sum:    the sum of the samples (mean: @sum / @count).
 * @max:    the largest sample.
 * @bucket: counts by the log-linear buckets above.
 */
struct coord_hist {
	uint64_t count, sum, max;
	uint64_t bucket[COORD_HIST_BUCKETS];
};

/** struct coord_worker_metrics - one worker's counters. */
struct coord_worker_metrics {
	int state;	     /* enum coord_worker_state */
	uint64_t executed;   /* closures completed on it (rate: diff two snapshots) */
	uint64_t losses;     /* times it was lost */
	uint64_t recoveries; /* times the recovery thread brought it back */
};

/**
 * struct coord_metrics - a snapshot (coord_metrics()).
 * @size:        the bytes coord_metrics() filled: the smaller of the struct
 *               the program was compiled with and the library's.  The
 *               struct grows only at its end; a field past @size (a library
 *               older than the headers) reads 0.
 * @now_ns:      CLOCK_MONOTONIC when taken: rates are differences of two
 *               snapshots over the difference of their @now_ns.
 * @queued:      closures waiting in the queue.
 * @in_flight:   taken by a dispatcher and not yet final (running, or sent).
 * @outstanding: scheduled and not yet final (queued + in flight).
 * @completed:   final with a value or an error since creation.
 * @failed:      of those, with an error.
 * @cancelled:   final as CANCELLED (S3, or destroy).
 * @put_back:    times a closure went back on the queue (worker lost, S2).
 * @workers, @workers_up, @workers_down, @workers_dropped: by state.
 * @losses, @recoveries: summed over the workers.
 * @exec_ns:     from a dispatcher taking a closure to its completion (the
 *               function's run; over tcp also the network both ways).
 * @round_trip_ns: from schedule() to the RemoteValue being final.
 * @waits:       fetches and waits on a RemoteValue that found it not final
 *               and had to wait (spinning, then maybe sleeping).
 * @parked:      of those, the ones that slept in the kernel (FUTEX_WAIT):
 *               a high share of short waits means @spin_ns / @spin_max_ns
 *               are too small for this load (each park costs its completer
 *               a wake-up).
 * The histograms sample one closure in 64 (a clock read per sample, none
 * for the others); counters are exact but read without stopping anyone, so
 * a snapshot is consistent only to within the closures completing meanwhile.
 */
struct coord_metrics {
	size_t size;
	uint64_t now_ns;
	uint64_t queued, in_flight, outstanding;
	uint64_t completed, failed, cancelled, put_back;
	unsigned workers, workers_up, workers_down, workers_dropped;
	uint64_t losses, recoveries;
	struct coord_hist exec_ns, round_trip_ns;
	uint64_t waits, parked;
};

/**
 * coord_metrics_size() - take a snapshot of @c's metrics into the first
 * @size bytes at @m; what coord_metrics() calls.
 * @size: sizeof(*@m) as the caller was compiled; at least the first
 *        published size of struct coord_metrics (0.2.0).
 *
 * Return: 0; COORD_EINVAL for a NULL @c or @m or a @size too small.
 */
COORD_API COORD_NODISCARD int coord_metrics_size(struct coord *c, struct coord_metrics *m,
						 size_t size, struct coord_worker_metrics *w,
						 unsigned nw);

/**
 * coord_metrics() - take a snapshot of @c's metrics.
 * @m:  filled (all of it: @m->size says how much the library knew).
 * @w:  optional: per-worker counters for the first @nw workers.
 *
 * An inline function, so that the size is the one the caller was compiled
 * with (struct coord_metrics.size).
 *
 * Concurrency: any thread, any time between create and destroy; takes no
 * lock and stops nothing.  Return: 0; COORD_EINVAL for a NULL @c or @m.
 */
static inline COORD_NODISCARD int coord_metrics(struct coord *c, struct coord_metrics *m,
						struct coord_worker_metrics *w, unsigned nw)
{
	return coord_metrics_size(c, m, sizeof(*m), w, nw);
}

/**
 * coord_hist_percentile() - the @p-th percentile (0 < @p <= 100) of @h, in
 * ns: the midpoint of the bucket holding the sample of that rank (the
 * nearest-rank definition), at most @h->max; so within 1/32 (3.1%) of that
 * sample, exact below 2 * COORD_HIST_SUB ns.  @p <= 0 reads as the
 * smallest sample's bucket, @p > 100 as 100.
 *
 * Concurrency: any thread; reads @h only.
 * Return: the value; 0 for a NULL or empty @h.
 */
COORD_API uint64_t coord_hist_percentile(const struct coord_hist *h, double p);

/**
 * coord_hist_sub() - @out = @a - @b bucket by bucket: the samples taken
 * between two snapshots @b and @a of the same histogram (@out->max is
 * @a->max, an upper bound).  @out may be @a or @b.
 *
 * Concurrency: any thread.  Return: 0; COORD_EINVAL for a NULL argument or
 * an @a with fewer samples than @b in some bucket (not a later snapshot).
 */
COORD_API COORD_NODISCARD int coord_hist_sub(struct coord_hist *out, const struct coord_hist *a,
					     const struct coord_hist *b);

/**
 * coord_fn_lookup() - resolve a registered name once (S15).
 * @id: on success the id to pass to coord_schedule().
 *
 * Return: 0; COORD_ENOFN with a message naming @name; COORD_EINVAL for a
 * NULL @c or @id.
 */
COORD_API COORD_NODISCARD int coord_fn_lookup(const struct coord *c, const char *name, uint32_t *id,
					      struct coord_error *err);

/**
 * struct coord_call - everything about one call; the general form of
 * coord_schedule().
 * @fn:       id from coord_fn_lookup().
 * @args:     argument bytes; copied before return.
 * @len:      their length.
 * @pw:       per-worker arguments (S8): on worker i the function sees worker
 *            i's component through coord_ctx_per_worker(ctx, k) for @pw[k].
 *            The array is copied; the handles are borrowed until the closure
 *            is final (keep them until join, or hold the RemoteValue).
 * @npw:      entries in @pw; at most COORD_MAX_PW.
 * @flags:    reserved, 0.
 * @inputs:   RemoteValues of this coordinator whose values the function
 *            reads (B1, dataflow): coord_ctx_input(ctx, i, &len) is
 *            @inputs[i]'s value.  The array is copied; the closure takes its
 *            own reference to each input (the caller may coord_rv_put() its
 *            handles at once) and drops it when the closure is final.  The
 *            closure is queued only once every input is final: it never
 *            occupies a worker, a thread or a ring slot while it waits, and
 *            scheduling it never blocks on its inputs.  An input that failed
 *            fails it with COORD_EINPUT (err.cause: the input's code, the
 *            message names the input); an input that was cancelled cancels
 *            it.  Values live on the coordinator, so a lost worker never
 *            loses one (no lineage re-execution is needed).
 * @ninputs:  entries in @inputs; at most COORD_MAX_INPUTS.
 * @priority: B4: enum coord_priority (0, normal, by default).  Higher
 *            levels are dispatched first; a closure that has waited
 *            opts.priority_aging_ms competes one level higher for each
 *            such wait, so a lower one is never starved.  Within a level,
 *            oldest first.
 * @affinity: B4: 0 (any worker, the default); COORD_ON_WORKER(i); or a
 *            set from coord_affinity_set().
 * @affinity_mode: B4: how @affinity binds (enum coord_affinity_mode):
 *            strict (the default) runs only there, waiting while those
 *            workers are down and failing with COORD_EUNAVAILABLE once
 *            every one of them is dropped (S10); preferred falls back to
 *            any worker after opts.affinity_fallback_ms of waiting (or at
 *            once when they are all dropped).
 *
 * A call with neither @priority nor @affinity takes the default path,
 * which hints cost nothing (B4); hinted calls are lock-free to schedule
 * and are matched to workers by the dispatchers in batches.
 */
struct coord_call {
	uint32_t fn;
	const void *args;
	size_t len;
	struct coord_pw *const *pw;
	unsigned npw;
	uint64_t flags;
	struct coord_rv *const *inputs;
	unsigned ninputs;
	int priority;
	uint32_t affinity;
	unsigned affinity_mode;
};

/* Priority levels of struct coord_call.priority (B4). */
enum coord_priority {
	COORD_PRIO_LOW = -1,
	COORD_PRIO_NORMAL = 0,
	COORD_PRIO_HIGH = 1,
	COORD_PRIO_URGENT = 2,
};

/* struct coord_call.affinity_mode (B4). */
enum coord_affinity_mode {
	COORD_AFFINITY_STRICT = 0,
	COORD_AFFINITY_PREFERRED = 1,
};

/* struct coord_call.affinity for worker @i alone (B4). */
#define COORD_ON_WORKER(i) ((uint32_t)(i) + 1u)

/* Most affinity sets one coordinator keeps (coord_affinity_set()). */
#define COORD_MAX_AFFINITY_SETS 256u

/**
 * coord_affinity_set() - name a set of workers for struct
 * coord_call.affinity (B4), once, off the fast path.
 * @c:       coordinator.
 * @workers: worker indices (0 .. coord_num_workers() - 1), @n of them;
 *           duplicates are ignored.
 * @n:       1 .. coord_num_workers().
 * @id:      on success the set's affinity value.  The same workers give
 *           the same id again.
 * @err:     optional detail on failure.
 *
 * Concurrency: any thread; takes a lock (not on the scheduling path).
 * Return: 0; COORD_EINVAL (an index out of range, n == 0, or past
 * COORD_MAX_AFFINITY_SETS distinct sets); COORD_ENOMEM.
 */
COORD_API COORD_NODISCARD int coord_affinity_set(struct coord *c, const unsigned *workers,
						 unsigned n, uint32_t *id, struct coord_error *err);

/* Most inputs of one call (struct coord_call.inputs). */
#define COORD_MAX_INPUTS 65536u

#define COORD_MAX_PW 4

/**
 * coord_schedule() - queue one call of @fn with @args on any worker (S1).
 * @c:    coordinator.
 * @fn:   id from coord_fn_lookup(); an unknown id fails here (S15).
 * @args: copied before return; the caller keeps ownership.
 * @len:  length of @args.
 * @out:  on success a new RemoteValue, owned by the caller until
 *        coord_rv_put().  May be NULL when the result is not wanted.
 * @err:  optional detail on failure.
 *
 * Concurrency: any number of threads; lock-free and no malloc in the steady
 * state.  Blocks only while the ring is full (S1).  Everything the caller
 * wrote to @args happens-before the function reads it.
 *
 * Return: 0; COORD_ENOFN; COORD_EINVAL (also for a NULL @c, or a NULL
 * call in coord_schedule_call()); an earlier closure's error after
 * the queue was cancelled and drained (S3), detail in @err, in which case
 * this call was not queued; COORD_EUNAVAILABLE when no worker is left.
 */
COORD_API COORD_NODISCARD int coord_schedule(struct coord *c, uint32_t fn, const void *args,
					     size_t len, struct coord_rv **out,
					     struct coord_error *err);

/** coord_schedule_call() - coord_schedule() with every option of @call. */
COORD_API COORD_NODISCARD int coord_schedule_call(struct coord *c, const struct coord_call *call,
						  struct coord_rv **out, struct coord_error *err);

/**
 * coord_schedule_many() - queue @n calls at once: coord_schedule_call() for
 * each of @calls, in order, at a fraction of the cost per call (B3).
 * @c:      coordinator.
 * @calls:  @n calls; each as in coord_schedule_call(), arguments copied
 *          before return.
 * @n:      how many; 0 does nothing.
 * @out:    NULL, or room for @n RemoteValues: on return @out[i] is call i's,
 *          owned by the caller until coord_rv_put(), or NULL if it was not
 *          queued.
 * @queued: NULL, or on return how many of the first calls were queued.
 * @err:    optional detail on failure.
 *
 * The calls are checked (S15) and the error rule applied (S3: an earlier
 * closure's error is returned, once, after the queue was cancelled and
 * drained) before any is queued; then they are queued in order, in chunks
 * that each take one claim of the closure pool, one of the ring, one update
 * of the pending count and at most one wake.  Each closure takes its
 * generation when its chunk is queued (C3).  Blocks only while the ring is
 * full (S1).
 *
 * Concurrency: any number of threads; lock-free and no malloc in the steady
 * state, like coord_schedule().  The calls of one batch are consecutive in
 * the queue only with respect to this thread: others may interleave.
 *
 * Return: 0 when all @n were queued; COORD_ENOFN or COORD_EINVAL (message
 * names the call; also a NULL @c or @calls) with none queued; an earlier closure's error (S3) or
 * COORD_EUNAVAILABLE with none queued; COORD_ENOMEM, possibly after the
 * first *@queued were queued (their RemoteValues are valid and run).
 */
COORD_API COORD_NODISCARD int coord_schedule_many(struct coord *c, const struct coord_call *calls,
						  size_t n, struct coord_rv **out, size_t *queued,
						  struct coord_error *err);

/**
 * coord_join() - wait until every scheduled closure is final (S4).
 *
 * Concurrency: any thread; sleeps on a futex.
 * Return: 0; the first error of a failed closure, once (S3 rule);
 * COORD_EINVAL for a NULL @c (also coord_join_timeout()).
 */
COORD_API COORD_NODISCARD int coord_join(struct coord *c, struct coord_error *err);

/**
 * coord_join_timeout() - coord_join() that gives up after @timeout_ns
 * (negative = forever) with COORD_ETIMEDOUT.
 */
COORD_API COORD_NODISCARD int coord_join_timeout(struct coord *c, int64_t timeout_ns,
						 struct coord_error *err);

/**
 * coord_done() - whether every scheduled closure is final (S5).
 * Return: 1 all final; 0 some still queued or running; or the first error
 * of a failed closure, once (S3 rule; nothing is executing then);
 * COORD_EINVAL for a NULL @c.
 */
COORD_API COORD_NODISCARD int coord_done(struct coord *c, struct coord_error *err);

/* RemoteValue states (S7), from coord_rv_state(). */
enum coord_rv_state {
	COORD_RV_NOT_READY = 0,
	COORD_RV_READY = 1,	/* value or the closure's own error */
	COORD_RV_ABORTED = 2,	/* worker lost, not handled yet */
	COORD_RV_CANCELLED = 3, /* cancelled (S3) */
};

/**
 * coord_rv_state() - the current state; a snapshot, never blocks.
 * A NULL @rv reads COORD_RV_CANCELLED (final, without a value: a poll loop
 * ends, and coord_rv_fetch() refuses it with COORD_EINVAL).
 * Concurrency: any thread.
 */
COORD_API enum coord_rv_state coord_rv_state(const struct coord_rv *rv);

/**
 * coord_rv_id() - the closure's sequence number, as in coord_error.closure;
 * COORD_NO_CLOSURE for a NULL @rv.
 */
COORD_API uint64_t coord_rv_id(const struct coord_rv *rv);

/**
 * coord_rv_fetch() - wait until @rv is final and return its value (S6).
 * @val: on success the value's bytes, borrowed until coord_rv_put(); may be
 *       NULL.
 * @len: on success their length; may be NULL.
 *
 * Spins briefly, then sleeps on a futex.
 *
 * Return: 0; the closure's own error (message in @err); COORD_ECANCELLED for
 * a cancelled or aborted value; COORD_EINVAL for a NULL @rv.
 */
COORD_API COORD_NODISCARD int coord_rv_fetch(struct coord_rv *rv, const void **val, size_t *len,
					     struct coord_error *err);

/** coord_rv_fetch_timeout() - coord_rv_fetch() bounded by @timeout_ns (<0 forever). */
COORD_API COORD_NODISCARD int coord_rv_fetch_timeout(struct coord_rv *rv, int64_t timeout_ns,
						     const void **val, size_t *len,
						     struct coord_error *err);

/**
 * struct coord_result - one outcome in coord_rv_fetch_many().
 * @code: 0, the closure's error, or COORD_ECANCELLED.
 * @val, @len: the value when @code is 0; borrowed until coord_rv_put().
 */
struct coord_result {
	int code;
	const void *val;
	size_t len;
};

/**
 * coord_rv_fetch_many() - wait for @n RemoteValues at once (B3).
 * @res: @n outcomes, filled in order.
 *
 * Return: 0 when all were waited for (each outcome in @res, errors
 * included; a NULL entry of @rvs gets code COORD_EINVAL); COORD_ETIMEDOUT
 * if @timeout_ns (<0 forever) ran out first; COORD_EINVAL for a NULL @rvs
 * or @res with @n > 0.
 */
COORD_API COORD_NODISCARD int coord_rv_fetch_many(struct coord_rv *const *rvs, size_t n,
						  struct coord_result *res, int64_t timeout_ns);

/**
 * coord_rv_put() - drop the caller's handle.  The value's memory is reused
 * once the runtime is done with it too.  NULL is ignored.
 */
COORD_API void coord_rv_put(struct coord_rv *rv);

/**
 * coord_per_worker_create() - a per-worker resource (S9), e.g. a dataset
 * iterator: made on each worker by the creator registered as @creator, on the
 * first closure that uses it there (lazily), and again after the worker
 * recovers.
 * @args: the creator's arguments; copied.
 * @out:  the handle to pass in coord_call.pw; free with coord_per_worker_put()
 *        once no closure that uses it is pending.
 *
 * Return: 0; COORD_ENOFN if @creator is not a resource creator; COORD_ENOMEM;
 * COORD_EINVAL for a NULL @c or @out.
 */
COORD_API COORD_NODISCARD int coord_per_worker_create(struct coord *c, const char *creator,
						      const void *args, size_t len,
						      struct coord_pw **out,
						      struct coord_error *err);

/**
 * coord_per_worker_state() - S7 for a per-worker resource on @worker:
 * COORD_RV_READY once a closure that uses it has run there; COORD_RV_ABORTED
 * before that (resources are made lazily) and again after that worker was
 * lost, until it is made again (before the first closure that uses it runs
 * on the recovered worker, S9); COORD_RV_NOT_READY for a bad index.
 * Concurrency: any thread, while the coordinator lives.
 */
COORD_API enum coord_rv_state coord_per_worker_state(const struct coord_pw *pw, unsigned worker);

/**
 * coord_per_worker_put() - release a per-worker handle; NULL is ignored.
 *
 * A closure that names the resource holds its own reference until it is
 * final and freed (its RemoteValue put), so a put while closures still use
 * it is safe.  When the last reference goes, every worker that made the
 * resource destroys its component (the creator's destroy callback runs
 * there), while the coordinator lives (S9); a worker that is down freed
 * it when its connection ended.  A worker destroys it before it runs any
 * closure with per-worker arguments or a RemoteValue handle scheduled
 * after that last put returned (or after a coord_join() that followed it).
 */
COORD_API void coord_per_worker_put(struct coord_pw *pw);

#ifdef __cplusplus
}
#endif
#endif /* COORD_COORD_H */
