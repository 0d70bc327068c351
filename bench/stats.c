// SPDX-License-Identifier: MIT
/*
 * bench/stats.c - see stats.h.
 */
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

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
	out->p999 = bench_percentile(v, s->n, higher_better ? 0.1 : 99.9);
	free(v);
	if (s->n > 1) {
		double mean = 0, ss = 0;

		for (size_t i = 0; i < s->n; i++)
			mean += s->v[i];
		mean /= (double)s->n;
		for (size_t i = 0; i < s->n; i++)
			ss += (s->v[i] - mean) * (s->v[i] - mean);
		out->stdev = sqrt(ss / (double)(s->n - 1));
	}
}

/* The table being printed, for the JSON rows (BENCH_JSON). */
static char cur_title[512], cur_unit[128];
static const char *bench_name = "bench";
static char pt_series[128]; /* bench_point(): "" when none */
static double pt_x;

void bench_point(const char *series, double x)
{
	snprintf(pt_series, sizeof(pt_series), "%s", series);
	pt_x = x;
}

double bench_loadavg(void)
{
	FILE *f = fopen("/proc/loadavg", "r");
	double l = -1;

	if (f) {
		if (fscanf(f, "%lf", &l) != 1)
			l = -1;
		fclose(f);
	}
	return l;
}

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

	if (!path || !*path || !(f = fopen(path, "a"))) {
		pt_series[0] = 0;
		return;
	}
	fprintf(f, "{\"schema\": %d, \"bench\": ", BENCH_JSON_SCHEMA);
	json_str(f, bench_name);
	fprintf(f, ", \"loadavg\": %.2f, \"table\": ", bench_loadavg());
	json_str(f, cur_title);
	fputs(", \"unit\": ", f);
	json_str(f, cur_unit);
	fputs(", \"impl\": ", f);
	json_str(f, name);
	if (pt_series[0]) {
		fputs(", \"series\": ", f);
		json_str(f, pt_series);
		fprintf(f, ", \"x\": %.6g", pt_x);
	}
	fprintf(f,
		", \"median\": %.6g, \"p99\": %.6g, \"p999\": %.6g, \"stdev\": %.6g, "
		"\"min\": %.6g, \"max\": %.6g, \"n\": %zu, \"ratio\": %.4g}\n",
		st->median, st->p99, st->p999, st->stdev, st->min, st->max, st->n, ratio);
	fclose(f);
	pt_series[0] = 0;
}

void bench_header(const char *title, const char *unit)
{
	snprintf(cur_title, sizeof(cur_title), "%s", title);
	snprintf(cur_unit, sizeof(cur_unit), "%s", unit);
	printf("# %s\n", title);
	printf("# %-34s %10s %10s %10s %9s %23s %7s  (%s)\n", "impl", "p50", "p99", "p99.9",
	       "stdev", "min - max", "x base", unit);
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
	printf("  %-34s %10.4g %10.4g %10.4g %9.3g %23s %7.2f\n", name, st->median, st->p99,
	       st->p999, st->stdev, range, bench_speedup(st, base, higher_better));
	json_row(name, st, bench_speedup(st, base, higher_better));
}

static void usage(const char *prog, const struct bench_opt *opt, size_t nopt)
{
	fprintf(stderr,
		"usage: %s [--quick] [--repeats=N]%s\n"
		"  --quick      tiny sizes (the bench-smoke suite)\n"
		"  --repeats=N  timed repeats per implementation (default 5)\n",
		prog, nopt ? " [options]" : "");
	for (size_t i = 0; i < nopt; i++)
		fprintf(stderr, "  --%s%s  %s\n", opt[i].name, opt[i].flag ? "" : "=N",
			opt[i].help);
}

/* A size: digits, then an optional k/K or m/M (powers of 1024). */
static bool parse_size(const char *s, unsigned long *out)
{
	char *end;
	unsigned long v;

	if (*s < '0' || *s > '9')
		return false;
	v = strtoul(s, &end, 10);
	if (*end == 'k' || *end == 'K') {
		v *= 1024;
		end++;
	} else if (*end == 'm' || *end == 'M') {
		v *= 1024 * 1024;
		end++;
	}
	*out = v;
	return *end == 0;
}

static void print_meta(void)
{
	char commit[64] = "?", model[128] = "?", line[256], date[32];
	const char *env = getenv("BENCH_COMMIT");
	time_t now = time(NULL);
	FILE *f;

	if (env && *env) {
		snprintf(commit, sizeof(commit), "%s", env);
	} else if ((f = popen("git rev-parse --short HEAD 2>/dev/null", "r"))) {
		if (fgets(commit, sizeof(commit), f))
			commit[strcspn(commit, "\n")] = 0;
		if (pclose(f) != 0 || !commit[0])
			snprintf(commit, sizeof(commit), "?");
	}
	if ((f = fopen("/proc/cpuinfo", "r"))) {
		while (fgets(line, sizeof(line), f))
			if (!strncmp(line, "model name", 10) && strchr(line, ':')) {
				snprintf(model, sizeof(model), "%s", strchr(line, ':') + 2);
				model[strcspn(model, "\n")] = 0;
				break;
			}
		fclose(f);
	}
	strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%SZ", gmtime(&now));
	line[0] = 0;
	if ((f = fopen("/proc/loadavg", "r"))) {
		if (!fgets(line, sizeof(line), f))
			line[0] = 0;
		fclose(f);
	}
	/* the first three fields */
	for (int i = 0, sp = 0; line[i]; i++)
		if (line[i] == ' ' && ++sp == 3) {
			line[i] = 0;
			break;
		}
	printf("# run: schema=%d bench=%s commit=%s nproc=%ld model=\"%s\" loadavg=\"%s\" "
	       "date=%s\n",
	       BENCH_JSON_SCHEMA, bench_name, commit, sysconf(_SC_NPROCESSORS_ONLN), model, line,
	       date);
	fflush(stdout);
}

void bench_parse_args_ex(int argc, char **argv, struct bench_args *a, const struct bench_opt *opt,
			 size_t nopt)
{
	const char *slash = strrchr(argv[0], '/');

	bench_name = slash ? slash + 1 : argv[0];
	a->quick = false;
	a->repeats = 0;
	for (int i = 1; i < argc; i++) {
		size_t k;

		if (!strcmp(argv[i], "--quick")) {
			a->quick = true;
			continue;
		} else if (!strncmp(argv[i], "--repeats=", 10)) {
			char *end;
			unsigned long r = strtoul(argv[i] + 10, &end, 10);

			if (*end || r == 0 || r > 1000) {
				usage(argv[0], opt, nopt);
				exit(2);
			}
			a->repeats = (unsigned)r;
			continue;
		}
		for (k = 0; k < nopt; k++) {
			size_t l = strlen(opt[k].name);
			unsigned long v;

			if (strncmp(argv[i], "--", 2) || strncmp(argv[i] + 2, opt[k].name, l))
				continue;
			if (opt[k].flag && argv[i][2 + l] == 0) {
				*opt[k].val = 1;
				break;
			}
			if (!opt[k].flag && argv[i][2 + l] == '=' &&
			    parse_size(argv[i] + 3 + l, &v) && v >= opt[k].min && v <= opt[k].max) {
				*opt[k].val = v;
				break;
			}
			fprintf(stderr, "%s: bad option %s (--%s: %lu ... %lu)\n", argv[0], argv[i],
				opt[k].name, opt[k].min, opt[k].max);
			exit(2);
		}
		if (k < nopt)
			continue;
		usage(argv[0], opt, nopt);
		exit(strcmp(argv[i], "--help") ? 2 : 0);
	}
	if (a->repeats == 0)
		a->repeats = a->quick ? 3 : 5;
	print_meta();
}

void bench_parse_args(int argc, char **argv, struct bench_args *a)
{
	bench_parse_args_ex(argc, argv, a, NULL, 0);
}

void bench_ratio_row(const char *name, const struct bench_samples *r, struct bench_stats *out)
{
	char unit[sizeof(cur_unit)];

	bench_summarize(r, true, out);
	if (r->n == 0) /* the workload did not run (a knob left it out) */
		return;
	printf("# ratio %s: median %.2fx (min %.2fx - max %.2fx over %zu alternating rounds)\n",
	       name, out->median, out->min, out->max, out->n);
	memcpy(unit, cur_unit, sizeof(unit));
	snprintf(cur_unit, sizeof(cur_unit), "ratio");
	json_row(name, out, out->median);
	memcpy(cur_unit, unit, sizeof(unit));
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

int bench_spawn(char *const argv[], const char *banner, unsigned *port)
{
	char line[160] = "", fmt[96];
	struct pollfd p;
	int fd[2];
	pid_t pid;
	FILE *f;

	if (pipe2(fd, O_CLOEXEC) < 0)
		return -1;
	pid = fork();
	if (pid < 0) {
		close(fd[0]);
		close(fd[1]);
		return -1;
	}
	if (pid == 0) {
		/* die with the bench; only async-signal-safe calls before exec */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(fd[1], 1);
		execv(argv[0], argv);
		_exit(127);
	}
	close(fd[1]);
	snprintf(fmt, sizeof(fmt), "%s listening on port %%u", banner);
	/* Bounded: the server prints its port at once or exits (EOF). */
	p.fd = fd[0];
	p.events = POLLIN;
	f = fdopen(fd[0], "r");
	if (!f || poll(&p, 1, 20000) != 1 || !fgets(line, sizeof(line), f) ||
	    sscanf(line, fmt, port) != 1) {
		fprintf(stderr, "bench: %s did not start (%s)\n", argv[0], line);
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		if (f)
			fclose(f);
		else
			close(fd[0]);
		return -1;
	}
	fclose(f);
	return pid;
}

int bench_worker_spawn(const char *bin, const char *fns, unsigned port, int *pid,
		       unsigned *port_out)
{
	char listen[32];
	char *const argv[] = { (char *)bin, "--fns", (char *)fns, "--listen",
			       listen,	    "--log", "error",	  NULL };

	snprintf(listen, sizeof(listen), "127.0.0.1:%u", port);
	*pid = bench_spawn(argv, "coord-worker", port_out);
	return *pid < 0 ? -1 : 0;
}

int bench_send_all(int fd, const void *p, size_t n)
{
	while (n) {
		ssize_t w = send(fd, p, n, MSG_NOSIGNAL);

		if (w < 0 && errno == EINTR)
			continue;
		if (w <= 0)
			return -1;
		p = (const uint8_t *)p + w;
		n -= (size_t)w;
	}
	return 0;
}

int bench_recv_all(int fd, void *p, size_t n)
{
	while (n) {
		ssize_t r = recv(fd, p, n, MSG_WAITALL);

		if (r < 0 && errno == EINTR)
			continue;
		if (r <= 0)
			return -1;
		p = (uint8_t *)p + r;
		n -= (size_t)r;
	}
	return 0;
}

const char *getenv_or(const char *name, const char *dflt)
{
	const char *v = getenv(name);

	return v && *v ? v : dflt;
}
