// SPDX-License-Identifier: MIT
/*
 * runtime/core/metrics.c - coord_metrics() and the latency histograms (B7).
 *
 * Each dispatcher keeps its own counters and log-linear histograms (struct
 * coord_dmetrics; one writer, relaxed stores: hist_record() in coord_pvt.h);
 * a snapshot sums them without a lock.  struct coord_metrics is filled by
 * the library and can grow (runtime/util/abi.h): the caller's compiled size
 * comes through coord_metrics()'s inline wrapper.  coord_hist_percentile()
 * keeps its answer within 1/32 of the sample of that rank (coord.h).
 *
 * Synchronization: a dispatcher's counters and histograms are written by
 * its own thread and read by coord_metrics() (relaxed both: a snapshot, no
 * order needed); a worker's state is recovery.c's (R1).
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/coord_pvt.h"
#include "runtime/util/abi.h"

#define offsetofend(type, member) (offsetof(type, member) + sizeof(((type *)0)->member))

/* The size first published (0.2.0): never change it. */
#define METRICS_SIZE_0 offsetofend(struct coord_metrics, parked)

_Static_assert(COORD_HIST_SUB == 16, "hist_bucket() takes 4 bits below the leading one");
_Static_assert(COORD_HIST_BUCKETS % COORD_HIST_SUB == 0, "whole powers of two");

void coord_hist_add(struct coord_hist *h, struct coord_dhist *d)
{
	uint64_t mx = stat_rd(&d->max);

	h->sum += stat_rd(&d->sum);
	if (mx > h->max)
		h->max = mx;
	for (unsigned b = 0; b < COORD_HIST_BUCKETS; b++) {
		uint64_t n = stat_rd(&d->b[b]);

		h->bucket[b] += n;
		h->count += n;
	}
}

int coord_metrics_size(struct coord *c, struct coord_metrics *out, size_t size,
		       struct coord_worker_metrics *w, unsigned nw)
{
	struct coord_metrics mm, *m = &mm;

	if (!c || !out || size < METRICS_SIZE_0)
		return COORD_EINVAL;
	memset(m, 0, sizeof(*m));
	m->now_ns = coord_now_ns();
	m->queued = coord_queue_size(c);
	m->outstanding = outstanding_total(c);
	m->cancelled = stat_rd(&c->cancelled);
	m->waits = stat_rd(&c->waits);
	m->parked = stat_rd(&c->parked);
	m->completed = m->failed = stat_rd(&c->dep_failed); /* B1: input errors */
	for (unsigned i = 0; i < c->ndisp; i++) {
		struct coord_dmetrics *dm = &c->disp[i].m;

		m->in_flight += stat_rd(&c->disp[i].inflight);
		m->completed += stat_rd(&dm->finished);
		m->failed += stat_rd(&dm->failed);
		m->put_back += stat_rd(&dm->put_back);
		coord_hist_add(&m->exec_ns, &dm->exec);
		coord_hist_add(&m->round_trip_ns, &dm->rt);
	}
	m->workers = c->nworkers;
	for (unsigned i = 0; i < c->nworkers; i++) {
		struct coord_worker *wk = &c->workers[i];
		/* Relaxed: as in stat_rd(). */
		int st = atomic_load_explicit(&wk->state, memory_order_relaxed);
		uint64_t lo = stat_rd(&wk->losses), re = stat_rd(&wk->recoveries);

		m->workers_up += st == COORD_WORKER_UP;
		m->workers_down += st == COORD_WORKER_DOWN;
		m->workers_dropped += st == COORD_WORKER_DROPPED;
		m->losses += lo;
		m->recoveries += re;
		if (w && i < nw) {
			w[i].state = st;
			w[i].executed = stat_rd(&wk->executed);
			w[i].losses = lo;
			w[i].recoveries = re;
		}
	}
	return coord_struct_out(out, size, m, sizeof(*m), METRICS_SIZE_0, "coord_metrics", NULL);
}

/* Bucket @b's lowest value and width (coord.h, struct coord_hist). */
static void bucket_bounds(unsigned b, uint64_t *lo, uint64_t *width)
{
	unsigned k;

	if (b < 2 * COORD_HIST_SUB) {
		*lo = b;
		*width = 1;
		return;
	}
	k = b / COORD_HIST_SUB - 1;
	*lo = (uint64_t)(COORD_HIST_SUB + b % COORD_HIST_SUB) << k;
	*width = 1ull << k;
}

uint64_t coord_hist_percentile(const struct coord_hist *h, double p)
{
	uint64_t need, seen = 0, lo, width, v;
	unsigned b;

	if (!h || h->count == 0)
		return 0;
	if (!(p > 0)) /* also NaN */
		need = 1;
	else if (p >= 100)
		need = h->count;
	else {
		double r = p / 100.0 * (double)h->count;

		need = (uint64_t)r;
		need += (double)need < r; /* nearest rank: ceil */
		if (need == 0)
			need = 1;
	}
	for (b = 0; b < COORD_HIST_BUCKETS - 1; b++) {
		seen += h->bucket[b];
		if (seen >= need)
			break;
	}
	bucket_bounds(b, &lo, &width);
	v = lo + width / 2;
	/* The last bucket is open; a snapshot's max may trail its buckets. */
	if (h->max >= lo && (v > h->max || b == COORD_HIST_BUCKETS - 1))
		v = h->max;
	return v;
}

int coord_hist_sub(struct coord_hist *out, const struct coord_hist *a, const struct coord_hist *b)
{
	uint64_t count = 0;

	if (!out || !a || !b || a->sum < b->sum)
		return COORD_EINVAL;
	for (unsigned i = 0; i < COORD_HIST_BUCKETS; i++)
		if (a->bucket[i] < b->bucket[i])
			return COORD_EINVAL;
	for (unsigned i = 0; i < COORD_HIST_BUCKETS; i++) {
		out->bucket[i] = a->bucket[i] - b->bucket[i];
		count += out->bucket[i];
	}
	out->sum = a->sum - b->sum;
	out->max = a->max;
	out->count = count;
	return 0;
}
