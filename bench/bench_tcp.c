// SPDX-License-Identifier: MIT
/*
 * bench/bench_tcp.c - the tcp transport over loopback, against the
 * strongest plain-socket programs doing the same exchange over the same
 * loopback, measured in the same run.
 *
 * Workers are real coord-worker processes started here (`--listen
 * 127.0.0.1:0`, port read from their "coord-worker listening on port P"
 * line), serving bench/benchfns.c's `empty` function (it ignores its
 * argument and returns no result).
 *
 * Baselines (forked before any coordinator runs, one process per
 * coord-worker process, each serving every connection it accepts with a
 * thread of its own doing blocking recv/send, TCP_NODELAY both ends):
 *   raw echo     a client keeps F fixed-size requests in flight over C
 *                connections; every request is exactly one REQ frame
 *                carrying one call with the argument (so the echo moves at
 *                least coord's bytes: coord packs many calls in a frame),
 *                every reply exactly one RES frame carrying an empty
 *                result, and carries its request's 8-byte token.  Requests
 *                go out with writev() (a token and the shared argument
 *                bytes, up to 512 requests per call), replies are read into
 *                a 64 KiB buffer, many per recv(); the server reads up to
 *                256 KiB per recv() and answers every complete request in
 *                it with one send().  Two forms, both printed:
 *                  window    as replies come back, the same number of new
 *                            requests go out at once (the pipe never
 *                            drains);
 *                  batch     send F requests, read the F replies, repeat
 *                            (lockstep batches).
 *                The throughput target is taken against the stronger of the
 *                two in each round.  With C > 1 the client poll()s its
 *                connections; with C = 1 it blocks in recv().  A thread per
 *                connection and one poll() over all of them is the
 *                strongest simple form for a few connections, not for
 *                hundreds: the connection sweep's echo rows past a few
 *                connections are a plain baseline, not a tuned one.
 *   ping-pong    the raw echo with F = 1, C = 1: one request, blocking
 *                recv of its reply - the syscall floor for one request at
 *                a time.  Every round trip a sample.  Printed beside it,
 *                not a target: the same with the client polling for the
 *                reply (MSG_DONTWAIT), since coord's fetch spins (spin_ns)
 *                before it sleeps.
 *
 * Workloads (implementations alternate within each round - the order
 * flips every round - and round 0 warms up; every ratio is taken within a
 * round and reported as the median with min - max over the rounds):
 *   throughput  F = 1, 64, 256 closures in flight (a sliding window of
 *               RemoteValues: fetch the oldest, put it, schedule a new
 *               one) for a fixed time per repeat, then drained;
 *               closures/s = fetched / elapsed.  To 1 worker (1
 *               connection, 1 process) and 2 workers (2 connections, 2
 *               processes), against the raw echo over the same number of
 *               connections and server processes.
 *   cpu         getrusage(RUSAGE_SELF) user+sys of this process over each
 *               throughput repeat, divided by its closures: coord's
 *               coordinator (the calling thread's spinning in fetch and the
 *               event loops' included) against the echo client.  Beside
 *               it the calling thread's own share (RUSAGE_THREAD) and the
 *               server processes' CPU per closure (/proc/PID/stat, 10 ms
 *               ticks).
 *   round trip  1 in flight, 1 worker: schedule + fetch + put of one
 *               closure at a time, every round trip a sample, and the CPU
 *               per round trip (RUSAGE_SELF), against the ping-pong's.
 *   scale       256 in flight through one coordinator with 256 worker
 *               connections (a spec listing 4 coord-worker processes 64
 *               times each) against 2 connections (2 processes).  An extra
 *               row, not the target: 256 connections with 8 in flight each.
 *   --sweep     instead of the above: coord against the raw echo (window
 *               form) at every point of three sweeps, alternating per
 *               round: in flight 1 ... 1,024 (1 connection), argument size
 *               8 B ... 64 KiB (at --inflight, default 256, 1 connection),
 *               connections 1 ... 1,024 (in flight max(--inflight, C),
 *               over min(C, 4) processes).
 *
 * Options: --arg-size=N (0 ... 64K bytes of argument per closure, default
 * 0: a call without an argument), --inflight=N (1 ... 1024: the throughput
 * table runs only this F; the sweeps' fixed F), --conns=N (1 ... 1024: the
 * throughput table runs this many connections, over min(N, 4) processes,
 * instead of the 1- and 2-worker rows), --sweep.
 *
 * Checks (exit 1 on a discrepancy, never on speed): every fetch returns 0
 * with an empty value, fetched == scheduled in every run, coord_join()
 * returns 0 afterwards; every echo reply carries its request's token, in
 * order.
 *
 * Targets (SUMMARY lines, never asserted): issue 3: round trip p50 <=
 * 1.2x the ping-pong's, >= 2,000,000 closures/s with 256 in flight, 256
 * connections >= 0.80x the throughput of 2.  Issue 23: 256 in flight, one
 * worker >= 1.0x the raw echo (two workers >= 0.9x), median per-round
 * ratio; round trip p50 <= 1.0x the ping-pong's in every round, with
 * coordinator CPU per closure <= 1.2x the ping-pong client's (median).
 *
 * Knobs for exploring (not used by run.sh): BENCH_TCP_ONLY=rtt, tput or
 * scale runs only that workload; BENCH_SPIN_NS, BENCH_SPIN_MAX_NS and
 * BENCH_BATCH set coord_opts.spin_ns, .spin_max_ns and .batch of every
 * coordinator made here (printed in the titles); BENCH_LOOPS sets
 * tcp_loops (0, the default, is one loop per 4 CPUs);
 * BENCH_TCP_WORKERS=1|2 runs only those throughput rows, BENCH_SCALE_ROW=
 * 1|2|3 only that scale row (for a profiler).
 *
 * Paths: COORD_WORKER_BIN and BENCH_FNS in the environment override the
 * build tree's coord-worker and libcoordbenchfns.so (compiled in by meson).
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
#include "stats.h"

#define MAX_PROCS 4
#define MAX_CONNS 1024
#define MAX_INFLIGHT 1024
#define MAX_ARG (64u * 1024u)
#define LOOPS 0	       /* opts.tcp_loops of every coordinator here: the default */
#define WINDOW_MIN 256 /* opts.window: at least this, and never below F per connection */
#define SCALE_CONNS 256
#define SCALE_INFLIGHT 256
#define SCALE_DEEP 8 /* the extra row: this many in flight per connection */
#define TPUT_TARGET 2e6
#define RTT_TARGET 1.2 /* issue 3 */
#define SCALE_TARGET 0.80
#define ECHO_TARGET_1 1.0 /* issue 23: one worker, 256 in flight */
#define ECHO_TARGET_2 0.9 /* two workers */
#define RTT_ECHO_TARGET 1.0
#define CPU_TARGET 1.2
#define ECHO_SRV_BUF (256u * 1024u)
#define ECHO_CLI_BUF (64u * 1024u)
#define ECHO_IOV_REQS 512 /* requests per writev(): 2 iovecs each, IOV_MAX 1024 */

int coord_register_fns(struct coord_registry *reg); /* benchfns.c */

/* The argument every closure and every echo request carries. */
static uint8_t arg_buf[MAX_ARG + 16 * 1024];
static size_t arg_bytes;

/* One REQ frame of one call with @arg bytes; one RES frame, empty result. */
static size_t req_frame_bytes(size_t arg)
{
	struct coord_wire_req q = { .len = (uint32_t)arg };

	return COORD_WIRE_HDR + coord_wire_req_size(&q);
}

static size_t res_frame_bytes(void)
{
	return COORD_WIRE_HDR + COORD_WIRE_RES_FIXED;
}

static void nodelay(int fd)
{
	int one = 1;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

static int send_all(int fd, const void *p, size_t n)
{
	while (n) {
		ssize_t k = send(fd, p, n, MSG_NOSIGNAL);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		p = (const char *)p + k;
		n -= (size_t)k;
	}
	return 0;
}

static int recv_all(int fd, void *p, size_t n)
{
	while (n) {
		ssize_t k = recv(fd, p, n, 0);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		p = (char *)p + k;
		n -= (size_t)k;
	}
	return 0;
}

/* writev() all of @iov[0, @n), resuming after short writes. */
static int writev_all(int fd, struct iovec *iov, int n)
{
	while (n > 0) {
		ssize_t k = writev(fd, iov, n);

		if (k < 0 && errno == EINTR)
			continue;
		if (k <= 0)
			return -1;
		while (n > 0 && (size_t)k >= iov->iov_len) {
			k -= (ssize_t)iov->iov_len;
			iov++;
			n--;
		}
		if (n > 0) {
			iov->iov_base = (char *)iov->iov_base + k;
			iov->iov_len -= (size_t)k;
		}
	}
	return 0;
}

static uint64_t cpu_ns_of(int who)
{
	struct rusage ru;

	getrusage(who, &ru);
	return ((uint64_t)ru.ru_utime.tv_sec + (uint64_t)ru.ru_stime.tv_sec) * 1000000000ull +
	       ((uint64_t)ru.ru_utime.tv_usec + (uint64_t)ru.ru_stime.tv_usec) * 1000ull;
}

static uint64_t cpu_ns(void)
{
	return cpu_ns_of(RUSAGE_SELF);
}

/* CPU time (user + sys) so far of processes @pids[0, @n), from
 * /proc/PID/stat (clock ticks): the server side's cost, which RUSAGE_SELF
 * does not see. */
static uint64_t procs_cpu_ns(const pid_t *pids, unsigned n)
{
	long hz = sysconf(_SC_CLK_TCK);
	uint64_t t = 0;

	for (unsigned i = 0; i < n; i++) {
		char path[64], buf[1024], *p;
		unsigned long ut = 0, st = 0;
		FILE *f;
		size_t k;

		snprintf(path, sizeof(path), "/proc/%d/stat", (int)pids[i]);
		f = fopen(path, "r");
		if (!f)
			continue;
		k = fread(buf, 1, sizeof(buf) - 1, f);
		fclose(f);
		buf[k] = 0;
		p = strrchr(buf, ')'); /* comm may hold spaces */
		if (p && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut,
				&st) == 2)
			t += (uint64_t)(ut + st) * (1000000000ull / (uint64_t)(hz > 0 ? hz : 100));
	}
	return t;
}

/* ---- coord-worker processes ---------------------------------------------------------- */

static pid_t procs[MAX_PROCS];
static unsigned ports[MAX_PROCS], nprocs;

static int worker_start(const char *bin, const char *fns)
{
	int pid;

	if (bench_worker_spawn(bin, fns, 0, &pid, &ports[nprocs]) < 0)
		return -1;
	procs[nprocs++] = pid;
	return 0;
}

static void workers_stop(void)
{
	for (unsigned i = 0; i < nprocs; i++)
		bench_reap(procs[i]);
	nprocs = 0;
}

/* ---- the baseline: raw echo servers ----------------------------------------------------- */

/* What a client sends first on each connection: the sizes of its requests
 * and of the replies it wants. */
struct echo_hello {
	uint32_t req, res;
};

static pid_t echo_pids[MAX_PROCS];
static struct sockaddr_in echo_addr[MAX_PROCS];
static unsigned necho;

/* One connection: answer every complete request in each recv() with one
 * send() of as many replies, each starting with its request's token. */
static void *echo_conn_main(void *arg)
{
	int fd = (int)(intptr_t)arg;
	struct echo_hello h;
	uint8_t *in = NULL, *out = NULL, tok[8];
	size_t pos = 0;

	if (recv_all(fd, &h, sizeof(h)) < 0 || h.req < 8 || h.res < 8 || h.req > sizeof(arg_buf) ||
	    h.res > 4096)
		goto out;
	in = malloc(ECHO_SRV_BUF);
	out = calloc(ECHO_SRV_BUF / h.req + 1, h.res);
	if (!in || !out)
		goto out;
	for (;;) {
		ssize_t n = recv(fd, in, ECHO_SRV_BUF, 0);
		size_t off = 0, nrep = 0;

		if (n < 0 && errno == EINTR)
			continue;
		if (n <= 0)
			break;
		while (off < (size_t)n) {
			size_t take = h.req - pos < (size_t)n - off ? h.req - pos : (size_t)n - off;

			if (pos < 8)
				memcpy(tok + pos, in + off, take < 8 - pos ? take : 8 - pos);
			pos += take;
			off += take;
			if (pos == h.req) {
				memcpy(out + nrep * h.res, tok, 8);
				nrep++;
				pos = 0;
			}
		}
		if (nrep && send_all(fd, out, nrep * h.res) < 0)
			break;
	}
out:
	free(in);
	free(out);
	close(fd);
	return NULL;
}

/* Child: accept connections for ever, a thread each. */
static void echo_serve(int lfd)
{
	pthread_attr_t at;

	pthread_attr_init(&at);
	pthread_attr_setdetachstate(&at, PTHREAD_CREATE_DETACHED);
	pthread_attr_setstacksize(&at, 256 * 1024);
	for (;;) {
		int fd = accept(lfd, NULL, NULL);
		pthread_t t;

		if (fd < 0) {
			if (errno == EINTR || errno == ECONNABORTED)
				continue;
			_exit(1);
		}
		nodelay(fd);
		if (pthread_create(&t, &at, echo_conn_main, (void *)(intptr_t)fd))
			close(fd);
	}
}

static int echo_start(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK) };
	socklen_t alen = sizeof(a);
	int lfd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
	pid_t pid;

	if (lfd < 0 || bind(lfd, (struct sockaddr *)&a, sizeof(a)) < 0 ||
	    listen(lfd, MAX_CONNS) < 0 || getsockname(lfd, (struct sockaddr *)&a, &alen) < 0)
		return -1;
	pid = fork();
	if (pid < 0)
		return -1;
	if (pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		echo_serve(lfd);
	}
	close(lfd);
	echo_pids[necho] = pid;
	echo_addr[necho++] = a;
	return 0;
}

static void echo_stop(void)
{
	for (unsigned i = 0; i < necho; i++)
		bench_reap(echo_pids[i]);
	necho = 0;
}

/* ---- the baseline: raw echo client ------------------------------------------------------ */

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

/* @nconns connections, round robin over echo servers [0, @np), for
 * @req-byte requests and @res-byte replies. */
static int echo_open(struct echo *e, unsigned nconns, unsigned np, size_t req, size_t res)
{
	e->c = calloc(nconns, sizeof(*e->c));
	e->n = 0;
	e->req = req;
	e->res = res;
	if (!e->c)
		return -1;
	for (unsigned i = 0; i < nconns; i++) {
		struct echo_hello h = { (uint32_t)req, (uint32_t)res };
		struct echo_conn *c = &e->c[i];

		c->fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
		if (c->fd < 0)
			return -1;
		e->n++;
		if (connect(c->fd, (struct sockaddr *)&echo_addr[i % np], sizeof(echo_addr[0])) < 0)
			return -1;
		nodelay(c->fd);
		if (send_all(c->fd, &h, sizeof(h)) < 0)
			return -1;
	}
	return 0;
}

static void echo_close(struct echo *e)
{
	for (unsigned i = 0; i < e->n; i++)
		close(e->c[i].fd);
	free(e->c);
	e->c = NULL;
	e->n = 0;
}

/* Send @k requests on @c: a token each, then the shared argument bytes. */
static int echo_send(struct echo_conn *c, size_t req, unsigned k)
{
	uint64_t toks[ECHO_IOV_REQS];
	struct iovec iov[2 * ECHO_IOV_REQS];

	while (k) {
		unsigned b = k < ECHO_IOV_REQS ? k : ECHO_IOV_REQS;

		for (unsigned i = 0; i < b; i++) {
			toks[i] = c->next_tok++;
			iov[2 * i].iov_base = &toks[i];
			iov[2 * i].iov_len = 8;
			iov[2 * i + 1].iov_base = arg_buf;
			iov[2 * i + 1].iov_len = req - 8;
		}
		if (writev_all(c->fd, iov, (int)(2 * b)) < 0)
			return -1;
		c->out += b;
		k -= b;
	}
	return 0;
}

/* Read what is there (@flags: 0 blocks) on @c; the complete replies are
 * checked and counted in *@got.  -1 on a broken connection or reply. */
static int echo_recv(struct echo_conn *c, size_t res, int flags, unsigned *got)
{
	ssize_t n = recv(c->fd, c->buf + c->fill, sizeof(c->buf) - c->fill, flags);
	size_t k;

	*got = 0;
	if (n < 0 && (errno == EAGAIN || errno == EINTR))
		return 0;
	if (n <= 0)
		return -1;
	c->fill += (size_t)n;
	k = c->fill / res;
	for (size_t i = 0; i < k; i++) {
		uint64_t tok;

		memcpy(&tok, c->buf + i * res, 8);
		if (!bench_check(tok == c->want_tok, "echo: reply %" PRIu64 ", want %" PRIu64, tok,
				 c->want_tok))
			return -1;
		c->want_tok++;
	}
	c->fill -= k * res;
	if (c->fill)
		memmove(c->buf, c->buf + k * res, c->fill);
	c->out -= (unsigned)k;
	*got = (unsigned)k;
	return 0;
}

struct run_out {
	double rate;	/* closures (or round trips) per second */
	double cpu;	/* this process's CPU ns per closure */
	double thr_cpu; /* the calling thread's share (coord only) */
	double srv_cpu; /* the server processes' CPU ns per closure */
};

/*
 * Keep @f requests in flight over @e's connections (spread evenly; a
 * connection with none stays idle) until @dur_ns has passed or @nmax
 * replies came, then drain.  @lockstep: a connection sends its next batch
 * only when all its replies are in.  @spin: poll with MSG_DONTWAIT instead
 * of blocking.  With @lat (f == 1 only) every round trip's ns is a sample.
 */
static void echo_run(struct echo *e, unsigned f, bool lockstep, bool spin, uint64_t dur_ns,
		     uint64_t nmax, struct bench_samples *lat, struct run_out *o)
{
	struct pollfd pfd[MAX_CONNS];
	uint64_t c0 = cpu_ns(), s0 = procs_cpu_ns(echo_pids, necho), t0 = bench_now_ns(), ts,
		 done = 0, sent = 0;
	bool stop = false;
	unsigned active = 0;

	memset(o, 0, sizeof(*o));
	for (unsigned i = 0; i < e->n; i++) {
		struct echo_conn *c = &e->c[i];

		c->win = f / e->n + (i < f % e->n);
		c->out = 0;
		c->fill = 0;
		c->want_tok = c->next_tok;
		if (c->win && echo_send(c, e->req, c->win) < 0) {
			bench_check(false, "echo: send failed");
			return;
		}
		sent += c->win;
		active += c->win > 0;
	}
	ts = bench_now_ns();
	while (!stop || sent != done) {
		unsigned np = 0;

		if (e->n == 1 || active == 1) {
			pfd[0].fd = -1;
			pfd[0].revents = POLLIN;
			for (unsigned i = 0; i < e->n; i++)
				if (e->c[i].win)
					pfd[0].fd = (int)i;
			np = 1;
		} else {
			for (unsigned i = 0; i < e->n; i++)
				if (e->c[i].out) {
					pfd[np].fd = e->c[i].fd;
					pfd[np].events = POLLIN;
					pfd[np].revents = 0;
					np++;
				}
			if (poll(pfd, np, spin ? 0 : -1) < 0 && errno != EINTR) {
				bench_check(false, "echo: poll: %s", strerror(errno));
				return;
			}
		}
		for (unsigned j = 0, i = 0; j < np; j++) {
			struct echo_conn *c;
			unsigned got;
			int flags = spin ? MSG_DONTWAIT : 0;

			if (!(pfd[j].revents & (POLLIN | POLLERR | POLLHUP)))
				continue;
			if (e->n == 1 || active == 1) {
				c = &e->c[pfd[0].fd];
			} else {
				while (e->c[i].fd != pfd[j].fd)
					i++;
				c = &e->c[i];
				flags = MSG_DONTWAIT;
			}
			if (echo_recv(c, e->res, flags, &got) < 0) {
				bench_check(false, "echo: the connection failed");
				return;
			}
			if (!got)
				continue;
			done += got;
			if (lat) {
				uint64_t now = bench_now_ns();

				bench_samples_add(lat, (double)(now - ts));
				ts = now;
			}
			if (!stop && (bench_now_ns() - t0 >= dur_ns || done >= nmax))
				stop = true;
			if (stop)
				continue;
			if (lockstep && c->out)
				continue;
			got = lockstep ? c->win : got;
			if (echo_send(c, e->req, got) < 0) {
				bench_check(false, "echo: send failed");
				return;
			}
			sent += got;
			if (lat)
				ts = bench_now_ns();
		}
	}
	o->rate = (double)done / ((double)(bench_now_ns() - t0) / 1e9);
	o->cpu = (double)(cpu_ns() - c0) / (double)done;
	o->srv_cpu = (double)(procs_cpu_ns(echo_pids, necho) - s0) / (double)done;
}

/* ---- coord over tcp -------------------------------------------------------------------- */

static uint64_t spin_ns, spin_max_ns; /* of the coordinators made, for the titles */
static unsigned loops;		      /* their tcp_loops (0: the default) */
static unsigned batch;

/* A coordinator over @nconns connections spread round robin over worker
 * processes [0, @np), @window closures in flight per connection. */
static struct coord *make_coord(struct coord_registry *reg, unsigned nconns, unsigned np,
				unsigned window, uint32_t *fn)
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
	loops = o.tcp_loops;
	o.window = window < WINDOW_MIN ? WINDOW_MIN : window;
	o.start_delay_ms = 0;
	o.start_delay_max_ms = -1;
	if (getenv("BENCH_SPIN_NS"))
		o.spin_ns = strtoull(getenv("BENCH_SPIN_NS"), NULL, 10);
	if (getenv("BENCH_SPIN_MAX_NS"))
		o.spin_max_ns = strtoull(getenv("BENCH_SPIN_MAX_NS"), NULL, 10);
	if (getenv("BENCH_BATCH"))
		o.batch = (unsigned)strtoul(getenv("BENCH_BATCH"), NULL, 10);
	spin_ns = o.spin_ns;
	spin_max_ns = o.spin_max_ns;
	batch = o.batch;
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
static unsigned window_for(unsigned f, unsigned conns)
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
static void coord_window(struct coord *c, uint32_t fn, unsigned f, uint64_t dur_ns,
			 struct coord_rv **rvs, struct run_out *o)
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
static void coord_rtt(struct coord *c, uint32_t fn, uint64_t n, struct bench_samples *lat,
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
static void row(const char *name, struct bench_samples *s, double scale, bool higher_better,
		const struct bench_stats *base, struct bench_stats *st)
{
	for (size_t i = 0; i < s->n; i++)
		s->v[i] *= scale;
	bench_summarize(s, higher_better, st);
	bench_row(name, st, base ? base : st, higher_better);
}

static const char *getenv_or(const char *name, const char *dflt)
{
	const char *v = getenv(name);

	return v && *v ? v : dflt;
}

static unsigned umin(unsigned a, unsigned b)
{
	return a < b ? a : b;
}

/* Processes a run over @conns connections spreads over. */
static unsigned procs_for(unsigned conns)
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
				 what, (double)dur_ns / 1e6, repeats, loops, batch, spin_ns);
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

static void run_sweeps(struct coord_registry *reg, bool quick, unsigned fixed_f, size_t arg,
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

/* ---- the default run ------------------------------------------------------------------- */

#define MAX_CFG 2
#define MAX_F 3
enum { I_COORD, I_ECHO_W, I_ECHO_B, NIMPL };

struct point {
	struct bench_samples rate[NIMPL], cpu[NIMPL], srv[NIMPL], thr, ratio;
};

static void point_free(struct point *p)
{
	for (unsigned i = 0; i < NIMPL; i++) {
		bench_samples_free(&p->rate[i]);
		bench_samples_free(&p->cpu[i]);
		bench_samples_free(&p->srv[i]);
	}
	bench_samples_free(&p->thr);
	bench_samples_free(&p->ratio);
}

/* Add one repeat's latencies @lat (ns) to @all; return their p50 (ns). */
static double add_repeat(struct bench_samples *all, const struct bench_samples *lat)
{
	struct bench_stats ls;

	bench_summarize(lat, false, &ls);
	for (size_t i = 0; i < lat->n; i++)
		bench_samples_add(all, lat->v[i]);
	return ls.median;
}

int main(int argc, char **argv)
{
	const char *bin = getenv_or("COORD_WORKER_BIN", BENCH_WORKER_BIN);
	const char *fns = getenv_or("BENCH_FNS", BENCH_FNS_LIB);
	const char *only = getenv("BENCH_TCP_ONLY"); /* rtt, tput or scale: for profiling */
	unsigned only_w = (unsigned)atoi(getenv_or("BENCH_TCP_WORKERS", "0"));
	unsigned only_s = (unsigned)atoi(getenv_or("BENCH_SCALE_ROW", "0"));
	unsigned long o_arg = 0, o_f = 0, o_conns = 0, o_sweep = 0;
	const struct bench_opt opts[] = {
		{ "arg-size", "argument bytes per closure and per echo request (0 ... 64K)", 0,
		  MAX_ARG, &o_arg, false },
		{ "inflight", "the throughput table's only F; the sweeps' fixed F (1 ... 1024)", 1,
		  MAX_INFLIGHT, &o_f, false },
		{ "conns", "the throughput table's connections, over min(N, 4) processes", 1,
		  MAX_CONNS, &o_conns, false },
		{ "sweep", "sweep in flight, argument size and connections instead", 0, 1, &o_sweep,
		  true },
	};
	struct bench_args a;
	struct coord_registry *reg;
	struct coord *cw[MAX_CFG] = { NULL }, *crtt = NULL, *cs[2] = { NULL };
	uint32_t fw[MAX_CFG], frtt, fs[2];
	struct echo ew[MAX_CFG], pp;
	struct coord_rv **rvs;
	struct point pt[MAX_CFG][MAX_F];
	struct bench_samples pp_rate = { 0 }, pp_cpu = { 0 }, rtt = { 0 }, rtt_cpu = { 0 },
			     pp_lat = { 0 }, ps_lat = { 0 }, rtt_ratio = { 0 }, cpu_ratio = { 0 },
			     srate[3] = { 0 }, scpu[3] = { 0 }, swcpu[3] = { 0 }, sccpu[3] = { 0 };
	struct bench_stats st, pp_st, ps_st, rtt_st, rr_st = { 0 }, cr_st = { 0 }, ppc_st, rc_st,
						     sst[3];
	struct bench_stats er_st[MAX_CFG][MAX_F], rate_st[MAX_CFG][MAX_F];
	unsigned cfg_conns[MAX_CFG], ncfg, flist[MAX_F], nf, scale_conns, scale_f[3];
	uint64_t dur_ns, n_rtt, t_start = bench_now_ns();
	double best256 = 0, scale_ratio, e256[MAX_CFG] = { 0 };
	char title[400], label[MAX_CFG][48];
	size_t req_bytes, res_bytes;
	struct rlimit nofile;

	bench_parse_args_ex(argc, argv, &a, opts, sizeof(opts) / sizeof(opts[0]));
	arg_bytes = o_arg;
	dur_ns = a.quick ? 50000000ull : (o_sweep ? 200000000ull : 400000000ull);
	n_rtt = a.quick ? 500 : 10000;
	scale_conns = a.quick ? 32 : SCALE_CONNS;
	req_bytes = req_frame_bytes(arg_bytes);
	res_bytes = res_frame_bytes();
	signal(SIGPIPE, SIG_IGN);
	memset(pt, 0, sizeof(pt));
	/* The connection sweep holds 2 x 1,024 sockets: the soft limit up to
	 * the hard one (best effort; a failed connect is reported). */
	if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur < nofile.rlim_max) {
		nofile.rlim_cur = nofile.rlim_max;
		setrlimit(RLIMIT_NOFILE, &nofile);
	}

	/* Every process is forked before any coordinator runs (docs/guarantees.md: fork). */
	for (unsigned i = 0; i < MAX_PROCS; i++)
		if (echo_start() < 0) {
			perror("bench_tcp: echo server set-up");
			echo_stop();
			return 1;
		}
	for (unsigned i = 0; i < MAX_PROCS; i++)
		if (worker_start(bin, fns) < 0) {
			workers_stop();
			echo_stop();
			return 1;
		}
	if (coord_registry_create(&reg) || coord_register_fns(reg)) {
		fprintf(stderr, "bench_tcp: registry set-up failed\n");
		return 1;
	}
	scale_f[0] = scale_f[1] = SCALE_INFLIGHT;
	scale_f[2] = SCALE_DEEP * scale_conns;
	rvs = calloc(scale_f[2] > MAX_INFLIGHT ? scale_f[2] : MAX_INFLIGHT, sizeof(*rvs));
	if (!rvs)
		return 1;
	if (o_sweep) {
		run_sweeps(reg, a.quick, o_f ? (unsigned)o_f : 256, arg_bytes, a.repeats, dur_ns,
			   rvs);
		printf("SUMMARY bench_tcp config=sweep_done conservation=%s elapsed_s=%.1f\n",
		       bench_exit_code() ? "FAILED" : "ok",
		       (double)(bench_now_ns() - t_start) / 1e9);
		goto done;
	}

	ncfg = o_conns ? 1 : 2;
	cfg_conns[0] = o_conns ? (unsigned)o_conns : 1;
	cfg_conns[1] = 2;
	nf = o_f ? 1 : 3;
	flist[0] = o_f ? (unsigned)o_f : 1;
	flist[1] = 64;
	flist[2] = 256;
	for (unsigned w = 0; w < ncfg; w++) {
		unsigned c = cfg_conns[w];

		if (c == procs_for(c))
			snprintf(label[w], sizeof(label[w]), "%u worker%s", c, c > 1 ? "s" : "");
		else
			snprintf(label[w], sizeof(label[w]), "%u conns/%u procs", c, procs_for(c));
		cw[w] = make_coord(reg, c, procs_for(c), window_for(flist[nf - 1], c), &fw[w]);
		if (echo_open(&ew[w], c, procs_for(c), req_bytes, res_bytes) < 0) {
			perror("bench_tcp: echo connect");
			return 1;
		}
	}
	crtt = make_coord(reg, 1, 1, WINDOW_MIN, &frtt);
	if (echo_open(&pp, 1, 1, req_bytes, res_bytes) < 0) {
		perror("bench_tcp: ping-pong connect");
		return 1;
	}
	cs[0] = make_coord(reg, 2, 2, WINDOW_MIN, &fs[0]);
	cs[1] = make_coord(reg, scale_conns, MAX_PROCS, WINDOW_MIN, &fs[1]);

	/* Round 0 warms up; implementations alternate within a round, the
	 * order flipping every round. */
	for (unsigned rep = 0; rep <= a.repeats; rep++) {
		bool flip = rep & 1;

		if (!only || !strcmp(only, "rtt")) {
			struct bench_samples lat = { 0 };
			struct run_out po = { 0 }, so, co = { 0 };
			double pp50 = 0, c50 = 0;

			for (unsigned s = 0; s < 3; s++) {
				unsigned which = flip ? 2 - s : s;

				bench_samples_reset(&lat);
				if (which == 0) {
					echo_run(&pp, 1, false, false, UINT64_MAX, n_rtt, &lat,
						 &po);
					if (rep)
						pp50 = add_repeat(&pp_lat, &lat);
				} else if (which == 1) {
					echo_run(&pp, 1, false, true, UINT64_MAX, n_rtt, &lat, &so);
					if (rep)
						add_repeat(&ps_lat, &lat);
				} else {
					coord_rtt(crtt, frtt, n_rtt, &lat, &co);
					if (rep)
						c50 = add_repeat(&rtt, &lat);
				}
			}
			bench_samples_free(&lat);
			if (rep && pp50 > 0 && po.cpu > 0) {
				bench_samples_add(&pp_rate, po.rate);
				bench_samples_add(&pp_cpu, po.cpu);
				bench_samples_add(&rtt_cpu, co.cpu);
				bench_samples_add(&rtt_ratio, c50 / pp50);
				bench_samples_add(&cpu_ratio, co.cpu / po.cpu);
			}
		}
		if (!only || !strcmp(only, "tput"))
			for (unsigned w = 0; w < ncfg; w++)
				for (unsigned k = 0; k < nf; k++) {
					struct point *p = &pt[w][k];
					struct run_out o[NIMPL];
					unsigned f = flist[k];

					if (only_w && only_w != cfg_conns[w])
						continue;
					for (unsigned s = 0; s < NIMPL; s++) {
						unsigned which = flip ? NIMPL - 1 - s : s;

						memset(&o[which], 0, sizeof(o[which]));
						if (which == I_COORD)
							coord_window(cw[w], fw[w], f, dur_ns, rvs,
								     &o[which]);
						else if (which == I_ECHO_W || f > 1)
							echo_run(&ew[w], f, which == I_ECHO_B,
								 false, dur_ns, UINT64_MAX, NULL,
								 &o[which]);
					}
					if (!rep || o[I_COORD].rate <= 0 || o[I_ECHO_W].rate <= 0)
						continue;
					for (unsigned i = 0; i < NIMPL; i++) {
						if (o[i].rate <= 0)
							continue;
						bench_samples_add(&p->rate[i], o[i].rate);
						bench_samples_add(&p->cpu[i], o[i].cpu);
						bench_samples_add(&p->srv[i], o[i].srv_cpu);
					}
					bench_samples_add(&p->thr, o[I_COORD].thr_cpu);
					bench_samples_add(
						&p->ratio,
						o[I_COORD].rate /
							(o[I_ECHO_B].rate > o[I_ECHO_W].rate
								 ? o[I_ECHO_B].rate
								 : o[I_ECHO_W].rate));
				}
		if (!only || !strcmp(only, "scale"))
			for (unsigned s = 0; s < 3; s++) {
				struct run_out o;

				if (only_s && only_s != s + 1)
					continue;
				coord_window(cs[s ? 1 : 0], fs[s ? 1 : 0], scale_f[s], dur_ns, rvs,
					     &o);
				if (rep) {
					bench_samples_add(&sccpu[s], o.thr_cpu);
					bench_samples_add(&srate[s], o.rate);
					bench_samples_add(&scpu[s], o.cpu);
					bench_samples_add(&swcpu[s], o.srv_cpu);
				}
			}
	}
	for (unsigned w = 0; w < ncfg; w++) {
		coord_destroy(cw[w]);
		echo_close(&ew[w]);
	}
	coord_destroy(crtt);
	echo_close(&pp);
	coord_destroy(cs[0]);
	coord_destroy(cs[1]);

	/* 1. throughput */
	snprintf(title, sizeof(title),
		 "bench_tcp throughput: empty closures with %zu-byte arguments over tcp loopback "
		 "to coord-worker processes, F in flight (sliding window of RemoteValues), "
		 "against the raw echo (%zu-byte requests, %zu-byte replies) over the same "
		 "connections; %.0f ms per repeat, %u alternating rounds; tcp_loops=%u batch=%u "
		 "spin_ns=%" PRIu64 " spin_max_ns=%" PRIu64,
		 arg_bytes, req_bytes, res_bytes, (double)dur_ns / 1e6, a.repeats, loops, batch,
		 spin_ns, spin_max_ns);
	bench_header(title, "closures/s; p99, p99.9 = slow tail; x base = over the echo (window)");
	for (unsigned w = 0; w < ncfg; w++)
		for (unsigned k = 0; k < nf; k++) {
			struct point *p = &pt[w][k];
			struct bench_stats bst = { 0 }, rst;
			char name[96], series[64];

			snprintf(series, sizeof(series), "raw echo window, %s", label[w]);
			snprintf(name, sizeof(name), "raw echo window, %s, %u in flight", label[w],
				 flist[k]);
			bench_point(series, flist[k]);
			row(name, &p->rate[I_ECHO_W], 1.0, true, NULL, &er_st[w][k]);
			if (p->rate[I_ECHO_B].n) {
				snprintf(series, sizeof(series), "raw echo batch, %s", label[w]);
				snprintf(name, sizeof(name), "raw echo batch, %s, %u in flight",
					 label[w], flist[k]);
				bench_point(series, flist[k]);
				row(name, &p->rate[I_ECHO_B], 1.0, true, &er_st[w][k], &bst);
			}
			snprintf(series, sizeof(series), "coord tcp, %s", label[w]);
			snprintf(name, sizeof(name), "coord tcp, %s, %u in flight", label[w],
				 flist[k]);
			bench_point(series, flist[k]);
			row(name, &p->rate[I_COORD], 1.0, true, &er_st[w][k], &rate_st[w][k]);
			snprintf(name, sizeof(name),
				 "coord / the stronger echo, %s, %u in flight, per round", label[w],
				 flist[k]);
			bench_ratio_row(name, &p->ratio, &rst);
			if (flist[k] == 256) {
				if (rate_st[w][k].median > best256)
					best256 = rate_st[w][k].median;
				e256[w] = rst.median;
			}
			printf("SUMMARY bench_tcp config=throughput conns=%u workers=%u "
			       "inflight=%u "
			       "arg_bytes=%zu closures_per_s=%.0f slow_p99=%.0f min=%.0f max=%.0f "
			       "echo_window_per_s=%.0f echo_batch_per_s=%.0f "
			       "ratio_to_echo_median=%.2f ratio_min=%.2f ratio_max=%.2f\n",
			       cfg_conns[w], procs_for(cfg_conns[w]), flist[k], arg_bytes,
			       rate_st[w][k].median, rate_st[w][k].p99, rate_st[w][k].min,
			       rate_st[w][k].max, er_st[w][k].median, bst.median, rst.median,
			       rst.min, rst.max);
		}
	printf("SUMMARY bench_tcp config=throughput_target inflight=256 best_median=%.0f "
	       "target_ge_2000000=%s\n",
	       best256, bench_met(best256 >= TPUT_TARGET));
	printf("\n");

	/* 2. CPU per closure */
	snprintf(title, sizeof(title),
		 "bench_tcp CPU per closure: getrusage(RUSAGE_SELF) user+sys over each "
		 "throughput repeat / closures: coord's coordinator (the calling thread's "
		 "spinning in fetch and the event loops' included) against the echo client; the "
		 "server processes' CPU is printed after the table");
	bench_header(title, "CPU ns per closure; x base = echo client's CPU / coord's");
	for (unsigned w = 0; w < ncfg; w++)
		for (unsigned k = 0; k < nf; k++) {
			struct point *p = &pt[w][k];
			struct bench_stats est;
			char name[96];

			snprintf(name, sizeof(name), "echo client (window), %s, %u in flight",
				 label[w], flist[k]);
			row(name, &p->cpu[I_ECHO_W], 1.0, false, NULL, &est);
			snprintf(name, sizeof(name), "coord tcp, %s, %u in flight", label[w],
				 flist[k]);
			row(name, &p->cpu[I_COORD], 1.0, false, &est, &st);
			printf("SUMMARY bench_tcp config=cpu conns=%u inflight=%u "
			       "cpu_ns_per_closure=%.0f p99=%.0f min=%.0f max=%.0f "
			       "echo_client_cpu_ns=%.0f\n",
			       cfg_conns[w], flist[k], st.median, st.p99, st.min, st.max,
			       est.median);
		}
	for (unsigned w = 0; w < ncfg; w++)
		for (unsigned k = 0; k < nf; k++) {
			struct point *p = &pt[w][k];
			struct bench_stats es;

			bench_summarize(&p->thr, false, &st);
			printf("# of which the calling thread (schedule + fetch, its spinning "
			       "included; RUSAGE_THREAD), %s, %u in flight: median %.0f ns\n",
			       label[w], flist[k], st.median);
			bench_summarize(&p->srv[I_COORD], false, &st);
			bench_summarize(&p->srv[I_ECHO_W], false, &es);
			printf("# server processes' CPU per closure (/proc/PID/stat, 10 ms ticks), "
			       "%s, %u in flight: coord-worker median %.0f ns (min - max %.0f - "
			       "%.0f), echo server median %.0f ns\n",
			       label[w], flist[k], st.median, st.min, st.max, es.median);
		}
	printf("\n");

	/* 3. round trip against the ping-pong */
	snprintf(title, sizeof(title),
		 "bench_tcp round trip: 1 in flight, 1 worker; coord: schedule + fetch of one "
		 "empty closure (%zu-byte argument); ping-pong: the raw echo with one %zu-byte "
		 "request and one %zu-byte reply at a time, blocking, TCP_NODELAY; %" PRIu64
		 " per repeat, %u alternating rounds",
		 arg_bytes, req_bytes, res_bytes, n_rtt, a.repeats);
	bench_header(title, "us per round trip, every round trip a sample");
	row("blocking ping-pong (base)", &pp_lat, 1e-3, false, NULL, &pp_st);
	row("ping-pong, client polls the reply", &ps_lat, 1e-3, false, &pp_st, &ps_st);
	row("coord tcp", &rtt, 1e-3, false, &pp_st, &rtt_st);
	bench_ratio_row("coord p50 / ping-pong p50, per round (lower is better)", &rtt_ratio,
			&rr_st);
	bench_summarize(&pp_cpu, false, &ppc_st);
	bench_summarize(&rtt_cpu, false, &rc_st);
	printf("# CPU per round trip (RUSAGE_SELF): ping-pong client median %.0f ns (min - max "
	       "%.0f - %.0f), coord median %.0f ns (min - max %.0f - %.0f)\n",
	       ppc_st.median, ppc_st.min, ppc_st.max, rc_st.median, rc_st.min, rc_st.max);
	bench_ratio_row("coord CPU / ping-pong client CPU per round trip, per round (lower is "
			"better)",
			&cpu_ratio, &cr_st);
	printf("SUMMARY bench_tcp config=round_trip coord_p50_us=%.2f coord_p99_us=%.2f "
	       "coord_p999_us=%.2f pingpong_p50_us=%.2f pingpong_p99_us=%.2f "
	       "pingpong_p999_us=%.2f ratio_p50=%.2f target_le_1.2=%s "
	       "ratio_per_round_median=%.2f ratio_per_round_max=%.2f "
	       "target_every_round_le_1.0=%s coord_cpu_ns=%.0f pingpong_cpu_ns=%.0f "
	       "cpu_ratio_median=%.2f cpu_ratio_min=%.2f cpu_ratio_max=%.2f "
	       "target_cpu_le_1.2=%s polling_pingpong_p50_us=%.2f\n",
	       rtt_st.median, rtt_st.p99, rtt_st.p999, pp_st.median, pp_st.p99, pp_st.p999,
	       pp_st.median > 0 ? rtt_st.median / pp_st.median : 0,
	       bench_met(pp_st.median > 0 && rtt_st.median <= RTT_TARGET * pp_st.median),
	       rr_st.median, rr_st.max, bench_met(rr_st.n && rr_st.max <= RTT_ECHO_TARGET),
	       rc_st.median, ppc_st.median, cr_st.median, cr_st.min, cr_st.max,
	       bench_met(cr_st.n && cr_st.median <= CPU_TARGET), ps_st.median);
	printf("\n");

	/* 4. scale */
	for (unsigned s = 0; s < 3; s++)
		bench_summarize(&srate[s], true, &sst[s]);
	scale_ratio = bench_speedup(&sst[1], &sst[0], true);
	snprintf(title, sizeof(title),
		 "bench_tcp scale: %d in flight, one coordinator (tcp_loops=%u window=%d); %u "
		 "connections over %d coord-worker processes against 2 connections over 2; "
		 "%.0f ms per repeat, %u repeats",
		 SCALE_INFLIGHT, loops, WINDOW_MIN, scale_conns, MAX_PROCS, (double)dur_ns / 1e6,
		 a.repeats);
	bench_header(title, "closures/s; p99, p99.9 = slow tail");
	bench_row("2 connections (base)", &sst[0], &sst[0], true);
	snprintf(title, sizeof(title), "%u connections", scale_conns);
	bench_row(title, &sst[1], &sst[0], true);
	snprintf(title, sizeof(title), "%u conns, %u in flight (info)", scale_conns, scale_f[2]);
	bench_row(title, &sst[2], &sst[0], true);
	printf("# the last row: %d in flight per connection, so that frames carry several "
	       "closures again\n",
	       SCALE_DEEP);
	for (unsigned s = 0; s < 3; s++) {
		bench_summarize(&scpu[s], false, &st);
		printf("# coordinator CPU per closure, %u connections, %u in flight: median %.0f "
		       "ns, p99 %.0f, min - max %.0f - %.0f\n",
		       s ? scale_conns : 2, scale_f[s], st.median, st.p99, st.min, st.max);
		bench_summarize(&sccpu[s], false, &st);
		printf("# of which the calling thread (schedule + fetch, spinning included), %u "
		       "connections, %u in flight: median %.0f ns\n",
		       s ? scale_conns : 2, scale_f[s], st.median);
		bench_summarize(&swcpu[s], false, &st);
		printf("# coord-worker processes' CPU per closure, %u connections, %u in flight: "
		       "median %.0f ns, min - max %.0f - %.0f\n",
		       s ? scale_conns : 2, scale_f[s], st.median, st.min, st.max);
	}
	printf("SUMMARY bench_tcp config=scale conns=%u base_conns=2 closures_per_s=%.0f "
	       "base_closures_per_s=%.0f ratio=%.2f target_ge_0.80=%s\n",
	       scale_conns, sst[1].median, sst[0].median, scale_ratio,
	       bench_met(scale_ratio >= SCALE_TARGET));
	printf("SUMMARY bench_tcp config=targets round_trip_p50_le_1.2x_pingpong=%s (%.2fx) "
	       "closures_per_s_256_in_flight_ge_2M=%s (%.0f) scale_256_conns_ge_0.80=%s "
	       "(%.2f) echo_256_1w_ge_1.0=%s (%.2f) echo_256_2w_ge_0.9=%s (%.2f) "
	       "round_trip_every_round_le_1.0x_pingpong=%s (max %.2f) "
	       "cpu_le_1.2x_pingpong_client=%s (%.2f) loadavg=%.2f conservation=%s "
	       "elapsed_s=%.1f\n",
	       bench_met(pp_st.median > 0 && rtt_st.median <= RTT_TARGET * pp_st.median),
	       pp_st.median > 0 ? rtt_st.median / pp_st.median : 0,
	       bench_met(best256 >= TPUT_TARGET), best256, bench_met(scale_ratio >= SCALE_TARGET),
	       scale_ratio, bench_met(!o_conns && e256[0] >= ECHO_TARGET_1), e256[0],
	       bench_met(!o_conns && e256[1] >= ECHO_TARGET_2), e256[1],
	       bench_met(rr_st.n && rr_st.max <= RTT_ECHO_TARGET), rr_st.max,
	       bench_met(cr_st.n && cr_st.median <= CPU_TARGET), cr_st.median, bench_loadavg(),
	       bench_exit_code() ? "FAILED" : "ok", (double)(bench_now_ns() - t_start) / 1e9);

	for (unsigned w = 0; w < MAX_CFG; w++)
		for (unsigned k = 0; k < MAX_F; k++)
			point_free(&pt[w][k]);
	bench_samples_free(&pp_rate);
	bench_samples_free(&pp_cpu);
	bench_samples_free(&rtt);
	bench_samples_free(&rtt_cpu);
	bench_samples_free(&pp_lat);
	bench_samples_free(&ps_lat);
	bench_samples_free(&rtt_ratio);
	bench_samples_free(&cpu_ratio);
	for (unsigned s = 0; s < 3; s++) {
		bench_samples_free(&srate[s]);
		bench_samples_free(&scpu[s]);
		bench_samples_free(&swcpu[s]);
		bench_samples_free(&sccpu[s]);
	}
done:
	workers_stop();
	echo_stop();
	free(rvs);
	coord_registry_destroy(reg);
	return bench_exit_code();
}
