// SPDX-License-Identifier: MIT
/*
 * bench/bench_cancel.c - how fast the error rule (S3) reaches work queued
 * for remote workers, over tcp: the raising call's delay past the longest
 * running closure, and whether any queued closure ran after the error.
 *
 * Set-up: 5 real coord-worker processes on loopback (bench/benchfns.c's
 * functions), one coordinator with the default options except the
 * staggered start (off, as in every bench).  Each round:
 *   1. a gate per worker 0-3: `hold` for --gate-ms (100), strictly on that
 *      worker, so whatever is placed there waits behind it;
 *   2. --queued (10,000) closures `hold 0`, strictly on workers 0-3 in
 *      turn: queued in the coordinator and in the workers' windows, as
 *      placement puts them (the metrics line says where they sat: with
 *      the default options placement sends nothing ahead of a closure of
 *      unknown or long run time, place.h PL6, so they wait in the
 *      coordinator);
 *   3. `fail` after --fail-ms (50) on worker 4;
 *   4. coord_join(), timed to its return (t_ret), while a second thread
 *      fetches the failing closure and notes when it saw it fail (t_err).
 * Printed per round: the raising call's delay past the end of the longest
 * running closure, max(t_err, end of the last gate) -> t_ret (the target:
 * <= 2 ms); how many of the queued closures ran at all and how many started
 * after t_err (the target: none), and how many were cancelled.  Times are
 * CLOCK_MONOTONIC on one host: `hold` returns when it started and ended.
 * Correctness is checked (every queued closure final, cancelled or run);
 * speed is printed, never asserted.
 */
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <coord/coord.h>
#include <coord/spec.h>
#include <coord/worker.h>

#include "stats.h"

#define NPROC 5
#define NGATE 4 /* workers 0 .. NGATE-1 hold the queue; worker NGATE fails */

int coord_register_fns(struct coord_registry *reg);

static int procs[NPROC];
static unsigned ports[NPROC];

struct round {
	uint64_t t_err, t_ret, gate_end;
	uint64_t ran, ran_after, cancelled, other;
	struct coord_metrics at_fail;
};

struct fail_watch {
	struct coord_rv *rv;
	uint64_t t_err;
};

static void *watch_fail(void *arg)
{
	struct fail_watch *fw = arg;
	struct coord_error err;
	const void *v;
	size_t len;

	/* The closure fails: any return is the moment it was seen final. */
	if (coord_rv_fetch(fw->rv, &v, &len, &err) == 0)
		bench_check(false, "the failing closure returned a value");
	fw->t_err = bench_now_ns();
	return NULL;
}

static int sched_on(struct coord *c, uint32_t fn, uint64_t arg, unsigned w, struct coord_rv **rv)
{
	struct coord_call call = { .fn = fn, .args = &arg, .len = sizeof(arg) };
	struct coord_error err;
	int r;

	call.affinity = COORD_ON_WORKER(w);
	call.affinity_mode = COORD_AFFINITY_STRICT;
	r = coord_schedule_call(c, &call, rv, &err);
	if (r)
		bench_check(false, "schedule on worker %u: %s", w, err.msg);
	return r;
}

/* Sort out the queued closures' outcomes into @rd; puts every handle. */
static void tally(struct round *rd, struct coord_rv **q, unsigned n)
{
	for (unsigned i = 0; i < n; i++) {
		enum coord_rv_state st = coord_rv_state(q[i]);
		struct coord_error err;
		const void *v;
		size_t len = 0;
		uint64_t t[2];

		if (st == COORD_RV_CANCELLED) {
			rd->cancelled++;
		} else if (st == COORD_RV_READY && coord_rv_fetch(q[i], &v, &len, &err) == 0 &&
			   len == sizeof(t)) {
			memcpy(t, v, sizeof(t));
			rd->ran++;
			rd->ran_after += t[0] > rd->t_err;
		} else {
			rd->other++;
		}
		coord_rv_put(q[i]);
	}
}

static int one_round(struct coord *c, uint32_t hold, uint32_t fail, unsigned nq, uint64_t gate_ns,
		     uint64_t fail_ns, struct coord_rv **q, struct round *rd)
{
	struct coord_rv *gate[NGATE] = { 0 };
	struct fail_watch fw = { 0 };
	struct coord_error err;
	pthread_t th;
	int r = 0;

	memset(rd, 0, sizeof(*rd));
	for (unsigned g = 0; g < NGATE && !r; g++)
		r = sched_on(c, hold, gate_ns, g, &gate[g]);
	for (unsigned i = 0; i < nq && !r; i++)
		r = sched_on(c, hold, 0, i % NGATE, &q[i]);
	if (!r)
		r = sched_on(c, fail, fail_ns, NGATE, &fw.rv);
	if (r || pthread_create(&th, NULL, watch_fail, &fw)) {
		bench_check(false, "round set-up failed");
		return -1;
	}
	/* Where the queued closures sit shortly before the error. */
	{
		struct timespec ts = { 0, (long)(fail_ns * 8 / 10) };

		nanosleep(&ts, NULL);
		if (coord_metrics(c, &rd->at_fail, NULL, 0))
			memset(&rd->at_fail, 0, sizeof(rd->at_fail));
	}
	r = coord_join(c, &err);
	rd->t_ret = bench_now_ns();
	pthread_join(th, NULL);
	rd->t_err = fw.t_err;
	bench_check(r != 0, "coord_join returned no error after a failing closure");
	for (unsigned g = 0; g < NGATE; g++) {
		const void *v;
		size_t len = 0;
		uint64_t t[2];

		if (coord_rv_fetch(gate[g], &v, &len, &err) == 0 && len == sizeof(t)) {
			memcpy(t, v, sizeof(t));
			if (t[1] > rd->gate_end)
				rd->gate_end = t[1];
		} else {
			bench_check(false,
				    "gate %u did not run whole (it started before the error)", g);
		}
		coord_rv_put(gate[g]);
	}
	coord_rv_put(fw.rv);
	tally(rd, q, nq);
	bench_check(rd->ran + rd->cancelled == nq,
		    "%" PRIu64 " queued closures neither ran nor "
		    "were cancelled",
		    rd->other);
	return 0;
}

static struct coord *make_coord(struct coord_registry *reg, uint32_t *hold, uint32_t *fail)
{
	struct coord_spec *spec = NULL;
	struct coord_opts o;
	struct coord_error err;
	struct coord *c;
	char json[256];
	int off;

	off = snprintf(json, sizeof(json), "{\"worker\": [");
	for (unsigned i = 0; i < NPROC; i++)
		off += snprintf(json + off, sizeof(json) - (size_t)off, "%s\"127.0.0.1:%u\"",
				i ? ", " : "", ports[i]);
	snprintf(json + off, sizeof(json) - (size_t)off, "]}");
	coord_opts_init(&o);
	o.registry = reg;
	o.transport = "tcp";
	o.start_delay_ms = 0;
	o.start_delay_max_ms = -1;
	if (coord_spec_parse(json, &spec, &err) || coord_create(spec, &o, &c, &err) ||
	    coord_fn_lookup(c, "hold", hold, &err) || coord_fn_lookup(c, "fail", fail, &err)) {
		fprintf(stderr, "bench_cancel: coordinator: %s\n", err.msg);
		exit(1);
	}
	coord_spec_destroy(spec);
	return c;
}

int main(int argc, char **argv)
{
	unsigned long nq = 10000, gate_ms = 100, fail_ms = 50;
	const struct bench_opt opts[] = {
		{ "queued", "closures queued behind the gates", 1, 1000000, &nq, false },
		{ "gate-ms", "how long each gate closure runs", 1, 10000, &gate_ms, false },
		{ "fail-ms", "when the failing closure fails", 1, 10000, &fail_ms, false },
	};
	struct bench_samples late = { 0 }, ran_after = { 0 }, ran = { 0 };
	struct bench_stats st;
	const char *bin = getenv_or("COORD_WORKER_BIN", BENCH_WORKER_BIN);
	const char *fns = getenv_or("BENCH_FNS", BENCH_FNS_LIB);
	struct coord_registry *reg = NULL;
	struct coord_rv **q;
	struct bench_args a;
	uint32_t hold, fail;
	struct coord *c;
	char title[256];

	bench_parse_args_ex(argc, argv, &a, opts, sizeof(opts) / sizeof(opts[0]));
	if (a.quick) {
		nq = nq > 1000 ? 1000 : nq;
		a.repeats = 2;
	}
	signal(SIGPIPE, SIG_IGN);
	q = calloc(nq, sizeof(*q));
	for (unsigned i = 0; i < NPROC; i++)
		if (bench_worker_spawn(bin, fns, 0, &procs[i], &ports[i]) < 0)
			return 1;
	if (!q || coord_registry_create(&reg) || coord_register_fns(reg)) {
		fprintf(stderr, "bench_cancel: set-up failed\n");
		return 1;
	}
	c = make_coord(reg, &hold, &fail);

	for (unsigned rep = 0; rep <= a.repeats && !bench_exit_code(); rep++) {
		struct round rd;

		if (one_round(c, hold, fail, (unsigned)nq, gate_ms * 1000000ull,
			      fail_ms * 1000000ull, q, &rd))
			break;
		printf("# round %u%s: queued %" PRIu64 " in the coordinator, %" PRIu64
		       " in flight (windows) before the error; raising call %.3f ms past the "
		       "last running closure; ran %" PRIu64 " (%" PRIu64
		       " started after the error), cancelled %" PRIu64 "\n",
		       rep, rep ? "" : " (warm-up)", rd.at_fail.queued, rd.at_fail.in_flight,
		       ((double)rd.t_ret -
			(double)(rd.gate_end > rd.t_err ? rd.gate_end : rd.t_err)) /
			       1e6,
		       rd.ran, rd.ran_after, rd.cancelled);
		if (!rep)
			continue;
		bench_samples_add(&late,
				  ((double)rd.t_ret -
				   (double)(rd.gate_end > rd.t_err ? rd.gate_end : rd.t_err)) /
					  1e3);
		bench_samples_add(&ran_after, (double)rd.ran_after);
		bench_samples_add(&ran, (double)rd.ran);
	}
	snprintf(title, sizeof(title),
		 "bench_cancel tcp: %lu closures queued on 4 workers behind %lu ms gates, a "
		 "closure failing at %lu ms on a 5th; %u rounds",
		 nq, gate_ms, fail_ms, a.repeats);
	bench_header(title, "us past the last running closure; lower is better");
	bench_summarize(&late, false, &st);
	bench_row("raising join() past the longest running closure", &st, &st, false);
	{
		struct bench_stats sa, sr;

		bench_summarize(&ran_after, false, &sa);
		bench_summarize(&ran, false, &sr);
		printf("SUMMARY bench_cancel queued=%lu gate_ms=%lu fail_ms=%lu rounds=%u "
		       "late_us_median=%.1f late_us_min=%.1f late_us_max=%.1f "
		       "ran_after_error_max=%.0f ran_median=%.0f target_late_le_2ms=%s "
		       "target_none_ran_after=%s\n",
		       nq, gate_ms, fail_ms, a.repeats, st.median, st.min, st.max, sa.max,
		       sr.median, bench_met(st.max <= 2000.0), bench_met(sa.max == 0));
	}
	coord_destroy(c);
	for (unsigned i = 0; i < NPROC; i++)
		bench_reap(procs[i]);
	coord_registry_destroy(reg);
	free(q);
	return bench_exit_code();
}
