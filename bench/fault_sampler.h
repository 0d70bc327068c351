/* SPDX-License-Identifier: MIT */
/*
 * bench/fault_sampler.h - bench_fault's sampler: a thread that reads
 * coord_metrics() (completed, workers_up) every BUCKET_MS, and the rates
 * bench_fault.c takes from its buckets (median, mean, lowest, when it
 * recovered) and the series it writes for bench/report.sh.
 */
#ifndef COORD_BENCH_FAULT_SAMPLER_H
#define COORD_BENCH_FAULT_SAMPLER_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <coord/coord.h>

#define BUCKET_MS 10 /* the sampler's period: recovery resolution */
#define SERIES_MS 20 /* one line of $BENCH_FAULT_SERIES */

struct sample {
	uint64_t t, completed;
	unsigned up;
};

struct sampler {
	struct coord *c;
	pthread_t thread;
	_Atomic bool stop;
	struct sample s[4096]; /* 40 s of buckets: more than any flow here */
	size_t n;
};

/* coord_metrics() of @c into @m; exits on a failure. */
void snap(struct coord *c, struct coord_metrics *m);

void sampler_start(struct sampler *sp, struct coord *c);
void sampler_stop(struct sampler *sp);
double median_rate(const struct sampler *sp, uint64_t from, uint64_t to);
double recovered_ms(const struct sampler *sp, uint64_t kill, uint64_t until, double thr);
double mean_rate(const struct sampler *sp, uint64_t from, uint64_t to);
double min_rate(const struct sampler *sp, uint64_t from, uint64_t to);
/* $BENCH_FAULT_SERIES (@nproc workers, @inflight closures in flight). */
void write_series(const struct sampler *sp, uint64_t t0, uint64_t kill, uint64_t restart,
		  uint64_t back, unsigned nproc, unsigned inflight);

#endif
