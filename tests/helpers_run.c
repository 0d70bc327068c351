// SPDX-License-Identifier: MIT
/*
 * tests/helpers_run.c - what the tests run on (helpers.h): the transports a
 * group runs over (inproc, or coord-worker processes over tcp or rdma), the
 * coord-worker / coord-ps processes a test starts (t_spawn(), T_SPAWN_WRAP,
 * T_WORKER_WRAP, T_WORKER_HOSTS), network namespaces (partitions) and the
 * fixtures (t_opts, t_create, t_coord, t_fx_*, t_fn).  The standard test
 * functions are in helpers.c.
 */
#include <fcntl.h>
#include <poll.h>
#include <stdarg.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <coord/var.h>

#include "helpers.h"

/* ---- transports: inproc, or coord-worker processes over tcp or rdma -------------- */

const char *t_transport = "inproc";
unsigned t_tcp_loops;

bool t_group_on(const char *name)
{
	const char *g = getenv("T_GROUPS");
	size_t n = strlen(name);

	for (const char *p = g; p && *p; p += strcspn(p, ",") + (p[strcspn(p, ",")] != 0))
		if (strncmp(p, name, n) == 0 && (p[n] == ',' || p[n] == 0))
			return true;
	return !g || !*g;
}

int t_use_transport(const char *name, unsigned n)
{
	if (strcmp(name, "rdma") == 0)
		setenv("COORD_CLUSTER_KEY",
		       "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff", 1);
	t_transport = name;
	return t_workers_start(n) == 0 ? 0 : -1;
}

void t_use_inproc(void)
{
	t_workers_stop();
	t_transport = "inproc";
	t_tcp_loops = 0;
	unsetenv("COORD_CLUSTER_KEY");
}

int t_group_tcp(void **state)
{
	(void)state;
	return t_use_transport("tcp", 2);
}

int t_group_tcp_loops(void **state)
{
	(void)state;
	t_tcp_loops = 2;
	return t_use_transport("tcp", 2);
}

int t_group_rdma(void **state)
{
	(void)state;
	return t_use_transport("rdma", 2);
}

int t_group_inproc(void **state)
{
	(void)state;
	t_use_inproc();
	return 0;
}

/* Where workers listen: loopback for tcp; over rdma an address on an RDMA
 * device ($RDMA_TEST_ADDR, default the rig's 10.0.2.15). */
const char *t_addr(void)
{
	const char *a = getenv("RDMA_TEST_ADDR");

	if (strcmp(t_transport, "rdma") != 0)
		return "127.0.0.1";
	return a && *a ? a : "10.0.2.15";
}

const char *t_local_addr(void)
{
	const char *a = getenv("RDMA_LOCAL_ADDR");

	return a && *a ? a : t_addr();
}

/*
 * Where tcp worker @i listens and is reached: t_addr(), or, on a cluster of
 * "hosts" (tests/cluster/netns.sh), the (i mod n)-th of $T_WORKER_HOSTS
 * (a comma list of IPv4 addresses, each shorter than 40 characters).
 */
static const char *t_worker_addr(unsigned i, char *buf, size_t len)
{
	const char *h = getenv("T_WORKER_HOSTS"), *p;
	size_t n = 0, k;

	if (!h || !*h || strcmp(t_transport, "tcp") != 0)
		return t_addr();
	for (p = h; *p; p++)
		n += *p == ',';
	k = i % (n + 1);
	for (p = h; k; p++)
		k -= *p == ',';
	snprintf(buf, len, "%.*s", (int)strcspn(p, ","), p);
	return buf;
}

#define T_MAX_PROCS 8
static pid_t t_pids[T_MAX_PROCS];
static unsigned t_ports[T_MAX_PROCS], t_nprocs;

pid_t t_spawn(char *const argv[], const char *banner, unsigned *port)
{
	const char *wrap = getenv("T_SPAWN_WRAP");
	char fmt[96], line[128], *wargv[24];
	int p[2];
	pid_t pid;

	signal(SIGPIPE, SIG_IGN);
	if (pipe(p) < 0)
		return -1;
	pid = fork();
	if (pid == 0) {
		/* die with the test, so a failed test leaves no server holding
		 * the test runner's pipes */
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		if (getenv("T_SERVER_STDERR")) { /* its log, for tests that read it */
			int fd = open(getenv("T_SERVER_STDERR"), O_WRONLY | O_CREAT | O_APPEND,
				      0600);

			if (fd >= 0) {
				dup2(fd, 2);
				close(fd);
			}
		}
		dup2(p[1], 1);
		close(p[0]);
		close(p[1]);
		if (wrap && *wrap) { /* T_SPAWN_WRAP argv... (bounded: 22 words) */
			size_t k = 0;

			wargv[0] = (char *)wrap;
			while (k < 22 && argv[k]) {
				wargv[k + 1] = argv[k];
				k++;
			}
			wargv[k + 1] = NULL;
			if (!argv[k]) /* else too long: 127, the server "did not start" */
				execv(wrap, wargv);
		} else {
			execv(argv[0], argv);
		}
		_exit(127);
	}
	close(p[1]);
	snprintf(fmt, sizeof(fmt), "%s listening on port %%u", banner);
	/* Bounded (20 s) without alarm(), which would cancel t_watchdog():
	 * the server prints its port at once or dies (EOF). */
	{
		struct pollfd pf = { .fd = p[0], .events = POLLIN };
		size_t n = 0;
		uint64_t until = t_now_ns() + 20000000000ull;

		while (n < sizeof(line) - 1 && t_now_ns() < until) {
			ssize_t k;

			if (poll(&pf, 1, 100) <= 0)
				continue;
			k = read(p[0], line + n, 1);
			if (k <= 0 || line[n] == '\n')
				break;
			n++;
		}
		line[n] = 0;
	}
	close(p[0]);
	if (sscanf(line, fmt, port) != 1) {
		fprintf(stderr, "%s did not start\n", argv[0]);
		kill(pid, SIGKILL);
		waitpid(pid, NULL, 0);
		return -1;
	}
	return pid;
}

void t_reap(pid_t pid)
{
	int st;
	uint64_t until = t_now_ns() + 5000000000ull;

	kill(pid, SIGTERM);
	while (waitpid(pid, &st, WNOHANG) == 0 && t_now_ns() < until)
		t_sleep_ns(1000000);
	if (waitpid(pid, &st, WNOHANG) == 0) {
		kill(pid, SIGKILL);
		waitpid(pid, &st, 0);
	}
}

/* ---- network namespaces (partitions) ------------------------------------------- */

static int t_sh_cmd(const char *fmt, ...)
{
	char cmd[512];
	va_list ap;
	int st;

	va_start(ap, fmt);
	vsnprintf(cmd, sizeof(cmd), fmt, ap);
	va_end(ap);
	st = system(cmd);
	return st == 0 ? 0 : -1;
}

int t_netns_create(struct t_netns *n, unsigned idx)
{
	unsigned first = ((unsigned)getpid() * 7 + idx) % 250, id = 0;

	memset(n, 0, sizeof(*n));
	if (geteuid() != 0 || t_sh_cmd("ip netns list >/dev/null 2>&1") < 0)
		return -1;
	/* The subnet 10.231.<id>.0/24 and the names are claimed by making the
	 * namespace named after <id> (`ip netns add` fails if it exists), so
	 * test processes running at once never share a subnet or a veth name;
	 * bounded: 250 ids at most. */
	for (unsigned k = 0; k < 250 && !id; k++) {
		unsigned c = (first + k) % 250 + 1;

		snprintf(n->name, sizeof(n->name), "coordt_s%u", c);
		if (t_sh_cmd("ip netns add %s 2>/dev/null", n->name) == 0)
			id = c;
	}
	if (!id)
		return -1;
	snprintf(n->veth_host, sizeof(n->veth_host), "cth%u", id);
	snprintf(n->veth_ns, sizeof(n->veth_ns), "ctn%u", id);
	snprintf(n->host_ip, sizeof(n->host_ip), "10.231.%u.1", id);
	snprintf(n->ns_ip, sizeof(n->ns_ip), "10.231.%u.2", id);
	n->made = 1;
	if (t_sh_cmd("ip link add %s type veth peer name %s", n->veth_host, n->veth_ns) < 0 ||
	    t_sh_cmd("ip link set %s netns %s", n->veth_ns, n->name) < 0 ||
	    t_sh_cmd("ip addr add %s/24 dev %s", n->host_ip, n->veth_host) < 0 ||
	    t_sh_cmd("ip link set %s up", n->veth_host) < 0 ||
	    t_sh_cmd("ip netns exec %s ip addr add %s/24 dev %s", n->name, n->ns_ip, n->veth_ns) <
		    0 ||
	    t_sh_cmd("ip netns exec %s ip link set %s up", n->name, n->veth_ns) < 0 ||
	    t_sh_cmd("ip netns exec %s ip link set lo up", n->name) < 0) {
		t_netns_destroy(n);
		return -1;
	}
	return 0;
}

int t_netns_link(struct t_netns *n, int up)
{
	return t_sh_cmd("ip link set %s %s", n->veth_host, up ? "up" : "down");
}

void t_netns_destroy(struct t_netns *n)
{
	if (!n->made)
		return;
	(void)t_sh_cmd("ip link del %s 2>/dev/null", n->veth_host); /* takes its peer too */
	(void)t_sh_cmd("ip netns del %s", n->name);
	n->made = 0;
}

/* Start worker process @i listening on @port (0: any). */
static int worker_spawn(unsigned i, unsigned port)
{
	const char *bin = getenv("COORD_WORKER_BIN"), *fns = getenv("COORD_TESTFNS");
	const char *log = getenv("T_WORKER_LOG") ? getenv("T_WORKER_LOG") : "error";
	/* $T_WORKER_WRAP: a program that runs the worker's command line (on a
	 * cluster of hosts: inside the namespace that owns its address) */
	const char *wrap = getenv("T_WORKER_WRAP");
	char listen[80], host[40];
	char *argv[] = { (char *)wrap, (char *)bin,   "--fns",
			 (char *)fns,  "--listen",    listen,
			 "--log",      (char *)log,   "--partial-ms",
			 "500",	       "--transport", (char *)t_transport,
			 NULL };
	char **av = wrap && *wrap ? argv : argv + 1;
	pid_t pid;

	if (!bin || !fns) {
		fprintf(stderr, "COORD_WORKER_BIN and COORD_TESTFNS must be set\n");
		return -1;
	}
	snprintf(listen, sizeof(listen), "%s:%u", t_worker_addr(i, host, sizeof(host)), port);
	pid = t_spawn(av, "coord-worker", &t_ports[i]);
	if (pid < 0)
		return -1;
	t_pids[i] = pid;
	return 0;
}

int t_workers_start(unsigned n)
{
	for (t_nprocs = 0; t_nprocs < n && t_nprocs < T_MAX_PROCS; t_nprocs++)
		if (worker_spawn(t_nprocs, 0) < 0)
			return -1;
	return 0;
}

pid_t t_worker_pid(unsigned i)
{
	return i < t_nprocs ? t_pids[i] : -1;
}

int t_worker_restart(unsigned i)
{
	if (i >= t_nprocs)
		return -1;
	kill(t_pids[i], SIGKILL);
	waitpid(t_pids[i], NULL, 0);
	/* the same port: a preempted machine coming back at its address;
	 * bounded retries while the old socket's port is released */
	for (int k = 0; k < 50; k++) {
		if (worker_spawn(i, t_ports[i]) == 0)
			return 0;
		t_sleep_ns(20000000);
	}
	return -1;
}

void t_workers_stop(void)
{
	for (unsigned i = 0; i < t_nprocs; i++)
		t_reap(t_pids[i]);
	t_nprocs = 0;
}

unsigned t_worker_port(unsigned i)
{
	return i < t_nprocs ? t_ports[i] : 0;
}

char *t_spec_json(unsigned nworkers)
{
	size_t cap = 32 + (size_t)nworkers * 80;
	char host[40];
	char *s = malloc(cap);
	size_t off = 0;

	off += (size_t)snprintf(s + off, cap - off, "{\"worker\": [");
	for (unsigned i = 0; i < nworkers; i++) {
		unsigned k = i % (t_nprocs ? t_nprocs : 1);

		off += (size_t)snprintf(s + off, cap - off, "%s\"%s:%u\"", i ? ", " : "",
					t_worker_addr(k, host, sizeof(host)), t_ports[k]);
	}
	snprintf(s + off, cap - off, "]}");
	return s;
}

void t_opts(struct coord_opts *o, struct coord_registry *reg)
{
	coord_opts_init(o);
	o->registry = reg;
	o->transport = t_transport;
	o->start_delay_ms = 0;
	o->start_delay_max_ms = -1;
	/* window and tcp_loops: the library's defaults, what a user gets;
	 * the "tcp-loops" groups ask for two loops (t_group_tcp_loops()) */
	o->tcp_loops = t_tcp_loops;
	/* a worker that dies unexpectedly (a sanitizer report) fails the
	 * test in seconds rather than waiting out TF's hour (S10) */
	o->recovery_limit_ms = 10000;
}

int t_create(struct coord_opts *o, unsigned nworkers, struct coord **c, struct coord_error *err)
{
	struct coord_spec *spec = NULL;
	char *json;
	int r;

	if (strcmp(t_transport, "inproc") == 0) {
		o->inproc_workers = nworkers;
		return coord_create(NULL, o, c, err);
	}
	json = t_spec_json(nworkers);
	r = coord_spec_parse(json, &spec, err);
	free(json);
	if (r == 0)
		r = coord_create(spec, o, c, err);
	coord_spec_destroy(spec);
	return r;
}

struct coord *t_coord(struct coord_registry *reg, unsigned nworkers, unsigned cap)
{
	struct coord_opts o;
	struct coord_error err;
	struct coord *c;

	t_opts(&o, reg);
	o.ring_capacity = cap;
	if (t_create(&o, nworkers, &c, &err)) {
		fprintf(stderr, "t_coord: %s\n", err.msg);
		abort();
	}
	return c;
}

int t_fx_setup(void **state, unsigned nworkers, unsigned cap)
{
	struct t_fx *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	t_reset_counters();
	f->reg = t_registry();
	f->c = t_coord(f->reg, nworkers, cap);
	*state = f;
	return 0;
}

int t_fx_teardown(void **state)
{
	struct t_fx *f = *state;

	atomic_store(&t_gate, 1);
	coord_destroy(f->c);
	coord_registry_destroy(f->reg);
	free(f);
	return 0;
}

uint32_t t_fn(struct coord *c, const char *name)
{
	uint32_t id;
	struct coord_error err;

	if (coord_fn_lookup(c, name, &id, &err)) {
		fprintf(stderr, "t_fn: %s\n", err.msg);
		abort();
	}
	return id;
}
