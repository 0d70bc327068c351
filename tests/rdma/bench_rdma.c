// SPDX-License-Identifier: MIT
/*
 * tests/rdma/bench_rdma.c - coord over rdma beside coord over tcp, in one
 * run on one host (the rig's guest): one coord-worker process per
 * transport (--transport tcp on 127.0.0.1, --transport rdma on
 * $RDMA_TEST_ADDR, default 10.0.2.15), a coordinator of one worker each,
 * the tests' `add` function (16 B of arguments, 8 B of result).
 *   round trip  one closure at a time: schedule + fetch + put, N samples;
 *               p50 / p99 / mean.
 *   throughput  F = 64 RemoteValues in flight (a sliding window) for T s;
 *               closures/s.
 * Checks (exit 1 on a discrepancy, never on speed): every fetch returns the
 * sum; join returns 0.  Prints one SUMMARY line per transport and workload.
 * Exit 77 without an RDMA device.  Usage: bench_rdma [-n N] [-s SECS]
 * (COORD_WORKER_BIN, COORD_TESTFNS as for the tests).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/internal.h"
#include "transport/rdma_chan.h"
#include "../helpers.h"

static int cmp_u64(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? -1 : x > y;
}

static int fetch_check(struct coord_rv *rv, int64_t want)
{
	const void *v;
	size_t len;
	int64_t x;

	if (coord_rv_fetch(rv, &v, &len, NULL) != 0 || len != sizeof(x))
		return -1;
	memcpy(&x, v, sizeof(x));
	coord_rv_put(rv);
	return x == want ? 0 : -1;
}

static int run(const char *tp, unsigned n, double secs)
{
	struct coord_registry *reg = t_registry();
	struct coord *c;
	uint64_t *lat = calloc(n, sizeof(*lat)), t0, sched = 0, done = 0;
	struct coord_rv *win[64];
	uint32_t add;
	double mean = 0;
	int bad = 0;

	t_transport = tp;
	if (t_workers_start(1) < 0) {
		printf("bench_rdma: cannot start a coord-worker over %s\n", tp);
		return 1;
	}
	c = t_coord(reg, 1, COORD_RING_DEFAULT);
	add = t_fn(c, "add");
	for (unsigned i = 0; i < 200 + n; i++) { /* 200 warm-up calls */
		int64_t ab[2] = { i, 1 };
		struct coord_rv *rv;
		uint64_t a = t_now_ns();

		bad |= coord_schedule(c, add, ab, sizeof(ab), &rv, NULL) != 0;
		bad |= fetch_check(rv, (int64_t)i + 1) != 0;
		if (i >= 200)
			lat[i - 200] = t_now_ns() - a;
	}
	qsort(lat, n, sizeof(*lat), cmp_u64);
	for (unsigned i = 0; i < n; i++)
		mean += (double)lat[i] / n;
	printf("SUMMARY transport=%s workload=round_trip n=%u p50_us=%.1f p99_us=%.1f "
	       "mean_us=%.1f\n",
	       tp, n, lat[n / 2] / 1e3, lat[n * 99 / 100] / 1e3, mean / 1e3);
	t0 = t_now_ns();
	while (t_now_ns() - t0 < (uint64_t)(secs * 1e9) || done < sched) {
		int64_t ab[2] = { (int64_t)sched, 2 };

		if (sched - done == 64 ||
		    (sched > done && t_now_ns() - t0 >= (uint64_t)(secs * 1e9))) {
			bad |= fetch_check(win[done % 64], (int64_t)done + 2) != 0;
			done++;
			continue;
		}
		bad |= coord_schedule(c, add, ab, sizeof(ab), &win[sched % 64], NULL) != 0;
		sched++;
	}
	printf("SUMMARY transport=%s workload=throughput in_flight=64 closures=%llu secs=%.2f "
	       "closures_per_s=%.0f\n",
	       tp, (unsigned long long)done, (t_now_ns() - t0) / 1e9,
	       done / ((t_now_ns() - t0) / 1e9));
	bad |= coord_join(c, NULL) != 0;
	/* backlog: N*5 closures queued at once (no RemoteValues), then join */
	t0 = t_now_ns();
	for (unsigned i = 0; i < n * 5; i++) {
		int64_t ab[2] = { i, 3 };

		bad |= coord_schedule(c, add, ab, sizeof(ab), NULL, NULL) != 0;
	}
	bad |= coord_join(c, NULL) != 0;
	printf("SUMMARY transport=%s workload=backlog closures=%u secs=%.2f closures_per_s=%.0f\n",
	       tp, n * 5, (t_now_ns() - t0) / 1e9, n * 5 / ((t_now_ns() - t0) / 1e9));
	coord_destroy(c);
	coord_registry_destroy(reg);
	t_workers_stop();
	free(lat);
	if (bad)
		printf("bench_rdma: FAIL: a result over %s was wrong\n", tp);
	return bad;
}

int main(int argc, char **argv)
{
	struct coord_error err = { 0 };
	unsigned n = 2000;
	double secs = 3;
	int opt, bad;

	while ((opt = getopt(argc, argv, "n:s:")) != -1) {
		if (opt == 'n')
			n = (unsigned)atoi(optarg);
		else if (opt == 's')
			secs = atof(optarg);
		else
			return 2;
	}
	if (n < 100)
		n = 100;
	setvbuf(stdout, NULL, _IOLBF, 0);
	t_watchdog(240);
	if (coord_rdma_available(&err) < 0) {
		printf("bench_rdma: SKIP: %s\n", err.msg);
		return 77;
	}
	/* Over rdma the worker listens on a device's address: a key is needed. */
	setenv("COORD_CLUSTER_KEY",
	       "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff", 1);
	bad = run("tcp", n, secs);
	bad |= run("rdma", n, secs);
	return bad;
}
