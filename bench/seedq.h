/* SPDX-License-Identifier: MIT */
/*
 * bench/seedq.h - the seed's design in C: the baseline coord is measured
 * against.
 *
 * struct seedq follows _CoordinatedClosureQueue in the seed
 * (/work/shared/seeds/002_47b6cd4d1792fbd5.reflowed.txt): one queue lock,
 * condition variables "closures queued" (not empty), "free slot" (not full),
 * "stop waiting" and "no inflight closure" on it, an inflight count, and the
 * separate _put_wait_lock that put() and wait() take before the queue lock.
 * Python's queue.Queue inside it is modelled as a plain ring buffer under the
 * queue lock (the real one takes a third lock of its own, so this baseline is
 * if anything generous).  Capacity as the seed's _CLOSURE_QUEUE_MAX_SIZE
 * unless told otherwise.
 *
 * struct seed_future is a RemoteValue as the seed builds it on
 * threading.Event: a mutex, a condition and a flag per value.
 *
 * Synchronization: every function takes the locks it needs; any thread.
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
	uint64_t inflight;
	bool closed; /* bench only: get() returns NULL once closed and empty */
};

int seedq_init(struct seedq *q, size_t cap);
void seedq_fini(struct seedq *q);
/* put(): wait for a free slot, append, notify one getter. */
void seedq_put(struct seedq *q, void *v);
/* Bench only, the seed design's best batched form: put() of @n values
 * under one acquisition of the locks, one notify for them all. */
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

struct seed_future {
	pthread_mutex_t m;
	pthread_cond_t cv;
	bool set;
	int64_t val;
};

void seed_future_init(struct seed_future *f);
void seed_future_fini(struct seed_future *f);
/* Event.set(): under the lock, flag and notify_all. */
void seed_future_set(struct seed_future *f, int64_t val);
/* Event.wait(): under the lock, wait for the flag. */
int64_t seed_future_wait(struct seed_future *f);

/*
 * A closure of the seed design: the function, its argument, its
 * RemoteValue, and a reference count standing in for Python's GC (the
 * worker's reference plus the caller's when it keeps the RemoteValue).
 */
struct seed_closure {
	void (*fn)(int worker, int64_t arg, int64_t *res);
	int64_t arg;
	struct seed_future fut;
	_Atomic int refs;
};

/* seed_schedule(): ClusterCoordinator.schedule(): a new closure with its
 * future, put on @q.  Returns the closure when @keep (caller drops it with
 * seed_closure_put()), else NULL. */
struct seed_closure *seed_schedule(struct seedq *q, void (*fn)(int, int64_t, int64_t *),
				   int64_t arg, bool keep);
void seed_closure_put(struct seed_closure *cl);
/* seed_schedule_many(): @n closures of @fn on args @arg0, @arg0 + 1, ...,
 * no RemoteValue kept, put with seedq_put_many() (bench only). */
void seed_schedule_many(struct seedq *q, void (*fn)(int, int64_t, int64_t *), int64_t arg0,
			size_t n);

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
