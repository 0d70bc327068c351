// SPDX-License-Identifier: MIT
/*
 * tests/rdma/bench_rdma.c - coord over rdma beside coord over tcp, in one
 * run on one host (the rig's guest): one coord-worker process per
 * transport (--transport tcp on 127.0.0.1, --transport rdma on
 * $RDMA_TEST_ADDR, default 10.0.2.15), a coordinator of one worker each,
 * the tests' `add` function (16 B of arguments, 8 B of result).
 *   chan_pingpong  (rdma) a PING frame and its PONG over coord's channel
 *               (transport/rdma_chan.c) between two threads of this
 *               process: the round trip below the coordinator.
 *   round trip  one closure at a time: schedule + fetch + put, N samples
 *               in 5 rounds; p50 / p99 / mean, and this process's context
 *               switches per closure.  With -p PERFTEST_PAIR_SH, over rdma,
 *               perftest's ib_send_lat runs after each round, and the
 *               median of the rounds' ratios is printed.
 *   throughput  F = 64 RemoteValues in flight (a sliding window) for T s;
 *               closures/s.
 * Checks (exit 1 on a discrepancy, never on speed): every fetch returns the
 * sum; join returns 0.  Prints one SUMMARY line per transport and workload.
 *   var_read    with COORD_PS_BIN set: a coord-ps --transport rdma, and a
 *               worker function (var_read_lat) that times N one-sided reads
 *               (runtime/varstore.c SNAP2): a 1-float and a 256-float
 *               variable, each read as one RDMA READ of its whole block, and
 *               256 floats of a 64 x 1024 one, a chain of three READs.
 *               Nine rounds of N each, alternating with raw_read:
 *               one RDMA READ of as many bytes on a channel of this process
 *               (what ib_read_lat measures), and the ratio of the p50s;
 *               with -p, ib_read_lat of as many bytes in each round too
 *               (after the reads in even rounds, before them in odd ones),
 *               and the median of the rounds' ratios.
 *   read_floor  before any coordinator starts (-t read: only this): per
 *               round, N READs of 4 (then 1024) bytes through the channel
 *               (coord_rdma_read()) and N bare ones on the same queue pair
 *               (one ibv_post_send(), then ib_read_lat's own loop of
 *               ibv_poll_cq()), then ib_read_lat: what the channel's
 *               wait adds to a READ, with nothing else of coord running.
 *               var_read rows also print the coordinator process's CPU
 *               use while it waits for the reading closure (a share of
 *               one CPU): an idle coordinator must leave the CPUs to the
 *               worker and the rxe device.
 * Exit 77 without an RDMA device.
 * -t rtt: the rdma round trip alone (no throughput, backlog or var_read;
 * -t rtt1: nor chan_pingpong, so that a profile holds only the round trip), and
 * -t var: var_read alone, to profile their code paths (tests/rdma/README.md,
 * "Profiling in the rig").
 * Usage: bench_rdma [-n N] [-s SECS] [-t tcp|rdma|chan|read|rtt|rtt1|var] [-p PERFTEST_PAIR_SH]
 * (COORD_WORKER_BIN, COORD_TESTFNS, COORD_PS_BIN as for the tests).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>

#include <pthread.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/timerfd.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <coord/var.h>
#include <infiniband/verbs.h>

#include "runtime/core/internal.h"
#include "transport/rdma/rdma_chan.h"
#include "../helpers.h"
#include "perftest_run.h"

#define ROUNDS 5
/* The watchdog of each phase (phase()), seconds. */
#define PHASE_S 240
/* var_read's rounds: more than ROUNDS, as ib_read_lat's t_typical swings by
 * 2x between runs in the guest; odd, so the median is a round's. */
#define VROUNDS 9

/* -p: perftest_pair.sh, run beside each round (NULL: no baseline rows). */
static const char *perftest_sh;
/* -S: the channel pairs' spin_us (0: the default). */
static int chan_spin_us;
/* chan_pingpong's p50 in this run (ns; 0: not measured), for breakdown(). */
static uint64_t chan_p50;

/*
 * The typical latency (us) that perftest's @tool prints for @iters
 * iterations of @bytes (0: its default size), run now, between two of our
 * rounds, by perftest_pair.sh; 0 if it is not there or failed.
 */
static double perftest(const char *tool, unsigned iters, unsigned bytes)
{
	double us = t_perftest(perftest_sh, tool, iters, bytes, "t_typical");

	if (perftest_sh && us <= 0)
		printf("bench_rdma: %s did not run (%s): no baseline beside this row\n", tool,
		       perftest_sh);
	return us;
}

static int cmp_dbl(const void *a, const void *b)
{
	double x = *(const double *)a, y = *(const double *)b;

	return x < y ? -1 : x > y;
}

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

/* When main() started, and the watchdog of one phase (phase()). */
static uint64_t t_start_ns;
static unsigned phase_s = PHASE_S;

/*
 * A phase of the run begins: say which, and when, and give it its own
 * watchdog of phase_s (T_WATCHDOG_S: t_watchdog()).  A phase is bounded
 * by its count and by perftest's own limits, so a watchdog hit is a hang
 * in the phase last printed, not the sum of slow phases on a loaded host.
 */
static void phase(const char *name)
{
	printf("bench_rdma: phase %s at %.1f s\n", name, (t_now_ns() - t_start_ns) / 1e9);
	t_watchdog(phase_s);
}

/* -t rtt: run() times the round trip only. */
static bool rtt_only;

/* The p50 of @n values (sorts them), in microseconds. */
static double p50_us(uint64_t *v, unsigned n)
{
	qsort(v, n, sizeof(*v), cmp_u64);
	return v[n / 2] / 1e3;
}

/*
 * Where a round trip's time goes: @n closures of `add_clock` one at a
 * time, which says when the function started and ended (CLOCK_MONOTONIC:
 * one clock for the processes of a host; with the worker in another guest,
 * rig.sh pair, only the total and fn are printed).  Stages, p50 of each:
 *   post   schedule() until it returns (with a loop asleep the caller's
 *          thread sends the REQ itself, rdma.c D5; the function may start
 *          before it returns);
 *   out    schedule()'s start until the function starts: the post, the
 *          wire, the worker noticing the frame (a spin or a wake-up),
 *          reading it and dispatching the call;
 *   fn     the function;
 *   back   from its end until fetch() returns: the result encoded and
 *          sent, the wire, the coordinator reaping it (the caller's
 *          thread when it drives, D2) and the future completed.
 * With the channel's own ping-pong p50 (@chan_ns, 0: not measured) the
 * wire's share is half of it each way, and the rest of out and back is
 * coord's: the post and the worker's dispatch, and its reply plus the
 * coordinator's reap.  Also the context switches of this process per
 * closure.
 */
static int breakdown(struct coord *c, const char *tp, unsigned n, uint64_t chan_ns)
{
	uint64_t *st = calloc(5 * (size_t)n, sizeof(*st)), *post = st, *out = st + n,
		 *fn = st + 2 * n, *back = st + 3 * n, *tot = st + 4 * n;
	uint32_t f = t_fn(c, "add_clock");
	struct rusage ru0, ru1;
	bool same_clock = true; /* the worker's clock is ours (one host) */
	int bad = !st;

	getrusage(RUSAGE_SELF, &ru0);
	for (unsigned i = 0; !bad && i < n; i++) {
		int64_t ab[2] = { i, 5 };
		struct coord_rv *rv;
		uint64_t t0 = t_now_ns(), t1, t7, res[3];
		const void *v;
		size_t len;

		bad |= coord_schedule(c, f, ab, sizeof(ab), &rv, NULL) != 0;
		t1 = t_now_ns();
		bad |= bad || coord_rv_fetch(rv, &v, &len, NULL) != 0 || len != sizeof(res);
		t7 = t_now_ns();
		if (bad)
			break;
		memcpy(res, v, sizeof(res));
		coord_rv_put(rv);
		bad |= res[0] != (uint64_t)i + 5 || res[2] < res[1];
		/* rig.sh pair: the worker runs in the other guest, on its own
		 * CLOCK_MONOTONIC; then only the total and fn mean anything. */
		same_clock = same_clock && res[1] >= t0 && t7 >= res[2];
		post[i] = t1 - t0;
		out[i] = res[1] - t0;
		fn[i] = res[2] - res[1];
		back[i] = t7 - res[2];
		tot[i] = t7 - t0;
	}
	getrusage(RUSAGE_SELF, &ru1);
	if (!bad && !same_clock) {
		printf("SUMMARY transport=%s workload=round_trip_stages n=%u p50_us=%.1f "
		       "fn_us=%.1f (the function ran on another host's clock: no other stage)\n",
		       tp, n, p50_us(tot, n), p50_us(fn, n));
	} else if (!bad) {
		double o = p50_us(out, n), b = p50_us(back, n), w = chan_ns / 2e3;

		printf("SUMMARY transport=%s workload=round_trip_stages n=%u p50_us=%.1f "
		       "post_us=%.1f out_us=%.1f fn_us=%.1f back_us=%.1f csw_per_call=%.2f",
		       tp, n, p50_us(tot, n), p50_us(post, n), o, p50_us(fn, n), b,
		       (double)((ru1.ru_nvcsw - ru0.ru_nvcsw) + (ru1.ru_nivcsw - ru0.ru_nivcsw)) /
			       n);
		if (chan_ns)
			printf(" wire_us=%.1f post_dispatch_us=%.1f reply_reap_us=%.1f", w, o - w,
			       b - w);
		printf("\n");
	} else {
		printf("bench_rdma: FAIL: the breakdown over %s went wrong\n", tp);
	}
	free(st);
	return bad;
}

/* Closures of add through @c over @tp, 64 in flight for @secs: their rate.
 * Non-zero if a result was wrong. */
static int run_throughput(struct coord *c, uint32_t add, const char *tp, double secs)
{
	uint64_t t0, sched = 0, done = 0;
	struct coord_rv *win[64];
	int bad = 0;

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
	return bad;
}

/* A backlog of @n * 5 adds through @c over @tp queued at once (no
 * RemoteValues), then join: their rate.  Non-zero if one failed. */
static int run_backlog(struct coord *c, uint32_t add, const char *tp, unsigned n)
{
	uint64_t t0;
	int bad = 0;

	t0 = t_now_ns();
	for (unsigned i = 0; i < n * 5; i++) {
		int64_t ab[2] = { i, 3 };

		bad |= coord_schedule(c, add, ab, sizeof(ab), NULL, NULL) != 0;
	}
	bad |= coord_join(c, NULL) != 0;
	printf("SUMMARY transport=%s workload=backlog closures=%u secs=%.2f closures_per_s=%.0f\n",
	       tp, n * 5, (t_now_ns() - t0) / 1e9, n * 5 / ((t_now_ns() - t0) / 1e9));
	return bad;
}

static int run(const char *tp, unsigned n, double secs)
{
	struct coord_registry *reg = t_registry();
	struct coord *c;
	uint64_t *lat = calloc(n, sizeof(*lat));
	uint32_t add;
	double mean = 0;
	int bad = 0;

	t_transport = tp;
	phase(strcmp(tp, "rdma") ? "round_trip tcp" : "round_trip rdma");
	if (t_workers_start(1) < 0) {
		printf("bench_rdma: cannot start a coord-worker over %s\n", tp);
		return 1;
	}
	c = t_coord(reg, 1, COORD_RING_DEFAULT);
	add = t_fn(c, "add");
	/* ROUNDS rounds of n / ROUNDS; over rdma with -p, ib_send_lat runs
	 * after each (the same machine, moments apart: TCG's speed drifts). */
	unsigned per = n / ROUNDS, k = 0;
	uint64_t r50[ROUNDS];
	double base[ROUNDS], ratio[ROUNDS];
	struct rusage ru0, ru1;
	long cs = 0;
	bool pt = perftest_sh && !strcmp(tp, "rdma");

	for (unsigned i = 0; i < 200; i++) { /* warm-up */
		int64_t ab[2] = { i, 1 };
		struct coord_rv *rv;

		bad |= coord_schedule(c, add, ab, sizeof(ab), &rv, NULL) != 0;
		bad |= fetch_check(rv, (int64_t)i + 1) != 0;
	}
	for (k = 0; k < ROUNDS; k++) {
		getrusage(RUSAGE_SELF, &ru0);
		for (unsigned i = k * per; i < (k + 1) * per; i++) {
			int64_t ab[2] = { i, 1 };
			struct coord_rv *rv;
			uint64_t a = t_now_ns();

			bad |= coord_schedule(c, add, ab, sizeof(ab), &rv, NULL) != 0;
			bad |= fetch_check(rv, (int64_t)i + 1) != 0;
			lat[i] = t_now_ns() - a;
		}
		getrusage(RUSAGE_SELF, &ru1);
		cs += (ru1.ru_nvcsw - ru0.ru_nvcsw) + (ru1.ru_nivcsw - ru0.ru_nivcsw);
		qsort(lat + k * per, per, sizeof(*lat), cmp_u64);
		r50[k] = lat[k * per + per / 2];
		base[k] = pt ? perftest("ib_send_lat", per, 0) : 0;
		ratio[k] = base[k] > 0 ? r50[k] / 1e3 / base[k] : 0;
		if (pt) /* each round's pair: on a loaded host they swing apart */
			printf("bench_rdma: round %u p50 %.1f us, ib_send_lat t_typical %.1f us: "
			       "%.2fx the verbs round trip\n",
			       k, r50[k] / 1e3, base[k], ratio[k] / 2);
	}
	n = per * ROUNDS;
	qsort(lat, n, sizeof(*lat), cmp_u64);
	for (unsigned i = 0; i < n; i++)
		mean += (double)lat[i] / n;
	/* context switches of this process (its threads: the caller, the
	 * loop's) per round trip: a wake-up on the path shows here */
	printf("SUMMARY transport=%s workload=round_trip n=%u p50_us=%.1f p99_us=%.1f "
	       "mean_us=%.1f csw_per_call=%.2f\n",
	       tp, n, lat[n / 2] / 1e3, lat[n * 99 / 100] / 1e3, mean / 1e3, (double)cs / n);
	if (pt && base[0] > 0 && base[ROUNDS - 1] > 0) {
		qsort(base, ROUNDS, sizeof(base[0]), cmp_dbl);
		qsort(ratio, ROUNDS, sizeof(ratio[0]), cmp_dbl);
		qsort(r50, ROUNDS, sizeof(r50[0]), cmp_u64);
		/* ib_send_lat's t_typical is half its ping-pong (perftest's
		 * rtt_factor 2 for SEND): a closure's round trip is two SENDs */
		printf("SUMMARY transport=rdma workload=round_trip_vs_ib_send_lat rounds=%ux%u "
		       "p50_us=%.1f..%.1f ib_send_lat_t_typical_us=%.1f..%.1f "
		       "ratio_to_t_typical=%.2f (%.2f..%.2f) ratio_to_verbs_round_trip=%.2f\n",
		       ROUNDS, per, r50[0] / 1e3, r50[ROUNDS - 1] / 1e3, base[0], base[ROUNDS - 1],
		       ratio[ROUNDS / 2], ratio[0], ratio[ROUNDS - 1], ratio[ROUNDS / 2] / 2);
	}
	phase("round_trip_stages");
	bad |= breakdown(c, tp, per, strcmp(tp, "rdma") ? 0 : chan_p50);
	if (!rtt_only) {
		phase("throughput");
		bad |= run_throughput(c, add, tp, secs);
		phase("backlog");
		bad |= run_backlog(c, add, tp, n);
	}
	coord_destroy(c);
	coord_registry_destroy(reg);
	t_workers_stop();
	free(lat);
	if (bad)
		printf("bench_rdma: FAIL: a result over %s was wrong\n", tp);
	return bad;
}

/* ---- one-sided variable reads beside raw RDMA READs ------------------------------- */

struct acc {
	struct coord_rdma_listener *l;
	struct coord_rdma_chan *ch;
	pthread_t th;
	bool started; /* th runs: join it */
	int r;
};

/* A channel pair on this host's RDMA address: @srv (a thread) accepts
 * into a->ch while we connect *@c.  Return: coord_rdma_connect()'s. */
static int pair_open(struct acc *a, void *(*srv)(void *), struct coord_rdma_chan **c)
{
	unsigned port;
	char hp[96];

	struct coord_rdma_opts o = { .spin_us = chan_spin_us };

	t_transport = "rdma"; /* t_local_addr(): this host's RDMA device's address */
	snprintf(hp, sizeof(hp), "%s:0", t_local_addr());
	if (coord_rdma_listen(hp, &o, &a->l, &port, NULL) < 0)
		return -1;
	snprintf(hp, sizeof(hp), "%s:%u", t_local_addr(), port);
	a->started = pthread_create(&a->th, NULL, srv, a) == 0;
	return a->started ? coord_rdma_connect(hp, &o, 10000, c, NULL) : -1;
}

static void *accept_main(void *arg)
{
	struct acc *a = arg;

	a->r = coord_rdma_accept(a->l, 10000, &a->ch, NULL);
	return NULL;
}

/* One signalled RDMA READ of @bytes posted on @ch's queue pair and its
 * completion reaped with a bare ibv_poll_cq() loop, as ib_read_lat does
 * (coord_rdma_chan_verbs()); 0, or -1 on any failure. */
static int bare_read(struct coord_rdma_chan *ch, struct coord_rdma_mr *lm, uint64_t raddr,
		     uint32_t rkey, size_t bytes)
{
	struct ibv_qp *qp;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	struct ibv_sge sge;
	struct ibv_send_wr wr, *bad;
	struct ibv_wc wc;
	uint64_t end = t_now_ns() + 5000000000ull;
	int k;

	coord_rdma_chan_verbs(ch, lm, &qp, &cq, &mr);
	memset(&wr, 0, sizeof(wr));
	sge.addr = (uintptr_t)mr->addr;
	sge.length = (uint32_t)bytes;
	sge.lkey = mr->lkey;
	wr.wr_id = UINT64_MAX;
	wr.sg_list = &sge;
	wr.num_sge = 1;
	wr.opcode = IBV_WR_RDMA_READ;
	wr.send_flags = IBV_SEND_SIGNALED;
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	if (ibv_post_send(qp, &wr, &bad))
		return -1;
	for (unsigned i = 0;; i++) {
		k = ibv_poll_cq(cq, 1, &wc);
		if (k)
			break;
		if ((i & 1023) == 1023 && t_now_ns() > end)
			return -1;
	}
	return k == 1 && wc.status == IBV_WC_SUCCESS && wc.wr_id == UINT64_MAX ? 0 : -1;
}

/* p50/p99 (ns) of @n single RDMA READs of @bytes over a channel of this
 * process: the baseline of one READ round trip (ib_read_lat's measure).
 * @bare: each READ by bare_read() on the channel's queue pair instead. */
static int raw_read(size_t bytes, unsigned n, bool bare, uint64_t *p50, uint64_t *p99)
{
	static uint8_t remote[8192], local[8192];
	struct coord_rdma_mr *rm = NULL, *lm = NULL;
	struct coord_rdma_chan *c = NULL;
	struct acc a = { 0 };
	uint64_t *lat = calloc(n, sizeof(*lat)), raddr;
	uint32_t rkey;
	int r = -1;

	if (!lat)
		goto out;
	r = pair_open(&a, accept_main, &c);
	if (a.started)
		pthread_join(a.th, NULL);
	if (r < 0 || a.r < 0 || coord_rdma_reg(a.ch, remote, sizeof(remote), true, &rm) < 0 ||
	    coord_rdma_reg(c, local, sizeof(local), false, &lm) < 0) {
		r = -1;
		goto out;
	}
	coord_rdma_mr_export(rm, &raddr, &rkey);
	for (unsigned i = 0; i < n + 200 && r == 0; i++) {
		uint64_t t0 = t_now_ns();

		r = bare ? bare_read(c, lm, raddr, rkey, bytes)
			 : coord_rdma_read(c, lm, 0, raddr, rkey, bytes, 5000);
		if (i >= 200)
			lat[i - 200] = t_now_ns() - t0;
	}
	if (r == 0) {
		qsort(lat, n, sizeof(*lat), cmp_u64);
		*p50 = lat[n / 2];
		*p99 = lat[n * 99 / 100];
	}
out:
	coord_rdma_dereg(lm);
	coord_rdma_dereg(rm);
	coord_rdma_chan_destroy(c);
	coord_rdma_chan_destroy(a.ch);
	coord_rdma_listener_destroy(a.l);
	free(lat);
	return r;
}

static void *echo_main(void *arg)
{
	struct acc *a = arg;
	struct coord_wire_hdr h;
	const uint8_t *pl;
	uint8_t buf[64];
	struct coord_wire_writer w;
	uint64_t tok;

	a->r = coord_rdma_accept(a->l, 10000, &a->ch, NULL);
	while (a->r == 0 && coord_rdma_chan_read(a->ch, 10000, 1000, &h, &pl) == 0) {
		if (coord_wire_get_ping(&h, pl, &tok) < 0)
			break;
		coord_wire_writer_init(&w, buf, sizeof(buf));
		coord_wire_put_ping(&w, COORD_WIRE_PONG, tok);
		if (coord_rdma_chan_send(a->ch, buf, w.len, 5000) < 0)
			break;
	}
	return NULL;
}

/* p50 (ns) of @n frame ping-pongs over coord's channel (no coordinator):
 * what a closure's round trip costs below the coordinator. */
static int chan_pingpong(unsigned n, uint64_t *p50, uint64_t *p99)
{
	struct coord_rdma_chan *c = NULL;
	struct acc a = { 0 };
	uint64_t *lat = calloc(2 * (size_t)n, sizeof(*lat)), *snd = lat + n;
	struct coord_wire_writer w;
	struct coord_wire_hdr h;
	const uint8_t *pl;
	uint8_t buf[64];
	struct coord_rdma_stats cs = { 0 }, ss = { 0 };
	int r = -1;

	if (!lat)
		goto out;
	snd = lat + n;
	r = pair_open(&a, echo_main, &c);
	for (unsigned i = 0; i < n + 200 && r == 0; i++) {
		uint64_t t0 = t_now_ns(), tok;

		coord_wire_writer_init(&w, buf, sizeof(buf));
		coord_wire_put_ping(&w, COORD_WIRE_PING, i);
		r = coord_rdma_chan_send(c, buf, w.len, 5000);
		if (i >= 200)
			snd[i - 200] = t_now_ns() - t0;
		if (r == 0)
			r = coord_rdma_chan_read(c, 5000, 1000, &h, &pl);
		if (r == 0 && (coord_wire_get_ping(&h, pl, &tok) < 0 || tok != i)) {
			printf("bench_rdma: chan_pingpong: reply %u type %u len %u tok %llu\n", i,
			       h.type, h.len, (unsigned long long)tok);
			r = -1;
		}
		if (i >= 200)
			lat[i - 200] = t_now_ns() - t0;
	}
	if (c)
		coord_rdma_chan_stats(c, &cs);
	coord_rdma_chan_destroy(c);
	c = NULL;
	if (a.started)
		pthread_join(a.th, NULL);
	if (a.ch)
		coord_rdma_chan_stats(a.ch, &ss);
	/* the blocking waits that slept on either side, per round trip */
	printf("bench_rdma: chan_pingpong: sleeps per round trip: client %.2f, server %.2f\n",
	       (double)cs.sleeps / (n + 200), (double)ss.sleeps / (n + 200));
	if (r != 0 || a.r != 0)
		printf("bench_rdma: chan_pingpong: client %d, server accept %d\n", r, a.r);
	if (r == 0 && a.r == 0) {
		qsort(lat, n, sizeof(*lat), cmp_u64);
		*p50 = lat[n / 2];
		*p99 = lat[n * 99 / 100];
		/* the SEND's post: on rxe one system call that also moves the
		 * frame into the peer's receive (the kernel's loopback) */
		printf("bench_rdma: chan_pingpong: send call p50 %.1f us\n", p50_us(snd, n));
	} else {
		r = -1;
	}
out:
	coord_rdma_chan_destroy(c);
	coord_rdma_chan_destroy(a.ch);
	coord_rdma_listener_destroy(a.l);
	free(lat);
	return r;
}

/* What a timerfd set and stop costs here (rdma.c D6 does both per
 * closure a schedule() sends): p50 of @n pairs, in microseconds. */
static double timer_pair_us(unsigned n)
{
	int fd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	struct itimerspec on = { .it_value = { 0, 300000 } }, off = { { 0, 0 }, { 0, 0 } };
	uint64_t *v = calloc(n, sizeof(*v));
	double p = 0;

	if (fd >= 0 && v) {
		for (unsigned i = 0; i < n; i++) {
			uint64_t t0 = t_now_ns();

			timerfd_settime(fd, 0, &on, NULL);
			timerfd_settime(fd, 0, &off, NULL);
			v[i] = t_now_ns() - t0;
		}
		p = p50_us(v, n);
	}
	if (fd >= 0)
		close(fd);
	free(v);
	return p;
}

/* CPU time (user + system) in @ru, in microseconds. */
static double cpu_us(const struct rusage *ru)
{
	return (double)(ru->ru_utime.tv_sec + ru->ru_stime.tv_sec) * 1e6 +
	       (double)(ru->ru_utime.tv_usec + ru->ru_stime.tv_usec);
}

/* Median of @n values (sorts them). */
static double median_dbl(double *v, unsigned n)
{
	qsort(v, n, sizeof(v[0]), cmp_dbl);
	return v[n / 2];
}

/*
 * read_floor: where a READ's time goes, with nothing else of coord running.
 * ROUNDS rounds, each N READs of @bytes through the channel
 * (coord_rdma_read()), N bare ones on the same queue pair (bare_read()),
 * then ib_read_lat -s @bytes (with -p); medians of the rounds.
 */
static int run_read_floor(unsigned n, unsigned bytes)
{
	double chan[ROUNDS], bare[ROUNDS], ib[ROUNDS], cb[ROUNDS], ci[ROUNDS], bi[ROUNDS];
	unsigned ni = 0;

	for (unsigned k = 0; k < ROUNDS; k++) {
		uint64_t c50 = 0, b50 = 0, p99 = 0;

		if (raw_read(bytes, n, false, &c50, &p99) || raw_read(bytes, n, true, &b50, &p99)) {
			printf("bench_rdma: FAIL: a READ failed\n");
			return 1;
		}
		chan[k] = c50 / 1e3;
		bare[k] = b50 / 1e3;
		cb[k] = chan[k] / bare[k];
		ib[ni] = perftest("ib_read_lat", n, bytes);
		if (ib[ni] > 0) {
			ci[ni] = chan[k] / ib[ni];
			bi[ni] = bare[k] / ib[ni];
			ni++;
		}
	}
	printf("SUMMARY transport=rdma workload=read_floor bytes=%u n=%ux%u chan_p50_us=%.1f "
	       "bare_p50_us=%.1f chan_over_bare=%.2f",
	       bytes, ROUNDS, n, median_dbl(chan, ROUNDS), median_dbl(bare, ROUNDS),
	       median_dbl(cb, ROUNDS));
	if (ni)
		printf(" ib_read_lat_us=%.1f chan_over_ib_read_lat=%.2f bare_over_ib_read_lat=%.2f",
		       median_dbl(ib, ni), median_dbl(ci, ni), median_dbl(bi, ni));
	printf("\n");
	return 0;
}

/* A variable the var_read rows read: its shape, the floats read, and how
 * they are read (one READ of the whole block, or a chain). */
struct vr_var {
	const char *name;
	unsigned ndim;
	uint64_t dims[2], floats;
	const char *how;
};

/* The rows of variable @vr through @c: VROUNDS rounds of @n reads from a
 * function beside @n raw READs (and ib_read_lat with -p).  Non-zero if a
 * step failed. */
static int var_read_rows(struct coord *c, const struct vr_var *vr, unsigned n)
{
	uint64_t floats = vr->floats;
	struct t_var_args a = { .off = 0, .n = floats, .pad = n };
	uint64_t out[3], r50 = 0, r99 = 0;
	coord_var_t v;
	struct coord_rv *rv;
	const void *p;
	size_t len;
	int bad = 0;

	bad |= coord_var_create(c, vr->name, vr->ndim, vr->dims, NULL, &v, NULL) != 0;
	a.var = v;
	/* warm-up: maps the variable on this worker's ps connection */
	a.pad = 200;
	bad |= coord_schedule(c, t_fn(c, "var_read_lat"), &a, sizeof(a), &rv, NULL) != 0 ||
	       coord_rv_fetch_timeout(rv, 60000000000ll, &p, &len, NULL) != 0;
	if (!bad)
		coord_rv_put(rv);
	/* VROUNDS rounds, each N var reads then N raw reads, so both see
	 * the same (shared, noisy) machine; medians of the rounds' p50s.
	 * With -p, ib_read_lat runs after the reads in even rounds and
	 * before them in odd ones, so neither side of a round's ratio
	 * is always the one that runs later as TCG's speed drifts. */
	uint64_t v50[VROUNDS], v99[VROUNDS], q50[VROUNDS], q99[VROUNDS];
	double ib[VROUNDS], ibr[VROUNDS], busy[VROUNDS];

	for (unsigned k = 0; !bad && k < VROUNDS; k++) {
		struct rusage ru0, ru1;
		uint64_t t0;

		if (k & 1)
			ib[k] = perftest("ib_read_lat", n, (unsigned)floats * 4);
		t0 = t_now_ns();
		getrusage(RUSAGE_SELF, &ru0);
		a.pad = n;
		bad |= coord_schedule(c, t_fn(c, "var_read_lat"), &a, sizeof(a), &rv, NULL) != 0 ||
		       coord_rv_fetch_timeout(rv, 120000000000ll, &p, &len, NULL) != 0 ||
		       len != sizeof(out);
		if (bad)
			break;
		getrusage(RUSAGE_SELF, &ru1);
		busy[k] = (cpu_us(&ru1) - cpu_us(&ru0)) * 1e3 / (double)(t_now_ns() - t0);
		memcpy(out, p, sizeof(out));
		coord_rv_put(rv);
		v50[k] = out[0];
		v99[k] = out[1];
		bad |= raw_read(floats * 4, n, false, &q50[k], &q99[k]) != 0;
		if (!(k & 1))
			ib[k] = perftest("ib_read_lat", n, (unsigned)floats * 4);
		ibr[k] = ib[k] > 0 ? v50[k] / 1e3 / ib[k] : 0;
	}
	if (bad)
		return bad;
	qsort(v50, VROUNDS, sizeof(v50[0]), cmp_u64);
	qsort(v99, VROUNDS, sizeof(v99[0]), cmp_u64);
	qsort(q50, VROUNDS, sizeof(q50[0]), cmp_u64);
	qsort(q99, VROUNDS, sizeof(q99[0]), cmp_u64);
	r50 = q50[VROUNDS / 2];
	r99 = q99[VROUNDS / 2];
	printf("SUMMARY transport=rdma workload=var_read one_sided=%s var=%s floats=%llu "
	       "n=%ux%u p50_us=%.1f p99_us=%.1f coordinator_cpu_while_waiting=%.2f\n",
	       vr->how, vr->name, (unsigned long long)floats, VROUNDS, n, v50[VROUNDS / 2] / 1e3,
	       v99[VROUNDS / 2] / 1e3, median_dbl(busy, VROUNDS));
	printf("SUMMARY transport=rdma workload=raw_read bytes=%llu n=%ux%u p50_us=%.1f "
	       "p99_us=%.1f var_read_over_raw_p50=%.2f\n",
	       (unsigned long long)floats * 4, VROUNDS, n, r50 / 1e3, r99 / 1e3,
	       r50 ? (double)v50[VROUNDS / 2] / (double)r50 : 0.0);
	if (perftest_sh && ib[0] > 0 && ib[VROUNDS - 1] > 0) {
		qsort(ib, VROUNDS, sizeof(ib[0]), cmp_dbl);
		qsort(ibr, VROUNDS, sizeof(ibr[0]), cmp_dbl);
		printf("SUMMARY transport=rdma workload=var_read_vs_ib_read_lat var=%s "
		       "bytes=%llu ib_read_lat_t_typical_us=%.1f (%.1f..%.1f) "
		       "var_read_over_ib_read_lat=%.2f (%.2f..%.2f)\n",
		       vr->name, (unsigned long long)floats * 4, ib[VROUNDS / 2], ib[0],
		       ib[VROUNDS - 1], ibr[VROUNDS / 2], ibr[0], ibr[VROUNDS - 1]);
	}
	return bad;
}

static int run_var_read(unsigned n)
{
	const char *bin = getenv("COORD_PS_BIN");
	struct coord_registry *reg = t_registry();
	char listen[80], json[512], *w;
	char *argv[] = { (char *)bin, "--listen", listen,	 "--task", "0",
			 "--log",     "error",	  "--transport", "rdma",   NULL };
	struct coord_spec *spec = NULL;
	struct coord_opts o;
	struct coord *c = NULL;
	/* a 1-float and a 256-float variable (one READ of the whole block
	 * each), and 256 floats of a 64 x 1024 one (a chain of three) */
	static const struct vr_var vars[] = { { "bench/v1", 1, { 1, 0 }, 1, "block" },
					      { "bench/v256", 1, { 256, 0 }, 256, "block" },
					      { "bench/big", 2, { 64, 1024 }, 256, "chain" } };
	unsigned port;
	pid_t ps;
	int bad = 0;

	t_transport = "rdma";
	snprintf(listen, sizeof(listen), "%s:0", t_addr());
	ps = t_spawn(argv, "coord-ps", &port);
	if (ps < 0 || t_workers_start(1) < 0) {
		printf("bench_rdma: cannot start coord-ps or coord-worker over rdma\n");
		return 1;
	}
	t_opts(&o, reg);
	w = t_spec_json(1);
	w[strlen(w) - 1] = 0;
	snprintf(json, sizeof(json), "%s, \"ps\": [\"%s:%u\"]}", w, t_addr(), port);
	free(w);
	bad |= coord_spec_parse(json, &spec, NULL) != 0;
	bad |= !spec || coord_create(spec, &o, &c, NULL) != 0;
	coord_spec_destroy(spec);
	for (unsigned vi = 0; !bad && vi < sizeof(vars) / sizeof(vars[0]); vi++) {
		phase(vars[vi].name);
		bad |= var_read_rows(c, &vars[vi], n);
	}
	if (c) {
		bad |= coord_join(c, NULL) != 0;
		coord_destroy(c);
	}
	coord_registry_destroy(reg);
	t_workers_stop();
	t_reap(ps);
	if (bad)
		printf("bench_rdma: FAIL: the var_read run failed\n");
	return bad;
}

int main(int argc, char **argv)
{
	struct coord_error err = { 0 };
	unsigned n = 2000;
	double secs = 3;
	const char *only = NULL; /* -t tcp | rdma: that transport's rows only */
	int opt, bad = 0;

	while ((opt = getopt(argc, argv, "n:p:s:S:t:")) != -1) {
		if (opt == 'S')
			chan_spin_us = atoi(optarg);
		else if (opt == 'p')
			perftest_sh = optarg;
		else if (opt == 'n')
			n = (unsigned)atoi(optarg);
		else if (opt == 's')
			secs = atof(optarg);
		else if (opt == 't')
			only = optarg;
		else
			return 2;
	}
	if (n < 100 * ROUNDS)
		n = 100 * ROUNDS;
	setvbuf(stdout, NULL, _IOLBF, 0);
	t_start_ns = t_now_ns();
	if (getenv("T_WATCHDOG_S") && atoi(getenv("T_WATCHDOG_S")) > 0)
		phase_s = (unsigned)atoi(getenv("T_WATCHDOG_S"));
	t_watchdog(phase_s);
	if (coord_rdma_available(&err) < 0) {
		printf("bench_rdma: SKIP: %s\n", err.msg);
		return 77;
	}
	/* Over rdma the worker listens on a device's address: a key is needed. */
	setenv("COORD_CLUSTER_KEY",
	       "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff", 1);
	if (!only || !strcmp(only, "tcp"))
		bad |= run("tcp", n, secs);
	rtt_only = only && (!strcmp(only, "rtt") || !strcmp(only, "rtt1"));
	if (!only || !strcmp(only, "rdma") || !strcmp(only, "chan") || !strcmp(only, "rtt")) {
		uint64_t p50 = 0, p99 = 0;

		phase("chan_pingpong");
		bad |= chan_pingpong(n, &p50, &p99) != 0;
		chan_p50 = p50;
		printf("SUMMARY transport=rdma workload=chan_pingpong n=%u p50_us=%.1f "
		       "p99_us=%.1f\n",
		       n, p50 / 1e3, p99 / 1e3);
	}
	/* Before any coordinator starts: nothing else of coord running. */
	if (!only || !strcmp(only, "rdma") || !strcmp(only, "read")) {
		phase("read_floor");
		bad |= run_read_floor(n / 2 < 200 ? 200 : n / 2, 4) ||
		       run_read_floor(n / 2 < 200 ? 200 : n / 2, 1024);
	}
	if (rtt_only)
		printf("bench_rdma: timerfd set + stop p50 %.1f us\n", timer_pair_us(1000));
	if (!only || !strcmp(only, "rdma") || rtt_only)
		bad |= run("rdma", n, secs);
	if (getenv("COORD_PS_BIN") && (!only || !strcmp(only, "rdma") || !strcmp(only, "var"))) {
		phase("var_read");
		bad |= run_var_read(n / 2 < 200 ? 200 : n / 2);
	}
	printf("bench_rdma: done at %.1f s\n", (t_now_ns() - t_start_ns) / 1e9);
	return bad;
}
