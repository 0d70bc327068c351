// SPDX-License-Identifier: MIT
/*
 * bench/tcp_echo.c - bench_tcp's baseline: raw echo servers (forked, a
 * thread per connection doing blocking recv/send) and the client that keeps
 * F requests in flight over C connections (bench_tcp.c's header says how
 * both work and why they are the strongest simple form), and the CPU time
 * helpers.  Every echo reply carries its request's token, checked in order.
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

#define ECHO_SRV_BUF (256u * 1024u)
#define ECHO_IOV_REQS 512 /* requests per writev(): 2 iovecs each, IOV_MAX 1024 */

/* The argument every closure and every echo request carries. */
uint8_t arg_buf[MAX_ARG + 16 * 1024];
size_t arg_bytes;

/* One REQ frame of one call with @arg bytes; one RES frame, empty result. */
size_t req_frame_bytes(size_t arg)
{
	struct coord_wire_req q = { .len = (uint32_t)arg };

	return COORD_WIRE_HDR + coord_wire_req_size(&q);
}

size_t res_frame_bytes(void)
{
	return COORD_WIRE_HDR + COORD_WIRE_RES_FIXED;
}

static void nodelay(int fd)
{
	int one = 1;

	setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
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

uint64_t cpu_ns_of(int who)
{
	struct rusage ru;

	getrusage(who, &ru);
	return ((uint64_t)ru.ru_utime.tv_sec + (uint64_t)ru.ru_stime.tv_sec) * 1000000000ull +
	       ((uint64_t)ru.ru_utime.tv_usec + (uint64_t)ru.ru_stime.tv_usec) * 1000ull;
}

uint64_t cpu_ns(void)
{
	return cpu_ns_of(RUSAGE_SELF);
}

/* CPU time (user + sys) so far of processes @pids[0, @n), from
 * /proc/PID/stat (clock ticks): the server side's cost, which RUSAGE_SELF
 * does not see. */
uint64_t procs_cpu_ns(const pid_t *pids, unsigned n)
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

	if (bench_recv_all(fd, &h, sizeof(h)) < 0 || h.req < 8 || h.res < 8 ||
	    h.req > sizeof(arg_buf) || h.res > 4096)
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
		if (nrep && bench_send_all(fd, out, nrep * h.res) < 0)
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

int echo_start(void)
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

void echo_stop(void)
{
	for (unsigned i = 0; i < necho; i++)
		bench_reap(echo_pids[i]);
	necho = 0;
}

/* ---- the baseline: raw echo client ------------------------------------------------------ */

/* @nconns connections, round robin over echo servers [0, @np), for
 * @req-byte requests and @res-byte replies. */
int echo_open(struct echo *e, unsigned nconns, unsigned np, size_t req, size_t res)
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
		if (bench_send_all(c->fd, &h, sizeof(h)) < 0)
			return -1;
	}
	return 0;
}

void echo_close(struct echo *e)
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

/*
 * Keep @f requests in flight over @e's connections (spread evenly; a
 * connection with none stays idle) until @dur_ns has passed or @nmax
 * replies came, then drain.  @lockstep: a connection sends its next batch
 * only when all its replies are in.  @spin: poll with MSG_DONTWAIT instead
 * of blocking.  With @lat (f == 1 only) every round trip's ns is a sample.
 */
void echo_run(struct echo *e, unsigned f, bool lockstep, bool spin, uint64_t dur_ns, uint64_t nmax,
	      struct bench_samples *lat, struct run_out *o)
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
