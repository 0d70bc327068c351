// SPDX-License-Identifier: MIT
/*
 * bench/seedq.c - the seed design (see seedq.h for what is faithful and
 * what was made lighter).
 */
#include <limits.h>
#include <linux/futex.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "seedq.h"

int seedq_init(struct seedq *q, size_t cap)
{
	q->buf = calloc(cap, sizeof(*q->buf));
	if (!q->buf)
		return -1;
	q->cap = cap;
	q->head = q->count = 0;
	q->inflight = 0;
	q->error = 0;
	q->closed = false;
	pthread_mutex_init(&q->put_wait_lock, NULL);
	pthread_mutex_init(&q->lock, NULL);
	pthread_cond_init(&q->queued, NULL);
	pthread_cond_init(&q->free_slot, NULL);
	pthread_cond_init(&q->stop_waiting, NULL);
	pthread_cond_init(&q->no_inflight, NULL);
	return 0;
}

void seedq_fini(struct seedq *q)
{
	pthread_cond_destroy(&q->no_inflight);
	pthread_cond_destroy(&q->stop_waiting);
	pthread_cond_destroy(&q->free_slot);
	pthread_cond_destroy(&q->queued);
	pthread_mutex_destroy(&q->lock);
	pthread_mutex_destroy(&q->put_wait_lock);
	free(q->buf);
	q->buf = NULL;
}

/* _raise_if_error(), queue lock held: the benches never fail a closure. */
static void raise_if_error(struct seedq *q)
{
	if (q->error) {
		fprintf(stderr, "seedq: error %d raised\n", q->error);
		abort();
	}
}

void seedq_put(struct seedq *q, void *v)
{
	pthread_mutex_lock(&q->put_wait_lock);
	pthread_mutex_lock(&q->lock);
	while (q->count == q->cap)
		pthread_cond_wait(&q->free_slot, &q->lock);
	q->buf[(q->head + q->count) % q->cap] = v;
	q->count++;
	raise_if_error(q);
	pthread_cond_signal(&q->queued);
	pthread_mutex_unlock(&q->lock);
	pthread_mutex_unlock(&q->put_wait_lock);
}

void seedq_put_many(struct seedq *q, void *const *v, size_t n)
{
	pthread_mutex_lock(&q->put_wait_lock);
	pthread_mutex_lock(&q->lock);
	for (size_t i = 0; i < n; i++) {
		while (q->count == q->cap) {
			pthread_cond_broadcast(&q->queued); /* getters make the room */
			pthread_cond_wait(&q->free_slot, &q->lock);
		}
		q->buf[(q->head + q->count) % q->cap] = v[i];
		q->count++;
	}
	raise_if_error(q);
	pthread_cond_broadcast(&q->queued);
	pthread_mutex_unlock(&q->lock);
	pthread_mutex_unlock(&q->put_wait_lock);
}

void *seedq_get(struct seedq *q)
{
	void *v;

	pthread_mutex_lock(&q->lock);
	while (q->count == 0 && !q->closed)
		pthread_cond_wait(&q->queued, &q->lock);
	if (q->count == 0) {
		pthread_mutex_unlock(&q->lock);
		return NULL;
	}
	v = q->buf[q->head];
	q->head = (q->head + 1) % q->cap;
	q->count--;
	pthread_cond_signal(&q->free_slot);
	q->inflight++;
	pthread_mutex_unlock(&q->lock);
	return v;
}

void seedq_mark_finished(struct seedq *q)
{
	pthread_mutex_lock(&q->lock);
	if (q->inflight < 1) {
		fprintf(stderr, "seedq: there is no inflight closure to mark_finished\n");
		abort();
	}
	q->inflight--;
	if (q->inflight == 0)
		pthread_cond_broadcast(&q->no_inflight);
	if (q->count == 0 && q->inflight == 0)
		pthread_cond_broadcast(&q->stop_waiting);
	pthread_mutex_unlock(&q->lock);
}

void seedq_wait(struct seedq *q)
{
	pthread_mutex_lock(&q->put_wait_lock);
	pthread_mutex_lock(&q->lock);
	while (!q->error && (q->count != 0 || q->inflight > 0))
		pthread_cond_wait(&q->stop_waiting, &q->lock);
	raise_if_error(q);
	pthread_mutex_unlock(&q->lock);
	pthread_mutex_unlock(&q->put_wait_lock);
}

void seedq_close(struct seedq *q)
{
	pthread_mutex_lock(&q->lock);
	q->closed = true;
	pthread_cond_broadcast(&q->queued);
	pthread_mutex_unlock(&q->lock);
}

/* ---- RemoteValue ---------------------------------------------------------------------- */

enum {
	SEED_FUT_UNSET = 0,   /* not ready, nobody sleeps */
	SEED_FUT_WAITING = 1, /* not ready, a fetcher may sleep on the futex */
	SEED_FUT_SET = 2,     /* ready: val is published */
};

static long futex(_Atomic uint32_t *addr, int op, uint32_t val)
{
	return syscall(SYS_futex, (uint32_t *)addr, op, val, NULL, NULL, 0);
}

void seed_future_init(struct seed_future *f)
{
	/* Relaxed: the closure is published to the worker by the queue lock. */
	atomic_store_explicit(&f->state, SEED_FUT_UNSET, memory_order_relaxed);
	f->val = 0;
}

void seed_future_set(struct seed_future *f, int64_t val)
{
	uint32_t old;

	f->val = val;
	/* Release: publishes val to the acquire loads in seed_future_wait();
	 * an RMW so that it sees a fetcher's WAITING and wakes it. */
	old = atomic_exchange_explicit(&f->state, SEED_FUT_SET, memory_order_release);
	if (old == SEED_FUT_WAITING)
		futex(&f->state, FUTEX_WAKE_PRIVATE, INT_MAX);
}

int64_t seed_future_wait(struct seed_future *f)
{
	/* Acquire: pairs with the release exchange in seed_future_set(). */
	uint32_t s = atomic_load_explicit(&f->state, memory_order_acquire);

	while (s != SEED_FUT_SET) {
		if (s == SEED_FUT_UNSET &&
		    /* Acquire on failure: s may now be SET, then val is read. */
		    !atomic_compare_exchange_strong_explicit(&f->state, &s, SEED_FUT_WAITING,
							     memory_order_acquire,
							     memory_order_acquire))
			continue;
		/* Sleeps only while the word is still WAITING: no lost wake-up. */
		futex(&f->state, FUTEX_WAIT_PRIVATE, SEED_FUT_WAITING);
		/* Acquire: as above. */
		s = atomic_load_explicit(&f->state, memory_order_acquire);
	}
	return f->val;
}

/* ---- closures and workers ------------------------------------------------------------- */

struct seed_closure *seed_closures_alloc(size_t n, void (*fn)(int, int64_t, int64_t *),
					 int64_t arg0)
{
	struct seed_closure *cl = malloc((n ? n : 1) * sizeof(*cl));

	if (!cl)
		return NULL;
	for (size_t i = 0; i < n; i++) {
		cl[i].fn = fn;
		cl[i].arg = arg0 + (int64_t)i;
		seed_future_init(&cl[i].fut);
	}
	return cl;
}

void seed_closures_free(struct seed_closure *cl)
{
	free(cl);
}

void seed_schedule_many(struct seedq *q, struct seed_closure *cl, size_t n)
{
	void *v[64];

	for (size_t i = 0; i < n;) {
		size_t k = n - i < 64 ? n - i : 64;

		for (size_t j = 0; j < k; j++)
			v[j] = &cl[i + j];
		seedq_put_many(q, v, k);
		i += k;
	}
}

static void *seed_worker_main(void *arg)
{
	struct seed_worker *w = arg;
	struct seed_closure *cl;

	while ((cl = seedq_get(w->q)) != NULL) {
		int64_t res = 0;

		cl->fn(w->index, cl->arg, &res);  /* closure.execute_on(self) */
		seed_future_set(&cl->fut, res);	  /* ... _set_value(output_value) */
		(void)seed_future_wait(&cl->fut); /* output_remote_value.fetch() */
		seedq_mark_finished(w->q);
	}
	return NULL;
}

int seed_workers_start(struct seed_worker *w, unsigned n, struct seedq *q)
{
	for (unsigned i = 0; i < n; i++) {
		w[i].q = q;
		w[i].index = (int)i;
		if (pthread_create(&w[i].thread, NULL, seed_worker_main, &w[i])) {
			seed_workers_stop(w, i, q);
			return -1;
		}
	}
	return 0;
}

void seed_workers_stop(struct seed_worker *w, unsigned n, struct seedq *q)
{
	seedq_close(q);
	for (unsigned i = 0; i < n; i++)
		pthread_join(w[i].thread, NULL);
}
