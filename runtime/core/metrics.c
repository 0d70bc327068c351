// SPDX-License-Identifier: MIT
/*
 * runtime/core/metrics.c - coord_metrics() and the latency histograms (B7).
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/coord_pvt.h"

int coord_metrics(struct coord *c, struct coord_metrics *m, struct coord_worker_metrics *w,
		  unsigned nw)
{
	if (!c || !m)
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
		for (unsigned b = 0; b < COORD_HIST_BUCKETS; b++) {
			m->exec_ns.bucket[b] += stat_rd(&dm->exec[b]);
			m->round_trip_ns.bucket[b] += stat_rd(&dm->rt[b]);
		}
	}
	for (unsigned b = 0; b < COORD_HIST_BUCKETS; b++) {
		m->exec_ns.count += m->exec_ns.bucket[b];
		m->round_trip_ns.count += m->round_trip_ns.bucket[b];
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
	return 0;
}

uint64_t coord_hist_percentile(const struct coord_hist *h, double p)
{
	uint64_t need, seen = 0;

	if (!h || h->count == 0 || !(p > 0))
		return 0;
	need = (uint64_t)((p >= 100 ? 1.0 : p / 100.0) * (double)h->count);
	if (need == 0)
		need = 1;
	for (unsigned b = 0; b < COORD_HIST_BUCKETS; b++) {
		seen += h->bucket[b];
		if (seen >= need)
			return b >= 63 ? UINT64_MAX : (2ull << b) - 1;
	}
	return UINT64_MAX;
}
