/* SPDX-License-Identifier: MIT */
/*
 * bench/stats.h - timing, percentiles, the table every bench prints, and the
 * command line every bench takes.
 *
 * Output shape (mercury Testing/perf/na/na_perf.c, urcu test_urcu_wfcq.c,
 * and perftest's p50 / p99 / p99.9 / stdev columns):
 *
 *   # <title>
 *   # impl         p50     p99   p99.9   stdev     min - max   x base
 *   coord ring ... 12.3    10.1   9.9     0.8     9.8 - 13.0     3.41
 *   SUMMARY <bench> <key=value ...>
 *
 * Every number in a row is computed from samples (one per repeat for rates,
 * one per timed batch or call for latencies).  p50 is the median.  For a
 * rate (higher is better) "p99" and "p99.9" are the slow tail: the rate that
 * 99% (99.9%) of the samples beat, i.e. the 1st (0.1th) percentile of the
 * rate (= the 99th percentile of the time per operation).  For a latency
 * they are the ordinary 99th and 99.9th percentiles.  stdev is the sample
 * standard deviation.  "x base" is always the speed-up over the baseline
 * row (of the medians): > 1 means faster than the baseline.
 */
#ifndef COORD_BENCH_STATS_H
#define COORD_BENCH_STATS_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <time.h>

#if defined(__x86_64__) || defined(__i386__)
#define bench_relax() __builtin_ia32_pause()
#else
#define bench_relax() __asm__ __volatile__("" ::: "memory")
#endif

static inline uint64_t bench_now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/*
 * bench_backoff() - what a spinning thread does when its queue is empty or
 * full: pause, and every 64th time yield the CPU, so that on a 2-core VM with
 * more threads than cores the thread it waits for gets to run.  Every
 * lock-free implementation in a bench uses this same policy.
 */
void bench_backoff(unsigned *n);

/* A growable array of samples. */
struct bench_samples {
	double *v;
	size_t n, cap;
};

void bench_samples_add(struct bench_samples *s, double x);
void bench_samples_reset(struct bench_samples *s);
void bench_samples_free(struct bench_samples *s);

struct bench_stats {
	double median, p99, p999, stdev, min, max;
	size_t n;
};

/* bench_percentile() - @p in [0, 100] of @sorted (ascending), interpolated. */
double bench_percentile(const double *sorted, size_t n, double p);

/*
 * bench_summarize() - median, p99 and p99.9 (see the file comment: the slow
 * tail, so the 1st and 0.1th percentiles when @higher_better), stdev, min
 * and max of @s.
 */
void bench_summarize(const struct bench_samples *s, bool higher_better, struct bench_stats *out);

/* bench_header() - "# @title" then the column line; @unit names the values. */
void bench_header(const char *title, const char *unit);

/*
 * bench_row() - one implementation's row.  @base is the baseline's stats
 * (the baseline prints 1.00); the ratio is the speed-up over it.
 */
void bench_row(const char *name, const struct bench_stats *st, const struct bench_stats *base,
	       bool higher_better);

/*
 * bench_point() - the next bench_row()'s JSON row (only that one) also
 * carries "series": @series and "x": @x, a point of a sweep for the plots.
 */
void bench_point(const char *series, double x);

/* bench_speedup() - the "x base" value of bench_row(). */
double bench_speedup(const struct bench_stats *st, const struct bench_stats *base,
		     bool higher_better);

/* Command line shared by every bench. */
struct bench_args {
	bool quick;	  /* --quick: tiny sizes, for the bench-smoke suite */
	unsigned repeats; /* --repeats=N (default 5, --quick 3) */
};

/*
 * An option of one bench beyond the shared ones: "--@name=VALUE", parsed
 * into *@val (a size: digits with an optional k/K or m/M suffix, powers of
 * 1024), checked against [@min, @max]; or, with @flag, "--@name" alone sets
 * *@val to 1.  @help is one line for the usage text.
 */
struct bench_opt {
	const char *name, *help;
	unsigned long min, max;
	unsigned long *val;
	bool flag;
};

/* bench_parse_args() - parse argv; prints usage and exits 2 on a bad one. */
void bench_parse_args(int argc, char **argv, struct bench_args *a);
/* bench_parse_args_ex() - the same with @nopt extra options @opt. */
void bench_parse_args_ex(int argc, char **argv, struct bench_args *a, const struct bench_opt *opt,
			 size_t nopt);

/*
 * bench_ratio_row() - one row of per-round ratios (@r: one sample per
 * alternating round, a / b of that round) summarized into @out: median and
 * min - max.  Printed "# ratio <name>: median Mx (min ax - max bx over n
 * alternating rounds)"; also a JSON row (unit "ratio", the current table).
 * Nothing is printed for no samples.
 */
void bench_ratio_row(const char *name, const struct bench_samples *r, struct bench_stats *out);

/*
 * Run metadata.  bench_parse_args() prints it as the bench's first line:
 *   # run: schema=2 commit=<git rev-parse --short HEAD, $BENCH_COMMIT or ?>
 *     nproc=N model="<cpu model name>" loadavg=<1 5 15 min> date=<UTC ISO>
 * and every JSON row ($BENCH_JSON) carries "schema", "bench" (argv[0]'s
 * base name) and the load average of the moment the row was written.
 * BENCH_JSON_SCHEMA changes whenever a row's members change meaning.
 */
#define BENCH_JSON_SCHEMA 2

/* bench_loadavg() - /proc/loadavg's 1-minute figure (-1 if unreadable). */
double bench_loadavg(void);

/*
 * bench_check() - a conservation check: on false, print "FAIL: ..." to
 * stderr and remember it; bench_exit_code() is then 1.  Never used for
 * speed: benches print speed and assert only correctness.
 */
bool bench_check(bool ok, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
int bench_exit_code(void);

/* bench_reap() - SIGTERM @pid, wait up to 5 s, then SIGKILL it; reaped. */
void bench_reap(int pid);

/*
 * bench_spawn() - run the server @argv (argv[0] a path) with stdout on a
 * pipe and wait (20 s at most) for its "<@banner> listening on port P"
 * line; it dies with the bench (PDEATHSIG).  Return: its pid (*@port = P),
 * or -1.  Stop it with bench_reap().
 */
int bench_spawn(char *const argv[], const char *banner, unsigned *port);

/*
 * bench_worker_spawn() - bench_spawn() of a coord-worker (@bin, serving the
 * functions of @fns) listening on 127.0.0.1:@port (0: any).  Return: 0
 * with *@pid and *@port_out set, or -1.
 */
int bench_worker_spawn(const char *bin, const char *fns, unsigned port, int *pid,
		       unsigned *port_out);

/* bench_send_all(), bench_recv_all() - all @n bytes on a blocking socket
 * (EINTR retried); 0, or -1 when it broke or closed. */
int bench_send_all(int fd, const void *p, size_t n);
int bench_recv_all(int fd, void *p, size_t n);

/* getenv_or() - $@name when set and not empty, else @dflt. */
const char *getenv_or(const char *name, const char *dflt);

/* bench_met() - "met" / "not_met" for a target in a SUMMARY line. */
static inline const char *bench_met(bool met)
{
	return met ? "met" : "not_met";
}

#endif /* COORD_BENCH_STATS_H */
