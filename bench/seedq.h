/* SPDX-License-Identifier: MIT */
/*
 * bench/seedq.h - the seed's design in C: the baseline coord is measured
 * against, ported as strongly as it can be while staying faithful.
 *
 * Reference: _CoordinatedClosureQueue, RemoteValueImpl and
 * Worker._process_queue in the seed
 * (/work/shared/seeds/002_47b6cd4d1792fbd5.reflowed.txt).
 *
 * Faithful (the same locks, waits and notifies, in the same order):
 *   - one queue lock (_queue_lock) with four condition variables on it:
 *     closures queued (not empty), free slot (not full), stop waiting and
 *     no inflight closure; the separate _put_wait_lock that put() and wait()
 *     take before the queue lock;
 *   - put(): both locks, wait for a free slot while full, append, check the
 *     error (_raise_if_error), notify one getter;
 *   - get(): queue lock, wait while empty, take one, notify one free slot,
 *     inflight count + 1;
 *   - mark_finished(): queue lock, inflight count - 1 (asserted >= 1), at 0
 *     notify_all "no inflight", and when also empty notify_all "stop
 *     waiting";
 *   - wait(): both locks, wait on "stop waiting" until no error and empty
 *     and nothing in flight;
 *   - the worker loop: get(), run the function, set the closure's
 *     RemoteValue (always, even when nobody keeps it, as
 *     Closure.execute_on() does), fetch it (the seed's worker calls
 *     output_remote_value.fetch() after every closure), mark_finished().
 *   Capacity as the seed's _CLOSURE_QUEUE_MAX_SIZE unless told otherwise.
 *
 * Made lighter, and why it is still faithful:
 *   - Python's queue.Queue inside the seed's queue is a plain ring buffer
 *     under the queue lock (the real one takes a third lock of its own and
 *     notifies its own conditions): only the outer queue's synchronisation
 *     is the design; the inner one is an accident of Python.
 *   - A RemoteValue (threading.Event: a lock, a condition and a flag) is an
 *     atomic state word and a futex (struct seed_future): set() publishes
 *     the value with one atomic exchange and makes a futex wake only when a
 *     fetcher sleeps; fetch() is one acquire load when the value is there,
 *     else a futex wait.  Same semantics as Event.set()/wait() (set once,
 *     every waiter woken, a wait after set returns at once), none of its
 *     cost that is not needed for them.
 *   - Closures (Python objects) are made before the timed region and freed
 *     after it (seed_closures_alloc() / _free()): what is timed is the
 *     queue, the worker loop and the RemoteValue, not malloc and not the
 *     Python object model.  Nothing is freed in the worker.
 *   - The error and cancellation paths (mark_failed, put_back,
 *     _cancel_all_closures) are not ported: the benches never fail a
 *     closure.  The error check they imply in put() and wait() is kept
 *     (one load under the lock).
 *   - The locks are glibc's default pthread mutexes (threading.Lock is a
 *     plain lock; an adaptive mutex was measured no faster here, see
 *     seedq.c).
 *
 * Synchronization: every seedq function takes the locks it needs; any
 * thread.  A seed_future is set by one thread (its worker) and waited on by
 * any number.
 */
#ifndef COORD_BENCH_SEEDQ_H
#define COORD_BENCH_SEEDQ_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

/* _CLOSURE_QUEUE_MAX_SIZE in the seed. */
#define SEEDQ_DEFAULT_CAP (256u * 1024u)

struct seedq {
	pthread_mutex_t put_wait_lock; /* _put_wait_lock */
	pthread_mutex_t lock;	       /* _queue_lock */
	pthread_cond_t queued;	       /* _closures_queued_condition */
	pthread_cond_t free_slot;      /* _queue_free_slot_condition */
	pthread_cond_t stop_waiting;   /* _stop_waiting_condition */
	pthread_cond_t no_inflight;    /* _no_inflight_closure_condition */
	void **buf;
	size_t cap, head, count;
	uint64_t inflight; /* _inflight_closure_count */
	int error;	   /* _error: never set by the benches */
	bool closed;	   /* bench only: get() returns NULL once closed and empty */
};

int seedq_init(struct seedq *q, size_t cap);
void seedq_fini(struct seedq *q);
/* put(): wait for a free slot, append, notify one getter. */
void seedq_put(struct seedq *q, void *v);
/* Bench only, the seed design's best batched form: put() of @n values
 * under one acquisition of the locks, one notify_all for them all. */
void seedq_put_many(struct seedq *q, void *const *v, size_t n);
/* get(): wait until not empty (or closed: NULL), take one, notify a free
 * slot, count it in flight. */
void *seedq_get(struct seedq *q);
/* mark_finished(): one closure in flight is done. */
void seedq_mark_finished(struct seedq *q);
/* wait(): until the queue is empty and nothing is in flight. */
void seedq_wait(struct seedq *q);
/* Bench only: wake every getter for good. */
void seedq_close(struct seedq *q);

/* A RemoteValue: threading.Event's semantics on an atomic word + futex. */
struct seed_future {
	_Atomic uint32_t state; /* SEED_FUT_* in seedq.c */
	int64_t val;
};

void seed_future_init(struct seed_future *f);
/* Event.set() after _set_value(): publish @val, wake any fetcher. */
void seed_future_set(struct seed_future *f, int64_t val);
/* RemoteValue.fetch(): Event.wait() then the value. */
int64_t seed_future_wait(struct seed_future *f);

/* A closure of the seed design: the function, its argument, its
 * RemoteValue (output_remote_value). */
struct seed_closure {
	void (*fn)(int worker, int64_t arg, int64_t *res);
	int64_t arg;
	struct seed_future fut;
};

/*
 * seed_closures_alloc() - @n closures of @fn on args @arg0, @arg0 + 1, ...,
 * each with a fresh RemoteValue: the Closure objects schedule() would make,
 * made before the timed region.  NULL on out of memory.  Free with
 * seed_closures_free() once the queue's wait() has returned.
 */
struct seed_closure *seed_closures_alloc(size_t n, void (*fn)(int, int64_t, int64_t *),
					 int64_t arg0);
void seed_closures_free(struct seed_closure *cl);

/* seed_schedule(): ClusterCoordinator.schedule() of a made closure: put. */
static inline void seed_schedule(struct seedq *q, struct seed_closure *cl)
{
	seedq_put(q, cl);
}

/* seed_schedule_many(): @n made closures, put 64 per seedq_put_many()
 * (bench only). */
void seed_schedule_many(struct seedq *q, struct seed_closure *cl, size_t n);

/* A worker of the seed design: Worker._process_queue. */
struct seed_worker {
	pthread_t thread;
	struct seedq *q;
	int index;
};

/* seed_workers_start() / _stop(): @n worker threads on @q; stop closes @q. */
int seed_workers_start(struct seed_worker *w, unsigned n, struct seedq *q);
void seed_workers_stop(struct seed_worker *w, unsigned n, struct seedq *q);

#endif /* COORD_BENCH_SEEDQ_H */
