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

/*
 * P2 with closures on a CPU (not asleep): three that spin for 3 s on three
 * connections of the worker process (more than its pool's threads on a
 * 2-CPU machine) do not hold back a short closure on a fourth: the watchdog
 * adds a thread once a stuck one has run on a CPU (relief_helps()), so the
 * short one completes while they still spin.
 */
static void test_spinning_closures_do_not_block_other_connections(void **state)
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

/* ---- issue 21: limits, each against a coord-worker of its own ---------------------- */

static char srv_log[64];

/* A coord-worker with @extra options (NULL-terminated), logging at @level
 * to srv_log (truncated first); its pid, *@port its port.  @wrap: a
 * command to run it under (prlimit ...), or NULL. */
static pid_t srv_spawn(unsigned *port, const char *level, const char *const *wrap,
		       const char *const *extra)
{
	const char *argv[32];
	unsigned n = 0;
	pid_t pid;

	snprintf(srv_log, sizeof(srv_log), "/tmp/coord_hostile_%d.log", (int)getpid());
	unlink(srv_log);
	for (; wrap && *wrap; wrap++)
		argv[n++] = *wrap;
	argv[n++] = getenv("COORD_WORKER_BIN");
	argv[n++] = "--fns";
	argv[n++] = getenv("COORD_TESTFNS");
	argv[n++] = "--listen";
	argv[n++] = "127.0.0.1:0";
	argv[n++] = "--log";
	argv[n++] = level;
	for (; extra && *extra && n < 31; extra++)
		argv[n++] = *extra;
	argv[n] = NULL;
	setenv("T_SERVER_STDERR", srv_log, 1);
	pid = t_spawn((char *const *)argv, "coord-worker", port);
	unsetenv("T_SERVER_STDERR");
	assert_true(pid > 0);
	return pid;
}

/* Lines of the server's log that contain @needle. */
static unsigned log_count(const char *needle)
{
	char line[1024];
	unsigned n = 0;
	FILE *f = fopen(srv_log, "re");

	if (!f)
		return 0;
	while (fgets(line, sizeof(line), f))
		n += strstr(line, needle) != NULL;
	fclose(f);
	return n;
}

static int dial_port(unsigned port)
{
	struct sockaddr_in a = { .sin_family = AF_INET };
	int fd = socket(AF_INET, SOCK_STREAM, 0);

	a.sin_port = htons((uint16_t)port);
	a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	assert_int_equal(connect(fd, (struct sockaddr *)&a, sizeof(a)), 0);
	return fd;
}

/* A number from /proc/@pid/@file after "@field:" (status: kB, Threads; limits). */
static long proc_field(pid_t pid, const char *file, const char *field)
{
	char path[64], line[256];
	size_t fl = strlen(field);
	long v = -1;
	FILE *f;

	snprintf(path, sizeof(path), "/proc/%d/%s", (int)pid, file);
	f = fopen(path, "re");
	assert_non_null(f);
	while (fgets(line, sizeof(line), f))
		if (!strncmp(line, field, fl)) {
			char *p = line + fl;

			while (*p == ' ' || *p == ':')
				p++;
			v = strtol(p, NULL, 10);
			break;
		}
	fclose(f);
	return v;
}

/* The CPU time @pid has used, in clock ticks (user + system). */
static long cpu_ticks(pid_t pid)
{
	char path[64], buf[1024], *p;
	unsigned long ut = 0, st = 0;
	FILE *f;
	size_t n;

	snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
	f = fopen(path, "re");
	assert_non_null(f);
	n = fread(buf, 1, sizeof(buf) - 1, f);
	fclose(f);
	buf[n] = 0;
	p = strrchr(buf, ')');
	assert_non_null(p);
	assert_int_equal(
		sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st), 2);
	return (long)(ut + st);
}

/* Send a HELLO on @fd and read the answer's frame type (5 s at most). */
static uint16_t hello_answer(int fd)
{
	struct pollfd p = { .fd = fd, .events = POLLIN };
	uint8_t b[512];
	size_t n = hello(b, sizeof(b), COORD_WIRE_MAGIC, COORD_WIRE_VERSION, COORD_WIRE_VERSION);

	send_raw(fd, b, n);
	assert_int_equal(poll(&p, 1, 5000), 1);
	assert_true(recv(fd, b, sizeof(b), 0) >= COORD_WIRE_HDR);
	return b[4];
}

/* A whole coordinator handshake on @fd and a FN_TABLE naming sleep_us as
 * function 0 (no PING: the server knows no heartbeat); @rd is left open. */
static void raw_coordinator(int fd, struct coord_frame_reader *rd)
{
	struct coord_wire_writer w;
	struct coord_error err;
	struct coord_key key;
	uint8_t b[256];

	assert_int_equal(coord_key_load(NULL, &key, &err), 0);
	assert_int_equal(coord_frame_reader_init(rd, fd, 1u << 20), 0);
	assert_int_equal(coord_handshake_client(rd, &key, COORD_ROLE_COORDINATOR, COORD_ROLE_WORKER,
						0, 5000, "test", &err),
			 0);
	coord_key_wipe(&key);
	coord_wire_writer_init(&w, b, sizeof(b));
	assert_int_equal(coord_wire_begin(&w, COORD_WIRE_FN_TABLE), 0);
	assert_int_equal(coord_wire_put_fn(&w, 0, "sleep_us"), 0);
	coord_wire_end(&w);
	send_raw(fd, b, w.len);
}

/*
 * H1: a peer not yet authenticated may not declare a frame larger than the
 * handshake's 4 KiB: refused from the header with an ERROR frame, before any
 * buffer grows, so 200 peers each declaring 16 MiB and sending 256 KiB add
 * (far) less than 32 MiB to the server's peak RSS (before: 16 MiB each).
 */
static void test_handshake_frames_limited(void **state)
{
	static const char *const opts[] = { "--max-handshakes", "4096", NULL };
	static uint8_t junk[256 * 1024];
	unsigned port;
	pid_t pid = srv_spawn(&port, "error", NULL, opts);
	long hwm0 = proc_field(pid, "status", "VmHWM"), hwm;
	uint8_t h[COORD_WIRE_HDR], buf[4096];
	int fds[200];
	size_t n;

	for (int i = 0; i < 200; i++) {
		uint32_t len = i ? 16u << 20 : COORD_WIRE_HS_MAX_FRAME + 1;

		memset(h, 0, sizeof(h));
		memcpy(h, &len, 4);
		h[4] = COORD_WIRE_HELLO;
		h[8] = 1;
		fds[i] = dial_port(port);
		send_raw(fds[i], h, sizeof(h));
		(void)!send(fds[i], junk, sizeof(junk), MSG_NOSIGNAL | MSG_DONTWAIT);
	}
	for (int i = 0; i < 200; i++) {
		n = drain_until_closed(fds[i], buf, sizeof(buf), 5000);
		if (i < 2) { /* the first ones get their ERROR before any reset */
			assert_true(n >= COORD_WIRE_HDR);
			assert_int_equal(buf[4], COORD_WIRE_ERROR);
		}
		close(fds[i]);
	}
	hwm = proc_field(pid, "status", "VmHWM");
	assert_true(hwm0 > 0 && hwm - hwm0 < 32 * 1024);
	t_reap(pid);
}

/*
 * H1: handshakes run on the pool: 300 peers in the handshake at once (HELLO
 * answered, AUTH not sent) add no thread to the server; with
 * --max-handshakes 300 the 301st is refused with an ERROR frame, and the
 * refusals of a burst are logged once; after one handshake is over, a new
 * peer is answered again.
 */
static void test_handshakes_pending_bounded(void **state)
{
	static const char *const opts[] = { "--max-handshakes", "300", NULL };
	unsigned port;
	pid_t pid = srv_spawn(&port, "warn", NULL, opts);
	long threads = proc_field(pid, "status", "Threads");
	uint8_t mac[COORD_WIRE_MAC] = { 0 }, b[64];
	struct coord_wire_writer w;
	int fds[300], extra[20], fd;

	for (int i = 0; i < 300; i++) {
		fds[i] = dial_port(port);
		assert_int_equal(hello_answer(fds[i]), COORD_WIRE_HELLO_ACK);
	}
	assert_int_equal(proc_field(pid, "status", "Threads"), threads);
	for (int i = 0; i < 20; i++) { /* the excess, in well under a second */
		extra[i] = dial_port(port);
		assert_int_equal(hello_answer(extra[i]), COORD_WIRE_ERROR);
	}
	for (int i = 0; i < 20; i++)
		close(extra[i]);
	/* one handshake done (a proof of zeros: the server is keyless) */
	coord_wire_writer_init(&w, b, sizeof(b));
	assert_int_equal(coord_wire_put_auth(&w, mac), 0);
	send_raw(fds[0], b, w.len);
	for (int k = 0;; k++) { /* bounded: the server counts it done within 5 s */
		fd = dial_port(port);
		if (hello_answer(fd) == COORD_WIRE_HELLO_ACK)
			break;
		close(fd);
		assert_true(k < 500);
		t_sleep_ns(10000000);
	}
	close(fd);
	for (int i = 0; i < 300; i++)
		close(fds[i]);
	assert_true(log_count("server busy") == 0); /* said to peers, not logged per peer */
	assert_true(log_count("refused") >= 1 &&
		    log_count("connections in the last second") +
				    log_count("connection in the last second") <=
			    2);
	t_reap(pid);
}

/*
 * A1: with its descriptors used up (limit lowered to 64 under it) and more
 * peers waiting, the server does not spin on accept (under 20% of a CPU
 * over a second; a spinning acceptor takes most of one), says so once per
 * episode, and once descriptors are free it accepts again: a coordinator's
 * handshake goes through.
 */
static void test_accept_backs_off_without_descriptors(void **state)
{
	struct rlimit rl = { .rlim_cur = 64, .rlim_max = 64 };
	struct coord_frame_reader rd;
	unsigned port;
	pid_t pid = srv_spawn(&port, "warn", NULL, NULL);
	long hz = sysconf(_SC_CLK_TCK), t0, t1;
	int fds[100], fd;

	assert_int_equal(prlimit(pid, RLIMIT_NOFILE, &rl, NULL), 0);
	for (int i = 0; i < 100; i++)
		fds[i] = dial_port(port); /* the kernel completes them: the backlog */
	t_sleep_ns(300000000);
	t0 = cpu_ticks(pid);
	t_sleep_ns(1000000000);
	t1 = cpu_ticks(pid);
	assert_true(t1 - t0 < hz / 5);
	assert_int_equal(log_count("cannot accept"), 1);
	for (int i = 0; i < 100; i++)
		close(fds[i]);
	fd = dial_port(port);
	raw_coordinator(fd, &rd); /* accepted and served again (5 s bound) */
	coord_frame_reader_fini(&rd);
	close(fd);
	/* the backlog's closed peers may use the freed descriptors up again
	 * for a moment: an episode or two more, each logged once */
	assert_true(log_count("accepting again") >= 1);
	assert_true(log_count("cannot accept") <= 5);
	t_reap(pid);
}

/* A1: a server raises its soft descriptor limit to the hard one at start,
 * and says so. */
static void test_server_raises_descriptor_limit(void **state)
{
	static const char *const wrap[] = { "/usr/bin/prlimit", "--nofile=200:3000", NULL };
	unsigned port;
	pid_t pid;

	if (access(wrap[0], X_OK) != 0)
		skip();
	pid = srv_spawn(&port, "info", wrap, NULL);
	assert_int_equal(proc_field(pid, "limits", "Max open files"), 3000);
	assert_int_equal(log_count("descriptor limit 3000 (was 200"), 1);
	t_reap(pid);
}

/*
 * The child of create_limited(), run as this binary with --create-100 (an
 * exec, not a fork alone: a sanitizer's runtime may not start threads in
 * the fork of a threaded process): coord_create() over tcp for 100 workers
 * at no address that answers; prints its return code, the soft limit it
 * ended with and the message.
 */
static int create_100(void)
{
	struct coord_registry *reg = t_registry();
	struct coord_error err = { 0 };
	struct coord_spec *spec = NULL;
	struct coord_opts o;
	struct coord *c = NULL;
	char json[4096] = "{\"worker\": [";
	struct rlimit rl;
	int r;

	for (int i = 0; i < 100; i++) /* port 1: refused at once */
		strcat(json, i ? ",\"127.0.0.1:1\"" : "\"127.0.0.1:1\"");
	strcat(json, "]}");
	if (coord_spec_parse(json, &spec, &err) < 0)
		return 100;
	coord_opts_init(&o);
	o.registry = reg;
	o.transport = "tcp";
	o.connect_timeout_ms = 200;
	r = coord_create(spec, &o, &c, &err);
	if (r == 0)
		coord_destroy(c);
	getrlimit(RLIMIT_NOFILE, &rl);
	printf("%d %lu %s\n", r, (unsigned long)rl.rlim_cur, err.msg);
	coord_spec_destroy(spec);
	coord_registry_destroy(reg);
	return 0;
}

/* Run create_100() with a descriptor limit of @soft:@hard; its return
 * code, the soft limit it ended with in *@got, its message in @msg. */
static int create_limited(rlim_t soft, rlim_t hard, long *got, char *msg, size_t cap)
{
	char out[512] = "", *end;
	size_t n = 0;
	int p[2], st = 0, r;
	pid_t pid;

	assert_int_equal(pipe(p), 0);
	pid = fork();
	if (pid == 0) {
		struct rlimit rl = { .rlim_cur = soft, .rlim_max = hard };

		dup2(p[1], 1);
		close(p[0]);
		close(p[1]);
		if (setrlimit(RLIMIT_NOFILE, &rl) == 0)
			execl("/proc/self/exe", "test_tcp_hostile", "--create-100", (char *)NULL);
		_exit(127);
	}
	close(p[1]);
	for (ssize_t k; n < sizeof(out) - 1 && (k = read(p[0], out + n, sizeof(out) - 1 - n)) > 0;)
		n += (size_t)k;
	out[n] = 0;
	close(p[0]);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
	r = (int)strtol(out, &end, 10);
	*got = strtol(end, &end, 10);
	snprintf(msg, cap, "%s", *end ? end + 1 : "");
	return r;
}

/*
 * Issue 27: a coordinator raises its soft descriptor limit to the hard
 * one; one whose hard limit cannot hold its connections fails
 * coord_create() with -EMFILE and a message saying how many it needs and
 * how to raise it (100 workers: 100 + 64 of its own).
 */
static void test_coordinator_descriptor_limit(void **state)
{
	char msg[512];
	long got = 0;

	assert_int_equal(create_limited(64, 64, &got, msg, sizeof(msg)), -EMFILE);
	assert_int_equal(got, 64);
	assert_non_null(strstr(msg, "needs 164 descriptors"));
	assert_non_null(strstr(msg, "ulimit -Hn 164"));
	/* raised to the hard limit: then it fails dialing, not for descriptors */
	assert_int_not_equal(create_limited(64, 4096, &got, msg, sizeof(msg)), -EMFILE);
	assert_int_equal(got, 4096);
}

/* Read frames on @rd until one that is not a PONG (5 s): its type; 0 at EOF. */
static uint16_t next_frame(struct coord_frame_reader *rd, struct coord_wire_hdr *h,
			   const uint8_t **payload)
{
	for (;;) {
		int r = coord_frame_read(rd, 5000, 5000, h, payload);

		if (r == -EPIPE || r == -ECONNRESET)
			return 0;
		assert_int_equal(r, 0);
		if (h->type != COORD_WIRE_PONG)
			return h->type;
	}
}

/* Send a PING with @token on @fd and read its PONG (or what came instead). */
static uint16_t ping(int fd, struct coord_frame_reader *rd, uint64_t token)
{
	struct coord_wire_writer w;
	struct coord_wire_hdr h;
	const uint8_t *payload;
	uint8_t b[64];

	coord_wire_writer_init(&w, b, sizeof(b));
	assert_int_equal(coord_wire_put_ping(&w, COORD_WIRE_PING, token), 0);
	send_raw(fd, b, w.len);
	assert_int_equal(coord_frame_read(rd, 5000, 5000, &h, &payload), 0);
	return h.type;
}

/*
 * I1: with --idle-ms 2000, an authenticated connection that sends nothing
 * is closed with an ERROR frame saying so, after the limit; one that pings
 * every 100 ms stays open for 4 s; one that announced a 1 s heartbeat (its
 * limit: 4 s) is still open after 3 s of silence; a closure that runs 2.5 s
 * (nothing received meanwhile) still returns its result; and a real
 * coordinator (400 ms heartbeats) idle for 4 s loses no worker.  Margins of
 * seconds against pauses of 100-400 ms: a loaded machine does not stall a
 * process that long.
 */
static void test_idle_connections_closed(void **state)
{
	static const char *const opts[] = { "--idle-ms", "2000", NULL };
	struct coord_registry *reg = t_registry();
	struct coord_frame_reader rd;
	struct coord_wire_writer w;
	struct coord_wire_hdr h;
	const uint8_t *payload;
	struct coord_metrics m;
	struct coord_opts o;
	struct coord *c;
	struct coord_rv *rv;
	unsigned port;
	pid_t pid = srv_spawn(&port, "warn", NULL, opts);
	uint64_t t0;
	uint8_t b[256];
	char json[128];
	struct coord_spec *spec;
	struct coord_error err;
	int fd;

	/* silent: closed after about 2 s */
	fd = dial_port(port);
	t0 = t_now_ns();
	raw_coordinator(fd, &rd);
	assert_int_equal(next_frame(&rd, &h, &payload), COORD_WIRE_ERROR);
	assert_true(t_now_ns() - t0 >= 1900000000ull);
	assert_int_equal(next_frame(&rd, &h, &payload), 0);
	coord_frame_reader_fini(&rd);
	close(fd);
	assert_int_equal(log_count("idle"), 1);

	/* pinging every 100 ms: open after 4 s */
	fd = dial_port(port);
	raw_coordinator(fd, &rd);
	for (int i = 0; i < 40; i++) {
		assert_int_equal(ping(fd, &rd, 100), COORD_WIRE_PONG);
		t_sleep_ns(100000000);
	}
	/* a 1 s heartbeat announced: 3 s of silence are within its limit */
	assert_int_equal(ping(fd, &rd, 1000), COORD_WIRE_PONG);
	t_sleep_ns(3000000000ull);
	assert_int_equal(ping(fd, &rd, 1000), COORD_WIRE_PONG);
	/* then a 2.5 s closure with nothing sent meanwhile: its result (the
	 * server's keepalive PONGs may come first) */
	{
		uint32_t us = 2500000;
		struct coord_wire_req q = {
			.closure_id = 1, .attempt = 1, .fn = 0, .len = sizeof(us), .args = &us
		};
		struct coord_wire_iter it;
		struct coord_wire_res res;

		coord_wire_writer_init(&w, b, sizeof(b));
		assert_int_equal(coord_wire_begin(&w, COORD_WIRE_REQ), 0);
		assert_int_equal(coord_wire_put_req(&w, &q), 0);
		coord_wire_end(&w);
		send_raw(fd, b, w.len);
		assert_int_equal(next_frame(&rd, &h, &payload), COORD_WIRE_RES);
		coord_wire_iter_init(&it, &h, payload);
		assert_int_equal(coord_wire_next_res(&it, &res), 1);
		assert_int_equal(res.code, 0);
	}
	coord_frame_reader_fini(&rd);
	close(fd);
	assert_int_equal(log_count("idle"), 1); /* only the silent one */

	/* a real coordinator: its heartbeats keep its connection */
	snprintf(json, sizeof(json), "{\"worker\": [\"127.0.0.1:%u\"]}", port);
	assert_int_equal(coord_spec_parse(json, &spec, &err), 0);
	coord_opts_init(&o);
	o.registry = reg;
	o.transport = "tcp";
	o.heartbeat_ms = 400;
	o.heartbeat_misses = 10;
	assert_int_equal(coord_create(spec, &o, &c, &err), 0);
	t_sleep_ns(4000000000ull);
	assert_int_equal(coord_schedule(c, t_fn(c, "attempt"), NULL, 0, &rv, NULL), 0);
	assert_int_equal(coord_rv_fetch_timeout(rv, 5000000000ll, NULL, NULL, NULL), 0);
	coord_rv_put(rv);
	assert_int_equal(coord_metrics(c, &m, NULL, 0), 0);
	assert_int_equal(m.losses, 0);
	assert_int_equal(log_count("idle"), 1);
	coord_destroy(c);
	coord_spec_destroy(spec);
	coord_registry_destroy(reg);
	t_reap(pid);
}

/* Schedule @fn(@a) and fetch it (10 s); its code (the value into @out). */
static int run_var(struct coord *c, const char *fn, const struct t_var_args *a, float *out)
{
	struct coord_rv *rv;
	const void *v = NULL;
	size_t len = 0;
	int r;

	assert_int_equal(coord_schedule(c, t_fn(c, fn), a, sizeof(*a), &rv, NULL), 0);
	r = coord_rv_fetch_timeout(rv, 10000000000ll, &v, &len, NULL);
	if (r == 0 && out && len == sizeof(*out))
		memcpy(out, v, sizeof(*out));
	coord_rv_put(rv);
	return r;
}

/*
 * I1 at a ps (--idle-ms 3000): the coordinator's and the worker's
 * connections to it carry the ps clients' heartbeats (VAR_SYNC, about every
 * 750 ms by default), so through pauses longer than the idle limit the ps
 * closes none of them, and every variable operation succeeds: nothing
 * fails, the sum is exact.
 */
static void test_idle_ps_connections_kept_by_heartbeats(void **state)
{
	const char *argv[] = { getenv("COORD_PS_BIN"),
			       "--listen",
			       "127.0.0.1:0",
			       "--task",
			       "0",
			       "--log",
			       "warn",
			       "--idle-ms",
			       "3000",
			       "--ckpt-root",
			       "/tmp",
			       NULL };
	struct coord_registry *reg = t_registry();
	struct t_var_args a = { .off = 0, .n = 1, .val = 1.0f };
	struct coord_spec *spec;
	struct coord_error err;
	struct coord_opts o;
	struct coord *c;
	uint64_t dims[1] = { 4 };
	unsigned port;
	char json[160];
	float got = 0;
	pid_t pid;

	snprintf(srv_log, sizeof(srv_log), "/tmp/coord_hostile_%d.log", (int)getpid());
	unlink(srv_log);
	setenv("T_SERVER_STDERR", srv_log, 1);
	pid = t_spawn((char *const *)argv, "coord-ps", &port);
	unsetenv("T_SERVER_STDERR");
	assert_true(pid > 0);
	snprintf(json, sizeof(json), "{\"worker\": [\"127.0.0.1:%u\"], \"ps\": [\"127.0.0.1:%u\"]}",
		 t_worker_port(0), port);
	assert_int_equal(coord_spec_parse(json, &spec, &err), 0);
	coord_opts_init(&o);
	o.registry = reg;
	o.transport = "tcp";
	o.ps_failure_threshold = 0; /* any ps failure would be returned */
	assert_int_equal(coord_create(spec, &o, &c, &err), 0);
	assert_int_equal(coord_var_create(c, "idle", 1, dims, NULL, &a.var, &err), 0);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(run_var(c, "var_add", &a, NULL), 0);
		t_sleep_ns(3500000000ull); /* longer than the idle limit */
	}
	assert_int_equal(run_var(c, "var_read", &a, &got), 0);
	assert_true(got == 3.0f);
	{
		float v[4];

		assert_int_equal(coord_var_read(c, a.var, 0, 4, v, &err), 0);
		assert_true(v[0] == 3.0f);
	}
	assert_int_equal(coord_join(c, &err), 0);
	assert_int_equal(log_count("idle"), 0);
	coord_destroy(c);
	coord_spec_destroy(spec);
	coord_registry_destroy(reg);
	t_reap(pid);
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
