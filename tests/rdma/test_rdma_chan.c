// SPDX-License-Identifier: MIT
/*
 * tests/rdma/test_rdma_chan.c - the rdma frame channel (transport/rdma_chan.h)
 * over a real RDMA device: in the soft-RoCE rig (tests/rdma/rig.sh), on a
 * host with rdma_rxe, or with an RDMA NIC.  Both ends live in this process:
 * a thread accepts, the main thread connects, on the first IPv4 address that
 * rdma_cm binds to an RDMA device (or -a ADDR / $RDMA_TEST_ADDR).
 *
 * Without a device it checks that connecting fails at once with a clear
 * error, then exits 77 (skip).  alarm() is a watchdog over the whole run;
 * every wait in here has a deadline and every loop a bound.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <unistd.h>

#include <infiniband/verbs.h>
#include <rdma/rdma_cma.h>

#include "transport/rdma/rdma_chan.h"
#include "raw_peer.h"

#define SKIP 77
#define WAIT_MS 10000
#define BUF 1024 /* small buffers: frames span many of them */
#define NRECV 8

static char addr[64]; /* "10.0.2.15" */

static void watchdog(int sig)
{
	static const char msg[] = "test_rdma_chan: FAIL: watchdog fired, no progress\n";

	(void)!write(2, msg, sizeof(msg) - 1);
	_exit(1);
}

/* ---- helpers ---------------------------------------------------------------------- */

/* Frame @i of @len payload bytes: type RES, count 0, payload seq + pattern. */
static size_t frame_make(uint8_t *out, uint32_t len, uint64_t seq)
{
	struct coord_wire_writer w;

	coord_wire_writer_init(&w, out, COORD_WIRE_HDR + (size_t)len);
	assert_int_equal(coord_wire_begin(&w, COORD_WIRE_RES), 0);
	for (uint32_t i = 0; i < len; i++)
		out[COORD_WIRE_HDR + i] = (uint8_t)(seq * 31 + i * 7 + (i >> 9));
	if (len >= 8)
		memcpy(out + COORD_WIRE_HDR, &seq, 8);
	w.len += len;
	coord_wire_end(&w);
	return w.len;
}

/* 0 if @p (@len bytes) is frame_make(@seq)'s payload. */
static int frame_check(const uint8_t *p, uint32_t len, uint64_t seq)
{
	uint64_t s;

	if (len >= 8) {
		memcpy(&s, p, 8);
		if (s != seq) {
			fprintf(stderr, "frame %llu: got seq %llu\n", (unsigned long long)seq,
				(unsigned long long)s);
			return -1;
		}
	}
	for (uint32_t i = len >= 8 ? 8 : 0; i < len; i++)
		if (p[i] != (uint8_t)(seq * 31 + i * 7 + (i >> 9))) {
			fprintf(stderr, "frame %llu: byte %u differs\n", (unsigned long long)seq,
				i);
			return -1;
		}
	return 0;
}

static const struct coord_rdma_opts small_opts = {
	.buf = BUF, .nrecv = NRECV, .nsend = NRECV, .max_frame = 1u << 20
};

struct acceptor {
	struct coord_rdma_listener *l;
	struct coord_rdma_chan *ch;
	struct coord_error err;
	int ret;
};

static void *accept_main(void *arg)
{
	struct acceptor *a = arg;

	a->ret = coord_rdma_accept(a->l, WAIT_MS, &a->ch, &a->err);
	return NULL;
}

/* A connected pair: *@s accepted with @so, *@c connected with @co. */
static void pair_open(const struct coord_rdma_opts *co, const struct coord_rdma_opts *so,
		      struct coord_rdma_chan **c, struct coord_rdma_chan **s)
{
	struct acceptor a = { 0 };
	struct coord_error err = { 0 };
	char hp[96];
	unsigned port;
	pthread_t th;
	int r;

	snprintf(hp, sizeof(hp), "%s:0", addr);
	r = coord_rdma_listen(hp, so, &a.l, &port, &err);
	if (r)
		fprintf(stderr, "listen: %s\n", err.msg);
	assert_int_equal(r, 0);
	assert_int_equal(pthread_create(&th, NULL, accept_main, &a), 0);
	snprintf(hp, sizeof(hp), "%s:%u", addr, port);
	r = coord_rdma_connect(hp, co, WAIT_MS, c, &err);
	if (r)
		fprintf(stderr, "connect: %s\n", err.msg);
	pthread_join(th, NULL);
	if (a.ret)
		fprintf(stderr, "accept: %s\n", a.err.msg);
	coord_rdma_listener_destroy(a.l);
	assert_int_equal(r, 0);
	assert_int_equal(a.ret, 0);
	*s = a.ch;
}

/* A thread running fn(ch, arg) on one end while the main thread drives the other. */
struct peer {
	struct coord_rdma_chan *ch;
	int (*fn)(struct peer *p);
	const void *arg;
	uint64_t n;
	int ret;
	pthread_t th;
};

static void *peer_main(void *arg)
{
	struct peer *p = arg;

	p->ret = p->fn(p);
	return NULL;
}

static void peer_start(struct peer *p)
{
	assert_int_equal(pthread_create(&p->th, NULL, peer_main, p), 0);
}

static int peer_join(struct peer *p)
{
	pthread_join(p->th, NULL);
	return p->ret;
}

/* ---- frames of every size class, in order ------------------------------------------ */

static const uint32_t sizes[] = { 0,
				  1,
				  7,
				  8,
				  BUF - 17,
				  BUF - 16,
				  BUF - 15,
				  BUF,
				  BUF + 1,
				  2 * BUF - 16,
				  3 * BUF + 7,
				  NRECV *BUF,
				  10 * BUF + 3,
				  100 * 1000 };

static int send_sizes(struct peer *p)
{
	uint8_t *f = malloc(COORD_WIRE_HDR + 100 * 1000 + 64);
	int r = 0;

	for (unsigned rep = 0; rep < 3 && !r; rep++)
		for (size_t i = 0; i < ARRAY_SIZE(sizes) && !r; i++)
			r = coord_rdma_chan_send(p->ch, f, frame_make(f, sizes[i], i), WAIT_MS);
	free(f);
	return r;
}

static void test_rdma_chan_sizes(void **state)
{
	struct coord_rdma_chan *c, *s;
	struct peer p = { .fn = send_sizes };
	struct coord_wire_hdr h;
	const uint8_t *pl;

	pair_open(&small_opts, &small_opts, &c, &s);
	p.ch = c;
	peer_start(&p);
	for (unsigned rep = 0; rep < 3; rep++)
		for (size_t i = 0; i < ARRAY_SIZE(sizes); i++) {
			assert_int_equal(coord_rdma_chan_read(s, WAIT_MS, WAIT_MS, &h, &pl), 0);
			assert_int_equal(h.type, COORD_WIRE_RES);
			assert_int_equal(h.len, sizes[i]);
			assert_int_equal(frame_check(pl, h.len, i), 0);
		}
	assert_int_equal(peer_join(&p), 0);
	coord_rdma_chan_destroy(c);
	coord_rdma_chan_destroy(s);
}

/* Many small frames in one send (one chain), and frames that straddle buffers. */
static void test_rdma_chan_batched(void **state)
{
	struct coord_rdma_chan *c, *s;
	static uint8_t b[64 * 1024];
	struct coord_wire_hdr h;
	const uint8_t *pl;
	size_t len = 0;
	uint64_t n = 0;

	pair_open(&small_opts, &small_opts, &c, &s);
	while (len + COORD_WIRE_HDR + 40 < 4 * BUF) /* within the credits: no wait */
		len += frame_make(b + len, (uint32_t)(n * 13 % 40), n), n++;
	assert_int_equal(coord_rdma_chan_send(c, b, len, WAIT_MS), 0);
	for (uint64_t i = 0; i < n; i++) {
		assert_int_equal(coord_rdma_chan_read(s, WAIT_MS, WAIT_MS, &h, &pl), 0);
		assert_int_equal(h.len, i * 13 % 40);
		assert_int_equal(frame_check(pl, h.len, i), 0);
	}
	/* Nothing more: an idle read times out. */
	assert_int_equal(coord_rdma_chan_read(s, 50, 50, &h, &pl), -ETIMEDOUT);
	coord_rdma_chan_destroy(c);
	coord_rdma_chan_destroy(s);
}

/* ---- credit flow: a flooding sender, a slow receiver --------------------------------- */

#define FLOOD 10000

static int flood(struct peer *p)
{
	uint8_t f[COORD_WIRE_HDR + 3 * BUF];
	int r = 0;

	for (uint64_t i = 0; i < FLOOD && !r; i++)
		r = coord_rdma_chan_send(p->ch, f, frame_make(f, (uint32_t)(i * 97 % (3 * BUF)), i),
					 WAIT_MS);
	return r;
}

static void test_rdma_chan_credit_flood(void **state)
{
	struct coord_rdma_opts o = small_opts;
	struct coord_rdma_chan *c, *s;
	struct peer p = { .fn = flood };
	struct coord_rdma_stats cs, ss;
	struct coord_wire_hdr h;
	const uint8_t *pl;

	o.nrecv = 4; /* the fewest: credits run out at once */
	pair_open(&o, &o, &c, &s);
	p.ch = c;
	peer_start(&p);
	for (uint64_t i = 0; i < FLOOD; i++) {
		assert_int_equal(coord_rdma_chan_read(s, WAIT_MS, WAIT_MS, &h, &pl), 0);
		assert_int_equal(h.len, i * 97 % (3 * BUF));
		assert_int_equal(frame_check(pl, h.len, i), 0);
		if (i % 1000 == 0)
			usleep(20000); /* slow receiver: the sender must wait, not overrun */
	}
	assert_int_equal(peer_join(&p), 0);
	coord_rdma_chan_stats(c, &cs);
	coord_rdma_chan_stats(s, &ss);
	printf("flood: sender %llu SENDs, %llu signalled, %llu credit waits, %llu sleeps; "
	       "receiver %llu receives, %llu credit-only SENDs\n",
	       (unsigned long long)cs.sends, (unsigned long long)cs.signalled,
	       (unsigned long long)cs.credit_waits, (unsigned long long)cs.sleeps,
	       (unsigned long long)ss.recvs, (unsigned long long)ss.credit_msgs);
	assert_true(cs.credit_waits > 0);		    /* the receiver held the sender back */
	assert_true(ss.credit_msgs > 0);		    /* credits went back without data */
	assert_true(cs.signalled < cs.sends);		    /* selective signalling */
	assert_true(ss.recvs >= cs.sends - cs.credit_msgs); /* every data SEND arrived */
	assert_int_equal(coord_rdma_chan_read(s, 50, 50, &h, &pl), -ETIMEDOUT);
	coord_rdma_chan_destroy(c);
	coord_rdma_chan_destroy(s);
}

/* Both ways at once, each side slow in turn: credits ride on data both ways. */
static int ping_both(struct peer *p)
{
	uint8_t f[COORD_WIRE_HDR + 2 * BUF];
	struct coord_wire_hdr h;
	const uint8_t *pl;
	int r;

	for (uint64_t i = 0; i < 2000; i++) {
		r = coord_rdma_chan_send(p->ch, f, frame_make(f, (uint32_t)(i * 7 % (2 * BUF)), i),
					 WAIT_MS);
		if (r)
			return r;
		r = coord_rdma_chan_read(p->ch, WAIT_MS, WAIT_MS, &h, &pl);
		if (r)
			return r;
		if (h.len != i * 11 % (2 * BUF) || frame_check(pl, h.len, i))
			return -EBADMSG;
	}
	return 0;
}

static void test_rdma_chan_both_ways(void **state)
{
	struct coord_rdma_chan *c, *s;
	struct peer p = { .fn = ping_both };
	uint8_t f[COORD_WIRE_HDR + 2 * BUF];
	struct coord_wire_hdr h;
	const uint8_t *pl;

	pair_open(&small_opts, &small_opts, &c, &s);
	p.ch = c;
	peer_start(&p);
	for (uint64_t i = 0; i < 2000; i++) {
		assert_int_equal(coord_rdma_chan_read(s, WAIT_MS, WAIT_MS, &h, &pl), 0);
		assert_int_equal(h.len, i * 7 % (2 * BUF));
		assert_int_equal(frame_check(pl, h.len, i), 0);
		assert_int_equal(
			coord_rdma_chan_send(s, f, frame_make(f, (uint32_t)(i * 11 % (2 * BUF)), i),
					     WAIT_MS),
			0);
	}
	assert_int_equal(peer_join(&p), 0);
	coord_rdma_chan_destroy(c);
	coord_rdma_chan_destroy(s);
}

/* ---- the handshake (sock.h) over the channel --------------------------------------- */

struct hs {
	const struct coord_key *key;
	struct coord_error err;
	uint32_t task;
};

static int hs_server(struct peer *p)
{
	struct hs *hs = (struct hs *)p->arg;
	struct coord_frame_io io;

	coord_rdma_chan_io(&io, p->ch);
	return coord_handshake_server_io(&io, hs->key, COORD_ROLE_WORKER, &hs->task, WAIT_MS,
					 "client", &hs->err);
}

static void key_set(struct coord_key *k, uint8_t fill)
{
	memset(k, 0, sizeof(*k));
	memset(k->bytes, fill, 32);
	k->len = 32;
	k->set = true;
}

/* Handshake with keys @ck (client) and @sk (server); both results out. */
static void handshake(const struct coord_key *ck, const struct coord_key *sk, int *rc, int *rs)
{
	struct coord_rdma_chan *c, *s;
	struct hs hs = { .key = sk };
	struct peer p = { .fn = hs_server, .arg = &hs };
	struct coord_error err = { 0 };
	struct coord_frame_io io;

	pair_open(NULL, NULL, &c, &s);
	p.ch = s;
	peer_start(&p);
	coord_rdma_chan_io(&io, c);
	*rc = coord_handshake_client_io(&io, ck, COORD_ROLE_COORDINATOR, COORD_ROLE_WORKER, 7,
					WAIT_MS, "server", &err);
	*rs = peer_join(&p);
	printf("handshake: client %d%s%s, server %d%s%s\n", *rc, *rc ? ": " : "", err.msg, *rs,
	       *rs ? ": " : "", hs.err.msg);
	if (*rc == 0 && *rs == 0)
		assert_int_equal(hs.task, 7);
	coord_rdma_chan_destroy(c);
	coord_rdma_chan_destroy(s);
}

static void test_rdma_chan_handshake(void **state)
{
	struct coord_key k1, k2;
	int rc, rs;

	key_set(&k1, 0x11);
	key_set(&k2, 0x22);
	handshake(NULL, NULL, &rc, &rs); /* no key on either side */
	assert_int_equal(rc, 0);
	assert_int_equal(rs, 0);
	handshake(&k1, &k1, &rc, &rs); /* the same key */
	assert_int_equal(rc, 0);
	assert_int_equal(rs, 0);
	handshake(&k1, &k2, &rc, &rs); /* a wrong key */
	assert_int_equal(rc, -EACCES);
	assert_int_equal(rs, -EACCES);
	handshake(NULL, &k1, &rc, &rs); /* a keyed server, an unkeyed client */
	assert_int_equal(rc, -EACCES);
	assert_int_equal(rs, -EACCES);
}

/* ---- hostile peers ------------------------------------------------------------------ */

/* The peer sends @bytes; our read refuses them, and the peer sees the channel close. */
static void hostile(const uint8_t *bytes, size_t len, int want)
{
	struct coord_rdma_chan *c, *s;
	struct coord_wire_hdr h;
	const uint8_t *pl;
	uint8_t f[64];

	pair_open(&small_opts, &small_opts, &c, &s);
	/* one good frame first: it is delivered */
	assert_int_equal(coord_rdma_chan_send(c, f, frame_make(f, 20, 1), WAIT_MS), 0);
	assert_int_equal(coord_rdma_chan_send(c, bytes, len, WAIT_MS), 0);
	assert_int_equal(coord_rdma_chan_read(s, WAIT_MS, WAIT_MS, &h, &pl), 0);
	assert_int_equal(frame_check(pl, h.len, 1), 0);
	assert_int_equal(coord_rdma_chan_read(s, WAIT_MS, WAIT_MS, &h, &pl), want);
	assert_int_equal(coord_rdma_chan_read(s, 0, 0, &h, &pl), want); /* sticky */
	/* closed: the hostile side's next read ends with -EPIPE, in time */
	assert_int_equal(coord_rdma_chan_read(c, WAIT_MS, WAIT_MS, &h, &pl), -EPIPE);
	assert_int_equal(coord_rdma_chan_send(c, f, frame_make(f, 20, 2), WAIT_MS), -EPIPE);
	coord_rdma_chan_destroy(c);
	coord_rdma_chan_destroy(s);
}

static void test_rdma_chan_hostile_garbage(void **state)
{
	uint8_t g[3 * BUF];

	for (size_t i = 0; i < sizeof(g); i++)
		g[i] = (uint8_t)(i * 151 + 89);
	g[0] = 100; /* a plausible length, then an unknown type */
	g[1] = g[2] = g[3] = 0;
	g[4] = 0xef;
	g[5] = 0xbe;
	hostile(g, sizeof(g), -EPROTO);
}

static void test_rdma_chan_hostile_huge(void **state)
{
	uint8_t f[COORD_WIRE_HDR + 8];

	frame_make(f, 8, 0);
	f[0] = f[1] = f[2] = 0xff; /* len 0x..ffffff: over max_frame */
	f[3] = 0x7f;
	hostile(f, sizeof(f), -EMSGSIZE);
}

/* A frame header that straddles two SENDs, then garbage: still refused. */
static void test_rdma_chan_hostile_split_header(void **state)
{
	struct coord_rdma_chan *c, *s;
	struct coord_wire_hdr h;
	const uint8_t *pl;
	uint8_t f[COORD_WIRE_HDR + 8];

	pair_open(&small_opts, &small_opts, &c, &s);
	frame_make(f, 8, 0);
	f[6] = 1; /* flags: must be 0 */
	assert_int_equal(coord_rdma_chan_send(c, f, 5, WAIT_MS), 0);
	assert_int_equal(coord_rdma_chan_send(c, f + 5, sizeof(f) - 5, WAIT_MS), 0);
	assert_int_equal(coord_rdma_chan_read(s, WAIT_MS, WAIT_MS, &h, &pl), -EPROTO);
	assert_int_equal(coord_rdma_chan_read(c, WAIT_MS, WAIT_MS, &h, &pl), -EPIPE);
	coord_rdma_chan_destroy(c);
	coord_rdma_chan_destroy(s);
}

/* Half a frame, then silence: partial_ms bounds the wait. */
static void test_rdma_chan_partial_timeout(void **state)
{
	struct coord_rdma_chan *c, *s;
	struct coord_wire_hdr h;
	const uint8_t *pl;
	uint8_t f[COORD_WIRE_HDR + 3 * BUF];
	size_t len = frame_make(f, 3 * BUF, 0);

	pair_open(&small_opts, &small_opts, &c, &s);
	assert_int_equal(coord_rdma_chan_send(c, f, len / 2, WAIT_MS), 0);
	assert_int_equal(coord_rdma_chan_read(s, WAIT_MS, 200, &h, &pl), -ETIMEDOUT);
	coord_rdma_chan_destroy(c);
	coord_rdma_chan_destroy(s);
}

/*
 * A raw verbs peer: connects with valid private data that announces @nrecv
 * receives, but posts only @posted of them and never returns a credit.
 */
struct raw_arg {
	uint32_t nrecv, posted;
	unsigned port;
	int ret;
	struct t_raw_peer rp;
};

static void *raw_main(void *arg)
{
	struct raw_arg *ra = arg;

	ra->ret = t_raw_connect(&ra->rp, addr, ra->port, ra->nrecv, ra->posted, WAIT_MS);
	return NULL;
}

/* Our channel sends to a raw peer until it fails; how it failed. */
static int send_to_raw(uint32_t nrecv, uint32_t posted, double *secs)
{
	struct raw_arg ra = { .nrecv = nrecv, .posted = posted };
	struct coord_rdma_listener *l;
	struct coord_rdma_chan *s = NULL;
	struct coord_error err = { 0 };
	struct coord_wire_hdr h;
	const uint8_t *pl;
	uint8_t f[COORD_WIRE_HDR + 100];
	char hp[96];
	pthread_t th;
	uint64_t t0;
	int r = 0;

	snprintf(hp, sizeof(hp), "%s:0", addr);
	assert_int_equal(coord_rdma_listen(hp, &small_opts, &l, &ra.port, &err), 0);
	assert_int_equal(pthread_create(&th, NULL, raw_main, &ra), 0);
	r = coord_rdma_accept(l, WAIT_MS, &s, &err);
	pthread_join(th, NULL);
	assert_int_equal(ra.ret, 0);
	assert_int_equal(r, 0);
	t0 = coord_now_ns();
	/* Bounded: at most 100 frames; the peer takes `posted` at most. */
	for (int i = 0; i < 100 && r == 0; i++)
		r = coord_rdma_chan_send(s, f, frame_make(f, 100, (uint64_t)i), 2000);
	/* An RNR failure shows on the next completion poll: a read reports it. */
	if (r == 0)
		r = coord_rdma_chan_read(s, 3000, 3000, &h, &pl);
	*secs = (double)(coord_now_ns() - t0) / 1e9;
	coord_rdma_chan_destroy(s);
	coord_rdma_listener_destroy(l);
	t_raw_close(&ra.rp);
	return r;
}

/* A peer that never posts receives: RNR retries run out (finite), the channel breaks. */
static void test_rdma_chan_peer_posts_no_receives(void **state)
{
	double secs;
	int r = send_to_raw(8, 0, &secs);

	printf("peer without receives: %d (%s) after %.2f s\n", r, strerror(-r), secs);
	assert_true(r == -EIO || r == -EPIPE || r == -ETIMEDOUT);
}

/* A peer that takes some frames but never returns credits: the sender times out. */
static void test_rdma_chan_peer_returns_no_credits(void **state)
{
	double secs;
	int r = send_to_raw(4, 4, &secs);

	printf("peer returning no credits: %d (%s) after %.2f s\n", r, strerror(-r), secs);
	assert_int_equal(r, -ETIMEDOUT);
}

/* ---- closing ------------------------------------------------------------------------ */

/* What was sent before the close is read; then -EPIPE, not a hang. */
static void test_rdma_chan_peer_close(void **state)
{
	struct coord_rdma_chan *c, *s;
	struct coord_wire_hdr h;
	const uint8_t *pl;
	uint8_t f[COORD_WIRE_HDR + 5 * BUF];

	pair_open(&small_opts, &small_opts, &c, &s);
	for (uint64_t i = 0; i < 3; i++)
		assert_int_equal(coord_rdma_chan_send(c, f, frame_make(f, 5 * BUF / 3, i), WAIT_MS),
				 0);
	coord_rdma_chan_destroy(c);
	for (uint64_t i = 0; i < 3; i++) {
		assert_int_equal(coord_rdma_chan_read(s, WAIT_MS, WAIT_MS, &h, &pl), 0);
		assert_int_equal(frame_check(pl, h.len, i), 0);
	}
	assert_int_equal(coord_rdma_chan_read(s, WAIT_MS, WAIT_MS, &h, &pl), -EPIPE);
	coord_rdma_chan_destroy(s);
}

/* An idle wait sleeps on the completion channel instead of spinning. */
static void test_rdma_chan_idle_sleeps(void **state)
{
	struct coord_rdma_chan *c, *s;
	struct coord_rdma_stats st;
	struct coord_wire_hdr h;
	const uint8_t *pl;
	struct rusage r0, r1;
	double cpu;

	pair_open(&small_opts, &small_opts, &c, &s);
	getrusage(RUSAGE_THREAD, &r0);
	assert_int_equal(coord_rdma_chan_read(s, 500, 500, &h, &pl), -ETIMEDOUT);
	getrusage(RUSAGE_THREAD, &r1);
	cpu = (double)(r1.ru_utime.tv_sec - r0.ru_utime.tv_sec + r1.ru_stime.tv_sec -
		       r0.ru_stime.tv_sec) +
	      (double)(r1.ru_utime.tv_usec - r0.ru_utime.tv_usec + r1.ru_stime.tv_usec -
		       r0.ru_stime.tv_usec) /
		      1e6;
	coord_rdma_chan_stats(s, &st);
	printf("idle 500 ms read: %.1f ms CPU, %llu sleeps\n", cpu * 1e3,
	       (unsigned long long)st.sleeps);
	assert_true(st.sleeps >= 1);
	assert_true(cpu < 0.25); /* not a busy wait (TCG is slow: generous) */
	coord_rdma_chan_destroy(c);
	coord_rdma_chan_destroy(s);
}

/* The event-loop API: arm, poll the fds, progress, then read without waiting. */
static void test_rdma_chan_event_loop_api(void **state)
{
	struct coord_rdma_chan *c, *s;
	struct coord_wire_hdr h;
	const uint8_t *pl;
	uint8_t f[COORD_WIRE_HDR + 64];
	struct pollfd p[2];
	int cq_fd, cm_fd, r = 0;

	pair_open(&small_opts, &small_opts, &c, &s);
	coord_rdma_chan_fds(s, &cq_fd, &cm_fd);
	assert_int_equal(coord_rdma_chan_arm(s), 0);
	p[0] = (struct pollfd){ .fd = cq_fd, .events = POLLIN };
	p[1] = (struct pollfd){ .fd = cm_fd, .events = POLLIN };
	assert_int_equal(poll(p, 2, 50), 0); /* idle: nothing */
	assert_int_equal(coord_rdma_chan_send(c, f, frame_make(f, 64, 5), WAIT_MS), 0);
	assert_int_equal(poll(p, 2, WAIT_MS), 1);
	assert_true(p[0].revents & POLLIN);
	for (int i = 0; i < 1000 && !coord_rdma_chan_readable(s); i++)
		r = coord_rdma_chan_progress(s);
	assert_int_equal(r, 0);
	assert_true(coord_rdma_chan_readable(s));
	assert_int_equal(coord_rdma_chan_read(s, 0, 0, &h, &pl), 0);
	assert_int_equal(frame_check(pl, h.len, 5), 0);
	/* the peer closes: the cm fd turns readable, progress says -EPIPE */
	coord_rdma_chan_destroy(c);
	r = 0;
	for (int i = 0; i < 100 && r == 0; i++) {
		int armed = coord_rdma_chan_arm(s);

		p[0].revents = p[1].revents = 0;
		if (armed != 0 || poll(p, 2, 100) > 0)
			r = coord_rdma_chan_progress(s);
	}
	assert_int_equal(r, -EPIPE);
	coord_rdma_chan_destroy(s);
}

/* ---- one-sided RDMA READ -------------------------------------------------------------- */

static void test_rdma_chan_rdma_read(void **state)
{
	struct coord_rdma_chan *c, *s;
	struct coord_rdma_mr *rm, *lm;
	size_t len = 256 * 1024;
	uint8_t *remote = malloc(len), *local = calloc(1, len);
	uint64_t raddr;
	uint32_t rkey;
	uint64_t t0;
	int n = 200;

	assert_non_null(remote);
	assert_non_null(local);
	for (size_t i = 0; i < len; i++)
		remote[i] = (uint8_t)(i * 13 + (i >> 12));
	pair_open(&small_opts, &small_opts, &c, &s);
	assert_int_equal(coord_rdma_reg(s, remote, len, true, &rm), 0);
	assert_int_equal(coord_rdma_reg(c, local, len, false, &lm), 0);
	coord_rdma_mr_export(rm, &raddr, &rkey);
	/* whole, then pieces at odd offsets into odd places */
	assert_int_equal(coord_rdma_read(c, lm, 0, raddr, rkey, len, WAIT_MS), 0);
	assert_memory_equal(local, remote, len);
	memset(local, 0, len);
	assert_int_equal(coord_rdma_read(c, lm, 7, raddr + 4093, rkey, 10000, WAIT_MS), 0);
	assert_memory_equal(local + 7, remote + 4093, 10000);
	assert_int_equal(local[6], 0);
	assert_int_equal(local[7 + 10000], 0);
	/* out of the local region: refused before posting */
	assert_int_equal(coord_rdma_read(c, lm, len - 10, raddr, rkey, 11, WAIT_MS), -EINVAL);
	/* repeated small reads; the server's CPU does nothing */
	t0 = coord_now_ns();
	for (int i = 0; i < n; i++)
		assert_int_equal(
			coord_rdma_read(c, lm, 0, raddr + (uint64_t)i * 8, rkey, 64, WAIT_MS), 0);
	printf("rdma read: %d x 64 B, mean %.1f us\n", n, (double)(coord_now_ns() - t0) / 1e3 / n);
	assert_memory_equal(local, remote + (n - 1) * 8, 64);
	/* frames still flow after the reads */
	{
		uint8_t f[COORD_WIRE_HDR + 32];
		struct coord_wire_hdr h;
		const uint8_t *pl;

		assert_int_equal(coord_rdma_chan_send(c, f, frame_make(f, 32, 9), WAIT_MS), 0);
		assert_int_equal(coord_rdma_chan_read(s, WAIT_MS, WAIT_MS, &h, &pl), 0);
		assert_int_equal(frame_check(pl, h.len, 9), 0);
	}
	/* a wrong rkey: the READ fails and the channel breaks (RC semantics) */
	assert_int_equal(coord_rdma_read(c, lm, 0, raddr, rkey ^ 0x5a5a00, 64, WAIT_MS), -EIO);
	coord_rdma_dereg(lm);
	coord_rdma_dereg(rm);
	coord_rdma_chan_destroy(c);
	coord_rdma_chan_destroy(s);
	free(remote);
	free(local);
}

/* ---- set-up ----------------------------------------------------------------------- */

static void test_rdma_chan_refused(void **state)
{
	struct coord_rdma_chan *c = NULL;
	struct coord_error err = { 0 };
	char hp[96];
	uint64_t t0 = coord_now_ns();
	int r;

	snprintf(hp, sizeof(hp), "%s:1", addr); /* nobody listens on port 1 */
	r = coord_rdma_connect(hp, NULL, 3000, &c, &err);
	printf("connect to a closed port: %d: %s (%.2f s)\n", r, err.msg,
	       (double)(coord_now_ns() - t0) / 1e9);
	assert_true(r == -ECONNREFUSED || r == -ETIMEDOUT || r == -EHOSTUNREACH);
	assert_null(c);
}

/* Pick the first non-loopback IPv4 address that rdma_cm binds to an RDMA device. */
static int find_addr(void)
{
	struct rdma_event_channel *ch = rdma_create_event_channel();
	struct ifaddrs *ifa, *i;
	int ret = -ENODEV;

	if (!ch)
		return -ENODEV;
	if (getifaddrs(&ifa)) {
		rdma_destroy_event_channel(ch);
		return -errno;
	}
	for (i = ifa; i && ret; i = i->ifa_next) {
		struct sockaddr_in sin;
		struct rdma_cm_id *id;

		if (!i->ifa_addr || i->ifa_addr->sa_family != AF_INET)
			continue;
		memcpy(&sin, i->ifa_addr, sizeof(sin));
		if (ntohl(sin.sin_addr.s_addr) >> 24 == 127) /* rdma_cm over rxe on lo fails */
			continue;
		if (rdma_create_id(ch, &id, NULL, RDMA_PS_TCP))
			continue;
		if (!rdma_bind_addr(id, (struct sockaddr *)&sin) && id->verbs) {
			inet_ntop(AF_INET, &sin.sin_addr, addr, sizeof(addr));
			ret = 0;
		}
		rdma_destroy_id(id);
	}
	freeifaddrs(ifa);
	rdma_destroy_event_channel(ch);
	return ret;
}

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rdma_chan_sizes),
		cmocka_unit_test(test_rdma_chan_batched),
		cmocka_unit_test(test_rdma_chan_credit_flood),
		cmocka_unit_test(test_rdma_chan_both_ways),
		cmocka_unit_test(test_rdma_chan_handshake),
		cmocka_unit_test(test_rdma_chan_hostile_garbage),
		cmocka_unit_test(test_rdma_chan_hostile_huge),
		cmocka_unit_test(test_rdma_chan_hostile_split_header),
		cmocka_unit_test(test_rdma_chan_partial_timeout),
		cmocka_unit_test(test_rdma_chan_peer_posts_no_receives),
		cmocka_unit_test(test_rdma_chan_peer_returns_no_credits),
		cmocka_unit_test(test_rdma_chan_peer_close),
		cmocka_unit_test(test_rdma_chan_idle_sleeps),
		cmocka_unit_test(test_rdma_chan_event_loop_api),
		cmocka_unit_test(test_rdma_chan_rdma_read),
		cmocka_unit_test(test_rdma_chan_refused),
	};
	struct coord_error err = { 0 };
	const char *a = getenv("RDMA_TEST_ADDR");
	int opt, secs = 240;

	while ((opt = getopt(argc, argv, "a:t:")) != -1) {
		if (opt == 'a')
			a = optarg;
		else if (opt == 't')
			secs = atoi(optarg);
		else
			return 2;
	}
	signal(SIGALRM, watchdog);
	alarm(secs > 0 ? secs : 240);
	setvbuf(stdout, NULL, _IOLBF, 0);

	if (coord_rdma_available(&err) < 0) {
		struct coord_rdma_chan *c = NULL;
		uint64_t t0 = coord_now_ns();
		int r = coord_rdma_connect("10.0.2.15:7000", NULL, 2000, &c, &err);

		/* No device: a clear error at once, never a hang. */
		printf("test_rdma_chan: no RDMA here: connect says %d: %s (%.3f s)\n", r, err.msg,
		       (double)(coord_now_ns() - t0) / 1e9);
		if (r != -ENODEV || !strstr(err.msg, "rdma") || c) {
			printf("test_rdma_chan: FAIL: want -ENODEV with a reason\n");
			return 1;
		}
		printf("test_rdma_chan: SKIP: no RDMA device (tests/rdma/rig.sh runs this)\n");
		return SKIP;
	}
	if (a)
		snprintf(addr, sizeof(addr), "%s", a);
	else if (find_addr()) {
		printf("test_rdma_chan: SKIP: no IPv4 address on an RDMA device (give one with "
		       "-a)\n");
		return SKIP;
	}
	printf("test_rdma_chan: on %s\n", addr);
	return cmocka_run_group_tests_name("rdma_chan", tests, NULL, NULL);
}
