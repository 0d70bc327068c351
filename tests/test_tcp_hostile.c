// SPDX-License-Identifier: MIT
/*
 * tests/test_tcp_hostile.c - hostile peers against a real coord-worker
 * (design.md §6, B5; the tcp issue's hostile-input tests).
 *
 * One coord-worker serves a healthy coordinator that keeps closures in
 * flight from a background thread, while raw sockets on loopback send
 * garbage, a frame with a huge length, a truncated frame, a wrong magic, a
 * wrong version, half a frame and then nothing (slowloris), and a proof
 * from a peer that holds no key.  Each bad connection must be closed by the
 * server (with an ERROR frame or a refusing HELLO_ACK where it can), and the
 * healthy coordinator must lose nothing: every closure completes with the
 * right value.  Bounded in count and time.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "transport/wire/auth.h"
#include "transport/wire/sock.h"
#include "transport/wire/wire.h"
#include "helpers.h"

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
	uint64_t deadline = t_now_ns() + 60000000000ull;

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
		if (coord_rv_fetch_many(rv, 16, res, 30000000000ll) != 0) {
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

static int dial(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	a.sin_port = htons((uint16_t)t_worker_port(0));
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	return fd;
}

/* Read until the server closes (bounded); returns the bytes received. */
static size_t drain_until_closed(int fd, uint8_t *buf, size_t cap, int timeout_ms)
{
	size_t n = 0;
	uint64_t until = t_now_ns() + (uint64_t)timeout_ms * 1000000ull;

	for (;;) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t r;
		uint64_t now = t_now_ns();

		if (now >= until)
			fail_msg("the server did not close a hostile connection in %d ms",
				 timeout_ms);
		if (poll(&p, 1, (int)((until - now) / 1000000ull) + 1) <= 0)
			continue;
		r = recv(fd, buf + n, cap - n, 0);
		if (r <= 0)
			return n;
		n += (size_t)r;
		if (n == cap)
			n = 0; /* keep reading; only the close matters then */
	}
}

static void send_raw(int fd, const void *p, size_t n)
{
	assert_int_equal(send(fd, p, n, MSG_NOSIGNAL), (ssize_t)n);
}

/* A valid HELLO frame into @b (version range @vmin..@vmax, magic @magic). */
static size_t hello(uint8_t *b, size_t cap, uint32_t magic, uint16_t vmin, uint16_t vmax)
{
	struct coord_wire_writer w;
	struct coord_wire_hello h = {
		.magic = magic, .vmin = vmin, .vmax = vmax, .role = COORD_ROLE_COORDINATOR
	};

	coord_wire_writer_init(&w, b, cap);
	assert_int_equal(coord_wire_put_hello(&w, COORD_WIRE_HELLO, &h), 0);
	return w.len;
}

static void test_hostile_peers_refused_healthy_served(void **state)
{
	struct coord_registry *reg = t_registry();
	struct healthy h = { 0 };
	struct coord_opts o;
	pthread_t t;
	uint8_t buf[4096], b[256];
	size_t n;
	int fd;

	t_reset_counters();
	t_opts(&o, reg);
	o.window = 8;
	assert_int_equal(t_create(&o, 2, &h.c, NULL), 0);
	h.add = t_fn(h.c, "add");
	pthread_create(&t, NULL, healthy_main, &h);

	/* 1. garbage instead of a handshake */
	fd = dial();
	memset(b, 0xa5, sizeof(b));
	send_raw(fd, b, sizeof(b));
	drain_until_closed(fd, buf, sizeof(buf), 5000);
	close(fd);

	/* 2. a frame header announcing 4 GiB */
	fd = dial();
	memset(b, 0, 16);
	memset(b, 0xff, 4);
	b[4] = COORD_WIRE_HELLO;
	send_raw(fd, b, 16);
	n = drain_until_closed(fd, buf, sizeof(buf), 5000);
	assert_true(n >= COORD_WIRE_HDR); /* an ERROR frame came first */
	assert_int_equal(buf[4], COORD_WIRE_ERROR);
	close(fd);

	/* 3. a truncated HELLO, then the peer closes */
	fd = dial();
	n = hello(b, sizeof(b), COORD_WIRE_MAGIC, COORD_WIRE_VERSION, COORD_WIRE_VERSION);
	send_raw(fd, b, n / 2);
	shutdown(fd, SHUT_WR);
	drain_until_closed(fd, buf, sizeof(buf), 5000);
	close(fd);

	/* 4. not coord: wrong magic */
	fd = dial();
	n = hello(b, sizeof(b), 0x12345678, COORD_WIRE_VERSION, COORD_WIRE_VERSION);
	send_raw(fd, b, n);
	drain_until_closed(fd, buf, sizeof(buf), 5000);
	close(fd);

	/* 5. a version we do not speak: refused with a HELLO_ACK saying so;
	 * version 1 too (its error codes aliased errno values) */
	for (int v = 0; v < 2; v++) {
		fd = dial();
		n = hello(b, sizeof(b), COORD_WIRE_MAGIC, v ? 1 : 7, v ? 1 : 9);
		send_raw(fd, b, n);
		n = drain_until_closed(fd, buf, sizeof(buf), 5000);
		{
			struct coord_wire_hdr hd;
			struct coord_wire_hello ack;

			assert_int_equal(coord_wire_parse_hdr(buf, n, 1 << 20, &hd), 0);
			assert_int_equal(hd.type, COORD_WIRE_HELLO_ACK);
			assert_int_equal(coord_wire_get_hello(&hd, buf + COORD_WIRE_HDR, &ack), 0);
			assert_int_equal(ack.status, COORD_WIRE_BAD_VERSION);
		}
		close(fd);
	}

	/* 6. slowloris: half a frame, then nothing (the worker runs with
	 * --partial-ms 500) */
	fd = dial();
	n = hello(b, sizeof(b), COORD_WIRE_MAGIC, COORD_WIRE_VERSION, COORD_WIRE_VERSION);
	send_raw(fd, b, 10);
	drain_until_closed(fd, buf, sizeof(buf), 8000);
	close(fd);

	/* 7. a peer that sends a proof although the server holds no key */
	fd = dial();
	n = hello(b, sizeof(b), COORD_WIRE_MAGIC, COORD_WIRE_VERSION, COORD_WIRE_VERSION);
	send_raw(fd, b, n);
	{
		struct coord_wire_writer w;
		uint8_t mac[COORD_WIRE_MAC];
		struct pollfd p = { .fd = fd, .events = POLLIN };

		assert_true(poll(&p, 1, 5000) == 1); /* its HELLO_ACK */
		assert_true(recv(fd, buf, sizeof(buf), 0) > 0);
		memset(mac, 0x42, sizeof(mac));
		coord_wire_writer_init(&w, b, sizeof(b));
		assert_int_equal(coord_wire_put_auth(&w, mac), 0);
		send_raw(fd, b, w.len);
	}
	n = drain_until_closed(fd, buf, sizeof(buf), 5000);
	assert_true(n >= COORD_WIRE_HDR);
	assert_int_equal(buf[4], COORD_WIRE_ERROR);
	close(fd);

	/* the healthy coordinator was served throughout, and lost nothing */
	atomic_store(&h.stop, 1);
	pthread_join(t, NULL);
	assert_int_equal(atomic_load(&h.wrong), 0);
	assert_true(atomic_load(&h.ok) > 0);
	assert_int_equal(coord_join(h.c, NULL), 0);
	coord_destroy(h.c);
	coord_registry_destroy(reg);
}

/*
 * tcp_server P2: closures that run long on some connections of a worker
 * process do not hold back another connection's: with more long closures
 * than the server's pool has threads (one per CPU, at most 4), a short
 * closure on an idle connection of the same process still completes while
 * they run (the watchdog adds threads).
 */
static void test_long_closures_do_not_block_other_connections(void **state)
{
	struct coord_registry *reg = t_registry();
	struct coord_rv *g[6], *rv;
	struct coord_opts o;
	struct coord *c;
	uint64_t until = t_now_ns() + 10000000000ull;
	const void *v;
	size_t len;

	t_reset_counters();
	t_opts(&o, reg);
	/* 7 connections, all to the one coord-worker of this test */
	assert_int_equal(t_create(&o, 7, &c, NULL), 0);
	for (int i = 0; i < 6; i++)
		assert_int_equal(coord_schedule(c, t_fn(c, "gated"), NULL, 0, &g[i], NULL), 0);
	while (atomic_load(&t_entered) < 6 && t_now_ns() < until)
		t_sleep_ns(1000000);
	assert_int_equal(atomic_load(&t_entered), 6); /* all six run at once */
	assert_int_equal(coord_schedule(c, t_fn(c, "attempt"), NULL, 0, &rv, NULL), 0);
	assert_int_equal(coord_rv_fetch_timeout(rv, 5000000000ll, &v, &len, NULL), 0);
	assert_int_equal(atomic_load(&t_exited), 1); /* the gated ones still run */
	coord_rv_put(rv);
	atomic_store(&t_gate, 1);
	for (int i = 0; i < 6; i++) {
		assert_int_equal(coord_rv_fetch(g[i], &v, &len, NULL), 0);
		coord_rv_put(g[i]);
	}
	assert_int_equal(coord_join(c, NULL), 0);
	coord_destroy(c);
	coord_registry_destroy(reg);
	t_reset_counters();
}

/* One REQ frame of @n sleep_us(@us) calls of generation @gen, ids from @id. */
static size_t req_frame(uint8_t *b, size_t cap, uint64_t id, unsigned n, uint32_t us, uint32_t gen)
{
	struct coord_wire_writer w;

	coord_wire_writer_init(&w, b, cap);
	assert_int_equal(coord_wire_begin(&w, COORD_WIRE_REQ), 0);
	for (unsigned i = 0; i < n; i++) {
		struct coord_wire_req q = { .closure_id = id + i,
					    .attempt = 1,
					    .fn = 0,
					    .len = sizeof(us),
					    .args = &us,
					    .gen = gen };

		assert_int_equal(coord_wire_put_req(&w, &q), 0);
	}
	coord_wire_end(&w);
	return w.len;
}

/*
 * S3 at the worker (issue 20, item 1): a raw coordinator sends one REQ frame
 * of a 200 ms call and 50 short ones, then, while the long one runs, 10 more
 * short ones, a CANCEL of generation 1, and 5 calls of generation 1.  The
 * worker reads the CANCEL behind the running call: the 60 of generation 0
 * it has not started come back "not started" (COORD_ECANCELLED twice) and
 * never run; the long one and the 5 of generation 1 run.
 */
static void test_cancel_drops_what_has_not_started(void **state)
{
	static uint8_t b[65536];
	struct coord_frame_reader rd;
	struct coord_wire_writer w;
	struct coord_error err;
	struct coord_key key;
	unsigned got = 0, ran = 0, dropped = 0;
	uint64_t until = t_now_ns() + 20000000000ull;
	int fd = dial();
	size_t n;

	t_reset_counters();
	assert_int_equal(coord_key_load(NULL, &key, &err), 0);
	assert_int_equal(coord_frame_reader_init(&rd, fd, 1u << 20), 0);
	assert_int_equal(coord_handshake_client(&rd, &key, COORD_ROLE_COORDINATOR,
						COORD_ROLE_WORKER, 0, 5000, "test", &err),
			 0);
	coord_wire_writer_init(&w, b, sizeof(b));
	assert_int_equal(coord_wire_begin(&w, COORD_WIRE_FN_TABLE), 0);
	assert_int_equal(coord_wire_put_fn(&w, 0, "sleep_us"), 0);
	coord_wire_end(&w);
	send_raw(fd, b, w.len);
	n = req_frame(b, sizeof(b), 1, 1, 200000, 0);
	n += req_frame(b + n, sizeof(b) - n, 2, 50, 0, 0);
	send_raw(fd, b, n);
	while (atomic_load(&t_entered) < 1 && t_now_ns() < until)
		t_sleep_ns(1000000);
	assert_int_equal(atomic_load(&t_entered), 1); /* inside the 200 ms call */
	n = req_frame(b, sizeof(b), 52, 10, 0, 0);
	coord_wire_writer_init(&w, b + n, sizeof(b) - n);
	assert_int_equal(coord_wire_put_cancel(&w, 1), 0);
	n += w.len;
	n += req_frame(b + n, sizeof(b) - n, 62, 5, 0, 1);
	send_raw(fd, b, n);
	while (got < 66 && t_now_ns() < until) {
		struct coord_wire_hdr h;
		const uint8_t *payload;
		struct coord_wire_iter it;
		struct coord_wire_res r;

		assert_int_equal(coord_frame_read(&rd, 10000, 10000, &h, &payload), 0);
		if (h.type != COORD_WIRE_RES)
			continue; /* a keepalive PONG */
		coord_wire_iter_init(&it, &h, payload);
		while (coord_wire_next_res(&it, &r) == 1) {
			bool late = r.closure_id == 1 || r.closure_id >= 62;

			got++;
			if (late) {
				assert_int_equal(r.code, 0);
				ran++;
			} else {
				assert_int_equal(r.code, COORD_ECANCELLED);
				assert_int_equal(r.cause, COORD_ECANCELLED);
				dropped++;
			}
		}
	}
	assert_int_equal(ran, 6);
	assert_int_equal(dropped, 60);
	assert_int_equal(atomic_load(&t_entered), 6);
	coord_frame_reader_fini(&rd);
	coord_key_wipe(&key);
	close(fd);
}

static int group_setup(void **state)
{
	t_transport = "tcp";
	return t_workers_start(1) == 0 ? 0 : -1;
}

static int group_teardown(void **state)
{
	t_workers_stop();
	return 0;
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hostile_peers_refused_healthy_served),
		cmocka_unit_test(test_long_closures_do_not_block_other_connections),
		cmocka_unit_test(test_cancel_drops_what_has_not_started),
	};

	t_watchdog(120);
	return cmocka_run_group_tests_name("tcp_hostile", tests, group_setup, group_teardown);
}
