// SPDX-License-Identifier: MIT
/*
 * tests/test_ps.c - parameter-server variables (coord/var.h), the same test
 * bodies over the inproc transport (stores in this process) and over tcp
 * (4 coord-worker processes and 2 coord-ps processes on loopback, reached
 * by the coordinator and, through their ctx, by the worker functions).
 * Then, over tcp only: a peer with the wrong cluster key (at a ps and at a
 * worker, real processes), hostile bytes at a ps, and a ps that dies.
 * Every loop is bounded in count and time (t_watchdog).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <coord/var.h>

#include "transport/wire.h"
#include "helpers.h"

#define NW 4
#define NPS 2

static struct coord_registry *reg;

/* A closure's outcome (bounded wait), its value copied out. */
struct out {
	int code;
	size_t len;
	uint8_t val[256];
	struct coord_error err;
};

static int fetch(struct coord_rv *rv, struct out *o)
{
	const void *v = NULL;

	memset(o, 0, sizeof(*o));
	o->code = coord_rv_fetch_timeout(rv, 30000000000ll, &v, &o->len, &o->err);
	if (o->code == 0 && o->len <= sizeof(o->val) && o->len)
		memcpy(o->val, v, o->len);
	coord_rv_put(rv);
	return o->code;
}

static pid_t ps_pid[NPS];
static unsigned ps_port[NPS];

static int ps_start(unsigned i, const char *key)
{
	const char *bin = getenv("COORD_PS_BIN");
	char task[16];
	const char *log = getenv("T_WORKER_LOG") ? getenv("T_WORKER_LOG") : "error";
	char *argv[] = { (char *)bin, "--listen",    "127.0.0.1:0", "--task", task, "--log",
			 (char *)log, "--ckpt-root", "/tmp",	    NULL,     NULL, NULL };

	if (!bin)
		return -1;
	snprintf(task, sizeof(task), "%u", i);
	if (key) {
		argv[9] = "--key";
		argv[10] = (char *)key;
	}
	ps_pid[i] = t_spawn(argv, "coord-ps", &ps_port[i]);
	return ps_pid[i] < 0 ? -1 : 0;
}

/*
 * The cluster: 4 workers; 2 ps tasks (processes over tcp, stores inproc),
 * with the given S11/S12 options (-1: the defaults).
 */
static int create_opts(int threshold, int exit_code, struct coord **c, struct coord_error *err)
{
	struct coord_opts o;
	struct coord_spec *spec = NULL;
	char json[512], *w;
	int r;

	t_opts(&o, reg);
	o.ps_failure_threshold = threshold;
	o.restart_exit_code = exit_code;
	if (strcmp(t_transport, "tcp") != 0) {
		o.inproc_workers = NW;
		o.inproc_ps = NPS;
		return coord_create(NULL, &o, c, err);
	}
	w = t_spec_json(NW);
	w[strlen(w) - 1] = 0; /* drop the closing brace */
	snprintf(json, sizeof(json), "%s, \"ps\": [\"127.0.0.1:%u\", \"127.0.0.1:%u\"]}", w,
		 ps_port[0], ps_port[1]);
	free(w);
	r = coord_spec_parse(json, &spec, err);
	if (r == 0)
		r = coord_create(spec, &o, c, err);
	coord_spec_destroy(spec);
	return r;
}

static int create(struct coord **c, struct coord_error *err)
{
	return create_opts(-1, -1, c, err);
}

static struct coord *make(void)
{
	struct coord_error err;
	struct coord *c = NULL;

	if (create(&c, &err) != 0) {
		print_error("create: %s\n", err.msg);
		fail();
	}
	return c;
}

static void destroy(struct coord *c)
{
	coord_destroy(c);
}

static coord_var_t var(struct coord *c, const char *name, unsigned ndim, const uint64_t *dims)
{
	struct coord_error err;
	coord_var_t v;

	if (coord_var_create(c, name, ndim, dims, NULL, &v, &err) != 0) {
		print_error("coord_var_create(%s): %s\n", name, err.msg);
		fail();
	}
	return v;
}

static struct coord_rv *sched(struct coord *c, const char *fn, const void *args, size_t len)
{
	struct coord_rv *rv;
	struct coord_error err;

	if (coord_schedule(c, t_fn(c, fn), args, len, &rv, &err) != 0) {
		print_error("schedule %s: %s\n", fn, err.msg);
		fail();
	}
	return rv;
}

static void join_ok(struct coord *c)
{
	struct coord_error err;

	if (coord_join(c, &err) != 0) {
		print_error("join: %s\n", err.msg);
		fail();
	}
}

/* 4 workers x 10,000 closures, each assign_add of 1 on a ps variable: exact. */
static void test_assign_add_exact(void **state)
{
	struct coord *c = make();
	uint64_t dims[1] = { 4 };
	coord_var_t v[8];
	unsigned tasks = 0;
	float got[4];
	char name[8];

	(void)state;
	for (int i = 0; i < 8; i++) {
		snprintf(name, sizeof(name), "v%d", i);
		v[i] = var(c, name, 1, dims);
		tasks |= 1u << (v[i] >> 32);
	}
	assert_int_equal(tasks, 3); /* both ps tasks hold variables */
	for (int i = 0; i < NW * 10000; i++) {
		struct t_var_args a = { .var = v[i % 2], .off = 0, .n = 4, .val = 1.0f };

		coord_rv_put(sched(c, "var_add", &a, sizeof(a)));
	}
	join_ok(c);
	for (int k = 0; k < 2; k++) {
		assert_int_equal(coord_var_read(c, v[k], 0, 4, got, NULL), 0);
		for (int j = 0; j < 4; j++)
			assert_true(got[j] == NW * 10000 / 2);
	}
	destroy(c);
}

static void test_scatter_add(void **state)
{
	struct coord *c = make();
	uint64_t dims[2] = { 6, 3 };
	coord_var_t v = var(c, "emb", 2, dims);
	struct {
		struct t_var_args a;
		int64_t idx[3];
	} s = { { .var = v, .off = 3, .n = 3, .val = 2.0f }, { 1, 4, 1 } };
	struct out res;
	struct coord_error err;
	struct coord_rv *rv;
	float got[18], before[18];

	(void)state;
	rv = sched(c, "var_scatter", &s, sizeof(s));
	assert_int_equal(fetch(rv, &res), 0);
	assert_int_equal(coord_var_read(c, v, 0, 18, got, NULL), 0);
	for (int r = 0; r < 6; r++)
		for (int e = 0; e < 3; e++)
			assert_true(got[3 * r + e] == (r == 1 ? 4.0f : r == 4 ? 2.0f : 0.0f));
	/* One bad index fails the op and changes nothing. */
	memcpy(before, got, sizeof(got));
	s.idx[2] = 6;
	rv = sched(c, "var_scatter", &s, sizeof(s));
	assert_int_equal(fetch(rv, &res), -ERANGE);
	assert_non_null(strstr(res.err.msg, "6"));
	assert_int_equal(coord_join(c, &err), -ERANGE);
	/* The wrong row length is refused by the ps. */
	s.idx[2] = 0;
	s.a.off = 2;
	rv = sched(c, "var_scatter", &s, sizeof(s));
	assert_int_equal(fetch(rv, &res), COORD_EINVAL);
	assert_non_null(strstr(res.err.msg, "scatter_add"));
	assert_int_equal(coord_join(c, &err), COORD_EINVAL);
	assert_int_equal(coord_var_read(c, v, 0, 18, got, NULL), 0);
	assert_memory_equal(got, before, sizeof(got));
	destroy(c);
}

/* A worker resolves a name to the coordinator's handle; batches; reads. */
static void test_lookup_batch_read(void **state)
{
	struct coord *c = make();
	uint64_t dims[2] = { 2, 5 };
	float init[10], got[10];
	struct t_var_args a;
	struct out res;
	struct coord_rv *rv;
	coord_var_t v;
	uint64_t out[2];

	(void)state;
	for (int i = 0; i < 10; i++)
		init[i] = (float)i;
	assert_int_equal(coord_var_create(c, "x", 2, dims, init, &v, NULL), 0);
	rv = sched(c, "var_lookup", "x", 1);
	assert_int_equal(fetch(rv, &res), 0);
	assert_int_equal(res.len, sizeof(out));
	memcpy(out, res.val, sizeof(out));
	assert_int_equal(out[0], v);
	assert_int_equal(out[1], 10);
	rv = sched(c, "var_lookup", "nope", 4);
	assert_int_equal(fetch(rv, &res), -ENOENT);
	assert_non_null(strstr(res.err.msg, "nope"));
	assert_int_equal(coord_join(c, NULL), -ENOENT);
	/* One frame: += 0.5 on [3, 8), then read it back. */
	a = (struct t_var_args){ .var = v, .off = 3, .n = 5, .val = 0.5f };
	rv = sched(c, "var_batch", &a, sizeof(a));
	assert_int_equal(fetch(rv, &res), 0);
	assert_int_equal(res.len, 20);
	memcpy(got, res.val, 20);
	for (int i = 0; i < 5; i++)
		assert_true(got[i] == (float)(3 + i) + 0.5f);
	/* Coordinator side: read a range, assign, read through a worker. */
	assert_int_equal(coord_var_read(c, v, 0, 10, got, NULL), 0);
	assert_true(got[0] == 0.0f && got[3] == 3.5f && got[9] == 9.0f);
	for (int i = 0; i < 10; i++)
		init[i] = -1.0f * (float)i;
	assert_int_equal(coord_var_assign(c, v, 0, 10, init, NULL), 0);
	a = (struct t_var_args){ .var = v, .off = 8, .n = 2 };
	rv = sched(c, "var_read", &a, sizeof(a));
	assert_int_equal(fetch(rv, &res), 0);
	memcpy(got, res.val, 8);
	assert_true(got[0] == -8.0f && got[1] == -9.0f);
	join_ok(c);
	destroy(c);
}

static void test_errors(void **state)
{
	struct coord *c = make();
	uint64_t dims[1] = { 3 }, other[1] = { 4 }, zero[1] = { 0 };
	struct coord_error err;
	coord_var_t v = var(c, "e", 1, dims), v2;
	float buf[8];

	(void)state;
	assert_int_equal(coord_num_ps(c), NPS);
	assert_int_equal(coord_var_create(c, "bad name!", 1, dims, NULL, &v2, &err), COORD_EINVAL);
	assert_int_equal(coord_var_create(c, "", 1, dims, NULL, &v2, &err), COORD_EINVAL);
	assert_int_equal(coord_var_create(c, "z", 1, zero, NULL, &v2, &err), COORD_EINVAL);
	/* same name, same shape: the same variable; another shape: refused */
	assert_int_equal(coord_var_create(c, "e", 1, dims, NULL, &v2, &err), 0);
	assert_int_equal(v2, v);
	assert_int_equal(coord_var_create(c, "e", 1, other, NULL, &v2, &err), -EEXIST);
	assert_non_null(strstr(err.msg, "e"));
	assert_int_equal(coord_var_read(c, v, 2, 2, buf, &err), COORD_EINVAL);
	assert_int_equal(coord_var_read(c, v | 0xfffff, 0, 1, buf, &err), -ENOENT);
	assert_int_equal(coord_var_read(c, ((coord_var_t)7 << 32) | 1, 0, 1, buf, &err),
			 COORD_EINVAL);
	assert_non_null(strstr(err.msg, "ps task 7"));
	assert_int_equal(coord_var_lookup(c, "missing", &v2, NULL, &err), -ENOENT);
	assert_int_equal(coord_var_read(c, v, 0, 3, buf, &err), 0); /* still serving */
	destroy(c);
}

static char ckpt_dir[64];

/* DIR/ps-<t>/ckpt-<step>.coord of the task with the largest one. */
static int ckpt_file(uint64_t step, char *path, size_t cap)
{
	off_t best = -1;

	for (unsigned t = 0; t < NPS; t++) {
		char p[256];
		struct stat st;

		snprintf(p, sizeof(p), "%s/ps-%u/ckpt-%llu.coord", ckpt_dir, t,
			 (unsigned long long)step);
		if (stat(p, &st) == 0 && st.st_size > best) {
			best = st.st_size;
			snprintf(path, cap, "%s", p);
		}
	}
	return best < 0 ? -1 : 0;
}

/* tcp: a restarted ps has no variables (a real restart); inproc: the
 * stores die with the coordinator. */
static void restart_ps(void)
{
	if (strcmp(t_transport, "tcp") != 0)
		return;
	for (unsigned i = 0; i < NPS; i++) {
		t_reap(ps_pid[i]);
		assert_int_equal(ps_start(i, NULL), 0);
	}
}

static void test_checkpoint_round_trip(void **state)
{
	struct coord *c = make();
	uint64_t da[1] = { 3 }, db[2] = { 2, 2 }, step = 0;
	float a[3] = { 1, 2, 3 }, b[4] = { 4, 5, 6, 7 }, junk[4] = { 9, 9, 9, 9 }, got[4];
	struct coord_error err;
	coord_var_t va, vb, v2;
	char path[256];

	(void)state;
	snprintf(ckpt_dir, sizeof(ckpt_dir), "/tmp/coord-ckpt-XXXXXX");
	assert_non_null(mkdtemp(ckpt_dir));
	assert_int_equal(coord_var_create(c, "layer/a", 1, da, a, &va, NULL), 0);
	assert_int_equal(coord_var_create(c, "layer/b", 2, db, b, &vb, NULL), 0);
	assert_int_equal(coord_checkpoint_save(c, ckpt_dir, 7, &err), 0);
	assert_int_equal(coord_var_assign(c, va, 0, 3, junk, NULL), 0);
	assert_int_equal(coord_checkpoint_save(c, ckpt_dir, 9, &err), 0);
	assert_int_equal(ckpt_file(9, path, sizeof(path)), 0);
	/* A new coordinator and fresh ps tasks: restore brings the last one. */
	destroy(c);
	restart_ps();
	c = make();
	assert_int_equal(coord_var_lookup(c, "layer/a", &v2, NULL, &err), -ENOENT);
	assert_int_equal(coord_checkpoint_restore(c, ckpt_dir, &step, &err), 0);
	assert_int_equal(step, 9);
	assert_int_equal(coord_var_lookup(c, "layer/a", &v2, NULL, &err), 0);
	assert_int_equal(coord_var_read(c, v2, 0, 3, got, NULL), 0);
	assert_memory_equal(got, junk, 12);
	/* create after restore is the restored variable, values kept */
	assert_int_equal(coord_var_create(c, "layer/b", 2, db, NULL, &v2, &err), 0);
	assert_int_equal(coord_var_read(c, v2, 0, 4, got, NULL), 0);
	assert_memory_equal(got, b, 16);
	destroy(c);
}

static void test_checkpoint_corrupt_refused(void **state)
{
	struct coord *c = make();
	uint64_t dims[1] = { 64 }, step = 0;
	float v[64] = { 0 }, got[64];
	struct coord_error err;
	coord_var_t h;
	char path[256];
	int fd;
	uint8_t byte;

	(void)state;
	assert_true(ckpt_dir[0]); /* after the round trip */
	assert_int_equal(coord_var_create(c, "big", 1, dims, v, &h, NULL), 0);
	assert_int_equal(coord_checkpoint_save(c, ckpt_dir, 11, &err), 0);
	for (int i = 0; i < 64; i++)
		v[i] = 5.0f;
	assert_int_equal(coord_var_assign(c, h, 0, 64, v, NULL), 0);
	/* Flip one byte in the middle of a task's checkpoint file. */
	assert_int_equal(ckpt_file(11, path, sizeof(path)), 0);
	fd = open(path, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &byte, 1, 100), 1);
	byte ^= 0x40;
	assert_int_equal(pwrite(fd, &byte, 1, 100), 1);
	close(fd);
	assert_int_equal(coord_checkpoint_restore(c, ckpt_dir, &step, &err), -EBADMSG);
	assert_non_null(strstr(err.msg, "ckpt-11"));
	/* nothing changed */
	assert_int_equal(coord_var_read(c, h, 0, 64, got, NULL), 0);
	assert_memory_equal(got, v, sizeof(v));
	/* no checkpoint at all */
	assert_int_equal(coord_checkpoint_restore(c, "/tmp/coord-no-such-dir", &step, &err),
			 -ENOENT);
	destroy(c);
}

/* ---- tcp only ----------------------------------------------------------------------- */

static int write_key(const char *path, const char *hex)
{
	FILE *f = fopen(path, "w");

	if (!f)
		return -1;
	fprintf(f, "%s\n", hex);
	fclose(f);
	return chmod(path, 0600);
}

static int create_keyed(const char *key, unsigned wport, unsigned pport, struct coord **c,
			struct coord_error *err)
{
	struct coord_opts o;
	struct coord_spec *spec = NULL;
	char json[256];
	int r;

	t_opts(&o, reg);
	o.key_file = key;
	o.connect_timeout_ms = 20000; /* sanitizer builds are slow to answer */
	snprintf(json, sizeof(json), "{\"worker\": [\"127.0.0.1:%u\"], \"ps\": [\"127.0.0.1:%u\"]}",
		 wport, pport);
	r = coord_spec_parse(json, &spec, err);
	if (r == 0)
		r = coord_create(spec, &o, c, err);
	coord_spec_destroy(spec);
	return r;
}

/* A coordinator with another key is refused by a keyed worker and a keyed ps
 * (real processes); the same servers keep serving the right key. */
static void test_wrong_key_across_processes(void **state)
{
	char good[64], bad[64]; /* per test process: concurrent runs do not share them */
	const char *bin = getenv("COORD_WORKER_BIN"), *fns = getenv("COORD_TESTFNS");
	char *wargv[] = { (char *)bin, "--fns",	     (char *)fns, "--listen", "127.0.0.1:0",
			  "--key",     (char *)good, "--log",	  "error",    NULL };
	char *pargv[] = { (char *)getenv("COORD_PS_BIN"),
			  "--listen",
			  "127.0.0.1:0",
			  "--task",
			  "0",
			  "--key",
			  (char *)good,
			  "--log",
			  "error",
			  NULL };
	unsigned wport, pport;
	pid_t wpid, ppid;
	struct coord_error err;
	struct coord *c;
	uint64_t dims[1] = { 1 };
	coord_var_t v;
	struct t_var_args a;
	struct out res;
	struct coord_rv *rv;
	float one;

	(void)state;
	snprintf(good, sizeof(good), "/tmp/coord-test-key-good-%d", (int)getpid());
	snprintf(bad, sizeof(bad), "/tmp/coord-test-key-bad-%d", (int)getpid());
	assert_int_equal(
		write_key(good, "00112233445566778899aabbccddeeff00112233445566778899aabbccddeeff"),
		0);
	assert_int_equal(
		write_key(bad, "ffeeddccbbaa99887766554433221100ffeeddccbbaa99887766554433221100"),
		0);
	wpid = t_spawn(wargv, "coord-worker", &wport);
	ppid = t_spawn(pargv, "coord-ps", &pport);
	assert_true(wpid > 0 && ppid > 0);
	/* the wrong key: the worker refuses the coordinator */
	assert_int_not_equal(create_keyed(bad, wport, pport, &c, &err), 0);
	if (!strstr(err.msg, "authentication"))
		print_error("unexpected: %s\n", err.msg);
	assert_non_null(strstr(err.msg, "authentication"));
	/* a worker with the right key but a ps without it */
	{
		pid_t p2;
		unsigned port2;
		char *argv2[] = { pargv[0], "--listen",	 "127.0.0.1:0", "--task", "0",
				  "--key",  (char *)bad, "--log",	"error",  NULL };

		p2 = t_spawn(argv2, "coord-ps", &port2);
		assert_true(p2 > 0);
		assert_int_equal(create_keyed(good, wport, port2, &c, &err), 0);
		assert_int_equal(coord_var_create(c, "k", 1, dims, NULL, &v, &err),
				 COORD_EUNAVAILABLE);
		assert_non_null(strstr(err.msg, "authentication"));
		destroy(c);
		t_reap(p2);
	}
	/* the same worker and ps serve the right key, worker->ps included */
	assert_int_equal(create_keyed(good, wport, pport, &c, &err), 0);
	assert_int_equal(coord_var_create(c, "k", 1, dims, NULL, &v, &err), 0);
	a = (struct t_var_args){ .var = v, .off = 0, .n = 1, .val = 3.0f };
	rv = sched(c, "var_add", &a, sizeof(a));
	assert_int_equal(fetch(rv, &res), 0);
	assert_int_equal(coord_var_read(c, v, 0, 1, &one, NULL), 0);
	assert_true(one == 3.0f);
	destroy(c);
	t_reap(wpid);
	t_reap(ppid);
	unlink(good);
	unlink(bad);
}

static int raw_connect(unsigned port)
{
	struct sockaddr_in sa = { .sin_family = AF_INET, .sin_port = htons((uint16_t)port) };
	int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);

	sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
	if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0)
		return -1;
	return fd;
}

/* The ps closes the connection within @ms: read returns 0 or an error. */
static bool closed_within(int fd, int ms)
{
	uint8_t buf[512];
	uint64_t until = t_now_ns() + (uint64_t)ms * 1000000;

	while (t_now_ns() < until) {
		struct pollfd p = { .fd = fd, .events = POLLIN };
		ssize_t n;

		if (poll(&p, 1, 100) <= 0)
			continue;
		n = read(fd, buf, sizeof(buf));
		if (n <= 0)
			return true;
	}
	return false;
}

/* Garbage, a VAR_REQ before the handshake, a huge length: each closed;
 * the ps keeps its variables and serves a healthy coordinator. */
static void test_hostile_at_ps(void **state)
{
	struct coord *c = make();
	uint64_t dims[1] = { 2 };
	coord_var_t v = var(c, "h", 1, dims);
	float two[2] = { 1, 2 }, got[2];
	uint8_t garbage[64], frame[COORD_WIRE_HDR + 64];
	struct coord_wire_writer w;
	struct coord_wire_vreq q = { .rid = 1, .op = 3, .var = 0, .n = 1 };

	(void)state;
	assert_int_equal(coord_var_assign(c, v, 0, 2, two, NULL), 0);
	for (int i = 0; i < 64; i++)
		garbage[i] = (uint8_t)(i * 37 + 11);
	coord_wire_writer_init(&w, frame, sizeof(frame));
	coord_wire_begin(&w, COORD_WIRE_VAR_REQ);
	assert_int_equal(coord_wire_put_vreq(&w, &q), 0);
	coord_wire_end(&w);
	for (unsigned p = 0; p < NPS; p++) {
		int fd = raw_connect(ps_port[p]);
		uint8_t huge[16] = { 0xff, 0xff, 0xff, 0x7f, 11, 0 };

		assert_true(fd >= 0);
		assert_int_equal(write(fd, garbage, sizeof(garbage)), sizeof(garbage));
		assert_true(closed_within(fd, 5000));
		close(fd);
		fd = raw_connect(ps_port[p]);
		assert_int_equal(write(fd, frame, w.len), (ssize_t)w.len);
		assert_true(closed_within(fd, 5000));
		close(fd);
		fd = raw_connect(ps_port[p]);
		assert_int_equal(write(fd, huge, sizeof(huge)), sizeof(huge));
		assert_true(closed_within(fd, 5000));
		close(fd);
	}
	assert_int_equal(coord_var_read(c, v, 0, 2, got, NULL), 0);
	assert_memory_equal(got, two, 8);
	destroy(c);
}

/* A ps that dies: operations fail with UNAVAILABLE, never hang; a closure
 * that used it is put back K = 3 times (the default threshold, S11) and then
 * fails with that message; nothing else is lost. */
static void test_ps_dies(void **state)
{
	struct coord *c = make();
	uint64_t dims[1] = { 1 };
	coord_var_t v[8];
	struct out res;
	struct coord_error err;
	struct coord_rv *rv;
	int dead = -1;
	float x;
	char name[8];

	(void)state;
	for (int i = 0; i < 8; i++) {
		snprintf(name, sizeof(name), "d%d", i);
		v[i] = var(c, name, 1, dims);
	}
	kill(ps_pid[0], SIGKILL);
	waitpid(ps_pid[0], NULL, 0);
	ps_pid[0] = -1;
	for (int i = 0; i < 8 && dead < 0; i++)
		if ((v[i] >> 32) == 0)
			dead = i;
	assert_true(dead >= 0);
	assert_int_equal(coord_var_read(c, v[dead], 0, 1, &x, &err), COORD_EUNAVAILABLE);
	assert_non_null(strstr(err.msg, "ps task 0"));
	{
		struct t_var_args a = { .var = v[dead], .off = 0, .n = 1, .val = 1.0f };

		t_reset_counters();
		rv = sched(c, "var_add", &a, sizeof(a));
		assert_int_equal(fetch(rv, &res), COORD_EUNAVAILABLE);
		assert_non_null(strstr(res.err.msg, "ps task 0"));
		assert_int_equal(res.err.cause, 1); /* typed: ps task 0 */
		assert_int_equal(atomic_load(&t_sh->last_attempt), 4);
	}
	assert_int_equal(coord_join(c, &err), COORD_EUNAVAILABLE);
	/* the other ps task still works */
	for (int i = 0; i < 8; i++)
		if ((v[i] >> 32) == 1) {
			assert_int_equal(coord_var_read(c, v[i], 0, 1, &x, &err), 0);
			break;
		}
	destroy(c);
	assert_int_equal(ps_start(0, NULL), 0);
}

/* A variable on ps task 0 (created while it is up). */
static coord_var_t var_on_task0(struct coord *c)
{
	uint64_t dims[1] = { 1 };
	char name[16];

	for (int i = 0; i < 64; i++) {
		coord_var_t v;

		snprintf(name, sizeof(name), "t0_%d", i);
		v = var(c, name, 1, dims);
		if ((v >> 32) == 0)
			return v;
	}
	fail();
	return 0;
}

/*
 * S11 with K = 2 and K = 0: a closure whose ps is gone is put back K times,
 * runs K + 1 times in all, and then fails UNAVAILABLE with a typed cause
 * (the ps task), which join returns.
 */
static void test_ps_failure_threshold(void **state)
{
	struct coord_error err;
	struct coord *c;
	struct out res;
	coord_var_t v;

	(void)state;
	for (int k = 2; k >= 0; k -= 2) {
		struct t_var_args a = { .off = 0, .n = 1, .val = 1.0f };

		assert_int_equal(create_opts(k, -1, &c, &err), 0);
		v = var_on_task0(c);
		a.var = v;
		t_reap(ps_pid[0]);
		ps_pid[0] = -1;
		t_reset_counters();
		assert_int_equal(fetch(sched(c, "var_add", &a, sizeof(a)), &res),
				 COORD_EUNAVAILABLE);
		assert_int_equal(res.err.cause, 1);
		assert_int_equal(atomic_load(&t_sh->last_attempt), k + 1);
		assert_int_equal(coord_join(c, &err), COORD_EUNAVAILABLE);
		assert_non_null(strstr(err.msg, "ps task 0"));
		coord_destroy(c);
		assert_int_equal(ps_start(0, NULL), 0);
	}
}

/* S12: with a restart exit code, the call that would return a ps failure
 * exits the process with it (a supervisor restarts the coordinator). */
static void test_ps_failure_restart_exit_code(void **state)
{
	struct coord_error err;
	struct coord *c;
	coord_var_t v;
	pid_t pid;
	int st;

	(void)state;
	assert_int_equal(create_opts(0, -1, &c, &err), 0);
	v = var_on_task0(c);
	coord_destroy(c);
	t_reap(ps_pid[0]);
	ps_pid[0] = -1;
	pid = fork();
	if (pid == 0) {
		struct t_var_args a = { .var = v, .off = 0, .n = 1, .val = 1.0f };
		struct coord_rv *rv;

		if (create_opts(0, 42, &c, &err) != 0 ||
		    coord_schedule(c, t_fn(c, "var_add"), &a, sizeof(a), &rv, &err) != 0)
			_exit(3);
		if (coord_join(c, &err) == 0) /* exits 42 inside */
			_exit(5);
		_exit(4);
	}
	assert_true(pid > 0);
	assert_int_equal(waitpid(pid, &st, 0), pid);
	assert_true(WIFEXITED(st));
	assert_int_equal(WEXITSTATUS(st), 42);
	assert_int_equal(ps_start(0, NULL), 0);
}

static int tcp_setup(void **state)
{
	(void)state;
	t_transport = "tcp";
	if (t_workers_start(NW) != 0)
		return -1;
	for (unsigned i = 0; i < NPS; i++)
		if (ps_start(i, NULL) != 0)
			return -1;
	return 0;
}

static int tcp_teardown(void **state)
{
	(void)state;
	t_workers_stop();
	for (unsigned i = 0; i < NPS; i++)
		if (ps_pid[i] > 0)
			t_reap(ps_pid[i]);
	t_transport = "inproc";
	return 0;
}

static int group_teardown_dir(void **state)
{
	char cmd[128];

	(void)state;
	if (ckpt_dir[0]) {
		snprintf(cmd, sizeof(cmd), "rm -rf '%s'", ckpt_dir);
		(void)!system(cmd);
		ckpt_dir[0] = 0;
	}
	return 0;
}

static int tcp_teardown_all(void **state)
{
	group_teardown_dir(state);
	return tcp_teardown(state);
}

int main(void)
{
#define VAR_TESTS                                                                                  \
	cmocka_unit_test(test_assign_add_exact), cmocka_unit_test(test_scatter_add),               \
		cmocka_unit_test(test_lookup_batch_read), cmocka_unit_test(test_errors),           \
		cmocka_unit_test(test_checkpoint_round_trip),                                      \
		cmocka_unit_test(test_checkpoint_corrupt_refused)
	const struct CMUnitTest inproc_tests[] = { VAR_TESTS };
	const struct CMUnitTest tcp_tests[] = {
		VAR_TESTS,
		cmocka_unit_test(test_hostile_at_ps),
		cmocka_unit_test(test_wrong_key_across_processes),
		cmocka_unit_test(test_ps_dies),
		cmocka_unit_test(test_ps_failure_threshold),
		cmocka_unit_test(test_ps_failure_restart_exit_code),
	};
	int failed;

	t_watchdog(300);
	reg = t_registry();
	if (getenv("T_FILTER"))
		cmocka_set_test_filter(getenv("T_FILTER"));
	failed = cmocka_run_group_tests_name("ps/inproc", inproc_tests, NULL, group_teardown_dir);
	failed += cmocka_run_group_tests_name("ps/tcp", tcp_tests, tcp_setup, tcp_teardown_all);
	coord_registry_destroy(reg);
	return failed;
}
