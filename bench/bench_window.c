// SPDX-License-Identifier: MIT
/*
 * bench/bench_window.c - closures/s against an existing cluster, for a few
 * numbers of closures in flight: how the window hides the network's round
 * trip (tests/cluster/netns.sh runs it across namespaces with injected
 * latency).
 *
 *   bench_window --spec SPEC [--inflight F[,F...]] [--seconds S] [--rtt 0|1]
 *                [--window W] [--idle S] [--transport tcp|rdma]
 *
 * SPEC is anything coord_spec_from_arg() takes (its "worker" job: running
 * coord-worker processes serving bench/benchfns.c, with the cluster key in
 * $COORD_CLUSTER_KEY or $COORD_CLUSTER_KEY_FILE off loopback; --transport
 * rdma: coord-worker --transport rdma, which tests/rdma/suite.txt runs it
 * against, through libcoord.so and its rdma provider).  First
 * (unless --rtt 0) one closure at a time (the round trip as coord sees it:
 * schedule, fetch; 400 of them or 1 s), then for each F a sliding window of F RemoteValues of
 * `empty` (fetch the oldest, schedule the next) for S seconds (default 2),
 * each on a fresh coordinator whose per-connection window is
 * ceil(F / workers) (or W).  Prints one line each, and before each a "coord:"
 * line: how long coord_create() took and the threads, descriptors and
 * resident memory the coordinator added to this process:
 *   rtt: median U us over N round trips
 *   inflight F: R closures/s (N in T s)
 * --idle S instead: one coordinator, connected and idle for S seconds (only
 * heartbeats cross), between the lines "idle: S s from now" and "idle: done",
 * which gives the process's CPU time over the S seconds.
 * Speed is printed, never asserted; a failed call fails the run (exit 1).
 */
#include <dirent.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <time.h>

#include <coord/coord.h>
#include <coord/spec.h>

int coord_register_fns(struct coord_registry *reg); /* bench/benchfns.c */

#define MAX_F 16
#define RTT_N 400

static unsigned win;		      /* --window: opts.window, else ceil(F / workers) */
static const char *transport = "tcp"; /* --transport */

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

/* "Name:   value kB" or "Name:   value" of /proc/self/status, or -1. */
static long proc_status(const char *name)
{
	char line[256];
	size_t n = strlen(name);
	long v = -1;
	FILE *f = fopen("/proc/self/status", "r");

	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, name, n) && line[n] == ':') {
			v = strtol(line + n + 1, NULL, 10);
			break;
		}
	fclose(f);
	return v;
}

static unsigned open_fds(void)
{
	unsigned n = 0;
	DIR *d = opendir("/proc/self/fd");
	struct dirent *e;

	if (!d)
		return 0;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n - 1; /* the directory's own */
}

static struct coord *make(const char *spec_arg, struct coord_registry *reg, unsigned f,
			  uint32_t *fn)
{
	long rss0 = proc_status("VmRSS"), thr0 = proc_status("Threads");
	unsigned fd0 = open_fds();
	uint64_t t0;
	struct coord_spec *spec = NULL;
	struct coord_error err = { .msg = "" };
	struct coord_opts o;
	struct coord *c = NULL;
	size_t nw;

	coord_opts_init(&o);
	o.registry = reg;
	o.transport = transport;
	o.start_delay_ms = 0;
	o.start_delay_max_ms = -1;
	if (coord_spec_from_arg(spec_arg, &spec, NULL, &err) < 0)
		goto fail;
	nw = coord_spec_num_tasks(spec, "worker");
	o.window = win ? win : nw ? (unsigned)((f + nw - 1) / nw) : f;
	if (o.window < 1)
		o.window = 1;
	t0 = now_ns();
	if (coord_create(spec, &o, &c, &err) < 0 || coord_fn_lookup(c, "empty", fn, &err) < 0)
		goto fail;
	/* What this coordinator costs its process: connections and all. */
	printf("coord: %zu connections, window %u: created in %.1f ms; +%ld threads, +%d fds, "
	       "+%ld KiB RSS\n",
	       nw, o.window, (now_ns() - t0) / 1e6, proc_status("Threads") - thr0,
	       (int)open_fds() - (int)fd0, proc_status("VmRSS") - rss0);
	coord_spec_destroy(spec);
	return c;
fail:
	fprintf(stderr, "bench_window: %s\n", err.msg);
	coord_destroy(c);
	coord_spec_destroy(spec);
	exit(1);
}

static void check(int r, const struct coord_error *err, const char *what)
{
	if (r < 0) {
		fprintf(stderr, "bench_window: %s: %s\n", what, err->msg);
		exit(1);
	}
}

static void one(struct coord *c, uint32_t fn, struct coord_rv **rv)
{
	struct coord_error err;

	check(coord_schedule(c, fn, NULL, 0, rv, &err), &err, "coord_schedule");
}

static void fetch(struct coord_rv *rv)
{
	struct coord_error err;
	const void *v;
	size_t len;
	int r = coord_rv_fetch(rv, &v, &len, &err);

	coord_rv_put(rv);
	check(r, &err, "coord_rv_fetch");
}

/* --idle S: connected and idle, only heartbeats cross (measured outside). */
static void run_idle(const char *spec, struct coord_registry *reg, unsigned f, double idle)
{
	struct timespec ts = { (time_t)idle, (long)((idle - (double)(time_t)idle) * 1e9) };
	struct rusage r0, r1;
	uint32_t fn;
	struct coord *c = make(spec, reg, f, &fn);

	printf("idle: %.1f s from now\n", idle);
	fflush(stdout);
	getrusage(RUSAGE_SELF, &r0);
	nanosleep(&ts, NULL);
	getrusage(RUSAGE_SELF, &r1);
	printf("idle: done, coordinator CPU %.1f ms (user+sys)\n",
	       ((double)(r1.ru_utime.tv_sec - r0.ru_utime.tv_sec + r1.ru_stime.tv_sec -
			 r0.ru_stime.tv_sec) *
		1e3) + (double)(r1.ru_utime.tv_usec - r0.ru_utime.tv_usec + r1.ru_stime.tv_usec -
				r0.ru_stime.tv_usec) /
			       1e3);
	coord_destroy(c);
}

/* RTT_N round trips, or as many as fit in a second (at least 20). */
static void run_rtt(const char *spec, struct coord_registry *reg)
{
	uint64_t lat[RTT_N];
	unsigned n = 0;
	uint32_t fn;
	struct coord *c = make(spec, reg, 1, &fn);

	for (uint64_t t0 = now_ns(); n < RTT_N && (n < 20 || now_ns() - t0 < 1000000000ull); n++) {
		struct coord_rv *rv;
		uint64_t t = now_ns();

		one(c, fn, &rv);
		fetch(rv);
		lat[n] = now_ns() - t;
	}
	qsort(lat, n, sizeof(lat[0]), cmp_u64);
	printf("rtt: median %.1f us over %u round trips (p10 %.1f, p90 %.1f)\n", lat[n / 2] / 1e3,
	       n, lat[n / 10] / 1e3, lat[n * 9 / 10] / 1e3);
	coord_destroy(c);
}

/* A sliding window of @f closures for @secs seconds: 0, or -1 (no memory). */
static int run_inflight(const char *spec, struct coord_registry *reg, unsigned f, double secs)
{
	struct coord_rv **rvs = calloc(f, sizeof(*rvs));
	struct coord_error err;
	uint64_t t0, t1, done = 0, dur = (uint64_t)(secs * 1e9);
	unsigned i = 0;
	struct coord *c;
	uint32_t fn;

	if (!rvs)
		return -1;
	c = make(spec, reg, f, &fn);
	t0 = now_ns();
	for (unsigned j = 0; j < f; j++)
		one(c, fn, &rvs[j]);
	/* Bounded by time: checked every 64 fetches. */
	for (;;) {
		fetch(rvs[i]);
		rvs[i] = NULL;
		done++;
		if ((done & 63) == 0 && now_ns() - t0 >= dur)
			break;
		one(c, fn, &rvs[i]);
		i = i + 1 == f ? 0 : i + 1;
	}
	for (unsigned j = 0; j < f; j++)
		if (rvs[j]) {
			fetch(rvs[j]);
			done++;
		}
	t1 = now_ns();
	check(coord_join(c, &err), &err, "coord_join");
	printf("inflight %u: %.0f closures/s (%llu in %.2f s)\n", f,
	       (double)done / ((double)(t1 - t0) / 1e9), (unsigned long long)done,
	       (double)(t1 - t0) / 1e9);
	fflush(stdout);
	coord_destroy(c);
	free(rvs);
	return 0;
}

int main(int argc, char **argv)
{
	const char *spec = NULL, *fl = "64,256";
	unsigned fs[MAX_F], nf = 0;
	double secs = 2;
	struct coord_registry *reg;
	int rtt = 1;
	double idle = 0;

	for (int i = 1; i + 1 < argc; i += 2) {
		if (!strcmp(argv[i], "--spec"))
			spec = argv[i + 1];
		else if (!strcmp(argv[i], "--inflight"))
			fl = argv[i + 1];
		else if (!strcmp(argv[i], "--seconds"))
			secs = atof(argv[i + 1]);
		else if (!strcmp(argv[i], "--rtt"))
			rtt = atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--window"))
			win = (unsigned)atoi(argv[i + 1]);
		else if (!strcmp(argv[i], "--idle"))
			idle = atof(argv[i + 1]);
		else if (!strcmp(argv[i], "--transport"))
			transport = argv[i + 1];
		else
			spec = NULL, argc = 0;
	}
	for (const char *p = fl; p && *p && nf < MAX_F;
	     p = strchr(p, ',') ? strchr(p, ',') + 1 : NULL) {
		long v = strtol(p, NULL, 10);

		if (v < 1 || v > 65536)
			break;
		fs[nf++] = (unsigned)v;
	}
	if (!spec || argc % 2 == 0 || nf == 0 || !(secs > 0 && secs <= 600)) {
		fprintf(stderr, "usage: bench_window --spec SPEC [--inflight F[,F...]] "
				"[--seconds S] [--rtt 0|1] [--window W] [--idle S] "
				"[--transport tcp|rdma]\n");
		return 2;
	}
	if (coord_registry_create(&reg) || coord_register_fns(reg)) {
		fprintf(stderr, "bench_window: registry set-up failed\n");
		return 1;
	}
	if (idle > 0 && idle <= 600) {
		run_idle(spec, reg, fs[0], idle);
		coord_registry_destroy(reg);
		return 0;
	}
	if (rtt)
		run_rtt(spec, reg);
	for (unsigned k = 0; k < nf; k++)
		if (run_inflight(spec, reg, fs[k], secs) < 0)
			return 1;
	coord_registry_destroy(reg);
	return 0;
}
