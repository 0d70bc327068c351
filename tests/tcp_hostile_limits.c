// SPDX-License-Identifier: MIT
/*
 * tests/tcp_hostile_limits.c - part of test_tcp_hostile: issue 21's limits,
 * each against a coord-worker of its own (handshake frames, pending
 * handshakes, accept without descriptors, descriptor limits, idle
 * connections and heartbeats).
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
void test_handshake_frames_limited(void **state)
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
void test_handshakes_pending_bounded(void **state)
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
void test_accept_backs_off_without_descriptors(void **state)
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
void test_server_raises_descriptor_limit(void **state)
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
int create_100(void)
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
void test_coordinator_descriptor_limit(void **state)
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
void test_idle_connections_closed(void **state)
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
void test_idle_ps_connections_kept_by_heartbeats(void **state)
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
