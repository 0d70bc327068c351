// SPDX-License-Identifier: MIT
/*
 * bench/tcp_coord.c - bench_tcp's coord side: coord-worker processes (forked
 * before any coordinator runs), coordinators over N connections to them,
 * the sliding window and the round trip it measures (every fetch checked:
 * 0, an empty value; fetched == scheduled; coord_join() 0 after), the row
 * printer and the sweeps against the raw echo (bench_tcp --sweep).
 */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <sys/wait.h>
#include <unistd.h>

#include <coord/coord.h>

#include "transport/wire/wire.h"
#include "tcp_bench.h"

/* ---- coord-worker processes ---------------------------------------------------------- */

static pid_t procs[MAX_PROCS];
static unsigned ports[MAX_PROCS], nprocs;

int worker_start(const char *bin, const char *fns)
{
	int pid;

	if (bench_worker_spawn(bin, fns, 0, &pid, &ports[nprocs]) < 0)
		return -1;
	procs[nprocs++] = pid;
	return 0;
}

void workers_stop(void)
{
	for (unsigned i = 0; i < nprocs; i++)
		bench_reap(procs[i]);
	nprocs = 0;
}

/* ---- coord over tcp -------------------------------------------------------------------- */

struct made made;

/* A coordinator over @nconns connections spread round robin over worker
 * processes [0, @np), @window closures in flight per connection. */
struct coord *make_coord(struct coord_registry *reg, unsigned nconns, unsigned np, unsigned window,
			 uint32_t *fn)
{
	size_t cap = 32 + (size_t)nconns * 24, off = 0;
	char *json = malloc(cap);
	struct coord_spec *spec = NULL;
	struct coord_opts o;
	struct coord_error err;
	struct coord *c;

	if (!json)
		exit(1);
	off += (size_t)snprintf(json + off, cap - off, "{\"worker\": [");
	for (unsigned i = 0; i < nconns; i++)
		off += (size_t)snprintf(json + off, cap - off, "%s\"127.0.0.1:%u\"", i ? ", " : "",
					ports[i % np]);
	snprintf(json + off, cap - off, "]}");
	coord_opts_init(&o);
	o.registry = reg;
	o.transport = "tcp";
	o.tcp_loops = getenv("BENCH_LOOPS") ? (unsigned)strtoul(getenv("BENCH_LOOPS"), NULL, 10)
					    : LOOPS;
	made.loops = o.tcp_loops;
	o.window = window < WINDOW_MIN ? WINDOW_MIN : window;
	o.start_delay_ms = 0;
	o.start_delay_max_ms = -1;
	if (getenv("BENCH_SPIN_NS"))
		o.spin_ns = strtoull(getenv("BENCH_SPIN_NS"), NULL, 10);
	if (getenv("BENCH_SPIN_MAX_NS"))
		o.spin_max_ns = strtoull(getenv("BENCH_SPIN_MAX_NS"), NULL, 10);
	if (getenv("BENCH_BATCH"))
		o.batch = (unsigned)strtoul(getenv("BENCH_BATCH"), NULL, 10);
	made.spin_ns = o.spin_ns;
	made.spin_max_ns = o.spin_max_ns;
	made.batch = o.batch;
	if (coord_spec_parse(json, &spec, &err) || coord_create(spec, &o, &c, &err) ||
	    coord_fn_lookup(c, "empty", fn, &err)) {
		fprintf(stderr, "bench_tcp: coordinator over %u connections: %s\n", nconns,
			err.msg);
		exit(1);
	}
	coord_spec_destroy(spec);
	free(json);
	return c;
}

/* The window a coordinator over @conns connections needs for @f in flight. */
unsigned window_for(unsigned f, unsigned conns)
{
	unsigned w = (f + conns - 1) / conns;

	return w < WINDOW_MIN ? WINDOW_MIN : w;
}

static bool fetch_one(struct coord_rv *rv, const char *what)
{
	struct coord_error err;
	const void *v;
	size_t len = 1;
	int r = coord_rv_fetch(rv, &v, &len, &err);

	coord_rv_put(rv);
	return bench_check(r == 0 && len == 0, "%s: fetch returned %d (%s), len %zu", what, r,
			   r ? err.msg : "", len);
}

static bool schedule_one(struct coord *c, uint32_t fn, struct coord_rv **rv, const char *what)
{
	struct coord_error err;
	int r = coord_schedule(c, fn, arg_bytes ? arg_buf : NULL, arg_bytes, rv, &err);

	return bench_check(r == 0, "%s: coord_schedule: %s", what, r ? err.msg : "");
}

/*
 * Keep @f closures in flight (a sliding window of RemoteValues in @rvs) for
 * @dur_ns, then drain.  Rate and CPU per closure out.
 */
void coord_window(struct coord *c, uint32_t fn, unsigned f, uint64_t dur_ns, struct coord_rv **rvs,
		  struct run_out *o)
{
	uint64_t c0 = cpu_ns(), w0 = procs_cpu_ns(procs, nprocs), u0 = cpu_ns_of(RUSAGE_THREAD),
		 t0 = bench_now_ns(), t1, sched = 0, done = 0;
	struct coord_error err;
	unsigned i = 0;

	memset(o, 0, sizeof(*o));
	for (unsigned k = 0; k < f; k++, sched++)
		if (!schedule_one(c, fn, &rvs[k], "throughput"))
			return;
	for (;;) {
		struct coord_rv *rv = rvs[i];

		rvs[i] = NULL;
		if (!fetch_one(rv, "throughput"))
			return;
		done++;
		if ((done & 63) == 0 && bench_now_ns() - t0 >= dur_ns)
			break;
		if (!schedule_one(c, fn, &rvs[i], "throughput"))
			return;
		sched++;
		i = i + 1 == f ? 0 : i + 1;
	}
	for (unsigned k = 0; k < f; k++) {
		if (!rvs[k])
			continue;
		if (!fetch_one(rvs[k], "throughput drain"))
			return;
		rvs[k] = NULL;
		done++;
	}
	t1 = bench_now_ns();
	o->cpu = (double)(cpu_ns() - c0) / (double)done;
	o->srv_cpu = (double)(procs_cpu_ns(procs, nprocs) - w0) / (double)done;
	o->thr_cpu = (double)(cpu_ns_of(RUSAGE_THREAD) - u0) / (double)done;
	o->rate = (double)done / ((double)(t1 - t0) / 1e9);
	bench_check(done == sched, "throughput: %" PRIu64 " scheduled, %" PRIu64 " fetched", sched,
		    done);
	bench_check(coord_join(c, &err) == 0, "throughput: coord_join: %s", err.msg);
}

/* @n round trips, one closure at a time; each one's ns into @lat; CPU per
 * round trip into @o. */
void coord_rtt(struct coord *c, uint32_t fn, uint64_t n, struct bench_samples *lat,
	       struct run_out *o)
{
	uint64_t c0 = cpu_ns(), t0 = bench_now_ns();
	struct coord_error err;

	memset(o, 0, sizeof(*o));
	for (uint64_t i = 0; i < n; i++) {
		uint64_t ts = bench_now_ns();
		struct coord_rv *rv;

		if (!schedule_one(c, fn, &rv, "round trip") || !fetch_one(rv, "round trip"))
			return;
		if (lat)
			bench_samples_add(lat, (double)(bench_now_ns() - ts));
	}
	o->rate = (double)n / ((double)(bench_now_ns() - t0) / 1e9);
	o->cpu = (double)(cpu_ns() - c0) / (double)n;
	bench_check(coord_join(c, &err) == 0, "round trip: coord_join: %s", err.msg);
}

/* ---- printing -------------------------------------------------------------------------- */

/* Summarize @s (scaled by @scale first) and print it as a row against
 * @base (NULL: itself). */
void row(const char *name, struct bench_samples *s, double scale, bool higher_better,
	 const struct bench_stats *base, struct bench_stats *st)
{
	for (size_t i = 0; i < s->n; i++)
		s->v[i] *= scale;
	bench_summarize(s, higher_better, st);
	bench_row(name, st, base ? base : st, higher_better);
}

static unsigned umin(unsigned a, unsigned b)
{
	return a < b ? a : b;
}

/* Processes a run over @conns connections spreads over. */
unsigned procs_for(unsigned conns)
{
	return umin(conns, MAX_PROCS);
}

/* ---- sweeps ------------------------------------------------------------------------------ */

struct sweep_pt {
	unsigned f, conns;
	size_t arg;
	double x; /* the swept value */
};

/* coord against the raw echo (window form) at every point of @pts,
 * alternating within each round; one table. */
static void sweep(struct coord_registry *reg, const char *what, const char *xname,
		  const struct sweep_pt *pts, unsigned npts, unsigned repeats, uint64_t dur_ns,
		  struct coord_rv **rvs)
{
	char title[300], name[96], series[64];

	for (unsigned p = 0; p < npts; p++) {
		const struct sweep_pt *pt = &pts[p];
		struct bench_samples cr = { 0 }, er = { 0 }, rr = { 0 }, cc = { 0 }, ec = { 0 };
		struct bench_stats cst, est, rst, ccst, ecst;
		struct echo e;
		struct coord *c;
		uint32_t fn;

		arg_bytes = pt->arg;
		c = make_coord(reg, pt->conns, procs_for(pt->conns), window_for(pt->f, pt->conns),
			       &fn);
		if (p == 0) { /* the coordinator's options known: the title */
			snprintf(title, sizeof(title),
				 "bench_tcp sweep %s: coord tcp against the raw echo (window "
				 "form) over the same connections and processes, %.0f ms per "
				 "repeat, %u alternating rounds; tcp_loops=%u batch=%u "
				 "spin_ns=%" PRIu64,
				 what, (double)dur_ns / 1e6, repeats, made.loops, made.batch,
				 made.spin_ns);
			bench_header(title,
				     "closures/s; p99, p99.9 = slow tail; x base = over the echo");
		}
		if (echo_open(&e, pt->conns, procs_for(pt->conns), req_frame_bytes(pt->arg),
			      res_frame_bytes()) < 0) {
			bench_check(false, "echo: connect: %s", strerror(errno));
			echo_close(&e);
			coord_destroy(c);
			return;
		}
		for (unsigned rep = 0; rep <= repeats; rep++) {
			struct run_out co, eo;

			if (rep & 1) {
				echo_run(&e, pt->f, false, false, dur_ns, UINT64_MAX, NULL, &eo);
				coord_window(c, fn, pt->f, dur_ns, rvs, &co);
			} else {
				coord_window(c, fn, pt->f, dur_ns, rvs, &co);
				echo_run(&e, pt->f, false, false, dur_ns, UINT64_MAX, NULL, &eo);
			}
			if (!rep || co.rate <= 0 || eo.rate <= 0)
				continue;
			bench_samples_add(&cr, co.rate);
			bench_samples_add(&er, eo.rate);
			bench_samples_add(&rr, co.rate / eo.rate);
			bench_samples_add(&cc, co.cpu);
			bench_samples_add(&ec, eo.cpu);
		}
		echo_close(&e);
		coord_destroy(c);
		snprintf(series, sizeof(series), "raw echo");
		snprintf(name, sizeof(name), "raw echo, %s=%g", xname, pt->x);
		bench_point(series, pt->x);
		row(name, &er, 1.0, true, NULL, &est);
		snprintf(series, sizeof(series), "coord tcp");
		snprintf(name, sizeof(name), "coord tcp, %s=%g", xname, pt->x);
		bench_point(series, pt->x);
		row(name, &cr, 1.0, true, &est, &cst);
		snprintf(name, sizeof(name), "coord / echo, %s=%g, per round", xname, pt->x);
		bench_ratio_row(name, &rr, &rst);
		bench_summarize(&cc, false, &ccst);
		bench_summarize(&ec, false, &ecst);
		printf("SUMMARY bench_tcp config=sweep_%s inflight=%u conns=%u procs=%u "
		       "arg_bytes=%zu coord_closures_per_s=%.0f coord_min=%.0f coord_max=%.0f "
		       "echo_closures_per_s=%.0f echo_min=%.0f echo_max=%.0f ratio_median=%.2f "
		       "ratio_min=%.2f ratio_max=%.2f coord_cpu_ns=%.0f echo_cpu_ns=%.0f "
		       "loadavg=%.2f\n",
		       xname, pt->f, pt->conns, procs_for(pt->conns), pt->arg, cst.median, cst.min,
		       cst.max, est.median, est.min, est.max, rst.median, rst.min, rst.max,
		       ccst.median, ecst.median, bench_loadavg());
		fflush(stdout);
		bench_samples_free(&cr);
		bench_samples_free(&er);
		bench_samples_free(&rr);
		bench_samples_free(&cc);
		bench_samples_free(&ec);
	}
	printf("\n");
}

void run_sweeps(struct coord_registry *reg, bool quick, unsigned fixed_f, size_t arg,
		unsigned repeats, uint64_t dur_ns, struct coord_rv **rvs)
{
	static const unsigned fs[] = { 1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024 },
			      fs_q[] = { 1, 16, 256 }, as[] = { 8, 64, 512, 4096, 16384, 65536 },
			      as_q[] = { 8, 65536 }, cs[] = { 1, 2, 4, 16, 64, 256, 1024 },
			      cs_q[] = { 1, 4, 16 };
	struct sweep_pt pts[16];
	unsigned n;

	n = quick ? sizeof(fs_q) / sizeof(fs_q[0]) : sizeof(fs) / sizeof(fs[0]);
	for (unsigned i = 0; i < n; i++) {
		unsigned f = quick ? fs_q[i] : fs[i];

		pts[i] = (struct sweep_pt){ .f = f, .conns = 1, .arg = arg, .x = f };
	}
	sweep(reg, "in flight (1 connection)", "inflight", pts, n, repeats, dur_ns, rvs);
	n = quick ? sizeof(as_q) / sizeof(as_q[0]) : sizeof(as) / sizeof(as[0]);
	for (unsigned i = 0; i < n; i++) {
		unsigned a = quick ? as_q[i] : as[i];

		pts[i] = (struct sweep_pt){ .f = fixed_f, .conns = 1, .arg = a, .x = a };
	}
	sweep(reg, "argument bytes (1 connection)", "arg_bytes", pts, n, repeats, dur_ns, rvs);
	n = quick ? sizeof(cs_q) / sizeof(cs_q[0]) : sizeof(cs) / sizeof(cs[0]);
	for (unsigned i = 0; i < n; i++) {
		unsigned c = quick ? cs_q[i] : cs[i];

		pts[i] = (struct sweep_pt){
			.f = fixed_f > c ? fixed_f : c, .conns = c, .arg = arg, .x = c
		};
	}
	sweep(reg, "connections (over min(C, 4) processes, max(F, C) in flight)", "conns", pts, n,
	      repeats, dur_ns, rvs);
	arg_bytes = arg;
}
