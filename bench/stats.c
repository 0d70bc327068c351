// SPDX-License-Identifier: MIT
/*
 * bench/stats.c - see stats.h.
 */
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>

#include "stats.h"

static int failures;

void bench_backoff(unsigned *n)
{
	if ((++*n & 63) == 0)
		sched_yield();
	else
		bench_relax();
}

void bench_samples_add(struct bench_samples *s, double x)
{
	if (s->n == s->cap) {
		size_t cap = s->cap ? s->cap * 2 : 1024;
		double *v = realloc(s->v, cap * sizeof(*v));

		if (!v) {
			fprintf(stderr, "bench: out of memory for samples\n");
			exit(1);
		}
		s->v = v;
		s->cap = cap;
	}
	s->v[s->n++] = x;
}

void bench_samples_reset(struct bench_samples *s)
{
	s->n = 0;
}

void bench_samples_free(struct bench_samples *s)
{
	free(s->v);
	s->v = NULL;
	s->n = s->cap = 0;
}

static int cmp_double(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return (x > y) - (x < y);
}

double bench_percentile(const double *sorted, size_t n, double p)
{
	double pos, frac;
	size_t i;

	if (n == 0)
		return 0.0;
	pos = p / 100.0 * (double)(n - 1);
	i = (size_t)pos;
	if (i + 1 >= n)
		return sorted[n - 1];
	frac = pos - (double)i;
	return sorted[i] + frac * (sorted[i + 1] - sorted[i]);
}

void bench_summarize(const struct bench_samples *s, bool higher_better, struct bench_stats *out)
{
	double *v;

	memset(out, 0, sizeof(*out));
	if (s->n == 0)
		return;
	v = malloc(s->n * sizeof(*v));
	if (!v) {
		fprintf(stderr, "bench: out of memory for percentiles\n");
		exit(1);
	}
	memcpy(v, s->v, s->n * sizeof(*v));
	qsort(v, s->n, sizeof(*v), cmp_double);
	out->n = s->n;
	out->min = v[0];
	out->max = v[s->n - 1];
	out->median = bench_percentile(v, s->n, 50.0);
	/* The slow tail: low rates, high latencies (stats.h). */
	out->p99 = bench_percentile(v, s->n, higher_better ? 1.0 : 99.0);
	free(v);
}

/* The table being printed, for the JSON rows (BENCH_JSON). */
static char cur_title[512], cur_unit[128];

/* Write @str as a JSON string (quotes, backslashes, control bytes escaped). */
static void json_str(FILE *f, const char *str)
{
	fputc('"', f);
	for (const unsigned char *p = (const unsigned char *)str; *p; p++) {
		if (*p == '"' || *p == '\\')
			fprintf(f, "\\%c", *p);
		else if (*p < 0x20)
			fprintf(f, "\\u%04x", *p);
		else
			fputc(*p, f);
	}
	fputc('"', f);
}

/* With $BENCH_JSON set, every row is also appended there as one JSON object
 * per line (bench/report.sh gathers them into results.json and plots). */
static void json_row(const char *name, const struct bench_stats *st, double ratio)
{
	const char *path = getenv("BENCH_JSON");
	FILE *f;

	if (!path || !*path || !(f = fopen(path, "a")))
		return;
	fputs("{\"table\": ", f);
	json_str(f, cur_title);
	fputs(", \"unit\": ", f);
	json_str(f, cur_unit);
	fputs(", \"impl\": ", f);
	json_str(f, name);
	fprintf(f,
		", \"median\": %.6g, \"p99\": %.6g, \"min\": %.6g, \"max\": %.6g, \"n\": %zu, "
		"\"ratio\": %.4g}\n",
		st->median, st->p99, st->min, st->max, st->n, ratio);
	fclose(f);
}

void bench_header(const char *title, const char *unit)
{
	snprintf(cur_title, sizeof(cur_title), "%s", title);
	snprintf(cur_unit, sizeof(cur_unit), "%s", unit);
	printf("# %s\n", title);
	printf("# %-34s %12s %12s %25s %8s  (%s)\n", "impl", "median", "p99", "min - max", "x base",
	       unit);
}

double bench_speedup(const struct bench_stats *st, const struct bench_stats *base,
		     bool higher_better)
{
	if (st->median <= 0.0 || base->median <= 0.0)
		return 0.0;
	return higher_better ? st->median / base->median : base->median / st->median;
}

void bench_row(const char *name, const struct bench_stats *st, const struct bench_stats *base,
	       bool higher_better)
{
	char range[64];

	snprintf(range, sizeof(range), "%.3g - %.3g", st->min, st->max);
	printf("  %-34s %12.4g %12.4g %25s %8.2f\n", name, st->median, st->p99, range,
	       bench_speedup(st, base, higher_better));
	json_row(name, st, bench_speedup(st, base, higher_better));
}

static void usage(const char *prog)
{
	fprintf(stderr,
		"usage: %s [--quick] [--repeats=N]\n"
		"  --quick      tiny sizes (the bench-smoke suite)\n"
		"  --repeats=N  timed repeats per implementation (default 5)\n",
		prog);
}

void bench_parse_args(int argc, char **argv, struct bench_args *a)
{
	a->quick = false;
	a->repeats = 0;
	for (int i = 1; i < argc; i++) {
		if (!strcmp(argv[i], "--quick")) {
			a->quick = true;
		} else if (!strncmp(argv[i], "--repeats=", 10)) {
			char *end;
			unsigned long r = strtoul(argv[i] + 10, &end, 10);

			if (*end || r == 0 || r > 1000) {
				usage(argv[0]);
				exit(2);
			}
			a->repeats = (unsigned)r;
		} else {
			usage(argv[0]);
			exit(strcmp(argv[i], "--help") ? 2 : 0);
		}
	}
	if (a->repeats == 0)
		a->repeats = a->quick ? 3 : 5;
}

bool bench_check(bool ok, const char *fmt, ...)
{
	va_list ap;

	if (ok)
		return true;
	failures++;
	fprintf(stderr, "FAIL: ");
	va_start(ap, fmt);
	vfprintf(stderr, fmt, ap);
	va_end(ap);
	fputc('\n', stderr);
	fflush(stderr);
	return false;
}

int bench_exit_code(void)
{
	return failures ? 1 : 0;
}

void bench_reap(int pid)
{
	uint64_t until = bench_now_ns() + 5000000000ull;
	struct timespec ms = { 0, 1000000 };

	kill(pid, SIGTERM);
	while (waitpid(pid, NULL, WNOHANG) == 0) {
		if (bench_now_ns() > until) {
			kill(pid, SIGKILL);
			waitpid(pid, NULL, 0);
			return;
		}
		nanosleep(&ms, NULL);
	}
}
