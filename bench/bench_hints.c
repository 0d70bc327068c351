// SPDX-License-Identifier: MIT
/*
 * bench/bench_hints.c - worker affinity and priority (B4), in process,
 * against coord's default path in the same run.
 *
 * Workloads:
 *   throughput  schedule N closures of an empty function with no
 *               RemoteValue kept, then join; closures/s = N / (first
 *               schedule .. join returned); 2 workers.  Rows: no hints (the
 *               baseline: the ring), priority HIGH only, strict affinity
 *               alternating between the workers, preferred affinity
 *               likewise.  Hinted closures go through the hint queue
 *               (runtime/sched.c): a lock-free push, then dispatchers match
 *               them under a lock in batches, so this prints what a hint
 *               costs per closure.
 *   jump        with a backlog of B closures of a ~2 us function queued on
 *               2 workers, schedule one more closure and time until it
 *               starts running (it stamps the clock on entry): NORMAL (the
 *               baseline: it waits for the backlog) against URGENT
 *               (dispatched before the backlog).  Its start, not its fetch:
 *               with both CPUs running workers, the fetching thread's own
 *               wake-up waits for the kernel's scheduler (milliseconds),
 *               which is not what priority is about.  One sample per repeat
 *               of each.
 *
 * The "default path before and after" comparison of the issue (coord's
 * bench_e2e built at the commit before B4 against the current one, side by
 * side) is bench/compare_rev.sh, since it needs two builds.
 *
 * Conservation: every throughput run counts its calls (exit 1 if they do
 * not add up); every jump fetch must succeed.
 */
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <coord/coord.h>

#include "stats.h"

static _Atomic uint64_t calls;

static int fn_empty(struct coord_ctx *ctx, const void *args, size_t len)
{
	(void)ctx;
	(void)args;
	(void)len;
	/* Relaxed: a count read after join (which orders it). */
	atomic_fetch_add_explicit(&calls, 1, memory_order_relaxed);
	return 0;
}

static _Atomic uint64_t mark_ns;

/* Stamp the clock, then fn_spin(). */
static int fn_spin(struct coord_ctx *ctx, const void *args, size_t len);
static int fn_mark(struct coord_ctx *ctx, const void *args, size_t len)
{
	/* Relaxed: read after the fetch, which orders it. */
	atomic_store_explicit(&mark_ns, bench_now_ns(), memory_order_relaxed);
	return fn_spin(ctx, args, len);
}

/* About 2 us of work. */
static int fn_spin(struct coord_ctx *ctx, const void *args, size_t len)
{
	uint64_t until = bench_now_ns() + 2000;

	(void)ctx;
	(void)args;
	(void)len;
	while (bench_now_ns() < until)
		bench_relax();
	return 0;
}

enum mode { M_NONE, M_PRIO, M_STRICT, M_PREF, M_NMODES };

static const char *const mode_name[M_NMODES] = {
	"no hints (baseline: the ring)",
	"priority HIGH",
	"strict affinity, alternating",
	"preferred affinity, alternating",
};

static double run_throughput(struct coord *c, uint32_t fn, enum mode m, uint64_t n)
{
	struct coord_call call = { .fn = fn };
	uint64_t t0 = bench_now_ns(), before;

	before = atomic_load(&calls);
	for (uint64_t i = 0; i < n; i++) {
		if (m == M_PRIO)
			call.priority = COORD_PRIO_HIGH;
		if (m == M_STRICT || m == M_PREF) {
			call.affinity = COORD_ON_WORKER(i & 1);
			call.affinity_mode = m == M_PREF ? COORD_AFFINITY_PREFERRED
							 : COORD_AFFINITY_STRICT;
		}
		if (coord_schedule_call(c, &call, NULL, NULL)) {
			bench_check(false, "schedule failed");
			return -1;
		}
	}
	if (coord_join(c, NULL)) {
		bench_check(false, "join failed");
		return -1;
	}
	t0 = bench_now_ns() - t0;
	bench_check(atomic_load(&calls) - before == n, "%s: %" PRIu64 " calls, want %" PRIu64,
		    mode_name[m], atomic_load(&calls) - before, n);
	return (double)n / ((double)t0 / 1e9);
}

/* us until one closure of @prio, scheduled behind @backlog, starts. */
static double run_jump(struct coord *c, uint32_t spin, uint32_t mark, int prio, uint64_t backlog)
{
	struct coord_call call = { .fn = mark, .priority = prio };
	struct coord_rv *rv;
	uint64_t t0;
	double us;

	for (uint64_t i = 0; i < backlog; i++)
		if (coord_schedule(c, spin, NULL, 0, NULL, NULL))
			bench_check(false, "backlog schedule failed");
	t0 = bench_now_ns();
	if (coord_schedule_call(c, &call, &rv, NULL) || coord_rv_fetch(rv, NULL, NULL, NULL) != 0) {
		bench_check(false, "jump: schedule or fetch failed");
		return -1;
	}
	us = (double)(atomic_load(&mark_ns) - t0) / 1e3;
	coord_rv_put(rv);
	if (coord_join(c, NULL))
		bench_check(false, "jump: join failed");
	return us;
}

int main(int argc, char **argv)
{
	struct bench_samples s[M_NMODES] = { 0 }, jn = { 0 }, ju = { 0 };
	struct bench_stats st[M_NMODES], jns, jus;
	struct coord_registry *reg;
	struct coord_opts o;
	struct coord_error err;
	struct bench_args a;
	struct coord *c;
	uint32_t empty, spin, mark;
	uint64_t n, backlog;
	char title[200];

	bench_parse_args(argc, argv, &a);
	n = a.quick ? 20000 : 1000000;
	backlog = a.quick ? 2000 : 50000;
	if (coord_registry_create(&reg) || coord_registry_add(reg, "empty", fn_empty) ||
	    coord_registry_add(reg, "spin", fn_spin) || coord_registry_add(reg, "mark", fn_mark)) {
		fprintf(stderr, "registry setup failed\n");
		return 1;
	}
	coord_opts_init(&o);
	o.registry = reg;
	o.inproc_workers = 2;
	if (coord_create(NULL, &o, &c, &err) || coord_fn_lookup(c, "empty", &empty, &err) ||
	    coord_fn_lookup(c, "spin", &spin, &err) || coord_fn_lookup(c, "mark", &mark, &err)) {
		fprintf(stderr, "coord setup: %s\n", err.msg);
		return 1;
	}
	for (unsigned rep = 0; rep <= a.repeats; rep++) /* round 0 warms up */
		for (int m = 0; m < M_NMODES; m++) {
			double r = run_throughput(c, empty, (enum mode)m, n);

			if (rep && r > 0)
				bench_samples_add(&s[m], r);
		}
	for (int m = 0; m < M_NMODES; m++)
		bench_summarize(&s[m], true, &st[m]);
	snprintf(title, sizeof(title),
		 "bench_hints throughput: 2 in-process workers, %" PRIu64
		 " empty closures per repeat, %u repeats",
		 n, a.repeats);
	bench_header(title, "closures/s; p99 = slow tail");
	for (int m = 0; m < M_NMODES; m++)
		bench_row(mode_name[m], &st[m], &st[M_NONE], true);
	printf("SUMMARY bench_hints config=throughput workers=2 closures=%" PRIu64
	       " repeats=%u none_per_s=%.0f prio_per_s=%.0f strict_per_s=%.0f pref_per_s=%.0f "
	       "prio_ratio=%.2fx strict_ratio=%.2fx conservation=%s\n",
	       n, a.repeats, st[M_NONE].median, st[M_PRIO].median, st[M_STRICT].median,
	       st[M_PREF].median, bench_speedup(&st[M_PRIO], &st[M_NONE], true),
	       bench_speedup(&st[M_STRICT], &st[M_NONE], true),
	       bench_exit_code() ? "FAILED" : "ok");
	fflush(stdout);

	for (unsigned rep = 0; rep <= a.repeats; rep++) { /* alternate; round 0 warms up */
		double x = run_jump(c, spin, mark, COORD_PRIO_NORMAL, backlog);
		double y = run_jump(c, spin, mark, COORD_PRIO_URGENT, backlog);

		if (rep && x > 0 && y > 0) {
			bench_samples_add(&jn, x);
			bench_samples_add(&ju, y);
		}
	}
	bench_summarize(&jn, false, &jns);
	bench_summarize(&ju, false, &jus);
	snprintf(title, sizeof(title),
		 "bench_hints jump: one closure behind %" PRIu64
		 " queued 2-us closures, 2 workers, schedule to start, %u repeats",
		 backlog, a.repeats);
	bench_header(title, "us");
	bench_row("NORMAL (baseline: waits for the backlog)", &jns, &jns, false);
	bench_row("URGENT", &jus, &jns, false);
	printf("SUMMARY bench_hints config=jump workers=2 backlog=%" PRIu64
	       " repeats=%u normal_p50_us=%.0f urgent_p50_us=%.1f urgent_p99_us=%.1f "
	       "speedup=%.0fx conservation=%s\n",
	       backlog, a.repeats, jns.median, jus.median, jus.p99,
	       bench_speedup(&jus, &jns, false), bench_exit_code() ? "FAILED" : "ok");
	coord_destroy(c);
	coord_registry_destroy(reg);
	for (int m = 0; m < M_NMODES; m++)
		bench_samples_free(&s[m]);
	bench_samples_free(&jn);
	bench_samples_free(&ju);
	return bench_exit_code();
}
