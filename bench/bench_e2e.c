// SPDX-License-Identifier: MIT
/*
 * bench/bench_e2e.c - in-process end to end: coord against the seed's
 * design driving the same workload, in the same run.
 *
 * Seed design (bench/seedq.h, the strongest faithful port): schedule() puts
 * a closure (made before the timed region) on the _CoordinatedClosureQueue
 * port (one lock, its condition variables, the inflight count); 1 or 2
 * worker threads get() a closure, run the function, set its RemoteValue (an
 * atomic word + futex), fetch it, mark_finished(); join() is the queue's
 * wait().
 *
 * Workloads (implementations alternate within a round; round 0 warms up;
 * every ratio is taken per round, a / b of the same round, and reported as
 * the median with min - max over the rounds, never a best run):
 *   throughput  schedule N closures of an (almost) empty function with no
 *               RemoteValue kept, then join; closures/s = N / (first
 *               schedule .. join returned).  1 and 2 workers.  Four rows,
 *               each batched form against the other's in the same round:
 *                 seed, one put() per closure (the seed's schedule());
 *                 seed, put_many(): 64 closures per acquisition of its locks
 *                   and one notify (the seed design's best batched form;
 *                   its workers still get() one at a time, as the seed's);
 *                 coord_schedule(), one call per closure (x the first);
 *                 coord_schedule_many(), 64 calls per call (x the second).
 *               The coord_schedule() calls of the per-closure row are also
 *               timed in batches of 64 (clock_gettime), giving coord's
 *               per-call cost while workers drain (and, past the queue's
 *               capacity, while schedule() waits for room).
 *   fetched     every result fetched: N closures returning an int64 with
 *               256 RemoteValues kept in flight (fetch the oldest, check
 *               and drop it, schedule the next); against the seed design
 *               doing the same, and against coord's no-result rate of the
 *               same round.
 *   large args  64 KiB arguments, F = 1, 64, 256, 1024 RemoteValues in
 *               flight (every one fetched); F alternates within a round.
 *   round trip  one closure at a time with 1 worker: schedule, fetch the
 *               value, drop it; each round trip is one sample.
 *
 * The function bumps its worker's call counter and adds its argument to the
 * worker's sum (one padded slot per worker, written only by that worker);
 * after each join the counts and the sum must equal what was scheduled.  The
 * echo function returns arg ^ 0x5a5a, checked on every fetch.  Any
 * discrepancy exits 1.
 *
 * --throughput-only runs the throughput and fetched tables alone (A/B runs).
 * --fetch-cost runs only a probe of the fetched path that a loaded machine
 * does not blur (fetch_cost()): each side's serial cost per fetched
 * closure, with the closures' lines in the other side's cache.
 * Knobs for exploring (not used by run.sh): BENCH_SPIN_NS and BENCH_BATCH
 * in the environment set coord_opts.spin_ns and .batch of every coordinator
 * made here; the values are printed in the titles.
 *
 * Targets (issue 23; reported met / not_met, never asserted):
 *   throughput, 1 and 2 workers: median per-round ratio >= 15x the seed
 *   port's put(), and >= 10x in every round;
 *   every result fetched: >= 25 M closures/s and >= 0.5x the no-result
 *   rate; 64 KiB arguments: the rate at F = 1024 >= 0.9x the best F's;
 *   coord_schedule() median <= 100 ns; round trip p50 <= 5 us.
 */
#include <inttypes.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <coord/coord.h>

#include "seedq.h"
#include "stats.h"

#define BATCH 64
#define MAX_WORKERS 2
#define XOR 0x5a5a

struct wstat {
	uint64_t count, sum;
} __attribute__((aligned(64)));

static struct wstat wstats[MAX_WORKERS];

/* The work, shared by both implementations. */
static inline void count_work(int w, int64_t arg)
{
	wstats[w].count++;
	wstats[w].sum += (uint64_t)arg;
}

static int coord_count(struct coord_ctx *ctx, const void *args, size_t len)
{
	int64_t a;

	memcpy(&a, args, sizeof(a));
	count_work(coord_ctx_worker(ctx), a);
	return 0;
}

static int coord_echo(struct coord_ctx *ctx, const void *args, size_t len)
{
	int64_t a;

	memcpy(&a, args, sizeof(a));
	count_work(coord_ctx_worker(ctx), a);
	a ^= XOR;
	return coord_ctx_set_result(ctx, &a, sizeof(a));
}

static void seed_count(int w, int64_t arg, int64_t *res)
{
	count_work(w, arg);
	*res = 0; /* the seed's RemoteValue is always set */
}

static void seed_echo(int w, int64_t arg, int64_t *res)
{
	count_work(w, arg);
	*res = arg ^ XOR;
}

static void reset_counts(void)
{
	memset(wstats, 0, sizeof(wstats));
}

static void check_counts(const char *impl, uint64_t n)
{
	uint64_t c = 0, s = 0;

	for (int i = 0; i < MAX_WORKERS; i++) {
		c += wstats[i].count;
		s += wstats[i].sum;
	}
	bench_check(c == n, "%s: %" PRIu64 " closures scheduled, %" PRIu64 " completed", impl, n,
		    c);
	bench_check(s == n * (n - 1) / 2, "%s: argument sum %" PRIu64 ", want %" PRIu64, impl, s,
		    n * (n - 1) / 2);
}

struct env {
	struct coord_registry *reg;
	uint64_t n_tput, n_rtt;
	unsigned repeats;
	uint64_t spin_ns; /* of the last coordinator made, for the titles */
	unsigned batch;
};

static struct coord *make_coord(struct env *e, unsigned nw, uint32_t *f_count, uint32_t *f_echo)
{
	struct coord_opts opts;
	struct coord_error err;
	struct coord *c;

	coord_opts_init(&opts);
	opts.registry = e->reg;
	opts.inproc_workers = nw;
	if (getenv("BENCH_SPIN_NS"))
		opts.spin_ns = strtoull(getenv("BENCH_SPIN_NS"), NULL, 10);
	if (getenv("BENCH_BATCH"))
		opts.batch = (unsigned)strtoul(getenv("BENCH_BATCH"), NULL, 10);
	e->spin_ns = opts.spin_ns;
	e->batch = opts.batch;
	if (coord_create(NULL, &opts, &c, &err) || coord_fn_lookup(c, "count", f_count, &err) ||
	    coord_fn_lookup(c, "echo", f_echo, &err)) {
		fprintf(stderr, "coord setup: %s\n", err.msg);
		exit(1);
	}
	return c;
}

/* ---- throughput --------------------------------------------------------- */

static double coord_tput(struct coord *c, uint32_t fn, uint64_t n, bool many,
			 struct bench_samples *call_ns)
{
	struct coord_call calls[BATCH];
	int64_t args[BATCH];
	struct coord_error err;
	uint64_t t0, t1;

	memset(calls, 0, sizeof(calls));
	for (unsigned k = 0; k < BATCH; k++) {
		calls[k].fn = fn;
		calls[k].args = &args[k];
		calls[k].len = sizeof(args[k]);
	}
	reset_counts();
	t0 = bench_now_ns();
	for (uint64_t i = 0; i < n; i += BATCH) {
		unsigned b = n - i < BATCH ? (unsigned)(n - i) : BATCH;
		uint64_t tb = bench_now_ns();

		if (many) {
			for (unsigned k = 0; k < b; k++)
				args[k] = (int64_t)(i + k);
			if (coord_schedule_many(c, calls, b, NULL, NULL, &err)) {
				bench_check(false, "coord: coord_schedule_many: %s", err.msg);
				return -1;
			}
		} else {
			for (unsigned k = 0; k < b; k++) {
				int64_t a = (int64_t)(i + k);

				if (coord_schedule(c, fn, &a, sizeof(a), NULL, &err)) {
					bench_check(false, "coord: coord_schedule: %s", err.msg);
					return -1;
				}
			}
		}
		if (call_ns && b == BATCH)
			bench_samples_add(call_ns, (double)(bench_now_ns() - tb) / BATCH);
	}
	if (coord_join(c, &err))
		bench_check(false, "coord: coord_join: %s", err.msg);
	t1 = bench_now_ns();
	check_counts(many ? "coord throughput (schedule_many)" : "coord throughput", n);
	return (double)n / ((double)(t1 - t0) / 1e9);
}

static double seed_tput(unsigned nw, uint64_t n, bool many)
{
	struct seed_worker w[MAX_WORKERS];
	struct seed_closure *cl;
	struct seedq q;
	uint64_t t0, t1;

	/* The closures schedule() would make, made before the timed region
	 * (seedq.h). */
	cl = seed_closures_alloc(n, seed_count, 0);
	if (!cl || seedq_init(&q, SEEDQ_DEFAULT_CAP) || seed_workers_start(w, nw, &q)) {
		bench_check(false, "seed: setup failed");
		return -1;
	}
	reset_counts();
	t0 = bench_now_ns();
	if (many)
		seed_schedule_many(&q, cl, n);
	else
		for (uint64_t i = 0; i < n; i++)
			seed_schedule(&q, &cl[i]);
	seedq_wait(&q);
	t1 = bench_now_ns();
	seed_workers_stop(w, nw, &q);
	seedq_fini(&q);
	seed_closures_free(cl);
	check_counts(many ? "seed throughput (put_many)" : "seed throughput", n);
	return (double)n / ((double)(t1 - t0) / 1e9);
}

/* ---- one-at-a-time round trip ------------------------------------------- */

static void coord_rtt(struct coord *c, uint32_t fn, uint64_t n, struct bench_samples *s)
{
	struct coord_error err;

	reset_counts();
	for (uint64_t i = 0; i < n; i++) {
		int64_t a = (int64_t)i, got = 0;
		struct coord_rv *rv;
		const void *v;
		size_t len = 0;
		uint64_t t0 = bench_now_ns();

		if (coord_schedule(c, fn, &a, sizeof(a), &rv, &err)) {
			bench_check(false, "coord: coord_schedule: %s", err.msg);
			return;
		}
		if (coord_rv_fetch(rv, &v, &len, &err) == 0 && len == sizeof(got))
			memcpy(&got, v, sizeof(got));
		coord_rv_put(rv);
		if (s)
			bench_samples_add(s, (double)(bench_now_ns() - t0));
		if (!bench_check(got == (a ^ XOR),
				 "coord round trip %" PRIu64 ": got %" PRId64 " (len %zu)", i, got,
				 len))
			return;
	}
	if (coord_join(c, &err))
		bench_check(false, "coord: coord_join: %s", err.msg);
	check_counts("coord round trip", n);
}

static void seed_rtt(uint64_t n, struct bench_samples *s)
{
	struct seed_worker w[1];
	struct seed_closure *cl = seed_closures_alloc(n, seed_echo, 0);
	struct seedq q;

	if (!cl || seedq_init(&q, SEEDQ_DEFAULT_CAP) || seed_workers_start(w, 1, &q)) {
		bench_check(false, "seed: setup failed");
		return;
	}
	reset_counts();
	for (uint64_t i = 0; i < n; i++) {
		uint64_t t0 = bench_now_ns();
		int64_t got;

		seed_schedule(&q, &cl[i]);
		got = seed_future_wait(&cl[i].fut);
		if (s)
			bench_samples_add(s, (double)(bench_now_ns() - t0));
		if (!bench_check(got == ((int64_t)i ^ XOR),
				 "seed round trip %" PRIu64 ": got %" PRId64, i, got))
			break;
	}
	seedq_wait(&q);
	seed_workers_stop(w, 1, &q);
	seedq_fini(&q);
	seed_closures_free(cl);
	check_counts("seed round trip", n);
}

/* ---- every result fetched: a sliding window of RemoteValues ------------------------ */

/*
 * @n closures of @fn with @f RemoteValues kept in flight: schedule, and
 * once @f are out fetch the oldest, check it (echo: arg ^ XOR; else an
 * empty value) and drop it.  @arg is @arglen bytes (>= 8), its first 8 the
 * closure's number.  Returns closures/s, first schedule to last fetch.
 */
static double coord_window(struct coord *c, uint32_t fn, bool echo, uint64_t n, unsigned f,
			   uint8_t *arg, size_t arglen, struct coord_rv **rvs)
{
	struct coord_error err;
	uint64_t t0, t1;

	reset_counts();
	t0 = bench_now_ns();
	for (uint64_t i = 0; i < n + f; i++) {
		unsigned slot = (unsigned)(i % f);

		if (i >= f) {
			int64_t want = (int64_t)(i - f), got = 0;
			const void *v;
			size_t len = 0;
			int r = coord_rv_fetch(rvs[slot], &v, &len, &err);

			if (r == 0 && echo && len == sizeof(got))
				memcpy(&got, v, sizeof(got));
			coord_rv_put(rvs[slot]);
			if (!bench_check(r == 0 && (echo ? got == (want ^ XOR) : len == 0),
					 "coord window: closure %" PRId64 ": fetch %d, len %zu",
					 want, r, len))
				return -1;
		}
		if (i < n) {
			int64_t a = (int64_t)i;

			memcpy(arg, &a, sizeof(a));
			if (coord_schedule(c, fn, arg, arglen, &rvs[slot], &err)) {
				bench_check(false, "coord window: coord_schedule: %s", err.msg);
				return -1;
			}
		}
	}
	t1 = bench_now_ns();
	if (coord_join(c, &err))
		bench_check(false, "coord window: coord_join: %s", err.msg);
	check_counts(echo ? "coord fetched" : "coord window", n);
	return (double)n / ((double)(t1 - t0) / 1e9);
}

/* The same with the seed design: every closure's RemoteValue fetched, @f
 * kept in flight. */
static double seed_window(unsigned nw, uint64_t n, unsigned f)
{
	struct seed_worker w[MAX_WORKERS];
	struct seed_closure *cl = seed_closures_alloc(n, seed_echo, 0);
	struct seedq q;
	uint64_t t0, t1;

	if (!cl || seedq_init(&q, SEEDQ_DEFAULT_CAP) || seed_workers_start(w, nw, &q)) {
		bench_check(false, "seed: setup failed");
		return -1;
	}
	reset_counts();
	t0 = bench_now_ns();
	for (uint64_t i = 0; i < n + f; i++) {
		if (i >= f) {
			int64_t want = (int64_t)(i - f);

			if (!bench_check(seed_future_wait(&cl[i - f].fut) == (want ^ XOR),
					 "seed window: closure %" PRId64, want))
				break;
		}
		if (i < n)
			seed_schedule(&q, &cl[i]);
	}
	t1 = bench_now_ns();
	seedq_wait(&q);
	seed_workers_stop(w, nw, &q);
	seedq_fini(&q);
	seed_closures_free(cl);
	check_counts("seed fetched", n);
	return (double)n / ((double)(t1 - t0) / 1e9);
}

static void add_if(bool keep, struct bench_samples *s, double v)
{
	if (keep && v > 0)
		bench_samples_add(s, v);
}

/* One table row of @s, against @base. */
static void row(const char *name, struct bench_samples *s, struct bench_stats *st,
		const struct bench_stats *base, bool higher_better)
{
	bench_summarize(s, higher_better, st);
	bench_row(name, st, base ? base : st, higher_better);
}

#define FETCH_WINDOW 256
#define FETCH_TARGET 25e6
#define BIG_ARG (64u * 1024u)

/* ---- every result fetched: each side's serial cost (--fetch-cost) -------------------- */

/* fetch_cost()'s gate: holds the one worker until opened, yielding its CPU
 * meanwhile (on a loaded machine the caller may share it); it notes when it
 * saw the gate open, where the worker's timed part begins. */
static atomic_int gate_open, gate_in;
static _Atomic uint64_t gate_t0;

static int coord_gate(struct coord_ctx *ctx, const void *args, size_t len)
{
	(void)ctx;
	(void)args;
	(void)len;
	/* Release: tells the bench the worker is held (the value is all). */
	atomic_store_explicit(&gate_in, 1, memory_order_release);
	/* Acquire: pairs with the bench's release when it opens. */
	while (!atomic_load_explicit(&gate_open, memory_order_acquire))
		sched_yield();
	/* Relaxed: read after fetching a closure this worker finished later
	 * (its final state's release orders this store before). */
	atomic_store_explicit(&gate_t0, bench_now_ns(), memory_order_relaxed);
	return 0;
}

/*
 * fetch_cost() - one worker, FETCH_WINDOW closures returning a value, all
 * final (their lines last written by the worker); the worker held in a
 * gate.  Timed: the caller fetches, checks, puts each and schedules the next
 * in its place (the coordinator's cost per fetched closure, the worker
 * idle); then the gate opens, and the time from the worker seeing it open
 * until the last new one is final is the worker's cost per closure with a
 * result (the lines last written by the caller).  A round of each is one sample of each; a loaded machine
 * preempts few of these 10-20 us rounds, so their medians and minima stay
 * put where end-to-end rates do not.
 */
static void fetch_cost(struct env *e, unsigned rounds)
{
	enum { W = FETCH_WINDOW };
	struct bench_samples cs = { 0 }, ws = { 0 };
	struct bench_stats cst, wst;
	struct coord_rv *rv[W];
	int64_t want[W], x = 0;
	struct coord_error err;
	uint32_t f_count, f_echo, f_gate;
	struct coord *c = make_coord(e, 1, &f_count, &f_echo);
	bool ok = coord_fn_lookup(c, "gate", &f_gate, &err) == 0;

	for (unsigned i = 0; ok && i < W; i++, x++) {
		want[i] = x ^ XOR;
		ok = coord_schedule(c, f_echo, &x, sizeof(x), &rv[i], &err) == 0;
	}
	for (unsigned r = 0; ok && r < rounds; r++) {
		uint64_t t0, t1;

		ok = coord_join(c, &err) == 0;
		/* Relaxed: read by the gate after the push below publishes it. */
		atomic_store_explicit(&gate_open, 0, memory_order_relaxed);
		atomic_store_explicit(&gate_in, 0, memory_order_relaxed);
		ok = ok && coord_schedule(c, f_gate, &x, sizeof(x), NULL, &err) == 0;
		/* Acquire: the gate's release; the worker is held from here. */
		while (ok && !atomic_load_explicit(&gate_in, memory_order_acquire))
			sched_yield();
		t0 = bench_now_ns();
		for (unsigned i = 0; ok && i < W; i++, x++) {
			const void *v;
			size_t len = 0;
			int64_t got = 0;

			ok = coord_rv_fetch(rv[i], &v, &len, &err) == 0 && len == sizeof(got);
			if (ok)
				memcpy(&got, v, sizeof(got));
			ok = bench_check(ok && got == want[i], "fetch cost: closure %u: %" PRId64,
					 i, got);
			coord_rv_put(rv[i]);
			want[i] = x ^ XOR;
			ok = ok && coord_schedule(c, f_echo, &x, sizeof(x), &rv[i], &err) == 0;
		}
		t1 = bench_now_ns();
		bench_samples_add(&cs, (double)(t1 - t0) / W);
		/* Release: pairs with the gate's acquire. */
		atomic_store_explicit(&gate_open, 1, memory_order_release);
		ok = ok && coord_rv_fetch(rv[W - 1], NULL, NULL, &err) == 0;
		t1 = bench_now_ns();
		/* Relaxed: the fetch acquired the worker's later release. */
		t0 = atomic_load_explicit(&gate_t0, memory_order_relaxed);
		bench_samples_add(&ws, (double)(t1 - t0) / W);
	}
	if (!ok)
		bench_check(false, "fetch cost: %s", err.msg);
	/* Relaxed: nothing waits in the gate any more (or it is opened now). */
	atomic_store_explicit(&gate_open, 1, memory_order_release);
	for (unsigned i = 0; i < W; i++)
		coord_rv_put(rv[i]);
	if (coord_join(c, &err))
		bench_check(false, "fetch cost: coord_join: %s", err.msg);
	coord_destroy(c);
	bench_summarize(&cs, false, &cst);
	bench_summarize(&ws, false, &wst);
	bench_header("bench_e2e fetched, each side's serial cost: 1 worker, 256 closures "
		     "returning an int64, one round of each side a sample",
		     "ns per closure; min = the least disturbed round");
	bench_row("caller: fetch + put + schedule", &cst, &cst, false);
	bench_row("worker: run with a result", &wst, &wst, false);
	printf("SUMMARY bench_e2e config=fetch_cost workers=1 rounds=%zu coord_ns_median=%.1f "
	       "coord_ns_min=%.1f worker_ns_median=%.1f worker_ns_min=%.1f loadavg=%.2f\n",
	       cst.n, cst.median, cst.min, wst.median, wst.min, bench_loadavg());
	bench_samples_free(&cs);
	bench_samples_free(&ws);
}

static const unsigned big_inflight[] = { 1, 64, 256, 1024 };
#define NBIG (sizeof(big_inflight) / sizeof(big_inflight[0]))

/* What the last line (the targets) needs, by number of workers. */
struct totals {
	struct bench_stats rst[MAX_WORKERS + 1], mrst[MAX_WORKERS + 1], fst[MAX_WORKERS + 1],
		frst[MAX_WORKERS + 1];
	double big_drop[MAX_WORKERS + 1];
	struct bench_stats sched_st;
};

/* The samples of the throughput and fetched tables: rates, and ratios per round. */
struct tput_samples {
	struct bench_samples cs, ss, cms, sms, fs, sfs, rr, mr, fr, sfr;
};

/* Round 0 warms up; implementations alternate within a round, and each
 * round gives one ratio per pair. */
static void tput_rounds(struct env *e, unsigned nw, uint8_t *arg, struct coord_rv **rvs,
			struct bench_samples *sched_ns, struct tput_samples *s)
{
	uint32_t f_count, f_echo;
	struct coord *c = make_coord(e, nw, &f_count, &f_echo);

	for (unsigned rep = 0; rep <= e->repeats; rep++) {
		double r1 = coord_tput(c, f_count, e->n_tput, false,
				       rep && nw == MAX_WORKERS ? sched_ns : NULL);
		double r2 = seed_tput(nw, e->n_tput, false);
		double r3 = coord_tput(c, f_count, e->n_tput, true, NULL);
		double r4 = seed_tput(nw, e->n_tput, true);
		double r5 = coord_window(c, f_echo, true, e->n_tput, FETCH_WINDOW, arg,
					 sizeof(int64_t), rvs);
		double r6 = seed_window(nw, e->n_tput, FETCH_WINDOW);

		add_if(rep, &s->cs, r1);
		add_if(rep, &s->ss, r2);
		add_if(rep, &s->cms, r3);
		add_if(rep, &s->sms, r4);
		add_if(rep, &s->fs, r5);
		add_if(rep, &s->sfs, r6);
		if (rep && r1 > 0 && r2 > 0 && r3 > 0 && r4 > 0 && r5 > 0 && r6 > 0) {
			bench_samples_add(&s->rr, r1 / r2);
			bench_samples_add(&s->mr, r3 / r4);
			bench_samples_add(&s->fr, r5 / r1);
			bench_samples_add(&s->sfr, r5 / r6);
		}
	}
	coord_destroy(c);
}

/* The throughput table of @nw workers and its SUMMARY line. */
static void tput_table(const struct env *e, unsigned nw, struct tput_samples *s, struct totals *t)
{
	struct bench_stats cst, sst, cmst, smst;
	char title[300];

	snprintf(title, sizeof(title),
		 "bench_e2e throughput: %u worker%s, %" PRIu64
		 " empty closures per repeat, schedule all then join, %u alternating "
		 "rounds",
		 nw, nw > 1 ? "s" : "", e->n_tput, e->repeats);
	bench_header(title, "closures/s; p99, p99.9 = slow tail");
	printf("# coord: spin_ns=%" PRIu64 " batch=%u; seed (bench/seedq.h): %u worker "
	       "thread%s, closures made before the timed region; \"x base\": one-at-a-time "
	       "rows against the seed's put(), batched rows against the seed's "
	       "put_many(), of the medians\n",
	       e->spin_ns, e->batch, nw, nw > 1 ? "s" : "");
	row("seed put() per closure (baseline)", &s->ss, &sst, NULL, true);
	row("seed put_many() 64/lock (baseline)", &s->sms, &smst, NULL, true);
	row("coord_schedule() per closure", &s->cs, &cst, &sst, true);
	row("coord_schedule_many() 64/call", &s->cms, &cmst, &smst, true);
	bench_ratio_row("coord_schedule() / seed put(), per round", &s->rr, &t->rst[nw]);
	bench_ratio_row("coord_schedule_many() / seed put_many(), per round", &s->mr, &t->mrst[nw]);
	printf("SUMMARY bench_e2e config=throughput workers=%u closures=%" PRIu64
	       " repeats=%u coord_closures_per_s=%.0f seed_closures_per_s=%.0f "
	       "ratio_median=%.2fx ratio_min=%.2fx ratio_max=%.2fx "
	       "coord_many_closures_per_s=%.0f seed_many_closures_per_s=%.0f "
	       "ratio_many_median=%.2fx ratio_many_min=%.2fx ratio_many_max=%.2fx "
	       "target_ratio_median_ge_15x=%s target_ratio_every_round_ge_10x=%s "
	       "loadavg=%.2f conservation=%s\n",
	       nw, e->n_tput, e->repeats, cst.median, sst.median, t->rst[nw].median, t->rst[nw].min,
	       t->rst[nw].max, cmst.median, smst.median, t->mrst[nw].median, t->mrst[nw].min,
	       t->mrst[nw].max, bench_met(t->rst[nw].median >= 15.0),
	       bench_met(t->rst[nw].n && t->rst[nw].min >= 10.0), bench_loadavg(),
	       bench_exit_code() ? "FAILED" : "ok");
}

/* The every-result-fetched table of @nw workers and its SUMMARY line. */
static void fetched_table(const struct env *e, unsigned nw, struct tput_samples *s,
			  struct totals *t)
{
	struct bench_stats ffst, sfst, st;
	char title[300];

	snprintf(title, sizeof(title),
		 "bench_e2e every result fetched: %u worker%s, %" PRIu64
		 " closures per repeat returning an int64, %d RemoteValues kept in "
		 "flight (fetch the oldest, drop it, schedule the next), %u alternating "
		 "rounds",
		 nw, nw > 1 ? "s" : "", e->n_tput, FETCH_WINDOW, e->repeats);
	bench_header(title, "closures/s; p99, p99.9 = slow tail");
	row("seed, every RemoteValue fetched (baseline)", &s->sfs, &sfst, NULL, true);
	row("coord, every result fetched", &s->fs, &ffst, &sfst, true);
	bench_ratio_row("coord fetched / coord_schedule() no result, per round", &s->fr,
			&t->frst[nw]);
	bench_ratio_row("coord fetched / seed fetched, per round", &s->sfr, &st);
	t->fst[nw] = ffst;
	printf("SUMMARY bench_e2e config=fetched workers=%u closures=%" PRIu64
	       " window=%d coord_closures_per_s=%.0f min=%.0f max=%.0f "
	       "seed_closures_per_s=%.0f of_no_result_median=%.2f of_no_result_min=%.2f "
	       "of_no_result_max=%.2f target_ge_25M=%s target_ge_0.5x_no_result=%s\n",
	       nw, e->n_tput, FETCH_WINDOW, ffst.median, ffst.min, ffst.max, sfst.median,
	       t->frst[nw].median, t->frst[nw].min, t->frst[nw].max,
	       bench_met(ffst.median >= FETCH_TARGET), bench_met(t->frst[nw].median >= 0.5));
	fflush(stdout);
}

static void tput_samples_free(struct tput_samples *s)
{
	struct bench_samples *all[] = { &s->cs,	 &s->ss, &s->cms, &s->sms, &s->fs,
					&s->sfs, &s->rr, &s->mr,  &s->fr,  &s->sfr };

	for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++)
		bench_samples_free(all[i]);
}

/* coord_schedule()'s own cost, timed in batches during the throughput runs. */
static void sched_latency(struct bench_samples *sched_ns, struct totals *t)
{
	struct bench_stats *st = &t->sched_st;

	bench_summarize(sched_ns, false, st);
	printf("# bench_e2e: coord_schedule() during the %d-worker throughput runs: "
	       "p50 %.1f ns, p99 %.1f ns, p99.9 %.1f ns, stdev %.1f, min %.1f, max %.1f (%zu "
	       "batches of %d)\n",
	       MAX_WORKERS, st->median, st->p99, st->p999, st->stdev, st->min, st->max, st->n,
	       BATCH);
	printf("SUMMARY bench_e2e config=schedule_latency workers=%d coord_ns_median=%.1f "
	       "coord_ns_p99=%.1f coord_ns_p999=%.1f target_schedule_median_le_100ns=%s\n",
	       MAX_WORKERS, st->median, st->p99, st->p999, bench_met(st->median <= 100.0));
	bench_samples_free(sched_ns);
}

/* Large arguments with @nw workers: closures/s against the closures in flight. */
static void large_args(struct env *e, unsigned nw, uint64_t n, uint8_t *arg, struct coord_rv **rvs,
		       struct totals *t)
{
	struct bench_samples bs[NBIG] = { 0 };
	struct bench_stats bst[NBIG];
	uint32_t f_count, f_echo;
	struct coord *c = make_coord(e, nw, &f_count, &f_echo);
	double peak = 0;
	char title[300];

	for (unsigned rep = 0; rep <= e->repeats; rep++)
		for (unsigned k = 0; k < NBIG; k++)
			add_if(rep, &bs[k],
			       coord_window(c, f_count, false, n, big_inflight[k], arg, BIG_ARG,
					    rvs));
	coord_destroy(c);
	snprintf(title, sizeof(title),
		 "bench_e2e large arguments: %u worker%s, %" PRIu64
		 " closures of a %u-byte argument per repeat, F RemoteValues in flight, "
		 "every one fetched; F alternates within a round, %u rounds",
		 nw, nw > 1 ? "s" : "", n, BIG_ARG, e->repeats);
	bench_header(title, "closures/s; p99, p99.9 = slow tail; x base = over F = 1");
	for (unsigned k = 0; k < NBIG; k++) {
		char name[64];

		snprintf(name, sizeof(name), "coord inproc, 64 KiB, %u in flight", big_inflight[k]);
		row(name, &bs[k], &bst[k], k ? &bst[0] : NULL, true);
		if (bst[k].median > peak)
			peak = bst[k].median;
		bench_samples_free(&bs[k]);
	}
	/* The target: no loss as F grows, i.e. the largest F keeps the peak. */
	t->big_drop[nw] = peak > 0 ? bst[NBIG - 1].median / peak : 0;
	printf("SUMMARY bench_e2e config=large_args workers=%u arg_bytes=%u", nw, BIG_ARG);
	for (unsigned k = 0; k < NBIG; k++)
		printf(" f%u_closures_per_s=%.0f", big_inflight[k], bst[k].median);
	printf(" f%u_of_peak=%.2f target_no_loss_ge_0.9_of_peak=%s\n", big_inflight[NBIG - 1],
	       t->big_drop[nw], bench_met(t->big_drop[nw] >= 0.9));
}

/* One closure at a time with 1 worker, against the seed design. */
static void round_trip(struct env *e)
{
	struct bench_samples cs = { 0 }, ss = { 0 };
	struct bench_stats cst, sst;
	uint32_t f_count, f_echo;
	struct coord *c = make_coord(e, 1, &f_count, &f_echo);
	char title[300];

	for (unsigned rep = 0; rep <= e->repeats; rep++) {
		coord_rtt(c, f_echo, e->n_rtt, rep ? &cs : NULL);
		seed_rtt(e->n_rtt, rep ? &ss : NULL);
	}
	coord_destroy(c);
	/* Samples in ns; printed in us. */
	for (size_t i = 0; i < cs.n; i++)
		cs.v[i] /= 1e3;
	for (size_t i = 0; i < ss.n; i++)
		ss.v[i] /= 1e3;
	bench_summarize(&cs, false, &cst);
	bench_summarize(&ss, false, &sst);
	snprintf(title, sizeof(title),
		 "bench_e2e round trip: 1 worker, schedule + fetch "
		 "one closure at a time, %" PRIu64 " per repeat, %u repeats",
		 e->n_rtt, e->repeats);
	bench_header(title, "us per round trip, every round trip a sample");
	printf("# coord: spin_ns=%" PRIu64 " batch=%u; seed: futex RemoteValue, no spin\n",
	       e->spin_ns, e->batch);
	bench_row("seed design (baseline)", &sst, &sst, false);
	bench_row("coord inproc", &cst, &sst, false);
	printf("SUMMARY bench_e2e config=round_trip workers=1 round_trips=%" PRIu64
	       " repeats=%u coord_p50_us=%.2f coord_p99_us=%.2f coord_p999_us=%.2f "
	       "seed_p50_us=%.2f seed_p99_us=%.2f speedup=%.2fx target_p50_le_5us=%s "
	       "conservation=%s\n",
	       e->n_rtt, e->repeats, cst.median, cst.p99, cst.p999, sst.median, sst.p99,
	       bench_speedup(&cst, &sst, false), bench_met(cst.median <= 5.0),
	       bench_exit_code() ? "FAILED" : "ok");
	bench_samples_free(&cs);
	bench_samples_free(&ss);
}

static void targets(const struct totals *t)
{
	const struct bench_stats *rst = t->rst, *mrst = t->mrst, *fst = t->fst, *frst = t->frst;
	const double *big_drop = t->big_drop;

	printf("SUMMARY bench_e2e config=targets ratio_median_ge_15x=%s (1w %.2fx, 2w %.2fx) "
	       "ratio_every_round_ge_10x=%s (min 1w %.2fx, 2w %.2fx) "
	       "ratio_many_median=(1w %.2fx, 2w %.2fx) fetched_ge_25M=%s (1w %.0f, 2w %.0f) "
	       "fetched_ge_0.5x_no_result=%s (1w %.2f, 2w %.2f) large_args_no_loss=%s "
	       "(1w %.2f, 2w %.2f of peak at F=%u) schedule_median_le_100ns=%s (%.1f ns)\n",
	       bench_met(rst[1].median >= 15.0 && rst[2].median >= 15.0), rst[1].median,
	       rst[2].median, bench_met(rst[1].min >= 10.0 && rst[2].min >= 10.0), rst[1].min,
	       rst[2].min, mrst[1].median, mrst[2].median,
	       bench_met(fst[1].median >= FETCH_TARGET && fst[2].median >= FETCH_TARGET),
	       fst[1].median, fst[2].median,
	       bench_met(frst[1].median >= 0.5 && frst[2].median >= 0.5), frst[1].median,
	       frst[2].median, bench_met(big_drop[1] >= 0.9 && big_drop[2] >= 0.9), big_drop[1],
	       big_drop[2], big_inflight[NBIG - 1], bench_met(t->sched_st.median <= 100.0),
	       t->sched_st.median);
}

int main(int argc, char **argv)
{
	unsigned long only_tput = 0, only_cost = 0;
	const struct bench_opt opts[] = {
		{ "throughput-only", "only the throughput and fetched tables (for A/B runs)", 0, 1,
		  &only_tput, true },
		{ "fetch-cost", "only each side's serial cost per fetched closure (A/B under load)",
		  0, 1, &only_cost, true },
	};
	struct bench_args a;
	struct env e;
	struct bench_samples sched_ns = { 0 };
	static struct totals t;
	struct coord_rv **rvs;
	uint8_t *arg;

	bench_parse_args_ex(argc, argv, &a, opts, sizeof(opts) / sizeof(opts[0]));
	e.repeats = a.repeats;
	e.n_tput = a.quick ? 20000 : 500000;
	e.n_rtt = a.quick ? 1000 : 20000;
	rvs = calloc(big_inflight[NBIG - 1], sizeof(*rvs));
	arg = calloc(1, BIG_ARG);
	if (!rvs || !arg || coord_registry_create(&e.reg) ||
	    coord_registry_add(e.reg, "count", coord_count) ||
	    coord_registry_add(e.reg, "echo", coord_echo) ||
	    coord_registry_add(e.reg, "gate", coord_gate)) {
		fprintf(stderr, "registry setup failed\n");
		return 1;
	}
	if (only_cost) {
		fetch_cost(&e, a.quick ? 20 : 100 * a.repeats);
		free(rvs);
		free(arg);
		coord_registry_destroy(e.reg);
		return bench_exit_code();
	}
	for (unsigned nw = 1; nw <= MAX_WORKERS; nw++) {
		struct tput_samples s = { 0 };

		tput_rounds(&e, nw, arg, rvs, &sched_ns, &s);
		tput_table(&e, nw, &s, &t);
		fetched_table(&e, nw, &s, &t);
		tput_samples_free(&s);
	}
	sched_latency(&sched_ns, &t);
	if (!only_tput) {
		for (unsigned nw = 1; nw <= MAX_WORKERS; nw++)
			large_args(&e, nw, a.quick ? 2000 : 40000, arg, rvs, &t);
		round_trip(&e);
	}
	targets(&t);
	free(rvs);
	free(arg);
	coord_registry_destroy(e.reg);
	return bench_exit_code();
}
