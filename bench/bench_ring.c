// SPDX-License-Identifier: MIT
/*
 * bench/bench_ring.c - queue throughput: the coord MPMC ring against ck_ring
 * MPMC, liburcu's wfcqueue and the seed's mutex + condition-variable queue,
 * all in the same run.
 *
 * Configurations: 1 producer / 1 consumer and 2 producers / 2 consumers.
 * Implementations:
 *   seed mutex+cv (baseline)  seedq_put()/seedq_get(), bench/seedq.h
 *   coord ring pop max=1      coord_ring_push_mp()/coord_ring_pop_batch_mc(.., 1)
 *   coord ring pop batch=32   coord_ring_push_mp()/coord_ring_pop_batch_mc(.., 32)
 *   ck_ring mpmc              ck_ring_enqueue_mpmc()/ck_ring_trydequeue_mpmc()
 *   urcu wfcqueue             cds_wfcq_enqueue()/__cds_wfcq_dequeue_nonblocking()
 *                             under cds_wfcq_dequeue_lock() (its contract: the
 *                             "__" dequeue needs the dequeuers' exclusion)
 * ck's MPMC enqueue waits, spinning without yielding, for every earlier
 * producer to publish (p_tail moves in reservation order); with more threads
 * than cores a preempted producer stalls the other for its timeslice, so its
 * 2P/2C rate is heavy-tailed (single runs of 40 s for 1M values were seen).
 * The bounded ones have the same capacity.  wfcqueue is unbounded: its
 * producers never wait for room (nodes are preallocated outside the timing).
 *
 * A value is ((producer + 1) << 32) | (sequence + 1).  Each consumer checks
 * that it sees every producer's sequence numbers increasing (per-producer
 * FIFO, as ck's regressions/ck_ring/validate/ck_ring_mpmc.c) and marks each
 * value in a per-producer "seen" table, failing on a second mark ("we
 * dequeued twice"); after the run every entry must be marked exactly once
 * and the consumers' counts must add up to what was pushed (urcu
 * test_urcu_wfcq.c).  Any discrepancy exits 1.
 *
 * Termination: the last producer to finish sets `done` (release).  A
 * consumer that finds the queue empty after seeing `done` (acquire) exits:
 * every push has completed by then, so an empty queue means every value was
 * claimed by some consumer.  The seed queue is closed instead.
 *
 * Rate = values / (last consumer's end - first thread's start), in Mops/s.
 */
#define _LGPL_SOURCE /* urcu: the inline (static) wfcqueue, as ck_ring is inline */
#include <ck_ring.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <urcu/wfcqueue.h>

#include "runtime/core/ring.h"
#include "seedq.h"
#include "stats.h"

#define RING_CAP 65536u
#define MAX_THREADS 2
#define BATCH 32

enum impl { IMPL_SEED, IMPL_COORD1, IMPL_COORD32, IMPL_CK, IMPL_WFCQ, NIMPL };

static const char *const impl_name[NIMPL] = {
	[IMPL_SEED] = "seed mutex+cv queue (baseline)", [IMPL_COORD1] = "coord ring pop max=1",
	[IMPL_COORD32] = "coord ring pop batch=32",	[IMPL_CK] = "ck_ring mpmc",
	[IMPL_WFCQ] = "urcu wfcqueue (locked dequeue)",
};

static const char *const impl_key[NIMPL] = {
	[IMPL_SEED] = "seed", [IMPL_COORD1] = "coord1", [IMPL_COORD32] = "coord32",
	[IMPL_CK] = "ck",     [IMPL_WFCQ] = "wfcq",
};

struct wnode {
	struct cds_wfcq_node node;
	uint64_t v;
};

struct run {
	enum impl impl;
	unsigned nprod, ncons;
	uint64_t per_prod;

	struct coord_ring coord;
	ck_ring_t ck __attribute__((aligned(64)));
	ck_ring_buffer_t *ckbuf;
	struct cds_wfcq_head wh __attribute__((aligned(64)));
	struct cds_wfcq_tail wt __attribute__((aligned(64)));
	struct wnode *nodes[MAX_THREADS]; /* per producer, per_prod each */
	struct seedq seed;

	pthread_barrier_t start;
	_Atomic unsigned prod_left __attribute__((aligned(64)));
	_Atomic int done __attribute__((aligned(64)));
	uint8_t *seen[MAX_THREADS]; /* per producer, per_prod each */
};

struct thr {
	pthread_t t;
	struct run *r;
	unsigned id;
	uint64_t count;
	uint64_t start_ns, end_ns;
	bool bad;
} __attribute__((aligned(64)));

static inline uint64_t mkval(unsigned p, uint64_t s)
{
	return ((uint64_t)(p + 1) << 32) | (s + 1);
}

static void producer_done(struct run *r)
{
	/* acq_rel: the last producer's `done` store follows every producer's
	 * pushes (their release here chains into its acquire). */
	if (atomic_fetch_sub_explicit(&r->prod_left, 1, memory_order_acq_rel) != 1)
		return;
	if (r->impl == IMPL_SEED) {
		seedq_close(&r->seed);
		return;
	}
	/* Release: pairs with the consumers' acquire in consumer(). */
	atomic_store_explicit(&r->done, 1, memory_order_release);
}

static void *producer(void *arg)
{
	struct thr *t = arg;
	struct run *r = t->r;
	unsigned p = t->id;

	pthread_barrier_wait(&r->start);
	t->start_ns = bench_now_ns();
	for (uint64_t s = 0; s < r->per_prod; s++) {
		uint64_t v = mkval(p, s);
		unsigned idle = 0;

		switch (r->impl) {
		case IMPL_SEED:
			seedq_put(&r->seed, (void *)(uintptr_t)v);
			break;
		case IMPL_COORD1:
		case IMPL_COORD32:
			while (coord_ring_push_mp(&r->coord, (void *)(uintptr_t)v) < 0)
				bench_backoff(&idle);
			break;
		case IMPL_CK:
			while (!ck_ring_enqueue_mpmc(&r->ck, r->ckbuf, (void *)(uintptr_t)v))
				bench_backoff(&idle);
			break;
		case IMPL_WFCQ: {
			struct wnode *n = &r->nodes[p][s];

			n->v = v;
			cds_wfcq_node_init(&n->node);
			cds_wfcq_enqueue(&r->wh, &r->wt, &n->node);
			break;
		}
		default:
			abort();
		}
	}
	producer_done(r);
	t->end_ns = bench_now_ns();
	return NULL;
}

/* Pop up to @max values; 0 when empty (or, for ck, lost a race). */
static unsigned pop(struct run *r, uint64_t *out, unsigned max)
{
	void *buf[BATCH];
	unsigned n;

	switch (r->impl) {
	case IMPL_COORD1:
	case IMPL_COORD32:
		n = coord_ring_pop_batch_mc(&r->coord, buf, max);
		for (unsigned i = 0; i < n; i++)
			out[i] = (uint64_t)(uintptr_t)buf[i];
		return n;
	case IMPL_CK:
		if (!ck_ring_trydequeue_mpmc(&r->ck, r->ckbuf, &buf[0]))
			return 0;
		out[0] = (uint64_t)(uintptr_t)buf[0];
		return 1;
	case IMPL_WFCQ: {
		struct cds_wfcq_node *node;

		cds_wfcq_dequeue_lock(&r->wh, &r->wt);
		node = __cds_wfcq_dequeue_nonblocking(&r->wh, &r->wt);
		cds_wfcq_dequeue_unlock(&r->wh, &r->wt);
		/* WOULDBLOCK: an enqueuer is between its xchg and its link. */
		if (!node || node == CDS_WFCQ_WOULDBLOCK)
			return 0;
		out[0] = caa_container_of(node, struct wnode, node)->v;
		return 1;
	}
	default:
		abort();
	}
}

/* After `done`: is the queue empty, i.e. every value claimed? */
static bool drained(struct run *r)
{
	switch (r->impl) {
	case IMPL_COORD1:
	case IMPL_COORD32:
		return coord_ring_empty(&r->coord);
	case IMPL_CK:
		return ck_ring_size(&r->ck) == 0;
	case IMPL_WFCQ:
		return cds_wfcq_empty(&r->wh, &r->wt);
	default:
		abort();
	}
}

static void consume(struct thr *t, int64_t *last, uint64_t v)
{
	struct run *r = t->r;
	uint64_t p = (v >> 32) - 1, s = (v & 0xffffffffu) - 1;
	_Atomic uint8_t *seen;

	if (v == 0 || p >= r->nprod || s >= r->per_prod) {
		t->bad |= !bench_check(false, "%s: consumer %u got a value never pushed: %#" PRIx64,
				       impl_name[r->impl], t->id, v);
		return;
	}
	if ((int64_t)s <= last[p])
		t->bad |= !bench_check(false,
				       "%s: consumer %u: producer %" PRIu64 " out of order "
				       "(%" PRIu64 " after %" PRId64 ")",
				       impl_name[r->impl], t->id, p, s, last[p]);
	last[p] = (int64_t)s;
	seen = (_Atomic uint8_t *)&r->seen[p][s];
	/* Relaxed: a plain mark; two consumers racing on one slot is itself
	 * the bug being looked for, and the final scan catches a lost mark. */
	if (atomic_load_explicit(seen, memory_order_relaxed))
		t->bad |= !bench_check(false,
				       "%s: we dequeued twice: producer %" PRIu64 " seq %" PRIu64,
				       impl_name[r->impl], p, s);
	atomic_store_explicit(seen, 1, memory_order_relaxed);
	t->count++;
}

static void *consumer(void *arg)
{
	struct thr *t = arg;
	struct run *r = t->r;
	unsigned max = r->impl == IMPL_COORD32 ? BATCH : 1;
	int64_t last[MAX_THREADS];
	uint64_t vals[BATCH];
	unsigned idle = 0;

	for (unsigned i = 0; i < MAX_THREADS; i++)
		last[i] = -1;
	pthread_barrier_wait(&r->start);
	t->start_ns = bench_now_ns();
	if (r->impl == IMPL_SEED) {
		void *v;

		while ((v = seedq_get(&r->seed)) != NULL)
			consume(t, last, (uint64_t)(uintptr_t)v);
		t->end_ns = bench_now_ns();
		return NULL;
	}
	for (;;) {
		unsigned n = pop(r, vals, max);

		if (n == 0) {
			/* Acquire: pairs with producer_done(): every push is done. */
			if (atomic_load_explicit(&r->done, memory_order_acquire)) {
				n = pop(r, vals, max);
				if (n == 0 && drained(r))
					break;
			}
			if (n == 0) {
				bench_backoff(&idle);
				continue;
			}
		}
		for (unsigned i = 0; i < n; i++)
			consume(t, last, vals[i]);
	}
	t->end_ns = bench_now_ns();
	return NULL;
}

static int setup(struct run *r)
{
	switch (r->impl) {
	case IMPL_SEED:
		return seedq_init(&r->seed, RING_CAP);
	case IMPL_COORD1:
	case IMPL_COORD32:
		return coord_ring_init(&r->coord, RING_CAP);
	case IMPL_CK:
		r->ckbuf = aligned_alloc(64, RING_CAP * sizeof(*r->ckbuf));
		if (!r->ckbuf)
			return -1;
		ck_ring_init(&r->ck, RING_CAP);
		return 0;
	case IMPL_WFCQ:
		cds_wfcq_init(&r->wh, &r->wt);
		return 0;
	default:
		abort();
	}
}

static void teardown(struct run *r)
{
	switch (r->impl) {
	case IMPL_SEED:
		seedq_fini(&r->seed);
		break;
	case IMPL_COORD1:
	case IMPL_COORD32:
		coord_ring_fini(&r->coord);
		break;
	case IMPL_CK:
		free(r->ckbuf);
		r->ckbuf = NULL;
		break;
	case IMPL_WFCQ:
		cds_wfcq_destroy(&r->wh, &r->wt);
		break;
	default:
		abort();
	}
}

/* One timed run; returns Mops/s, or -1 on a conservation failure. */
static double run_once(struct run *r)
{
	struct thr prod[MAX_THREADS], cons[MAX_THREADS];
	uint64_t t0 = UINT64_MAX, t1 = 0, total = 0;
	bool bad = false;

	if (setup(r) < 0) {
		bench_check(false, "%s: setup failed", impl_name[r->impl]);
		return -1;
	}
	for (unsigned p = 0; p < r->nprod; p++)
		memset(r->seen[p], 0, r->per_prod);
	atomic_store_explicit(&r->prod_left, r->nprod, memory_order_relaxed);
	atomic_store_explicit(&r->done, 0, memory_order_relaxed);
	pthread_barrier_init(&r->start, NULL, r->nprod + r->ncons + 1);
	for (unsigned i = 0; i < r->ncons; i++) {
		cons[i] = (struct thr){ .r = r, .id = i };
		if (pthread_create(&cons[i].t, NULL, consumer, &cons[i]))
			abort();
	}
	for (unsigned i = 0; i < r->nprod; i++) {
		prod[i] = (struct thr){ .r = r, .id = i };
		if (pthread_create(&prod[i].t, NULL, producer, &prod[i]))
			abort();
	}
	pthread_barrier_wait(&r->start);
	/* The run: from the first thread past the barrier to the last one done. */
	for (unsigned i = 0; i < r->nprod; i++) {
		pthread_join(prod[i].t, NULL);
		t0 = prod[i].start_ns < t0 ? prod[i].start_ns : t0;
	}
	for (unsigned i = 0; i < r->ncons; i++) {
		pthread_join(cons[i].t, NULL);
		total += cons[i].count;
		bad |= cons[i].bad;
		t0 = cons[i].start_ns < t0 ? cons[i].start_ns : t0;
		t1 = cons[i].end_ns > t1 ? cons[i].end_ns : t1;
	}
	pthread_barrier_destroy(&r->start);
	teardown(r);

	/* Conservation: everything pushed was popped exactly once. */
	bad |= !bench_check(total == r->per_prod * r->nprod,
			    "%s %uP%uC: pushed %" PRIu64 ", popped %" PRIu64, impl_name[r->impl],
			    r->nprod, r->ncons, r->per_prod * r->nprod, total);
	for (unsigned p = 0; p < r->nprod; p++)
		for (uint64_t s = 0; s < r->per_prod; s++)
			if (r->seen[p][s] != 1) {
				bad |= !bench_check(
					false, "%s: producer %u seq %" PRIu64 " never dequeued",
					impl_name[r->impl], p, s);
				break;
			}
	if (bad)
		return -1;
	return (double)total / ((double)(t1 - t0) / 1e3); /* values per us = Mops/s */
}

static void run_config(unsigned nprod, unsigned ncons, uint64_t total_ops, unsigned repeats)
{
	struct run *r = aligned_alloc(64, sizeof(*r));
	struct bench_samples smp[NIMPL] = { 0 };
	struct bench_stats st[NIMPL];
	char title[160];

	memset(r, 0, sizeof(*r));
	r->nprod = nprod;
	r->ncons = ncons;
	r->per_prod = total_ops / nprod;
	for (unsigned p = 0; p < nprod; p++) {
		r->seen[p] = malloc(r->per_prod);
		r->nodes[p] = aligned_alloc(64, r->per_prod * sizeof(struct wnode));
		if (!r->seen[p] || !r->nodes[p])
			abort();
		/* Fault the nodes in now, not inside the timing. */
		memset(r->nodes[p], 0, r->per_prod * sizeof(struct wnode));
	}
	/* Interleave implementations within each repeat, so that a noisy
	 * moment of the shared VM hits all of them alike.  Round 0 warms up. */
	for (unsigned rep = 0; rep <= repeats; rep++)
		for (unsigned i = 0; i < NIMPL; i++) {
			double mops;

			r->impl = (enum impl)i;
			mops = run_once(r);
			if (mops > 0 && rep > 0)
				bench_samples_add(&smp[i], mops);
		}

	snprintf(title, sizeof(title),
		 "bench_ring: %uP/%uC, %" PRIu64 " values per run, "
		 "capacity %u, %u repeats",
		 nprod, ncons, r->per_prod * nprod, RING_CAP, repeats);
	bench_header(title, "Mops/s; p99 = slow tail");
	for (unsigned i = 0; i < NIMPL; i++)
		bench_summarize(&smp[i], true, &st[i]);
	for (unsigned i = 0; i < NIMPL; i++)
		bench_row(impl_name[i], &st[i], &st[IMPL_SEED], true);
	printf("SUMMARY bench_ring config=%uP%uC values=%" PRIu64 " repeats=%u unit=Mops/s", nprod,
	       ncons, r->per_prod * nprod, repeats);
	for (unsigned i = 0; i < NIMPL; i++)
		printf(" %s=%.3f", impl_key[i], st[i].median);
	printf(" coord32_vs_seed=%.2fx coord1_vs_ck=%.2fx conservation=%s\n",
	       bench_speedup(&st[IMPL_COORD32], &st[IMPL_SEED], true),
	       bench_speedup(&st[IMPL_COORD1], &st[IMPL_CK], true),
	       bench_exit_code() ? "FAILED" : "ok");
	fflush(stdout);

	for (unsigned i = 0; i < NIMPL; i++)
		bench_samples_free(&smp[i]);
	for (unsigned p = 0; p < nprod; p++) {
		free(r->seen[p]);
		free(r->nodes[p]);
	}
	free(r);
}

int main(int argc, char **argv)
{
	struct bench_args a;
	uint64_t ops;

	bench_parse_args(argc, argv, &a);
	ops = a.quick ? 20000 : 1000000;
	run_config(1, 1, ops, a.repeats);
	/* Half as many with 4 threads on the 2-core VM: ck's enqueue spins
	 * unboundedly on a preempted producer (see the file comment). */
	run_config(2, 2, ops / 2, a.repeats);
	return bench_exit_code();
}
