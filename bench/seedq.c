// SPDX-License-Identifier: MIT
/*
 * bench/seedq.c - the seed design (see seedq.h).
 */
#include <stdlib.h>

#include "seedq.h"

int seedq_init(struct seedq *q, size_t cap)
{
	q->buf = calloc(cap, sizeof(*q->buf));
	if (!q->buf)
		return -1;
	q->cap = cap;
	q->head = q->count = 0;
	q->inflight = 0;
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

void seedq_put(struct seedq *q, void *v)
{
	pthread_mutex_lock(&q->put_wait_lock);
	pthread_mutex_lock(&q->lock);
	while (q->count == q->cap)
		pthread_cond_wait(&q->free_slot, &q->lock);
	q->buf[(q->head + q->count) % q->cap] = v;
	q->count++;
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
	while (q->count != 0 || q->inflight > 0)
		pthread_cond_wait(&q->stop_waiting, &q->lock);
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

void seed_future_init(struct seed_future *f)
{
	pthread_mutex_init(&f->m, NULL);
	pthread_cond_init(&f->cv, NULL);
	f->set = false;
	f->val = 0;
}

void seed_future_fini(struct seed_future *f)
{
	pthread_cond_destroy(&f->cv);
	pthread_mutex_destroy(&f->m);
}

void seed_future_set(struct seed_future *f, int64_t val)
{
	pthread_mutex_lock(&f->m);
	f->val = val;
	f->set = true;
	pthread_cond_broadcast(&f->cv);
	pthread_mutex_unlock(&f->m);
}

int64_t seed_future_wait(struct seed_future *f)
{
	int64_t v;

	pthread_mutex_lock(&f->m);
	while (!f->set)
		pthread_cond_wait(&f->cv, &f->m);
	v = f->val;
	pthread_mutex_unlock(&f->m);
	return v;
}

struct seed_closure *seed_schedule(struct seedq *q, void (*fn)(int, int64_t, int64_t *),
				   int64_t arg, bool keep)
{
	struct seed_closure *cl = malloc(sizeof(*cl));

	if (!cl)
		abort();
	cl->fn = fn;
	cl->arg = arg;
	seed_future_init(&cl->fut);
	/* Relaxed: published to the worker by the queue lock. */
	atomic_store_explicit(&cl->refs, keep ? 2 : 1, memory_order_relaxed);
	seedq_put(q, cl);
	return keep ? cl : NULL;
}

void seed_closure_put(struct seed_closure *cl)
{
	/* acq_rel: the last dropper sees the other's use of the closure. */
	if (atomic_fetch_sub_explicit(&cl->refs, 1, memory_order_acq_rel) == 1) {
		seed_future_fini(&cl->fut);
		free(cl);
	}
}

void seed_schedule_many(struct seedq *q, void (*fn)(int, int64_t, int64_t *), int64_t arg0,
			size_t n)
{
	void *v[64];

	for (size_t i = 0; i < n;) {
		size_t k = n - i < 64 ? n - i : 64;

		for (size_t j = 0; j < k; j++) {
			struct seed_closure *cl = malloc(sizeof(*cl));

			if (!cl)
				abort();
			cl->fn = fn;
			cl->arg = arg0 + (int64_t)(i + j);
			seed_future_init(&cl->fut);
			/* Relaxed: published to the worker by the queue lock. */
			atomic_store_explicit(&cl->refs, 1, memory_order_relaxed);
			v[j] = cl;
		}
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

		cl->fn(w->index, cl->arg, &res);
		seed_future_set(&cl->fut, res);
		seedq_mark_finished(w->q);
		seed_closure_put(cl);
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
