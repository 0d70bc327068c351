// SPDX-License-Identifier: MIT
/*
 * bench/bench_server.c - one coord-worker under connection floods (issue 21):
 * what a server costs in memory and threads for peers that connect, and
 * whether that comes back.  Printed, never asserted (the tests assert the
 * behaviour: tests/test_tcp_hostile.c).
 *
 * Set-up: a real coord-worker (no cluster key, `--listen 127.0.0.1:0`,
 * `--max-handshakes 4096` so that the concurrent-handshake figure measures
 * handshakes, not refusals) serving bench/benchfns.c; its /proc status read
 * for VmRSS, VmHWM (peak RSS) and Threads.  This process raises its own
 * soft descriptor limit to the hard one (it holds CONNS sockets at once).
 *
 * Figures, in this order:
 *   flood    FLOOD connections that each send a header declaring a 16 MiB
 *            HELLO and then as many bytes as the socket takes (for up to 2 s
 *            in all), all held open: the server's peak RSS (VmHWM) above
 *            its idle RSS.  Target <= 64 MiB.
 *   cycles   CYCLES cycles of CONNS connections, each a full coordinator
 *            handshake + FN_TABLE + PING answered by a PONG, all open at
 *            once, then all closed; the server's RSS after each cycle (its
 *            descriptors back to the idle count first).  Target: growth
 *            after cycle 1 <= 5%.
 *   pending  CONNS connections at once in the handshake (HELLO sent, its
 *            HELLO_ACK read, AUTH not yet sent): the server's threads
 *            (the most seen), and how many were refused.  Target: a fixed
 *            number, whatever CONNS.
 *   emfile   the server's descriptor limit lowered to 256 (prlimit) while
 *            FLOOD_FD connections are made: its CPU time over 1 s while out
 *            of descriptors (a spinning acceptor takes a whole CPU).
 *
 * --quick (bench-smoke): 100 connections, 2 cycles.  --conns=N, --cycles=N
 * and --flood=N set the sizes.
 * Paths: COORD_WORKER_BIN and BENCH_FNS in the environment override the
 * build tree's coord-worker and libcoordbenchfns.so (compiled in by meson);
 * with BENCH_SERVER_PLAIN set, no --max-handshakes is passed (a
 * coord-worker from before it, for a comparison).
 */
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <dirent.h>
#include <time.h>
#include <unistd.h>

#include "transport/wire/sock.h"
#include "transport/wire/wire.h"
#include "stats.h"

static pid_t srv_pid = -1;
static unsigned srv_port;

static uint64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void sleep_ms(unsigned ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000l };

	nanosleep(&ts, NULL);
}

/* Start the coord-worker; its port from its "listening on port" line. */
static int srv_start(void)
{
	const char *bin = getenv_or("COORD_WORKER_BIN", BENCH_WORKER_BIN);
	const char *fns = getenv_or("BENCH_FNS", BENCH_FNS_LIB);
	char line[128];
	size_t n = 0;
	int p[2];

	if (pipe(p) < 0)
		return -1;
	srv_pid = fork();
	if (srv_pid == 0) {
		prctl(PR_SET_PDEATHSIG, SIGKILL);
		dup2(p[1], 1);
		close(p[0]);
		close(p[1]);
		if (getenv("BENCH_SERVER_PLAIN")) /* a coord-worker from before issue 21 */
			execl(bin, bin, "--fns", fns, "--listen", "127.0.0.1:0", "--log", "error",
			      (char *)NULL);
		else
			execl(bin, bin, "--fns", fns, "--listen", "127.0.0.1:0", "--log", "error",
			      "--max-handshakes", "4096", (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	while (n < sizeof(line) - 1) {
		struct pollfd pf = { .fd = p[0], .events = POLLIN };

		if (poll(&pf, 1, 20000) <= 0 || read(p[0], line + n, 1) <= 0 || line[n] == '\n')
			break;
		n++;
	}
	line[n] = 0;
	close(p[0]);
	if (sscanf(line, "coord-worker listening on port %u", &srv_port) != 1) {
		fprintf(stderr, "bench_server: %s did not start\n", bin);
		return -1;
	}
	return 0;
}

static void srv_stop(void)
{
	if (srv_pid > 0) {
		kill(srv_pid, SIGKILL);
		waitpid(srv_pid, NULL, 0);
	}
	srv_pid = -1;
}

/* A field of the server's /proc status ("VmRSS", "VmHWM": kB; "Threads"). */
static long srv_status(const char *field)
{
	char path[64], line[256];
	size_t fl = strlen(field);
	long v = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/status", (int)srv_pid);
	f = fopen(path, "re");
	if (!f)
		return -1;
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, field, fl) && line[fl] == ':') {
			v = strtol(line + fl + 1, NULL, 10);
			break;
		}
	fclose(f);
	return v;
}

/* The server's open descriptors. */
static long srv_fds(void)
{
	char path[64];
	struct dirent *e;
	long n = 0;
	DIR *d;

	snprintf(path, sizeof(path), "/proc/%d/fd", (int)srv_pid);
	d = opendir(path);
	if (!d)
		return -1;
	while ((e = readdir(d)))
		n += e->d_name[0] != '.';
	closedir(d);
	return n;
}

/* The server's CPU time (user + system), in clock ticks. */
static long srv_cpu_ticks(void)
{
	char path[64], buf[1024], *p;
	unsigned long ut = 0, st = 0;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)srv_pid);
	f = fopen(path, "re");
	if (!f)
		return -1;
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	p = strrchr(buf, ')'); /* fields 14 and 15 after the command name */
	if (!p ||
	    sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) != 2)
		return -1;
	return (long)(ut + st);
}

/* Wait (at most 10 s) until the server holds @fds descriptors or fewer. */
static void srv_settle(long fds)
{
	uint64_t until = now_ns() + 10000000000ull;

	while (srv_fds() > fds && now_ns() < until)
		sleep_ms(10);
	sleep_ms(300); /* the server frees the memory of a burst 100 ms after it */
}

static int dial(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	a.sin_port = htons((uint16_t)srv_port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd >= 0 && connect(fd, (struct sockaddr *)&a, sizeof(a)) < 0) {
		close(fd);
		fd = -1;
	}
	return fd;
}

static void close_all(int *fds, unsigned n)
{
	for (unsigned i = 0; i < n; i++)
		if (fds[i] >= 0)
			close(fds[i]);
}

/* flood: @n peers each declaring a 16 MiB HELLO, then sending bytes. */
static void fig_flood(unsigned n, long idle_kb)
{
	static uint8_t junk[256 * 1024];
	int *fds = calloc(n, sizeof(*fds));
	uint64_t until;
	unsigned ok = 0;
	size_t sent = 0;

	if (!fds)
		return;
	for (unsigned i = 0; i < n; i++) {
		uint8_t h[COORD_WIRE_HDR] = { 0 };
		uint32_t len = 16u << 20;

		fds[i] = dial();
		if (fds[i] < 0)
			continue;
		memcpy(h, &len, 4); /* little-endian hosts only, as the wire */
		h[4] = COORD_WIRE_HELLO;
		h[8] = 1;
		if (send(fds[i], h, sizeof(h), MSG_NOSIGNAL) == (ssize_t)sizeof(h))
			ok++;
		fcntl(fds[i], F_SETFL, O_NONBLOCK);
	}
	until = now_ns() + 2000000000ull;
	for (bool more = true; more && now_ns() < until;) {
		more = false;
		for (unsigned i = 0; i < n && now_ns() < until; i++) {
			ssize_t k;

			if (fds[i] < 0)
				continue;
			k = send(fds[i], junk, sizeof(junk), MSG_NOSIGNAL);
			if (k > 0) {
				sent += (size_t)k;
				more = true;
			} else if (k < 0 && errno != EAGAIN) {
				close(fds[i]); /* the server closed it */
				fds[i] = -1;
			}
		}
	}
	sleep_ms(300);
	{
		long hwm = srv_status("VmHWM"), rss = srv_status("VmRSS");

		printf("flood: %u connections each declaring a 16 MiB HELLO (%u headers sent, "
		       "%.1f MiB of payload sent in all): server peak RSS %.1f MiB, %.1f MiB "
		       "above idle (%.1f MiB); RSS now %.1f MiB (target: peak <= 64 MiB above "
		       "idle)\n",
		       n, ok, (double)sent / (1 << 20), hwm / 1024.0, (hwm - idle_kb) / 1024.0,
		       idle_kb / 1024.0, rss / 1024.0);
	}
	close_all(fds, n);
	free(fds);
}

/* Dial @n connections and send each a coordinator's HELLO; those that
 * failed are -1.  Every step of the handshake goes to all of them before
 * the next, so thousands are in it at once. */
static void hello_all(int *fds, unsigned n)
{
	struct coord_wire_hello hello = { .magic = COORD_WIRE_MAGIC,
					  .vmin = COORD_WIRE_VERSION,
					  .vmax = COORD_WIRE_VERSION,
					  .role = COORD_ROLE_COORDINATOR };
	struct coord_wire_writer w;
	uint8_t b[128];

	coord_wire_writer_init(&w, b, sizeof(b));
	coord_wire_put_hello(&w, COORD_WIRE_HELLO, &hello);
	for (unsigned i = 0; i < n; i++) {
		fds[i] = dial();
		if (fds[i] >= 0 && send(fds[i], b, w.len, MSG_NOSIGNAL) != (ssize_t)w.len) {
			close(fds[i]);
			fds[i] = -1;
		}
	}
}

/* The first frame's type on each of @n connections (5 s each at most);
 * counts those of @type, closes the others. */
static unsigned expect_all(int *fds, unsigned n, uint16_t type, unsigned *refused)
{
	unsigned got = 0;

	for (unsigned i = 0; i < n; i++) {
		struct pollfd p = { .fd = fds[i], .events = POLLIN };
		uint8_t b[512];
		ssize_t k = -1;

		if (fds[i] < 0)
			continue;
		if (poll(&p, 1, 5000) == 1)
			k = recv(fds[i], b, sizeof(b), 0);
		if (k >= COORD_WIRE_HDR && b[4] == type) {
			got++;
			continue;
		}
		if (k >= COORD_WIRE_HDR && b[4] == COORD_WIRE_ERROR && refused)
			(*refused)++;
		close(fds[i]);
		fds[i] = -1;
	}
	return got;
}

/* AUTH (keyless: a proof of zeros), FN_TABLE and PING to each of @n; then
 * their PONGs: connections served as a coordinator's are. */
static unsigned auth_all(int *fds, unsigned n)
{
	uint8_t b[256], mac[COORD_WIRE_MAC] = { 0 };
	struct coord_wire_writer w;

	coord_wire_writer_init(&w, b, sizeof(b));
	coord_wire_put_auth(&w, mac);
	coord_wire_begin(&w, COORD_WIRE_FN_TABLE);
	coord_wire_put_fn(&w, 0, "inc");
	coord_wire_end(&w);
	coord_wire_put_ping(&w, COORD_WIRE_PING, 1000);
	for (unsigned i = 0; i < n; i++)
		if (fds[i] >= 0 && send(fds[i], b, w.len, MSG_NOSIGNAL) != (ssize_t)w.len) {
			close(fds[i]);
			fds[i] = -1;
		}
	return expect_all(fds, n, COORD_WIRE_PONG, NULL);
}

/* cycles: @cycles x @n coordinator connections opened, then closed. */
static void fig_cycles(unsigned n, unsigned cycles, long idle_fds)
{
	int *fds = calloc(n, sizeof(*fds));
	long first = 0;

	if (!fds)
		return;
	for (unsigned c = 1; c <= cycles; c++) {
		unsigned ok;
		long rss, peak, threads;

		hello_all(fds, n);
		expect_all(fds, n, COORD_WIRE_HELLO_ACK, NULL);
		ok = auth_all(fds, n);
		peak = srv_status("VmRSS");
		threads = srv_status("Threads");
		close_all(fds, n);
		srv_settle(idle_fds);
		rss = srv_status("VmRSS");
		if (c == 1)
			first = rss;
		printf("cycles: cycle %u: %u of %u connections served; server RSS %.1f MiB with "
		       "them open (%ld threads), %.1f MiB after they closed (%+.1f%% against "
		       "cycle 1)\n",
		       c, ok, n, peak / 1024.0, threads, rss / 1024.0,
		       first ? 100.0 * (double)(rss - first) / (double)first : 0.0);
	}
	printf("cycles: growth after cycle 1: %+.1f%% (target <= 5%%)\n",
	       first ? 100.0 * (double)(srv_status("VmRSS") - first) / (double)first : 0.0);
	free(fds);
}

/* pending: @n connections in the handshake at once; the server's threads. */
static void fig_pending(unsigned n, long idle_fds)
{
	int *fds = calloc(n, sizeof(*fds));
	long threads0 = srv_status("Threads"), most, t;
	unsigned acked, refused = 0;

	if (!fds)
		return;
	hello_all(fds, n);
	most = srv_status("Threads");
	acked = expect_all(fds, n, COORD_WIRE_HELLO_ACK, &refused);
	t = srv_status("Threads");
	most = t > most ? t : most;
	printf("pending: %u connections in the handshake at once (%u answered, %u refused): "
	       "server threads %ld before, at most %ld seen during (target: a fixed number)\n",
	       n, acked, refused, threads0, most);
	close_all(fds, n);
	free(fds);
	srv_settle(idle_fds);
}

/* emfile: the server out of descriptors; its CPU while it is. */
static void fig_emfile(unsigned n)
{
	struct rlimit rl = { .rlim_cur = 256, .rlim_max = 256 };
	int *fds = calloc(n, sizeof(*fds));
	long t0, t1, hz = sysconf(_SC_CLK_TCK);

	if (!fds)
		return;
	if (prlimit(srv_pid, RLIMIT_NOFILE, &rl, NULL) < 0) {
		printf("emfile: cannot lower the server's limit (prlimit: %s)\n", strerror(errno));
		free(fds);
		return;
	}
	for (unsigned i = 0; i < n; i++)
		fds[i] = dial(); /* those beyond 256 wait in the listen backlog */
	sleep_ms(200);
	t0 = srv_cpu_ticks();
	sleep_ms(1000);
	t1 = srv_cpu_ticks();
	printf("emfile: server limited to 256 descriptors, %u connections made: its CPU over "
	       "1 s while out of descriptors: %.0f%% of one CPU\n",
	       n, 100.0 * (double)(t1 - t0) / (double)hz);
	close_all(fds, n);
	free(fds);
}

int main(int argc, char **argv)
{
	unsigned long conns = 2000, cycles = 5, flood = 1000;
	const struct bench_opt opts[] = {
		{ "conns", "connections per cycle and handshakes at once (2000)", 1, 16384, &conns,
		  false },
		{ "cycles", "connection cycles (5)", 1, 100, &cycles, false },
		{ "flood", "peers declaring 16 MiB (1000)", 1, 16384, &flood, false },
	};
	struct bench_args a;
	struct rlimit rl;
	long idle_kb, idle_fds;

	bench_parse_args_ex(argc, argv, &a, opts, sizeof(opts) / sizeof(opts[0]));
	if (a.quick) {
		conns = conns == 2000 ? 100 : conns;
		cycles = cycles == 5 ? 2 : cycles;
		flood = flood == 1000 ? 100 : flood;
	}
	signal(SIGPIPE, SIG_IGN);
	unsetenv("COORD_CLUSTER_KEY"); /* the server runs keyless: proofs are zeros */
	unsetenv("COORD_CLUSTER_KEY_FILE");
	setvbuf(stdout, NULL, _IOLBF, 0);
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
		rl.rlim_cur = rl.rlim_max;
		setrlimit(RLIMIT_NOFILE, &rl);
	}
	if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < conns + flood + 64)
		printf("# this process may open only %lu descriptors: fewer connections will be "
		       "made than asked\n",
		       (unsigned long)rl.rlim_cur);
	if (srv_start() < 0)
		return 1;
	sleep_ms(300);
	idle_kb = srv_status("VmRSS");
	idle_fds = srv_fds();
	printf("# server pid %d, idle: RSS %.1f MiB, %ld threads, %ld descriptors\n", (int)srv_pid,
	       idle_kb / 1024.0, srv_status("Threads"), idle_fds);
	fig_flood((unsigned)flood, idle_kb);
	srv_settle(idle_fds);
	fig_cycles((unsigned)conns, (unsigned)cycles, idle_fds);
	fig_pending((unsigned)conns, idle_fds);
	fig_emfile(a.quick ? 300 : 400);
	srv_stop();
	return 0;
}
