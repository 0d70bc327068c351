/* SPDX-License-Identifier: MIT */
/*
 * tests/helpers.h - shared test helpers (t_*), liburing test/helpers.h style.
 */
#ifndef COORD_TESTS_HELPERS_H
#define COORD_TESTS_HELPERS_H

#include <stdint.h>
#include <sys/types.h>

#include <coord/coord.h>
#include <coord/var.h>

#define T_EXIT_SKIP 77

/* Monotonic nanoseconds. */
uint64_t t_now_ns(void);
/* Sleep for @ns nanoseconds. */
void t_sleep_ns(uint64_t ns);
/* Abort the test binary with a message if it runs longer than @secs. */
void t_watchdog(unsigned secs);

/* A registry with the standard test functions (see helpers.c). */
struct coord_registry *t_registry(void);

/* A coordinator over @nworkers in-process workers, ring of @cap slots. */
struct coord *t_coord(struct coord_registry *reg, unsigned nworkers, unsigned cap);

/* A cmocka fixture: a registry and a coordinator over it.  t_fx_setup()
 * resets the shared counters and makes both (t_coord()); t_fx_teardown()
 * opens the gate (so no gated function is left waiting) and frees both. */
struct t_fx {
	struct coord_registry *reg;
	struct coord *c;
};
int t_fx_setup(void **state, unsigned nworkers, unsigned cap);
int t_fx_teardown(void **state);

/* Look up a function id or fail the test. */
uint32_t t_fn(struct coord *c, const char *name);

/*
 * Counters the standard functions update (atomics), in shared memory that
 * coord-worker processes started by the tests map too (COORD_TEST_SHM), so a
 * test reads them and opens gates whatever the transport:
 *   t_entered / t_exited   - every function, on entry and exit
 *   t_creates[w]           - resource creations on worker w
 *   tr_creates[w] / tr_destroys[w] - creations and destroy callbacks of
 *                            "tracked" resources made with args tr_token
 *                            (other tokens, e.g. an earlier test's, are
 *                            not counted: their destroys may come late)
 */
#define T_ORDER_MAX 400000
#define T_TB_MAX 4096
struct t_shared {
	_Atomic long entered, exited;
	_Atomic long creates[64];
	_Atomic int create_fail; /* creators fail while non-zero */
	_Atomic int gate;	 /* "gated" functions wait until non-zero */
	_Atomic uint64_t first_ns[64];
	_Atomic long norder;
	_Atomic int running_pid;  /* set by sleep_attempt when it starts */
	_Atomic int last_attempt; /* set by var_add */
	_Atomic int running[64];  /* sleep_attempt calls running on worker w */
	_Atomic int64_t tr_token;
	_Atomic long tr_creates[64], tr_destroys[64];
	int64_t order[T_ORDER_MAX];
	_Atomic int tb_runs[T_TB_MAX]; /* tb_run: runs of closure i */
};
extern struct t_shared *t_sh;
#define t_entered (t_sh->entered)
#define t_exited (t_sh->exited)
#define t_creates (t_sh->creates)
#define t_create_fail (t_sh->create_fail)
#define t_gate (t_sh->gate)
#define t_first_ns (t_sh->first_ns)
#define t_norder (t_sh->norder)
#define t_order (t_sh->order)
void t_reset_counters(void);

/* Arguments of the tb_run test function (helpers.c). */
struct t_tb_args {
	uint32_t idx;  /* counted in t_sh->tb_runs[idx] (< T_TB_MAX) */
	uint32_t us;   /* then sleeps this long (0: not at all) */
	uint32_t fail; /* then fails with -EIO if non-zero */
};

/* Arguments of the var_* test functions (helpers.c). */
struct t_var_args {
	uint64_t var;
	uint64_t off;
	uint64_t n;
	float val;
	uint32_t pad;
};

/* Arguments of the pvar_rows test function (helpers.c), followed by
 * int64 ids[n] and, for scatter_add, float rows[n][row_len]. */
enum { T_PV_GATHER, T_PV_SCATTER, T_PV_LOOKUP_GATHER };
struct t_pvar_args {
	struct coord_pvar pv;
	uint32_t op;
	uint32_t n;
};

/* Arguments of the pvar_multi test function (helpers.c), followed by
 * int64 ids[n[0]], ids[n[1]] and, for scatter_add, the rows of pv[0] then
 * of pv[1]; a gather's result: the rows of pv[0] then of pv[1]. */
struct t_pvar_multi {
	struct coord_pvar pv[2];
	uint32_t op; /* T_PV_GATHER or T_PV_SCATTER */
	uint32_t n[2];
};

/* Register the standard functions into @reg (also coord_register_fns()). */
int t_register(struct coord_registry *reg);

/*
 * The transport the t_coord() of this test binary uses: "inproc" (default)
 * or "tcp", where workers are coord-worker processes started by
 * t_workers_start() (COORD_WORKER_BIN, COORD_TESTFNS from meson).
 */
extern const char *t_transport;
/* tcp, rdma: the event loops t_opts() asks for (opts.tcp_loops): 0, the
 * library's default (one loop on these machines), or 2 in the "tcp-loops"
 * groups, so that what crosses loops (a push waking the other loop, a
 * closure only another loop's worker may run) stays tested. */
extern unsigned t_tcp_loops;
/* The address worker processes listen on: 127.0.0.1, or over rdma
 * $RDMA_TEST_ADDR (default 10.0.2.15, the rig's guest). */
const char *t_addr(void);
/* An rdma address of this host, for both ends of a pair inside the test
 * process: $RDMA_LOCAL_ADDR, default t_addr() (the rig's pair mode puts the
 * servers, and t_addr(), in the other guest). */
const char *t_local_addr(void);
/*
 * t_spawn() - run @argv (a server) with stdout on a pipe, wait for its
 * "<@banner> listening on port P" line; its pid (*@port = P) or -1.  The
 * child dies with the test (PDEATHSIG); with $T_SERVER_STDERR set, its
 * stderr (the log) is appended to that file.  With $T_SPAWN_WRAP set, the
 * server's command line runs through that program (the rig's pair mode:
 * tests/rdma/peer-exec.sh, which runs it in the other guest for as long as
 * the wrapper lives).  t_reap(): SIGTERM, then SIGKILL.
 */
pid_t t_spawn(char *const argv[], const char *banner, unsigned *port);
void t_reap(pid_t pid);
/*
 * A network namespace joined to this one by a veth pair, for partitions
 * (root and iproute2 needed; -1 otherwise, and the test skips).  Names carry
 * the pid, so concurrent test binaries do not collide; t_netns_destroy()
 * removes everything (also after a failed create).  Run a server inside
 * with argv = { "ip", "netns", "exec", n->name, BIN, ... } and t_spawn();
 * t_netns_link(n, 0) cuts the link (a partition), (n, 1) heals it.
 */
struct t_netns {
	char name[32], veth_host[16], veth_ns[16], host_ip[16], ns_ip[16];
	int made;
};
int t_netns_create(struct t_netns *n, unsigned idx);
int t_netns_link(struct t_netns *n, int up);
void t_netns_destroy(struct t_netns *n);

/* ---- partition runs (helpers_part.c; tests/test_pspart.c, tests/rdma/test_rdma_giveup.c) */

/* What a run of assign_add(+1) closures saw, over its cuts. */
struct t_part_run {
	uint64_t ok, failed, joins;
	uint64_t cut_ns, heal_ns; /* the current cut, and its heal (0: not yet) */
	uint64_t err_ns, ok_ns;	  /* its first failure, the first success after its heal */
	uint64_t err_max, ok_max; /* the longest delays over the cuts, ns */
	unsigned noticed, resumed;
	uint64_t other_joins; /* the job's errors other than UNAVAILABLE from the ps */
	char other[COORD_ERRMSG_LEN];
};
/* One batch of @n (at most 1024) closures that each add 1 to @var (the
 * test function var_add), all fetched: successes and failures into @r, the
 * first failure during a cut and the first success after its heal; the
 * job's error taken (coord_join()), counted. */
void t_part_batch(struct coord *c, coord_var_t var, unsigned n, struct t_part_run *r);
/* Close the books on one cut: its delays into the maxima, noticed/resumed. */
void t_part_cut_done(struct t_part_run *r);

/* One assign_add(+1) of the coordinator, on its own thread (t_one_add_main,
 * a pthread start routine): its result, time and message. */
struct t_one_add {
	struct coord *c;
	coord_var_t var;
	int r;
	uint64_t ns;
	char msg[COORD_ERRMSG_LEN];
};
void *t_one_add_main(void *arg);

/* Start @n coord-worker processes on ephemeral loopback ports; 0 or -1. */
int t_workers_start(unsigned n);
void t_workers_stop(void);
/* Worker process @i's pid; t_worker_restart(): SIGKILL it and start it
 * again on the same port (0 or -1). */
pid_t t_worker_pid(unsigned i);
int t_worker_restart(unsigned i);
/* The port of started worker process @i. */
unsigned t_worker_port(unsigned i);
/* A JSON spec of @nworkers workers spread over the started processes. */
char *t_spec_json(unsigned nworkers);
/* Options for a coordinator of this test binary's transport. */
void t_opts(struct coord_opts *o, struct coord_registry *reg);
/* Create with @o over @nworkers workers of this transport; 0 or the error. */
int t_create(struct coord_opts *o, unsigned nworkers, struct coord **c, struct coord_error *err);

/*
 * Test groups per transport (one table of tests, run once per transport):
 * t_group_on() - is group @name selected by $T_GROUPS (a comma list;
 * default: all)?  t_use_transport() - "tcp" or "rdma" for the tests that
 * follow, with @n coord-worker processes started (over rdma they listen on
 * t_addr(), and a cluster key is required (B5): set here, inherited by the
 * workers); 0 or -1.  t_use_inproc() - stop them, back to inproc.
 */
bool t_group_on(const char *name);
int t_use_transport(const char *name, unsigned n);
void t_use_inproc(void);
/* cmocka group setups/teardown around them: tcp or rdma with 2 workers
 * (t_group_tcp_loops(): tcp with 2 workers on 2 event loops); back to
 * inproc (and to the default loops). */
int t_group_tcp(void **state);
int t_group_tcp_loops(void **state);
int t_group_rdma(void **state);
int t_group_inproc(void **state);

#endif
