// SPDX-License-Identifier: MIT
/*
 * bench/fault_sampler.c - bench_fault's sampler (fault_sampler.h): one
 * thread samples the coordinator's metrics every BUCKET_MS on an absolute
 * clock (late: no catching up); the rates are read from its buckets after
 * it is joined, which orders every sample before them.
 */
#include <errno.h>
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "fault_sampler.h"
#include "stats.h"

void snap(struct coord *c, struct coord_metrics *m)
{
	if (coord_metrics(c, m, NULL, 0) != 0) {
		fprintf(stderr, "bench_fault: coord_metrics failed\n");
		exit(1);
	}
}

static void *sampler_main(void *arg)
{
	struct sampler *sp = arg;
	uint64_t next = bench_now_ns();

	/* Relaxed: a stop flag; the join orders the samples. */
	while (!atomic_load_explicit(&sp->stop, memory_order_relaxed) &&
	       sp->n < sizeof(sp->s) / sizeof(sp->s[0])) {
		struct coord_metrics m;
		struct timespec ts;

		snap(sp->c, &m);
		sp->s[sp->n++] = (struct sample){ m.now_ns, m.completed, m.workers_up };
		next += BUCKET_MS * 1000000ull;
		if (next < m.now_ns) /* late (a busy machine): no catching up */
			next = m.now_ns;
		ts.tv_sec = (time_t)(next / 1000000000ull);
		ts.tv_nsec = (long)(next % 1000000000ull);
		while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, &ts, NULL) == EINTR)
			;
	}
	return NULL;
}

void sampler_start(struct sampler *sp, struct coord *c)
{
	sp->c = c;
	sp->n = 0;
	atomic_init(&sp->stop, false);
	if (pthread_create(&sp->thread, NULL, sampler_main, sp) != 0) {
		fprintf(stderr, "bench_fault: cannot start the sampler thread\n");
		exit(1);
	}
}

void sampler_stop(struct sampler *sp)
{
	/* Relaxed: see sampler_main(). */
	atomic_store_explicit(&sp->stop, true, memory_order_relaxed);
	pthread_join(sp->thread, NULL);
}

/* The rate of the bucket ending at sample @j (> 0). */
static double bucket_rate(const struct sampler *sp, size_t j)
{
	uint64_t dt = sp->s[j].t - sp->s[j - 1].t;

	return dt ? (double)(sp->s[j].completed - sp->s[j - 1].completed) / ((double)dt / 1e9) : 0;
}

/* The median bucket rate over buckets inside [@from, @to). */
double median_rate(const struct sampler *sp, uint64_t from, uint64_t to)
{
	struct bench_samples r = { 0 };
	struct bench_stats st;

	for (size_t j = 1; j < sp->n; j++)
		if (sp->s[j - 1].t >= from && sp->s[j].t <= to)
			bench_samples_add(&r, bucket_rate(sp, j));
	bench_summarize(&r, true, &st);
	bench_samples_free(&r);
	return st.median;
}

/*
 * Time from @kill to the end of the first bucket starting after it that,
 * with the next one, runs at >= @thr closures/s, both before @until; ms, or
 * -1 when none does.
 */
double recovered_ms(const struct sampler *sp, uint64_t kill, uint64_t until, double thr)
{
	for (size_t j = 1; j + 1 < sp->n && sp->s[j + 1].t <= until; j++)
		if (sp->s[j - 1].t >= kill && bucket_rate(sp, j) >= thr &&
		    bucket_rate(sp, j + 1) >= thr)
			return (double)(sp->s[j].t - kill) / 1e6;
	return -1;
}

/* The mean rate over [@from, @to) (samples inside it). */
double mean_rate(const struct sampler *sp, uint64_t from, uint64_t to)
{
	size_t a = 0, b = 0;

	for (size_t j = 0; j < sp->n; j++) {
		if (sp->s[j].t < from)
			a = j + 1;
		if (sp->s[j].t <= to)
			b = j;
	}
	if (a >= b || a >= sp->n)
		return 0;
	return (double)(sp->s[b].completed - sp->s[a].completed) /
	       ((double)(sp->s[b].t - sp->s[a].t) / 1e9);
}

/* The lowest bucket rate among buckets ending in (@from, @to]. */
double min_rate(const struct sampler *sp, uint64_t from, uint64_t to)
{
	double lo = INFINITY;

	for (size_t j = 1; j < sp->n; j++)
		if (sp->s[j].t > from && sp->s[j].t <= to && bucket_rate(sp, j) < lo)
			lo = bucket_rate(sp, j);
	return isinf(lo) ? 0 : lo;
}

/* $BENCH_FAULT_SERIES: SERIES_MS buckets from the flow's start @t0. */
void write_series(const struct sampler *sp, uint64_t t0, uint64_t kill, uint64_t restart,
		  uint64_t back, unsigned nproc, unsigned inflight)
{
	const char *path = getenv("BENCH_FAULT_SERIES");
	size_t step = SERIES_MS / BUCKET_MS, last = 0;
	FILE *f;

	if (!path || !*path)
		return;
	f = fopen(path, "w");
	if (!f) {
		fprintf(stderr, "bench_fault: cannot write %s: %s\n", path, strerror(errno));
		return;
	}
	fprintf(f,
		"# bench_fault: %d coord-worker processes, %d closures in flight, one worker "
		"SIGKILLed and restarted on its port; %d ms buckets\n",
		nproc, inflight, SERIES_MS);
	fprintf(f, "# kill_ms=%.1f restart_ms=%.1f readmit_ms=%.1f\n", (double)(kill - t0) / 1e6,
		(double)(restart - t0) / 1e6, back ? (double)(back - t0) / 1e6 : -1.0);
	fprintf(f, "# t_ms closures_per_s workers_up\n");
	for (size_t j = step; j < sp->n; j += step) {
		double dt = (double)(sp->s[j].t - sp->s[last].t) / 1e9;

		fprintf(f, "%.1f %.0f %u\n", (double)(sp->s[j].t - t0) / 1e6,
			dt > 0 ? (double)(sp->s[j].completed - sp->s[last].completed) / dt : 0,
			sp->s[j].up);
		last = j;
	}
	fclose(f);
}
