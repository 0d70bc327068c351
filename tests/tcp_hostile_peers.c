// SPDX-License-Identifier: MIT
/*
 * tests/tcp_hostile_peers.c - part of test_tcp_hostile: hostile peers
 * refused while a healthy coordinator is served, long and spinning closures
 * that do not block other connections, CANCEL dropping what has not started.
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
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <coord/var.h>

#include "transport/wire/auth.h"
#include "transport/wire/sock.h"
#include "transport/wire/wire.h"
#include "helpers.h"
#include "tcp_hostile_tests.h"

/* Peers 1-4: garbage, a 4 GiB frame header, a truncated HELLO, a wrong
 * magic; each closed by the server. */
static void hostile_framing(void)
{
	uint8_t buf[4096], b[256];
	size_t n;
	int fd;

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
}

/* Peers 5-7: versions we do not speak, half a frame then nothing, a proof
 * to a server that holds no key; each refused and closed. */
static void hostile_handshakes(void)
{
	uint8_t buf[4096], b[256];
	size_t n;
	int fd;

	/* 5. a version we do not speak: refused with a HELLO_ACK saying so;
	 * version 1 too (its error codes aliased errno values), and 2 (no
	 * closure keys: a version-2 ps would apply a re-run's update again) */
	for (int v = 0; v < 3; v++) {
		fd = dial();
		n = hello(b, sizeof(b), COORD_WIRE_MAGIC, v ? v : 7, v ? v : 9);
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
}

void test_hostile_peers_refused_healthy_served(void **state)
{
	struct coord_registry *reg = t_registry();
	struct healthy h = { 0 };
	struct coord_opts o;
	pthread_t t;

	t_reset_counters();
	t_opts(&o, reg);
	o.window = 8;
	assert_int_equal(t_create(&o, 2, &h.c, NULL), 0);
	h.add = t_fn(h.c, "add");
	pthread_create(&t, NULL, healthy_main, &h);

	hostile_framing();
	hostile_handshakes();

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
void test_long_closures_do_not_block_other_connections(void **state)
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

/*
 * P2 with closures on a CPU (not asleep): three that spin for 3 s on three
 * connections of the worker process (more than its pool's threads on a
 * 2-CPU machine) do not hold back a short closure on a fourth: the watchdog
 * adds a thread once a stuck one has run on a CPU (relief_helps()), so the
 * short one completes while they still spin.
 */
void test_spinning_closures_do_not_block_other_connections(void **state)
{
	struct coord_registry *reg = t_registry();
	struct coord_rv *g[3], *rv;
	struct coord_opts o;
	struct coord *c;
	uint32_t us = 3000000;
	uint64_t until = t_now_ns() + 10000000000ull;
	const void *v;
	size_t len;

	t_reset_counters();
	t_opts(&o, reg);
	assert_int_equal(t_create(&o, 4, &c, NULL), 0);
	for (int i = 0; i < 3; i++)
		assert_int_equal(
			coord_schedule(c, t_fn(c, "spin_us"), &us, sizeof(us), &g[i], NULL), 0);
	while (atomic_load(&t_entered) < 3 && t_now_ns() < until)
		t_sleep_ns(1000000);
	assert_int_equal(atomic_load(&t_entered), 3);
	assert_int_equal(coord_schedule(c, t_fn(c, "attempt"), NULL, 0, &rv, NULL), 0);
	assert_int_equal(coord_rv_fetch_timeout(rv, 10000000000ll, &v, &len, NULL), 0);
	assert_int_equal(atomic_load(&t_exited), 1); /* the spinning ones still run */
	coord_rv_put(rv);
	for (int i = 0; i < 3; i++) {
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
 * never run; the long one and the 5 of generation 1 run.  Since the
 * take-back (srv_take.c), what waits behind the long call may come back
 * "returned" instead, before the CANCEL arrived (never run either), and
 * the watcher answers what the CANCEL drops "not started" too.
 */
void test_cancel_drops_what_has_not_started(void **state)
{
	static uint8_t b[65536];
	struct coord_frame_reader rd;
	struct coord_wire_writer w;
	struct coord_error err;
	struct coord_key key;
	unsigned got = 0, ran = 0, dropped = 0, returned = 0;
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
			if (coord_wire_returned(&r) && r.closure_id != 1) {
				returned++; /* given back unstarted (srv_take.c) */
			} else if (late) {
				assert_int_equal(r.code, 0);
				ran++;
			} else {
				assert_int_equal(r.code, COORD_ECANCELLED);
				assert_int_equal(r.cause, COORD_ECANCELLED);
				dropped++;
			}
		}
	}
	/* What the long one held back was dropped by the CANCEL or given
	 * back unstarted (srv_take.c T2: the watcher applies the CANCEL too). */
	print_message("cancel: %u ran, %u dropped, %u given back\n", ran, dropped, returned);
	assert_int_equal(got, 66);
	assert_true(ran >= 1 && ran + returned + dropped == 66);
	assert_int_equal(atomic_load(&t_entered), ran);
	coord_frame_reader_fini(&rd);
	coord_key_wipe(&key);
	close(fd);
}
