/* SPDX-License-Identifier: MIT */
/*
 * bench/tcp_bench.h - what the files of bench_tcp share: the argument every
 * closure and echo request carries, CPU time, the raw echo baseline
 * (tcp_echo.c) and coord over tcp with its sweeps (tcp_coord.c).
 * bench_tcp.c says what is measured and runs it.
 */
#ifndef COORD_BENCH_TCP_BENCH_H
#define COORD_BENCH_TCP_BENCH_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include <coord/coord.h>

#include "stats.h"

#define MAX_PROCS 4
#define MAX_CONNS 1024
#define MAX_INFLIGHT 1024
#define MAX_ARG (64u * 1024u)
#define LOOPS 0	       /* opts.tcp_loops of every coordinator here: the default */
#define WINDOW_MIN 256 /* opts.window: at least this, and never below F per connection */
#define ECHO_CLI_BUF (64u * 1024u)

int coord_register_fns(struct coord_registry *reg); /* benchfns.c */

/* The argument every closure and every echo request carries. */
extern uint8_t arg_buf[MAX_ARG + 16 * 1024];
extern size_t arg_bytes;

/* One REQ frame of one call with @arg bytes; one RES frame, empty result. */
size_t req_frame_bytes(size_t arg);
size_t res_frame_bytes(void);

/* CPU time (user + sys): of getrusage(@who); of this process; of @pids. */
uint64_t cpu_ns_of(int who);
uint64_t cpu_ns(void);
uint64_t procs_cpu_ns(const pid_t *pids, unsigned n);

struct run_out {
	double rate;	/* closures (or round trips) per second */
	double cpu;	/* this process's CPU ns per closure */
	double thr_cpu; /* the calling thread's share (coord only) */
	double srv_cpu; /* the server processes' CPU ns per closure */
};

/* ---- tcp_echo.c: the raw echo servers (forked) and client ---- */

struct echo_conn {
	int fd;
	unsigned win, out;	     /* requests to keep in flight; in flight now */
	uint64_t next_tok, want_tok; /* the next request's token; the next reply's */
	size_t fill;		     /* bytes of a partial reply in buf */
	uint8_t buf[ECHO_CLI_BUF];
};

struct echo {
	struct echo_conn *c;
	unsigned n;
	size_t req, res;
};

int echo_start(void);
void echo_stop(void);
int echo_open(struct echo *e, unsigned nconns, unsigned np, size_t req, size_t res);
void echo_close(struct echo *e);
void echo_run(struct echo *e, unsigned f, bool lockstep, bool spin, uint64_t dur_ns, uint64_t nmax,
	      struct bench_samples *lat, struct run_out *o);

/* ---- tcp_coord.c: coord-worker processes, coord over tcp, the sweeps ---- */

/* The options of the coordinators made, for the titles. */
struct made {
	uint64_t spin_ns, spin_max_ns;
	unsigned loops; /* tcp_loops (0: the default) */
	unsigned batch;
};
extern struct made made;

int worker_start(const char *bin, const char *fns);
void workers_stop(void);
struct coord *make_coord(struct coord_registry *reg, unsigned nconns, unsigned np, unsigned window,
			 uint32_t *fn);
unsigned window_for(unsigned f, unsigned conns);
void coord_window(struct coord *c, uint32_t fn, unsigned f, uint64_t dur_ns, struct coord_rv **rvs,
		  struct run_out *o);
void coord_rtt(struct coord *c, uint32_t fn, uint64_t n, struct bench_samples *lat,
	       struct run_out *o);
void row(const char *name, struct bench_samples *s, double scale, bool higher_better,
	 const struct bench_stats *base, struct bench_stats *st);
unsigned procs_for(unsigned conns);
void run_sweeps(struct coord_registry *reg, bool quick, unsigned fixed_f, size_t arg,
		unsigned repeats, uint64_t dur_ns, struct coord_rv **rvs);

#endif
