// SPDX-License-Identifier: MIT
/*
 * bench/bench_dataflow.c - RemoteValues as arguments (B1), in process,
 * against the way a TensorFlow user has to do it (fetch the value, then
 * schedule the next closure with it as an argument), in the same run.
 *
 * Workloads:
 *   chain    N closures, each adding 1 to the previous one's int64 value.
 *            coord dataflow: schedule all N at once, each with the previous
 *            RemoteValue as its input (handles dropped at once), then fetch
 *            the last.  Baseline: schedule one, fetch it, schedule the next
 *            with the value as its argument (a round trip through the user
 *            per link).  closures/s; 1 and 2 workers.  The last value must
 *            be N (else exit 1).
 *   fan-in   K = 1,000 closures each returning its index, then one closure
 *            summing them.  Sample = time from the first schedule to the
 *            sum's fetch.  coord dataflow: the sum is scheduled at once
 *            with the K RemoteValues as inputs.  Baseline: fetch the K
 *            values, copy them into one argument buffer, schedule the sum.
 *            The sum must be K(K-1)/2 (else exit 1).  2 workers.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <coord/coord.h>

#include "stats.h"

#define FANIN 1000

static int fn_inc(struct coord_ctx *ctx, const void *args, size_t len)
{
	int64_t x = 0;
	size_t l;
	const void *v;

	if (coord_ctx_num_inputs(ctx)) {
		v = coord_ctx_input(ctx, 0, &l);
		if (l == sizeof(x))
			memcpy(&x, v, sizeof(x));
	} else if (len == sizeof(x)) {
		memcpy(&x, args, sizeof(x));
	}
	x++;
	return coord_ctx_set_result(ctx, &x, sizeof(x));
}

static int fn_id(struct coord_ctx *ctx, const void *args, size_t len)
{
	return coord_ctx_set_result(ctx, args, len);
}

/* Sum of the int64 inputs, or of the int64 arguments when there are none. */
static int fn_sum(struct coord_ctx *ctx, const void *args, size_t len)
{
	unsigned n = coord_ctx_num_inputs(ctx);
	int64_t s = 0, x;
	size_t l;

	for (unsigned i = 0; i < n; i++) {
		const void *v = coord_ctx_input(ctx, i, &l);

		if (l != sizeof(x))
			return COORD_EINVAL;
		memcpy(&x, v, sizeof(x));
		s += x;
	}
	for (size_t i = 0; !n && i + sizeof(x) <= len; i += sizeof(x)) {
		memcpy(&x, (const char *)args + i, sizeof(x));
		s += x;
	}
	return coord_ctx_set_result(ctx, &s, sizeof(s));
}

struct fns {
	uint32_t inc, id, sum;
};

static struct coord *make(struct coord_registry *reg, unsigned nw, struct fns *f)
{
	struct coord_opts o;
	struct coord_error err;
	struct coord *c;

	coord_opts_init(&o);
	o.registry = reg;
	o.inproc_workers = nw;
	if (coord_create(NULL, &o, &c, &err) || coord_fn_lookup(c, "inc", &f->inc, &err) ||
	    coord_fn_lookup(c, "id", &f->id, &err) || coord_fn_lookup(c, "sum", &f->sum, &err)) {
		fprintf(stderr, "coord setup: %s\n", err.msg);
		exit(1);
	}
	return c;
}

static int64_t fetch64(struct coord_rv *rv)
{
	const void *v;
	size_t len;
	int64_t x = -1;

	if (coord_rv_fetch(rv, &v, &len, NULL) == 0 && len == sizeof(x))
		memcpy(&x, v, sizeof(x));
	return x;
}

/* closures/s of a dataflow chain of @n. */
static double chain_dataflow(struct coord *c, const struct fns *f, uint64_t n)
{
	struct coord_rv *prev = NULL, *next;
	uint64_t t0 = bench_now_ns();
	int64_t last;

	for (uint64_t i = 0; i < n; i++) {
		struct coord_call call = { .fn = f->inc, .inputs = &prev, .ninputs = prev ? 1 : 0 };

		if (coord_schedule_call(c, &call, &next, NULL)) {
			bench_check(false, "chain: schedule failed");
			return -1;
		}
		coord_rv_put(prev);
		prev = next;
	}
	last = fetch64(prev);
	coord_rv_put(prev);
	bench_check(last == (int64_t)n, "dataflow chain: last value %" PRId64 ", want %" PRIu64,
		    last, n);
	return (double)n / ((double)(bench_now_ns() - t0) / 1e9);
}

/* The same chain through the user: fetch, then schedule with the value. */
static double chain_user(struct coord *c, const struct fns *f, uint64_t n)
{
	uint64_t t0 = bench_now_ns();
	int64_t x = 0;

	for (uint64_t i = 0; i < n; i++) {
		struct coord_rv *rv;

		if (coord_schedule(c, f->inc, &x, sizeof(x), &rv, NULL)) {
			bench_check(false, "chain: schedule failed");
			return -1;
		}
		x = fetch64(rv);
		coord_rv_put(rv);
	}
	bench_check(x == (int64_t)n, "user chain: last value %" PRId64 ", want %" PRIu64, x, n);
	return (double)n / ((double)(bench_now_ns() - t0) / 1e9);
}

/* One fan-in, us from the first schedule to the sum. */
static double fanin(struct coord *c, const struct fns *f, bool dataflow)
{
	static struct coord_rv *in[FANIN];
	static int64_t vals[FANIN];
	struct coord_rv *sum;
	uint64_t t0 = bench_now_ns();
	int64_t s;

	for (int64_t i = 0; i < FANIN; i++)
		if (coord_schedule(c, f->id, &i, sizeof(i), &in[i], NULL))
			bench_check(false, "fan-in: schedule failed");
	if (dataflow) {
		struct coord_call call = { .fn = f->sum, .inputs = in, .ninputs = FANIN };

		if (coord_schedule_call(c, &call, &sum, NULL))
			bench_check(false, "fan-in: schedule failed");
	} else {
		for (int i = 0; i < FANIN; i++)
			vals[i] = fetch64(in[i]);
		if (coord_schedule(c, f->sum, vals, sizeof(vals), &sum, NULL))
			bench_check(false, "fan-in: schedule failed");
	}
	s = fetch64(sum);
	t0 = bench_now_ns() - t0;
	coord_rv_put(sum);
	for (int i = 0; i < FANIN; i++)
		coord_rv_put(in[i]);
	bench_check(s == (int64_t)FANIN * (FANIN - 1) / 2, "fan-in: sum %" PRId64, s);
	return (double)t0 / 1e3;
}

int main(int argc, char **argv)
{
	struct bench_args a;
	struct coord_registry *reg;
	uint64_t n;
	unsigned nf;

	bench_parse_args(argc, argv, &a);
	n = a.quick ? 10000 : 200000;
	nf = a.quick ? 20 : 200;
	if (coord_registry_create(&reg) || coord_registry_add(reg, "inc", fn_inc) ||
	    coord_registry_add(reg, "id", fn_id) || coord_registry_add(reg, "sum", fn_sum)) {
		fprintf(stderr, "registry setup failed\n");
		return 1;
	}
	for (unsigned nw = 1; nw <= 2; nw++) {
		struct bench_samples ds = { 0 }, us = { 0 };
		struct bench_stats dst, ust;
		struct fns f;
		struct coord *c = make(reg, nw, &f);
		char title[200];

		for (unsigned rep = 0; rep <= a.repeats; rep++) { /* round 0 warms up */
			double d = chain_dataflow(c, &f, n), u = chain_user(c, &f, n / 10);

			if (rep && d > 0)
				bench_samples_add(&ds, d);
			if (rep && u > 0)
				bench_samples_add(&us, u);
		}
		coord_destroy(c);
		bench_summarize(&ds, true, &dst);
		bench_summarize(&us, true, &ust);
		snprintf(title, sizeof(title),
			 "bench_dataflow chain: %u worker%s, %" PRIu64
			 " dependent closures per repeat (baseline: %" PRIu64 "), %u repeats",
			 nw, nw > 1 ? "s" : "", n, n / 10, a.repeats);
		bench_header(title, "closures/s; p99 = slow tail");
		bench_row("fetch, then schedule with the value (baseline)", &ust, &ust, true);
		bench_row("coord dataflow (RemoteValue as input)", &dst, &ust, true);
		printf("SUMMARY bench_dataflow config=chain workers=%u closures=%" PRIu64
		       " repeats=%u dataflow_closures_per_s=%.0f user_closures_per_s=%.0f "
		       "ratio=%.2fx conservation=%s\n",
		       nw, n, a.repeats, dst.median, ust.median, bench_speedup(&dst, &ust, true),
		       bench_exit_code() ? "FAILED" : "ok");
		fflush(stdout);
		bench_samples_free(&ds);
		bench_samples_free(&us);
	}
	{
		struct bench_samples ds = { 0 }, us = { 0 };
		struct bench_stats dst, ust;
		struct fns f;
		struct coord *c = make(reg, 2, &f);
		char title[200];

		for (unsigned i = 0; i <= nf; i++) { /* alternate; the first warms up */
			double d = fanin(c, &f, true), u = fanin(c, &f, false);

			if (i) {
				bench_samples_add(&ds, d);
				bench_samples_add(&us, u);
			}
		}
		coord_destroy(c);
		bench_summarize(&ds, false, &dst);
		bench_summarize(&us, false, &ust);
		snprintf(title, sizeof(title),
			 "bench_dataflow fan-in: 2 workers, %d inputs to one closure, "
			 "first schedule to the sum fetched, %u samples",
			 FANIN, nf);
		bench_header(title, "us per fan-in");
		bench_row("fetch all, copy into args (baseline)", &ust, &ust, false);
		bench_row("coord dataflow (1,000 inputs)", &dst, &ust, false);
		printf("SUMMARY bench_dataflow config=fan_in workers=2 inputs=%d samples=%u "
		       "dataflow_p50_us=%.1f dataflow_p99_us=%.1f user_p50_us=%.1f "
		       "user_p99_us=%.1f speedup=%.2fx conservation=%s\n",
		       FANIN, nf, dst.median, dst.p99, ust.median, ust.p99,
		       bench_speedup(&dst, &ust, false), bench_exit_code() ? "FAILED" : "ok");
		bench_samples_free(&ds);
		bench_samples_free(&us);
	}
	coord_registry_destroy(reg);
	return bench_exit_code();
}
