// SPDX-License-Identifier: MIT
/*
 * tests/rdma/verbs_smoke.c - the soft-RoCE rig's proof that verbs work: one
 * RC queue pair set up by rdma_cm between a server thread and a client (the
 * main thread) in one process, over the address of an RDMA-capable netdev.
 *
 *   1. the client SENDs 4 KiB pattern A; the server's posted RECV gets it;
 *   2. the server SENDs 4 KiB pattern C back;
 *   3. the client RDMA READs the server's 4 KiB pattern B, using the address
 *      and rkey the server handed out in rdma_accept()'s private data, then
 *      repeats the READ -n times and prints the mean round trip;
 *   4. the client disconnects; both sides see RDMA_CM_EVENT_DISCONNECTED.
 * Every byte received or read is checked.
 *
 * Usage: verbs_smoke [-a ADDR] [-d DEVICE] [-n READS] [-t WATCHDOG_S]
 *   -a  IP address to listen on and connect to; by default the first IPv4
 *       address (not loopback: rdma_cm over rxe on lo fails) that rdma_cm
 *       binds to an RDMA device (-d narrows it to one device)
 * Exit: 0 passed; 1 failed; 77 no RDMA device here (skip, as liburing's
 * T_EXIT_SKIP).  Every wait has a deadline and alarm() is a watchdog, so a
 * connect that never completes cannot hang the rig.
 */
#include <arpa/inet.h>
#include <endian.h>
#include <errno.h>
#include <ifaddrs.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#define SKIP 77
#define MSG_LEN 4096
/* Registered buffer: [0] receive, [1] send, [2] RDMA READ source/target. */
#define BUF_RECV 0
#define BUF_SEND MSG_LEN
#define BUF_READ (2 * MSG_LEN)
#define BUF_LEN (3 * MSG_LEN)
#define WAIT_MS 10000

/* What the server hands out at accept: where to RDMA READ from. */
struct smoke_priv {
	uint64_t addr; /* big-endian */
	uint32_t rkey; /* big-endian */
	uint32_t len;  /* big-endian */
};

struct side {
	const char *name;
	struct rdma_event_channel *ch;
	struct rdma_cm_id *id; /* the connection's id */
	struct ibv_pd *pd;
	struct ibv_cq *cq;
	struct ibv_mr *mr;
	uint8_t *buf;
};

struct server {
	struct side s;
	struct rdma_cm_id *listen;
	int ret;
};

static const char *dev_want;

static void watchdog(int sig)
{
	static const char msg[] = "verbs_smoke: FAIL: watchdog fired, no progress\n";
	ssize_t r = write(2, msg, sizeof(msg) - 1);

	(void)r;
	_exit(1);
}

static double now_s(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void fill(uint8_t *p, size_t len, uint8_t seed)
{
	for (size_t i = 0; i < len; i++)
		p[i] = (uint8_t)(seed + i * 7 + (i >> 8));
}

/* Return: 0 if @p holds fill(@seed)'s bytes, else -EBADMSG (and says where). */
static int check(const char *what, const uint8_t *p, size_t len, uint8_t seed)
{
	for (size_t i = 0; i < len; i++) {
		uint8_t want = (uint8_t)(seed + i * 7 + (i >> 8));

		if (p[i] != want) {
			fprintf(stderr, "verbs_smoke: FAIL: %s: byte %zu is 0x%02x, want 0x%02x\n",
				what, i, p[i], want);
			return -EBADMSG;
		}
	}
	printf("verbs_smoke: ok: %s, %zu bytes checked\n", what, len);
	return 0;
}

/*
 * Wait at most WAIT_MS for the next event on @s->ch; it must be @want.
 * @id: if not NULL, gets the event's id (the new id of a CONNECT_REQUEST).
 * @priv: if not NULL, gets @priv_len bytes of the event's private data.
 * Return: 0; -ETIMEDOUT; -EPROTO on another event (logged); -errno.
 */
static int cm_wait(struct side *s, enum rdma_cm_event_type want, struct rdma_cm_id **id, void *priv,
		   size_t priv_len)
{
	struct pollfd pfd = { .fd = s->ch->fd, .events = POLLIN };
	struct rdma_cm_event *ev;
	int ret, n;

	n = poll(&pfd, 1, WAIT_MS);
	if (n < 0)
		return -errno;
	if (n == 0) {
		fprintf(stderr, "verbs_smoke: %s: no %s within %d ms\n", s->name,
			rdma_event_str(want), WAIT_MS);
		return -ETIMEDOUT;
	}
	if (rdma_get_cm_event(s->ch, &ev))
		return -errno;
	ret = 0;
	if (ev->event != want) {
		fprintf(stderr, "verbs_smoke: %s: got %s (status %d), want %s\n", s->name,
			rdma_event_str(ev->event), ev->status, rdma_event_str(want));
		ret = -EPROTO;
	} else {
		if (id)
			*id = ev->id;
		if (priv) {
			if (ev->param.conn.private_data_len < priv_len) {
				fprintf(stderr,
					"verbs_smoke: %s: %u bytes of private data, want %zu\n",
					s->name, ev->param.conn.private_data_len, priv_len);
				ret = -EPROTO;
			} else {
				memcpy(priv, ev->param.conn.private_data, priv_len);
			}
		}
	}
	rdma_ack_cm_event(ev);
	return ret;
}

/*
 * Busy-poll @s->cq, at most WAIT_MS, until one successful completion of each
 * of @ops[0..@n) has arrived, in any order: with a SEND and a RECV both
 * posted, the peer's answer can complete the RECV before the SEND's own
 * completion is polled.
 * @recv_len: if not NULL, gets the byte count of the RECV completion.
 * Return: 0; -ETIMEDOUT; -EIO on an error or unexpected completion (logged).
 */
static int cq_wait(struct side *s, const enum ibv_wc_opcode *ops, int n, uint32_t *recv_len)
{
	double end = now_s() + WAIT_MS / 1000.0;
	bool seen[4] = { false };
	unsigned int spins = 0;
	struct ibv_wc wc;
	int got = 0, r, i;

	if (n > 4)
		return -EINVAL;
	while (got < n) {
		r = ibv_poll_cq(s->cq, 1, &wc);
		if (r < 0) {
			fprintf(stderr, "verbs_smoke: %s: ibv_poll_cq: %d\n", s->name, r);
			return -EIO;
		}
		if (r == 0) {
			/* Two threads share two vCPUs in the rig: let the peer run. */
			if ((++spins & 63) == 0) {
				if (now_s() > end) {
					fprintf(stderr,
						"verbs_smoke: %s: %d of %d completions within %d "
						"ms\n",
						s->name, got, n, WAIT_MS);
					return -ETIMEDOUT;
				}
				sched_yield();
			}
			continue;
		}
		for (i = 0; i < n; i++)
			if (!seen[i] && ops[i] == wc.opcode)
				break;
		if (wc.status != IBV_WC_SUCCESS || i == n) {
			fprintf(stderr, "verbs_smoke: %s: unexpected completion: %s, opcode %d\n",
				s->name, ibv_wc_status_str(wc.status), wc.opcode);
			return -EIO;
		}
		seen[i] = true;
		got++;
		if (wc.opcode == IBV_WC_RECV && recv_len)
			*recv_len = wc.byte_len;
	}
	return 0;
}

#define CQ_WAIT(s, len, ...)                                                                       \
	cq_wait(s, (const enum ibv_wc_opcode[]){ __VA_ARGS__ },                                    \
		sizeof((const enum ibv_wc_opcode[]){ __VA_ARGS__ }) / sizeof(enum ibv_wc_opcode),  \
		len)

/* PD, CQ, registered buffer and RC QP on @s->id. Return: 0 or -errno. */
static int side_setup(struct side *s)
{
	struct ibv_qp_init_attr qa = {
		.qp_type = IBV_QPT_RC, /* 0 is not a valid type: rdma_create_qp gives EINVAL */
		.cap = { .max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1 },
		.sq_sig_all = 1,
	};

	s->pd = ibv_alloc_pd(s->id->verbs);
	if (!s->pd)
		return -errno;
	s->cq = ibv_create_cq(s->id->verbs, 16, NULL, NULL, 0);
	if (!s->cq)
		return -errno;
	if (posix_memalign((void **)&s->buf, 4096, BUF_LEN))
		return -ENOMEM;
	memset(s->buf, 0, BUF_LEN);
	s->mr = ibv_reg_mr(s->pd, s->buf, BUF_LEN, IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_READ);
	if (!s->mr)
		return -errno;
	qa.send_cq = s->cq;
	qa.recv_cq = s->cq;
	if (rdma_create_qp(s->id, s->pd, &qa))
		return -errno;
	return 0;
}

static void side_destroy(struct side *s)
{
	if (s->id && s->id->qp)
		rdma_destroy_qp(s->id);
	if (s->mr)
		ibv_dereg_mr(s->mr);
	if (s->cq)
		ibv_destroy_cq(s->cq);
	if (s->pd)
		ibv_dealloc_pd(s->pd);
	free(s->buf);
	if (s->id)
		rdma_destroy_id(s->id);
}

static int post_recv(struct side *s)
{
	struct ibv_sge sge = { .addr = (uintptr_t)(s->buf + BUF_RECV),
			       .length = MSG_LEN,
			       .lkey = s->mr->lkey };
	struct ibv_recv_wr wr = { .wr_id = 1, .sg_list = &sge, .num_sge = 1 }, *bad;

	return -ibv_post_recv(s->id->qp, &wr, &bad);
}

/* One signalled work request: SEND from the send buffer or RDMA READ into the read buffer. */
static int post_one(struct side *s, enum ibv_wr_opcode op, uint64_t raddr, uint32_t rkey)
{
	struct ibv_sge sge = { .length = MSG_LEN, .lkey = s->mr->lkey };
	struct ibv_send_wr wr = { .wr_id = 2, .sg_list = &sge, .num_sge = 1, .opcode = op }, *bad;

	sge.addr = (uintptr_t)(s->buf + (op == IBV_WR_SEND ? BUF_SEND : BUF_READ));
	wr.wr.rdma.remote_addr = raddr;
	wr.wr.rdma.rkey = rkey;
	return -ibv_post_send(s->id->qp, &wr, &bad);
}

static void *server_main(void *arg)
{
	struct server *sv = arg;
	struct side *s = &sv->s;
	struct smoke_priv priv;
	struct rdma_conn_param cp = { .responder_resources = 1, .initiator_depth = 1 };
	uint32_t len = 0;
	int ret;

	ret = cm_wait(s, RDMA_CM_EVENT_CONNECT_REQUEST, &s->id, NULL, 0);
	if (ret)
		goto out;
	ret = side_setup(s);
	if (ret) {
		fprintf(stderr, "verbs_smoke: server: setup: %s\n", strerror(-ret));
		/* Refuse, so the client hears REJECTED instead of waiting. */
		rdma_reject(s->id, NULL, 0);
		goto out;
	}
	fill(s->buf + BUF_READ, MSG_LEN, 'B');
	fill(s->buf + BUF_SEND, MSG_LEN, 'C');
	ret = post_recv(s);
	if (ret)
		goto out;
	priv.addr = htobe64((uintptr_t)(s->buf + BUF_READ));
	priv.rkey = htobe32(s->mr->rkey);
	priv.len = htobe32(MSG_LEN);
	cp.private_data = &priv;
	cp.private_data_len = sizeof(priv);
	if (rdma_accept(s->id, &cp)) {
		ret = -errno;
		goto out;
	}
	ret = cm_wait(s, RDMA_CM_EVENT_ESTABLISHED, NULL, NULL, 0);
	if (ret)
		goto out;
	ret = CQ_WAIT(s, &len, IBV_WC_RECV);
	if (ret)
		goto out;
	if (len != MSG_LEN) {
		fprintf(stderr, "verbs_smoke: server: received %u bytes, want %d\n", len, MSG_LEN);
		ret = -EBADMSG;
		goto out;
	}
	ret = check("server: SEND/RECV client->server", s->buf + BUF_RECV, MSG_LEN, 'A');
	if (ret)
		goto out;
	ret = post_one(s, IBV_WR_SEND, 0, 0);
	if (!ret)
		ret = CQ_WAIT(s, NULL, IBV_WC_SEND);
	if (ret)
		goto out;
	/* The client READs our buffer without us, then disconnects. */
	ret = cm_wait(s, RDMA_CM_EVENT_DISCONNECTED, NULL, NULL, 0);
	/*
	 * Answer the DREQ: until this side disconnects too, the client's
	 * rdma_disconnect() waits for the CM's DREQ timeout (over 10 s on rxe)
	 * before it sees its own DISCONNECTED.
	 */
	if (!ret && rdma_disconnect(s->id))
		ret = -errno;
out:
	sv->ret = ret;
	return NULL;
}

/* Is @sa bound by rdma_cm to an RDMA device (named dev_want, if set)? */
static bool rdma_addr_ok(struct rdma_event_channel *ch, struct sockaddr *sa)
{
	struct rdma_cm_id *id;
	bool ok = false;

	if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
		return false;
	if (!rdma_bind_addr(id, sa) && id->verbs)
		ok = !dev_want || !strcmp(ibv_get_device_name(id->verbs->device), dev_want);
	rdma_destroy_id(id);
	return ok;
}

/* Pick the first non-loopback IPv4 address that rdma_cm binds to an RDMA device. */
static int find_addr(struct rdma_event_channel *ch, struct sockaddr_storage *out)
{
	struct ifaddrs *ifa, *i;
	int ret = -ENODEV;

	if (getifaddrs(&ifa))
		return -errno;
	for (i = ifa; i; i = i->ifa_next) {
		struct sockaddr_in sin;

		if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET)
			continue;
		memcpy(&sin, i->ifa_addr, sizeof(sin));
		if (ntohl(sin.sin_addr.s_addr) >> 24 == 127)
			continue;
		if (rdma_addr_ok(ch, (struct sockaddr *)&sin)) {
			memset(out, 0, sizeof(*out));
			memcpy(out, &sin, sizeof(sin));
			ret = 0;
			break;
		}
	}
	freeifaddrs(ifa);
	return ret;
}

static int parse_addr(const char *s, struct sockaddr_storage *out)
{
	struct addrinfo hints = { .ai_flags = AI_NUMERICHOST }, *ai;

	if (getaddrinfo(s, NULL, &hints, &ai))
		return -EINVAL;
	memset(out, 0, sizeof(*out));
	memcpy(out, ai->ai_addr, ai->ai_addrlen);
	freeaddrinfo(ai);
	return 0;
}

/* The client: everything after the server is listening on @dst. */
static int client_run(struct side *c, struct sockaddr *dst, int nreads)
{
	struct rdma_conn_param cp = { .responder_resources = 1,
				      .initiator_depth = 1,
				      .retry_count = 7,
				      .rnr_retry_count = 7 };
	struct smoke_priv priv;
	uint32_t len = 0;
	uint64_t raddr;
	uint32_t rkey;
	double t0, t1;
	int ret;

	if (rdma_create_id(c->ch, &c->id, NULL, RDMA_PS_TCP))
		return -errno;
	if (rdma_resolve_addr(c->id, NULL, dst, WAIT_MS / 2))
		return -errno;
	ret = cm_wait(c, RDMA_CM_EVENT_ADDR_RESOLVED, NULL, NULL, 0);
	if (ret)
		return ret;
	if (rdma_resolve_route(c->id, WAIT_MS / 2))
		return -errno;
	ret = cm_wait(c, RDMA_CM_EVENT_ROUTE_RESOLVED, NULL, NULL, 0);
	if (ret)
		return ret;
	ret = side_setup(c);
	if (ret)
		return ret;
	printf("verbs_smoke: device %s, RC QP %u\n", ibv_get_device_name(c->id->verbs->device),
	       c->id->qp->qp_num);
	fill(c->buf + BUF_SEND, MSG_LEN, 'A');
	ret = post_recv(c);
	if (ret)
		return ret;
	if (rdma_connect(c->id, &cp))
		return -errno;
	ret = cm_wait(c, RDMA_CM_EVENT_ESTABLISHED, NULL, &priv, sizeof(priv));
	if (ret)
		return ret;
	raddr = be64toh(priv.addr);
	rkey = be32toh(priv.rkey);
	if (be32toh(priv.len) != MSG_LEN)
		return -EPROTO;
	printf("verbs_smoke: ok: rdma_cm connected\n");

	ret = post_one(c, IBV_WR_SEND, 0, 0);
	if (!ret)
		ret = CQ_WAIT(c, &len, IBV_WC_SEND, IBV_WC_RECV);
	if (ret)
		return ret;
	if (len != MSG_LEN)
		return -EBADMSG;
	ret = check("client: SEND/RECV server->client", c->buf + BUF_RECV, MSG_LEN, 'C');
	if (ret)
		return ret;

	ret = post_one(c, IBV_WR_RDMA_READ, raddr, rkey);
	if (!ret)
		ret = CQ_WAIT(c, NULL, IBV_WC_RDMA_READ);
	if (ret)
		return ret;
	ret = check("client: RDMA READ of the server's buffer", c->buf + BUF_READ, MSG_LEN, 'B');
	if (ret)
		return ret;

	t0 = now_s();
	for (int i = 0; i < nreads; i++) {
		ret = post_one(c, IBV_WR_RDMA_READ, raddr, rkey);
		if (!ret)
			ret = CQ_WAIT(c, NULL, IBV_WC_RDMA_READ);
		if (ret)
			return ret;
	}
	t1 = now_s();
	if (nreads > 0) {
		ret = check("client: last of the repeated READs", c->buf + BUF_READ, MSG_LEN, 'B');
		if (ret)
			return ret;
		printf("verbs_smoke: %d RDMA READs of %d B: mean %.1f us round trip\n", nreads,
		       MSG_LEN, (t1 - t0) * 1e6 / nreads);
	}

	if (rdma_disconnect(c->id))
		return -errno;
	return cm_wait(c, RDMA_CM_EVENT_DISCONNECTED, NULL, NULL, 0);
}

static void usage(void)
{
	fprintf(stderr, "usage: verbs_smoke [-a ADDR] [-d DEVICE] [-n READS] [-t WATCHDOG_S]\n");
	exit(2);
}

/* Whether this host has an RDMA device; says how to get one if not. */
static bool have_device(void)
{
	struct ibv_device **devs;
	int ndev;

	devs = ibv_get_device_list(&ndev);
	if (!devs || ndev == 0) {
		printf("verbs_smoke: SKIP: no RDMA device (load rdma_rxe and run `rdma link add "
		       "rxe0 type rxe netdev IFACE`, or use tests/rdma/rig.sh)\n");
		if (devs)
			ibv_free_device_list(devs);
		return false;
	}
	ibv_free_device_list(devs);
	return true;
}

int main(int argc, char **argv)
{
	struct server sv = { .s.name = "server" };
	struct side c = { .name = "client" };
	struct sockaddr_storage addr;
	const char *addr_arg = NULL;
	char host[INET6_ADDRSTRLEN];
	int opt, nreads = 1000, secs = 60, ret;
	pthread_t th;

	while ((opt = getopt(argc, argv, "a:d:n:t:")) != -1) {
		switch (opt) {
		case 'a':
			addr_arg = optarg;
			break;
		case 'd':
			dev_want = optarg;
			break;
		case 'n':
			nreads = atoi(optarg);
			break;
		case 't':
			secs = atoi(optarg);
			break;
		default:
			usage();
		}
	}
	signal(SIGALRM, watchdog);
	alarm(secs > 0 ? secs : 60);
	setvbuf(stdout, NULL, _IOLBF, 0);

	if (!have_device())
		return SKIP;

	sv.s.ch = rdma_create_event_channel();
	c.ch = rdma_create_event_channel();
	if (!sv.s.ch || !c.ch) {
		printf("verbs_smoke: SKIP: no rdma_cm (/dev/infiniband/rdma_cm: load rdma_ucm): "
		       "%s\n",
		       strerror(errno));
		return SKIP;
	}
	if (addr_arg) {
		ret = parse_addr(addr_arg, &addr);
		if (ret) {
			fprintf(stderr, "verbs_smoke: bad address %s\n", addr_arg);
			return 2;
		}
	} else if (find_addr(sv.s.ch, &addr)) {
		printf("verbs_smoke: SKIP: no IPv4 address on an RDMA device%s%s (give one with "
		       "-a)\n",
		       dev_want ? " named " : "", dev_want ? dev_want : "");
		return SKIP;
	}

	/* Listen on an ephemeral port before the server thread starts. */
	if (rdma_create_id(sv.s.ch, &sv.listen, NULL, RDMA_PS_TCP) ||
	    rdma_bind_addr(sv.listen, (struct sockaddr *)&addr) || rdma_listen(sv.listen, 1)) {
		fprintf(stderr, "verbs_smoke: FAIL: listen: %s\n", strerror(errno));
		return 1;
	}
	if (addr.ss_family == AF_INET)
		((struct sockaddr_in *)&addr)->sin_port = rdma_get_src_port(sv.listen);
	else
		((struct sockaddr_in6 *)&addr)->sin6_port = rdma_get_src_port(sv.listen);
	getnameinfo((struct sockaddr *)&addr, sizeof(addr), host, sizeof(host), NULL, 0,
		    NI_NUMERICHOST);
	printf("verbs_smoke: server listening on %s port %u (device %s)\n", host,
	       ntohs(rdma_get_src_port(sv.listen)),
	       sv.listen->verbs ? ibv_get_device_name(sv.listen->verbs->device) : "?");

	ret = pthread_create(&th, NULL, server_main, &sv);
	if (ret) {
		fprintf(stderr, "verbs_smoke: FAIL: pthread_create: %s\n", strerror(ret));
		return 1;
	}
	ret = client_run(&c, (struct sockaddr *)&addr, nreads);
	if (ret) {
		fprintf(stderr, "verbs_smoke: FAIL: client: %s\n", strerror(-ret));
		/* Best effort, so the server stops waiting for us. */
		if (c.id)
			rdma_disconnect(c.id);
	}
	pthread_join(th, NULL);
	if (sv.ret)
		fprintf(stderr, "verbs_smoke: FAIL: server: %s\n", strerror(-sv.ret));

	side_destroy(&c);
	side_destroy(&sv.s);
	rdma_destroy_id(sv.listen);
	rdma_destroy_event_channel(c.ch);
	rdma_destroy_event_channel(sv.s.ch);
	if (ret || sv.ret)
		return 1;
	printf("verbs_smoke: PASS\n");
	return 0;
}
