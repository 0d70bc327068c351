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
 *
 * Then issue 21's limits, each against a coord-worker of its own (started
 * with the options the test needs, its log in a file the test reads):
 * handshake frames limited to 4 KiB before authentication (peers declaring
 * 16 MiB cost no memory), handshakes on the pool (hundreds pending add no
 * thread), max_handshakes (the excess refused, logged at most once a
 * second), accept backing off when descriptors run out (no spinning,
 * logged once, accepting again after), the descriptor limit raised at start
 * (servers) or checked (a coordinator: coord_create() fails with what it
 * needs), and idle_ms (a silent connection closed, a pinging one, a running
 * closure and a real coordinator's heartbeats kept).
 *
 * This file: main(), the test table and the raw-socket fixtures; the tests
 * are in tcp_hostile_peers.c and tcp_hostile_limits.c, linked into the same
 * executable (tcp_hostile_tests.h).
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

/* Keep a stream of closures going until told to stop; check each value. */
void *healthy_main(void *arg)
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

int dial(void)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	a.sin_port = htons((uint16_t)t_worker_port(0));
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	return fd;
}

/* Read until the server closes (bounded); returns the bytes received. */
size_t drain_until_closed(int fd, uint8_t *buf, size_t cap, int timeout_ms)
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

void send_raw(int fd, const void *p, size_t n)
{
	assert_int_equal(send(fd, p, n, MSG_NOSIGNAL), (ssize_t)n);
}

/* A valid HELLO frame into @b (version range @vmin..@vmax, magic @magic). */
size_t hello(uint8_t *b, size_t cap, uint32_t magic, uint16_t vmin, uint16_t vmax)
{
	struct coord_wire_writer w;
	struct coord_wire_hello h = {
		.magic = magic, .vmin = vmin, .vmax = vmax, .role = COORD_ROLE_COORDINATOR
	};

	coord_wire_writer_init(&w, b, cap);
	assert_int_equal(coord_wire_put_hello(&w, COORD_WIRE_HELLO, &h), 0);
	return w.len;
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

int main(int argc, char **argv)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_hostile_peers_refused_healthy_served),
		cmocka_unit_test(test_long_closures_do_not_block_other_connections),
		cmocka_unit_test(test_spinning_closures_do_not_block_other_connections),
		cmocka_unit_test(test_cancel_drops_what_has_not_started),
		cmocka_unit_test(test_handshake_frames_limited),
		cmocka_unit_test(test_handshakes_pending_bounded),
		cmocka_unit_test(test_accept_backs_off_without_descriptors),
		cmocka_unit_test(test_server_raises_descriptor_limit),
		cmocka_unit_test(test_coordinator_descriptor_limit),
		cmocka_unit_test(test_idle_connections_closed),
		cmocka_unit_test(test_idle_ps_connections_kept_by_heartbeats),
	};

	if (argc == 2 && !strcmp(argv[1], "--create-100"))
		return create_100();
	t_watchdog(180);
	return cmocka_run_group_tests_name("tcp_hostile", tests, group_setup, group_teardown);
}
