// SPDX-License-Identifier: MIT
/*
 * tests/rdma/bench_rdma_bw.c - large ps variables over rdma beside
 * perftest's ib_read_bw / ib_write_bw, in one run (the rig's guest, or
 * across the rig's pair-mode wire): a coord-ps --transport rdma and one
 * coord-worker on $RDMA_TEST_ADDR, a coordinator here whose ps client reads
 * over rdma.
 *   var_read_bw    coord_var_read() of a whole variable of 64 KiB, 1 MiB,
 *                  16 MiB and 64 MiB: one-sided, RDMA READ straight into
 *                  the caller's buffer (transport/rdma/ps_rdma.c P4; at
 *                  most 64 KiB through the bounce buffer); MiB/s over R
 *                  reads (about 64 MiB in all, 3..500 reads).
 *   var_assign_bw  coord_var_assign() of the same, 8 MiB at most each:
 *                  rendezvous (ps_rdma.c P5: the ps RDMA READs the caller's
 *                  buffer straight into the variable; at least 64 KiB).
 *   var_assign_add_bw  coord_var_batch() of one ASSIGN_ADD (of zeros, so
 *                  the values stay checkable), 8 MiB at most each:
 *                  rendezvous, the ps READs into its buffer and adds.
 * With -p PERFTEST_PAIR_SH: ib_read_bw and ib_write_bw of the same message
 * size right after each row, and the ratios (issue 25: >= 0.8 at >= 1 MiB;
 * an update's data moves by RDMA READ now, so ib_read_bw is its floor too).
 * Checks (exit 1, never on speed): every float read is the one assigned,
 * before and after the updates;
 * with the ps a local process (no T_SPAWN_WRAP), a 1 MiB read completes
 * while coord-ps is SIGSTOPped (one-sided: no ps CPU).
 * Exit 77 without an RDMA device.  SUMMARY lines, never asserted.
 * Usage: bench_rdma_bw [-m MAX_MIB] [-p PERFTEST_PAIR_SH]
 * (COORD_WORKER_BIN, COORD_TESTFNS, COORD_PS_BIN as for the tests).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <coord/var.h>

#include "runtime/core/internal.h"
#include "transport/rdma/rdma_chan.h"
#include "../helpers.h"
#include "perftest_run.h"

#define PIECE (8u << 20) /* an assign's largest frame of floats */

static const char *perftest_sh;

/* perftest's "BW average" (MB/s, perftest's MB: 2^20 B) of @tool with
 * @iters messages of @bytes, run now by perftest_pair.sh; 0 if it failed. */
static double perftest_bw(const char *tool, unsigned iters, size_t bytes)
{
	double bw = t_perftest(perftest_sh, tool, iters, bytes, "BW average");

	if (perftest_sh && bw <= 0)
		printf("bench_rdma_bw: %s -s %zu did not run: no baseline beside this row\n", tool,
		       bytes);
	return bw;
}

static double mib_s(size_t bytes, unsigned reps, uint64_t ns)
{
	return ns ? (double)bytes * reps / (1 << 20) / ((double)ns / 1e9) : 0;
}

/* Assign @v (@n floats) from @src in pieces of PIECE bytes at most. */
static int assign_all(struct coord *c, coord_var_t v, const float *src, uint64_t n)
{
	for (uint64_t at = 0; at < n; at += PIECE / 4) {
		uint64_t k = n - at < PIECE / 4 ? n - at : PIECE / 4;

		if (coord_var_assign(c, v, at, k, src + at, NULL) != 0)
			return -1;
	}
	return 0;
}

/* Add @delta (@n floats) to @v, in pieces of PIECE bytes at most. */
static int add_all(struct coord *c, coord_var_t v, const float *delta, uint64_t n)
{
	for (uint64_t at = 0; at < n; at += PIECE / 4) {
		struct coord_var_op op = { .op = COORD_VAR_ASSIGN_ADD,
					   .var = v,
					   .off = at,
					   .n = n - at < PIECE / 4 ? n - at : PIECE / 4,
					   .src = delta + at };

		if (coord_var_batch(c, &op, 1, NULL) != 0)
			return -1;
	}
	return 0;
}

/* A 1 MiB read while coord-ps is stopped: only a one-sided read completes. */
static int check_one_sided(struct coord *c, coord_var_t v, pid_t ps, float *dst)
{
	int bad;

	if (getenv("T_SPAWN_WRAP") && *getenv("T_SPAWN_WRAP"))
		return 0; /* the ps runs elsewhere: its pid is not ours to stop */
	kill(ps, SIGSTOP);
	bad = coord_var_read(c, v, 0, (1u << 20) / 4, dst, NULL) != 0;
	kill(ps, SIGCONT);
	printf("bench_rdma_bw: a 1 MiB read with coord-ps stopped: %s\n",
	       bad ? "FAILED (not one-sided)" : "done (one-sided)");
	return bad;
}

/* The SUMMARY lines of one size: coord's rates over perftest's in this boot. */
static void bw_print(size_t bytes, unsigned reps, double rd, double wr, double ad)
{
	double ib_r = perftest_bw("ib_read_bw", reps < 5 ? 5 : reps, bytes);
	double ib_w = perftest_bw("ib_write_bw", reps < 5 ? 5 : reps, bytes);

	printf("SUMMARY transport=rdma workload=var_read_bw bytes=%zu reps=%u MiB_s=%.1f", bytes,
	       reps, rd);
	if (ib_r > 0)
		printf(" ib_read_bw_MiB_s=%.1f over_ib_read_bw=%.2f", ib_r, rd / ib_r);
	printf("\nSUMMARY transport=rdma workload=var_assign_bw bytes=%zu reps=%u MiB_s=%.1f",
	       bytes, reps, wr);
	if (ib_w > 0)
		printf(" ib_write_bw_MiB_s=%.1f over_ib_write_bw=%.2f", ib_w, wr / ib_w);
	if (ib_r > 0)
		printf(" over_ib_read_bw=%.2f", wr / ib_r);
	printf("\nSUMMARY transport=rdma workload=var_assign_add_bw bytes=%zu reps=%u MiB_s=%.1f",
	       bytes, reps, ad);
	if (ib_w > 0)
		printf(" over_ib_write_bw=%.2f", ad / ib_w);
	if (ib_r > 0)
		printf(" over_ib_read_bw=%.2f", ad / ib_r);
	printf("\n");
}

/* 1 if the floats of @v read back are not @src's (@dst: scratch). */
static int read_differs(struct coord *c, coord_var_t v, const float *src, float *dst, size_t bytes)
{
	memset(dst, 0xff, bytes);
	return coord_var_read(c, v, 0, bytes / 4, dst, NULL) != 0 || memcmp(dst, src, bytes) != 0;
}

/*
 * One size: a variable of @bytes, read, assigned and assign_added (of
 * @zero, so the values stay @src's and are checked after the updates)
 * enough times for 64 MiB (3 to 500), beside ib_read_bw / ib_write_bw with -p.  Non-zero if
 * anything failed or read back wrong.
 */
static int bw_rows(struct coord *c, pid_t ps, const float *src, const float *zero, float *dst,
		   size_t bytes)
{
	uint64_t n = bytes / 4, dims[1] = { n }, t0, tr, ta, tad;
	unsigned reps = (unsigned)((64u << 20) / bytes);
	struct coord_error err = { 0 };
	char name[32];
	coord_var_t v;
	int bad = 0;

	reps = reps < 3 ? 3 : reps > 500 ? 500 : reps;
	snprintf(name, sizeof(name), "bw/%zu", bytes);
	if (coord_var_create(c, name, 1, dims, NULL, &v, &err) != 0 ||
	    assign_all(c, v, src, n) < 0) {
		printf("bench_rdma_bw: %s: cannot create or assign: %s\n", name, err.msg);
		return 1;
	}
	if (read_differs(c, v, src, dst, bytes)) { /* maps it; checked */
		printf("bench_rdma_bw: %s: the floats read are not the ones assigned\n", name);
		return 1;
	}
	if (bytes == (1u << 20))
		bad |= check_one_sided(c, v, ps, dst);
	t0 = t_now_ns();
	for (unsigned i = 0; !bad && i < reps; i++)
		bad |= coord_var_read(c, v, 0, n, dst, NULL) != 0;
	tr = t_now_ns() - t0;
	t0 = t_now_ns();
	for (unsigned i = 0; !bad && i < reps; i++)
		bad |= assign_all(c, v, src, n) < 0;
	ta = t_now_ns() - t0;
	t0 = t_now_ns();
	for (unsigned i = 0; !bad && i < reps; i++)
		bad |= add_all(c, v, zero, n) < 0;
	tad = t_now_ns() - t0;
	if (bad) {
		printf("bench_rdma_bw: %s: a read, assign or assign_add failed\n", name);
		return bad;
	}
	if (read_differs(c, v, src, dst, bytes)) {
		printf("bench_rdma_bw: %s: after the updates, the floats read are not the ones "
		       "assigned\n",
		       name);
		return 1;
	}
	printf("bench_rdma_bw: %zu B: %u reads %.1f s, %u assigns %.1f s, %u assign_adds %.1f s\n",
	       bytes, reps, tr / 1e9, reps, ta / 1e9, reps, tad / 1e9);
	bw_print(bytes, reps, mib_s(bytes, reps, tr), mib_s(bytes, reps, ta),
		 mib_s(bytes, reps, tad));
	return 0;
}

int main(int argc, char **argv)
{
	static const size_t sizes[] = { 64u << 10, 1u << 20, 16u << 20, 64u << 20 };
	const char *bin = getenv("COORD_PS_BIN");
	struct coord_error err = { 0 };
	struct coord_registry *reg;
	char listen[80], json[512], *w;
	char *pargv[] = { (char *)bin, "--listen", listen,	  "--task", "0",
			  "--log",     "error",	   "--transport", "rdma",   NULL };
	struct coord_spec *spec = NULL;
	struct coord_opts o;
	struct coord *c = NULL;
	size_t max = 64u << 20;
	unsigned port;
	float *src, *dst, *zero;
	pid_t ps;
	int opt, bad = 0;

	while ((opt = getopt(argc, argv, "m:p:")) != -1) {
		if (opt == 'p')
			perftest_sh = optarg;
		else if (opt == 'm')
			max = (size_t)atoi(optarg) << 20;
		else
			return 2;
	}
	setvbuf(stdout, NULL, _IOLBF, 0);
	t_watchdog(900);
	if (coord_rdma_available(&err) < 0) {
		printf("bench_rdma_bw: SKIP: %s\n", err.msg);
		return 77;
	}
	if (!bin) {
		printf("bench_rdma_bw: COORD_PS_BIN is not set\n");
		return 2;
	}
	setenv("COORD_CLUSTER_KEY",
	       "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff", 1);
	src = malloc(max);
	dst = malloc(max);
	zero = calloc(1, max);
	if (!src || !dst || !zero)
		return 1;
	for (size_t i = 0; i < max / 4; i++)
		src[i] = (float)(i & 0xffffff); /* exact in a float */
	t_transport = "rdma";
	snprintf(listen, sizeof(listen), "%s:0", t_addr());
	ps = t_spawn(pargv, "coord-ps", &port);
	if (ps < 0 || t_workers_start(1) < 0) {
		printf("bench_rdma_bw: cannot start coord-ps or coord-worker over rdma\n");
		return 1;
	}
	reg = t_registry();
	t_opts(&o, reg);
	/* perftest's pair busy-polls both of the guest's CPUs for seconds
	 * after each row: coord-ps answers the heartbeat late, and a lost
	 * connection would fail the next row's first call (redialled only a
	 * ping later).  The heartbeat is not what this measures. */
	o.heartbeat_ms = 1000;
	o.heartbeat_misses = 15;
	w = t_spec_json(1);
	w[strlen(w) - 1] = 0;
	snprintf(json, sizeof(json), "%s, \"ps\": [\"%s:%u\"]}", w, t_addr(), port);
	free(w);
	bad |= coord_spec_parse(json, &spec, NULL) != 0;
	bad |= !spec || coord_create(spec, &o, &c, NULL) != 0;
	coord_spec_destroy(spec);
	for (unsigned si = 0; !bad && si < sizeof(sizes) / sizeof(sizes[0]); si++) {
		if (sizes[si] > max)
			break;
		bad |= bw_rows(c, ps, src, zero, dst, sizes[si]);
	}
	if (c) {
		bad |= coord_join(c, NULL) != 0;
		coord_destroy(c);
	}
	coord_registry_destroy(reg);
	t_workers_stop();
	t_reap(ps);
	free(src);
	free(dst);
	free(zero);
	if (bad)
		printf("bench_rdma_bw: FAIL\n");
	return bad;
}
