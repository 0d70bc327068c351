// SPDX-License-Identifier: MIT
/*
 * tests/rdma/test_rdma_hostile.c - hostile peers against a serving
 * coord-worker --transport rdma (B5 over rdma; tests/test_tcp_hostile.c is
 * the tcp twin).
 *
 * One coord-worker (cluster key set: 10.0.2.15 is not loopback) serves a
 * healthy coordinator over rdma that keeps closures in flight from a
 * background thread, while this process opens hostile queue pairs to it:
 *   1. a coord channel that sends garbage instead of a HELLO;
 *   2. a coord channel that completes the handshake, then sends a frame
 *      header that does not parse;
 *   3. a coord channel that proves a wrong cluster key;
 *   4. a coord channel that holds no key at all;
 *   5. a raw verbs QP (tests/rdma/raw_peer.h) that announces receives in its
 *      private data, never posts one (and asks for infinite RNR retries),
 *      and sends a HELLO.
 * Each must be refused or closed by the server (we see the disconnection)
 * with a reason in its log ($T_SERVER_STDERR), and the healthy coordinator
 * must lose nothing: every closure completes with the right value; then a
 * new coordinator is served by the same process.
 *
 * And a connect held half-open (the raw peer never reads the server's
 * reply, so the server's accept waits for its handshake_ms) while a
 * coordinator with a short heartbeat runs a closure longer than that: the
 * server's keepalive must go on meanwhile, so the worker is not lost and
 * the closure runs once (rdma_server.c Q3).  Bounded: t_watchdog()
 * over the run, a deadline on every wait.
 *
 * And the limits (rdma_server.c Q5) of a second coord-worker started with
 * --max-handshakes 2 --idle-ms 1500: with two peers in the handshake (HELLO
 * answered, no AUTH) a third is refused with an ERROR frame; once they are
 * gone a peer is served again; an authenticated one that then sends
 * nothing gets an ERROR frame after about 1.5 s and is closed.
 *
 * Without an RDMA device it exits 77 (tests/rdma/suite.txt runs it in the
 * soft-RoCE rig).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "transport/wire/auth.h"
#include "transport/rdma/rdma_chan.h"
#include "transport/wire/sock.h"
#include "transport/wire/wire.h"
#include "../helpers.h"
#include "raw_peer.h"

#define WAIT_MS 20000
#define TEST_KEY "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"

static char logpath[96];

struct healthy {
	struct coord *c;
	uint32_t add;
	_Atomic int stop;
	_Atomic long ok, wrong;
};

/* Keep a stream of closures going until told to stop; check each value. */
static void *healthy_main(void *arg)
{
	struct healthy *h = arg;
	uint64_t deadline = t_now_ns() + 200000000000ull;

	for (int64_t i = 0; !atomic_load(&h->stop) && t_now_ns() < deadline; i++) {
		struct coord_rv *rv[16];
		struct coord_result res[16];

		for (int k = 0; k < 16; k++) {
			int64_t ab[2] = { i, k };

			if (coord_schedule(h->c, h->add, ab, sizeof(ab), &rv[k], NULL) != 0) {
				atomic_fetch_add(&h->wrong, 1);
				return NULL;
			}
		}
		if (coord_rv_fetch_many(rv, 16, res, 60000000000ll) != 0) {
			atomic_fetch_add(&h->wrong, 16);
			return NULL;
		}
		for (int k = 0; k < 16; k++) {
			int64_t x = -1;

			if (res[k].code == 0 && res[k].len == sizeof(x))
				memcpy(&x, res[k].val, sizeof(x));
			if (x == i + k)
				atomic_fetch_add(&h->ok, 1);
			else
				atomic_fetch_add(&h->wrong, 1);
			coord_rv_put(rv[k]);
		}
	}
	return NULL;
}

static void worker_addr(char *b, size_t cap)
{
	snprintf(b, cap, "%s:%u", t_addr(), t_worker_port(0));
}

/* A coord channel to the worker (valid private data), or fail the test. */
static struct coord_rdma_chan *dial(void)
{
	struct coord_rdma_chan *ch = NULL;
	struct coord_error err = { 0 };
	char a[96];
	int r;

	worker_addr(a, sizeof(a));
	r = coord_rdma_connect(a, NULL, WAIT_MS, &ch, &err);
	if (r < 0)
		fail_msg("connect %s: %s", a, err.msg);
	return ch;
}

/* Read until the server closes (bounded): -EPIPE, or fail.  The frames it
 * sent first (an ERROR frame, a HELLO_ACK) are counted in *@frames. */
static void drain_until_closed(struct coord_rdma_chan *ch, unsigned *frames, uint16_t *last)
{
	uint64_t until = t_now_ns() + (uint64_t)WAIT_MS * 1000000ull;
	struct coord_wire_hdr h;
	const uint8_t *pl;

	*frames = 0;
	while (t_now_ns() < until) {
		int r = coord_rdma_chan_read(ch, 500, 5000, &h, &pl);

		if (r == 0) {
			++*frames;
			*last = h.type;
			continue;
		}
		if (r == -ETIMEDOUT)
			continue;
		assert_true(r == -EPIPE || r == -EIO);
		return;
	}
	fail_msg("the server did not close a hostile channel in %d ms", WAIT_MS);
}

/* A valid HELLO frame into @b. */
static size_t hello(uint8_t *b, size_t cap)
{
	struct coord_wire_writer w;
	struct coord_wire_hello h = { .magic = COORD_WIRE_MAGIC,
				      .vmin = COORD_WIRE_VERSION,
				      .vmax = COORD_WIRE_VERSION,
				      .role = COORD_ROLE_COORDINATOR };

	coord_wire_writer_init(&w, b, cap);
	assert_int_equal(coord_wire_put_hello(&w, COORD_WIRE_HELLO, &h), 0);
	return w.len;
}

/* How many lines of the worker's log contain @what. */
static int log_count(const char *what)
{
	FILE *f = fopen(logpath, "r");
	char line[1024];
	int n = 0;

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		if (strstr(line, what)) {
			print_message("  log: %s", line);
			n++;
		}
	fclose(f);
	return n;
}

/* Wait (bounded) until the log has at least @n lines with @what. */
static void expect_log(const char *what, int n)
{
	uint64_t until = t_now_ns() + (uint64_t)WAIT_MS * 1000000ull;

	while (t_now_ns() < until) {
		FILE *f = fopen(logpath, "r");
		char line[1024];
		int k = 0;

		if (f) {
			while (fgets(line, sizeof(line), f))
				k += strstr(line, what) != NULL;
			fclose(f);
		}
		if (k >= n)
			return;
		t_sleep_ns(50000000);
	}
	(void)log_count(what);
	fail_msg("the worker's log has fewer than %d lines with \"%s\"", n, what);
}

/* A handshake with @key (@what: the step, for the log) to the worker at @a:
 * refused, the channel closed, the @nlog-th refusal logged. */
static void handshake_refused(const char *a, const struct coord_key *key, const char *what,
			      int nlog)
{
	struct coord_frame_io io;
	struct coord_error err;
	struct coord_rdma_chan *ch;
	unsigned frames;
	uint16_t last = 0;
	int r;

	ch = dial();
	coord_rdma_chan_io(&io, ch);
	memset(&err, 0, sizeof(err));
	r = coord_handshake_client_io(&io, key, COORD_ROLE_COORDINATOR, COORD_ROLE_WORKER, 0,
				      WAIT_MS, a, &err);
	print_message("%s: %d (%s)\n", what, r, err.msg);
	assert_true(r < 0);
	drain_until_closed(ch, &frames, &last);
	coord_rdma_chan_destroy(ch);
	expect_log("refused", nlog);
}

/* The worker process still serves a new coordinator: 50 adds, right. */
static void serves_new_coordinator(struct coord_registry *reg)
{
	struct healthy h = { 0 };
	struct coord_opts o;

	assert_int_equal(kill(t_worker_pid(0), 0), 0);
	t_opts(&o, reg);
	assert_int_equal(t_create(&o, 1, &h.c, NULL), 0);
	h.add = t_fn(h.c, "add");
	for (int64_t i = 0; i < 50; i++) {
		int64_t ab[2] = { i, 3 }, x;
		struct coord_rv *rv;
		const void *v;
		size_t len;

		assert_int_equal(coord_schedule(h.c, h.add, ab, sizeof(ab), &rv, NULL), 0);
		assert_int_equal(coord_rv_fetch_timeout(rv, 30000000000ll, &v, &len, NULL), 0);
		memcpy(&x, v, sizeof(x));
		assert_int_equal(x, i + 3);
		coord_rv_put(rv);
	}
	assert_int_equal(coord_join(h.c, NULL), 0);
	coord_destroy(h.c);
}

static void test_rdma_hostile_peers_refused_healthy_served(void **state)
{
	struct coord_registry *reg = t_registry();
	struct healthy h = { 0 };
	struct coord_opts o;
	struct coord_frame_io io;
	struct coord_error err;
	struct coord_key key = { 0 };
	struct coord_rdma_chan *ch;
	struct t_raw_peer rp;
	pthread_t t;
	uint8_t b[256];
	unsigned frames;
	uint16_t last = 0;
	char a[96];
	int r;

	(void)state;
	worker_addr(a, sizeof(a));
	t_reset_counters();
	t_opts(&o, reg);
	o.window = 8;
	assert_int_equal(t_create(&o, 2, &h.c, NULL), 0);
	h.add = t_fn(h.c, "add");
	assert_int_equal(pthread_create(&t, NULL, healthy_main, &h), 0);

	/* 1. garbage instead of a HELLO: the header does not parse */
	ch = dial();
	memset(b, 0xa5, sizeof(b));
	assert_int_equal(coord_rdma_chan_send(ch, b, sizeof(b), WAIT_MS), 0);
	drain_until_closed(ch, &frames, &last);
	coord_rdma_chan_destroy(ch);
	expect_log("refused", 1);
	print_message("1. garbage: closed after %u frames\n", frames);

	/* 2. a good handshake, then a frame header that does not parse */
	assert_int_equal(coord_key_load(NULL, &key, NULL), 0);
	assert_true(key.set);
	ch = dial();
	coord_rdma_chan_io(&io, ch);
	memset(&err, 0, sizeof(err));
	r = coord_handshake_client_io(&io, &key, COORD_ROLE_COORDINATOR, COORD_ROLE_WORKER, 0,
				      WAIT_MS, a, &err);
	if (r < 0)
		fail_msg("handshake: %s", err.msg);
	memset(b, 0, 32);
	memset(b, 0xff, 8); /* a length of 4 GiB and more: over max_frame */
	assert_int_equal(coord_rdma_chan_send(ch, b, 32, WAIT_MS), 0);
	drain_until_closed(ch, &frames, &last);
	coord_rdma_chan_destroy(ch);
	expect_log("closing:", 1);
	print_message("2. bad header after the handshake: closed after %u frames (last %u)\n",
		      frames, last);

	/* 3. a wrong cluster key: refused by the proof */
	memset(key.bytes, 0x5a, key.len);
	handshake_refused(a, &key, "3. wrong key", 2);

	/* 4. no key at all, against a keyed server */
	coord_key_wipe(&key);
	memset(&key, 0, sizeof(key));
	handshake_refused(a, &key, "4. no key", 3);

	/* 5. a raw QP that posts no receives (infinite RNR retries asked),
	 * sends a HELLO and then nothing: the server's answer cannot land, its
	 * handshake times out (bounded), it disconnects */
	memset(&rp, 0, sizeof(rp));
	r = t_raw_connect(&rp, t_addr(), t_worker_port(0), 8, 0, WAIT_MS);
	assert_int_equal(r, 0);
	assert_int_equal(t_raw_send(&rp, b, hello(b, sizeof(b)), WAIT_MS), 0);
	r = t_raw_wait_disconnect(&rp, 3 * WAIT_MS);
	print_message("5. no receives posted: disconnected by the server: %d\n", r);
	assert_int_equal(r, 0);
	t_raw_close(&rp);
	expect_log("refused", 4);

	/* the healthy coordinator was served throughout, and lost nothing */
	atomic_store(&h.stop, 1);
	pthread_join(t, NULL);
	print_message("healthy coordinator: %ld closures right, %ld wrong\n", atomic_load(&h.ok),
		      atomic_load(&h.wrong));
	assert_int_equal(atomic_load(&h.wrong), 0);
	assert_true(atomic_load(&h.ok) > 0);
	assert_int_equal(coord_join(h.c, NULL), 0);
	coord_destroy(h.c);

	/* the same process still serves a new coordinator */
	serves_new_coordinator(reg);
	log_count("refused");
	log_count("closing:");
	coord_registry_destroy(reg);
}

static void test_rdma_half_open_accept_keeps_busy_alive(void **state)
{
	struct coord_registry *reg = t_registry();
	struct coord_metrics m;
	struct t_raw_peer rp;
	struct coord_opts o;
	struct coord_rv *rv;
	struct coord *c;
	uint32_t us = 3000000; /* within the 5 s the accept is held (handshake_ms) */
	const void *v;
	size_t len;

	(void)state;
	t_reset_counters();
	t_opts(&o, reg);
	o.heartbeat_ms = 100;
	o.heartbeat_misses = 3; /* lost after ~300 ms without a PING's answer */
	assert_int_equal(t_create(&o, 1, &c, NULL), 0);
	assert_int_equal(coord_schedule(c, t_fn(c, "sleep_us"), &us, sizeof(us), &rv, NULL), 0);
	t_sleep_ns(300000000);
	memset(&rp, 0, sizeof(rp));
	assert_int_equal(t_raw_connect_start(&rp, t_addr(), t_worker_port(0), 8, 4, WAIT_MS), 0);
	assert_int_equal(coord_rv_fetch_timeout(rv, 30000000000ll, &v, &len, NULL), 0);
	t_raw_close(&rp);
	assert_int_equal(coord_metrics(c, &m, NULL, 0), 0);
	print_message("half-open accept: losses %" PRIu64 ", put back %" PRIu64 "\n", m.losses,
		      m.put_back);
	assert_int_equal(m.losses, 0);
	assert_int_equal(m.put_back, 0);
	coord_rv_put(rv);
	assert_int_equal(coord_join(c, NULL), 0);
	coord_destroy(c);
	coord_registry_destroy(reg);
}

/* The first frame @ch receives within @ms: its type, or 0 if none came
 * (the channel closed or the wait ended). */
static uint16_t first_frame(struct coord_rdma_chan *ch, int ms)
{
	struct coord_wire_hdr h;
	const uint8_t *pl;

	return coord_rdma_chan_read(ch, ms, 5000, &h, &pl) == 0 ? h.type : 0;
}

/* A coord channel to @port of this host's RDMA address, or fail. */
static struct coord_rdma_chan *dial_port(unsigned port)
{
	struct coord_rdma_chan *ch = NULL;
	struct coord_error err = { 0 };
	char a[96];

	snprintf(a, sizeof(a), "%s:%u", t_addr(), port);
	if (coord_rdma_connect(a, NULL, WAIT_MS, &ch, &err) < 0)
		fail_msg("connect %s: %s", a, err.msg);
	return ch;
}

static void test_rdma_handshakes_bounded_idle_closed(void **state)
{
	const char *bin = getenv("COORD_WORKER_BIN"), *fns = getenv("COORD_TESTFNS");
	char listen[80], a[96];
	char *argv[] = { (char *)bin, "--fns",	   (char *)fns,	  "--listen", listen,
			 "--log",     "warn",	   "--transport", "rdma",     "--max-handshakes",
			 "2",	      "--idle-ms", "1500",	  NULL };
	struct coord_rdma_chan *hs[2], *ch;
	struct coord_frame_io io;
	struct coord_key key = { 0 };
	struct coord_error err;
	uint8_t b[64];
	unsigned port, frames;
	uint16_t last = 0;
	uint64_t t0;
	pid_t pid;
	int r, k;

	(void)state;
	assert_non_null(bin);
	assert_non_null(fns);
	snprintf(listen, sizeof(listen), "%s:0", t_addr());
	pid = t_spawn(argv, "coord-worker", &port);
	assert_true(pid > 0);
	snprintf(a, sizeof(a), "%s:%u", t_addr(), port);

	/* two peers in the handshake: HELLO answered, no AUTH */
	for (int i = 0; i < 2; i++) {
		hs[i] = dial_port(port);
		assert_int_equal(coord_rdma_chan_send(hs[i], b, hello(b, sizeof(b)), WAIT_MS), 0);
		assert_int_equal(first_frame(hs[i], WAIT_MS), COORD_WIRE_HELLO_ACK);
	}
	/* a third: refused at once, with an ERROR frame */
	ch = dial_port(port);
	assert_int_equal(first_frame(ch, WAIT_MS), COORD_WIRE_ERROR);
	drain_until_closed(ch, &frames, &last);
	coord_rdma_chan_destroy(ch);
	expect_log("max_handshakes", 1);
	for (int i = 0; i < 2; i++)
		coord_rdma_chan_destroy(hs[i]);

	/* served again once they are gone (bounded: their threads see the
	 * disconnection within the server's idle tick) */
	assert_int_equal(coord_key_load(NULL, &key, NULL), 0);
	for (k = 0;; k++) {
		ch = dial_port(port);
		coord_rdma_chan_io(&io, ch);
		memset(&err, 0, sizeof(err));
		r = coord_handshake_client_io(&io, &key, COORD_ROLE_COORDINATOR, COORD_ROLE_WORKER,
					      0, WAIT_MS, a, &err);
		if (r == 0)
			break;
		coord_rdma_chan_destroy(ch);
		assert_true(k < 100);
		t_sleep_ns(100000000);
	}
	/* authenticated, then silent: an ERROR frame after about 1.5 s */
	t0 = t_now_ns();
	assert_int_equal(first_frame(ch, WAIT_MS), COORD_WIRE_ERROR);
	print_message("idle: closed after %.2f s\n", (t_now_ns() - t0) / 1e9);
	assert_true(t_now_ns() - t0 >= 1400000000ull);
	drain_until_closed(ch, &frames, &last);
	coord_rdma_chan_destroy(ch);
	expect_log("idle", 1);
	coord_key_wipe(&key);
	t_reap(pid);
}

static int group_setup(void **state)
{
	(void)state;
	/* not loopback: a cluster key is required (B5); the worker inherits it */
	setenv("COORD_CLUSTER_KEY", TEST_KEY, 1);
	snprintf(logpath, sizeof(logpath), "/tmp/coord-rdma-hostile-%d.log", (int)getpid());
	unlink(logpath);
	setenv("T_SERVER_STDERR", logpath, 1);
	setenv("T_WORKER_LOG", "warn", 1);
	t_transport = "rdma";
	return t_workers_start(1) == 0 ? 0 : -1;
}

static int group_teardown(void **state)
{
	(void)state;
	t_workers_stop();
	unlink(logpath);
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_rdma_hostile_peers_refused_healthy_served),
		cmocka_unit_test(test_rdma_half_open_accept_keeps_busy_alive),
		cmocka_unit_test(test_rdma_handshakes_bounded_idle_closed),
	};
	struct coord_error err = { 0 };

	t_watchdog(400);
	if (coord_rdma_available(&err) < 0) {
		printf("test_rdma_hostile: SKIP: %s (tests/rdma/rig.sh runs this)\n", err.msg);
		return T_EXIT_SKIP;
	}
	return cmocka_run_group_tests_name("rdma_hostile", tests, group_setup, group_teardown);
}
