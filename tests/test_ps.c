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
#include <pthread.h>
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

#include "runtime/ps/ps.h"
#include "runtime/store/varstore.h"
#include "transport/wire/wire.h"
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
		tasks |= 1u << coord_var_task(v[i]);
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

/* ---- large requests (their data sent from the caller's buffers over tcp) ---- */

#define LG_N (1u << 18) /* 1 MiB of floats: over PSC_EXT_MIN; 4 x: PSC_RX_DIRECT_MIN */
#define LG_THREADS 4
#define LG_ROUNDS 6

struct lg_arg {
	struct coord *c;
	coord_var_t big, small;
	int t, code;
	float want[3];
};

/* A thread's updates: large assign_adds of its own value, small ones in
 * between, and a batch of two large ones and a small one. */
static void *lg_thread(void *p)
{
	struct lg_arg *a = p;
	float *d = malloc(4 * (size_t)LG_N), one = 1.0f;
	struct coord_error err;

	if (!d) {
		a->code = COORD_ENOMEM;
		return NULL;
	}
	for (size_t i = 0; i < LG_N; i++)
		d[i] = (float)(a->t + 1);
	for (int r = 0; r < LG_ROUNDS && !a->code; r++) {
		struct coord_var_op ops[3] = {
			{ .op = COORD_VAR_ASSIGN_ADD, .var = a->big, .n = LG_N, .src = d },
			{ .op = COORD_VAR_ASSIGN_ADD, .var = a->small, .n = 1, .src = &one },
			{ .op = COORD_VAR_ASSIGN_ADD,
			  .var = a->big,
			  .off = LG_N,
			  .n = LG_N,
			  .src = d },
		};

		a->code = coord_var_batch(a->c, &ops[0], 1, &err);
		if (!a->code)
			a->code = coord_var_batch(a->c, &ops[1], 1, &err);
		if (!a->code)
			a->code = coord_var_batch(a->c, ops, 3, &err);
	}
	free(d);
	return NULL;
}

/* A thread's reads of the settled @big (its first quarter @want[0], its
 * second @want[1], the rest 0): whole, and in a batch with a small read. */
static void *lg_reader(void *p)
{
	struct lg_arg *a = p;
	float *d = malloc(16 * (size_t)LG_N), s1 = 0;
	struct coord_error err;

	if (!d) {
		a->code = COORD_ENOMEM;
		return NULL;
	}
	for (int r = 0; r < LG_ROUNDS && !a->code; r++) {
		struct coord_var_op ops[4] = {
			{ .op = COORD_VAR_READ, .var = a->big, .n = LG_N, .dst = d + LG_N },
			{ .op = COORD_VAR_READ, .var = a->small, .n = 1, .dst = &s1 },
			{ .op = COORD_VAR_READ, .var = a->big, .off = LG_N, .n = LG_N, .dst = d },
			{ .op = COORD_VAR_READ,
			  .var = a->big,
			  .off = 2 * LG_N,
			  .n = 2 * LG_N,
			  .dst = d + 2 * LG_N },
		};

		memset(d, 0xff, 16 * (size_t)LG_N);
		a->code = coord_var_read(a->c, a->big, 0, 4 * LG_N, d, &err);
		for (size_t i = 0; !a->code && i < 4 * (size_t)LG_N; i++)
			if (d[i] != (i < LG_N ? a->want[0] : i < 2 * LG_N ? a->want[1] : 0))
				a->code = -EBADMSG;
		memset(d, 0xff, 16 * (size_t)LG_N);
		if (!a->code)
			a->code = coord_var_batch(a->c, ops, 4, &err);
		for (size_t i = 0; !a->code && i < 4 * (size_t)LG_N; i++)
			if (d[i] != (i < LG_N ? a->want[1] : i < 2 * LG_N ? a->want[0] : 0))
				a->code = -EBADMSG;
		if (!a->code && s1 != a->want[2])
			a->code = -EBADMSG;
	}
	free(d);
	return NULL;
}

static void test_large_requests(void **state)
{
	uint64_t dims[1] = { 4 * LG_N }, gd[2] = { 8192, 64 }, one_dim[1] = { 1 };
	struct coord_partitioner p1 = { .num_shards = 1 };
	struct lg_arg a[LG_THREADS];
	pthread_t th[LG_THREADS];
	struct coord_error err;
	struct coord_pvar pv;
	struct coord *c = make();
	float *got = malloc(8 * (size_t)LG_N), *rows = malloc(4 * 8192 * 64), small;
	int64_t *ids = malloc(8 * 8192);
	coord_var_t big = var(c, "lg/big", 1, dims), sm = var(c, "lg/small", 1, one_dim);
	float want = 0;

	(void)state;
	assert_true(got && rows && ids);
	for (int t = 0; t < LG_THREADS; t++) {
		a[t] = (struct lg_arg){ .c = c, .big = big, .small = sm, .t = t };
		assert_int_equal(pthread_create(&th[t], NULL, lg_thread, &a[t]), 0);
		want += (float)(t + 1) * LG_ROUNDS;
	}
	for (int t = 0; t < LG_THREADS; t++) {
		pthread_join(th[t], NULL);
		assert_int_equal(a[t].code, 0);
	}
	assert_int_equal(coord_var_read(c, big, 0, 2 * LG_N, got, &err), 0);
	for (size_t i = 0; i < 2 * (size_t)LG_N; i++)
		if (got[i] != (i < LG_N ? 2 * want : want))
			fail_msg("element %zu: %g, want %g", i, got[i], i < LG_N ? 2 * want : want);
	assert_int_equal(coord_var_read(c, sm, 0, 1, &small, &err), 0);
	assert_true(small == 2.0f * LG_THREADS * LG_ROUNDS);
	/* large reads (replies received straight into the callers' buffers
	 * over tcp), concurrent, whole and in batches with a small read */
	for (int t = 0; t < LG_THREADS; t++) {
		a[t] = (struct lg_arg){ .c = c, .big = big, .small = sm, .t = t };
		a[t].want[0] = 2 * want;
		a[t].want[1] = want;
		a[t].want[2] = small;
		assert_int_equal(pthread_create(&th[t], NULL, lg_reader, &a[t]), 0);
	}
	for (int t = 0; t < LG_THREADS; t++) {
		pthread_join(th[t], NULL);
		assert_int_equal(a[t].code, 0);
	}
	/* scatter_add of 2 MiB of rows (ids and rows both from the caller's
	 * buffers), a repeated id adding twice */
	assert_int_equal(coord_pvar_create(c, "lg/rows", 2, gd, NULL, &p1, &pv, &err), 0);
	for (size_t k = 0; k < 8192; k++) {
		ids[k] = (int64_t)((k * 7) % 8192);
		for (size_t j = 0; j < 64; j++)
			rows[k * 64 + j] = (float)(k % 97) + (float)j * 0.5f;
	}
	ids[1] = ids[0];
	assert_int_equal(coord_pvar_scatter_add(c, &pv, ids, 8192, rows, &err), 0);
	memset(got, 0, 4 * 8192 * 64);
	for (size_t k = 0; k < 8192; k++)
		for (size_t j = 0; j < 64; j++)
			got[(size_t)ids[k] * 64 + j] += rows[k * 64 + j];
	for (size_t k = 0; k < 8192; k++)
		ids[k] = (int64_t)k;
	assert_int_equal(coord_pvar_gather(c, &pv, ids, 8192, rows, &err), 0);
	assert_memory_equal(rows, got, 4 * 8192 * 64);
	free(got);
	free(rows);
	free(ids);
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

/* ---- restores across a change of the ps count (issue 21) --------------------------- */

/*
 * A cluster of @nps ps tasks for the layout tests: inproc, @nps stores in
 * the coordinator; tcp, @nps fresh coord-ps processes confined to lay_root
 * (a restart is a real one: the stores start empty).
 */
#define LAY_MAX 3
#define LAY_VARS 24
static pid_t lay_pid[LAY_MAX];
static unsigned lay_port[LAY_MAX];
static char lay_root[64], lay_dir[96];

static void lay_stop(void)
{
	for (unsigned i = 0; i < LAY_MAX; i++)
		if (lay_pid[i] > 0) {
			t_reap(lay_pid[i]);
			lay_pid[i] = 0;
		}
}

static pid_t lay_spawn(unsigned task, const char *root, unsigned *port)
{
	char t[16];
	char *argv[] = {
		getenv("COORD_PS_BIN"), "--listen",   "127.0.0.1:0", "--task", t, "--log", "error",
		"--ckpt-root",		(char *)root, NULL
	};

	snprintf(t, sizeof(t), "%u", task);
	return argv[0] ? t_spawn(argv, "coord-ps", port) : -1;
}

static struct coord *lay_make(unsigned nps)
{
	struct coord_opts o;
	struct coord_spec *spec = NULL;
	struct coord_error err;
	struct coord *c = NULL;
	char json[1024], *w;
	size_t k;

	t_opts(&o, reg);
	if (strcmp(t_transport, "tcp") != 0) {
		o.inproc_workers = 1;
		o.inproc_ps = nps;
		assert_int_equal(coord_create(NULL, &o, &c, &err), 0);
		return c;
	}
	lay_stop();
	for (unsigned i = 0; i < nps; i++) {
		lay_pid[i] = lay_spawn(i, lay_root, &lay_port[i]);
		assert_true(lay_pid[i] > 0);
	}
	w = t_spec_json(NW);
	w[strlen(w) - 1] = 0; /* drop the closing brace */
	k = (size_t)snprintf(json, sizeof(json), "%s, \"ps\": [", w);
	for (unsigned i = 0; i < nps; i++)
		k += (size_t)snprintf(json + k, sizeof(json) - k, "%s\"127.0.0.1:%u\"",
				      i ? "," : "", lay_port[i]);
	snprintf(json + k, sizeof(json) - k, "]}");
	free(w);
	assert_int_equal(coord_spec_parse(json, &spec, &err), 0);
	if (coord_create(spec, &o, &c, &err) != 0)
		fail_msg("create: %s", err.msg);
	coord_spec_destroy(spec);
	return c;
}

static void lay_destroy(struct coord *c)
{
	coord_destroy(c);
	lay_stop();
}

static int lay_setup(void **state)
{
	(void)state;
	snprintf(lay_root, sizeof(lay_root), "/tmp/coord-lay-XXXXXX");
	if (!mkdtemp(lay_root))
		return -1;
	snprintf(lay_dir, sizeof(lay_dir), "%s/ck", lay_root);
	return mkdir(lay_dir, 0755);
}

static int lay_teardown(void **state)
{
	char cmd[128];

	(void)state;
	lay_stop();
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", lay_root);
	(void)!system(cmd);
	return 0;
}

/* Variable i of the layout tests: its name, shape, and values for @seed. */
static void lay_var(unsigned i, char *name, unsigned *ndim, uint64_t *dims)
{
	snprintf(name, 32, "lay/v%u", i);
	*ndim = i % 3;
	dims[0] = 1 + i % 5;
	dims[1] = 2 + i % 4;
}

static uint64_t lay_nelem(unsigned ndim, const uint64_t *dims)
{
	uint64_t n = 1;

	for (unsigned d = 0; d < ndim; d++)
		n *= dims[d];
	return n;
}

static void lay_vals(unsigned i, unsigned seed, float *v, uint64_t n)
{
	uint32_t x = 2654435761u * (i + 1) + seed * 40503u;

	for (uint64_t k = 0; k < n; k++) {
		x = x * 1664525u + 1013904223u;
		v[k] = (float)(int32_t)x / 3.0e5f; /* every bit pattern differs */
	}
}

/* Create the LAY_VARS variables with values of @seed, or set them. */
static void lay_fill(struct coord *c, unsigned seed)
{
	for (unsigned i = 0; i < LAY_VARS; i++) {
		char name[32];
		unsigned ndim;
		uint64_t dims[2];
		float v[32];
		coord_var_t h;

		lay_var(i, name, &ndim, dims);
		lay_vals(i, seed, v, lay_nelem(ndim, dims));
		assert_int_equal(coord_var_create(c, name, ndim, dims, NULL, &h, NULL), 0);
		assert_int_equal(coord_var_assign(c, h, 0, lay_nelem(ndim, dims), v, NULL), 0);
	}
}

/* Every variable holds exactly the values of @seed (absent if @seed < 0),
 * on the task its name places on now. */
static void lay_check(struct coord *c, int seed)
{
	unsigned nps = coord_num_ps(c);

	for (unsigned i = 0; i < LAY_VARS; i++) {
		char name[32];
		unsigned ndim;
		uint64_t dims[2], n;
		float want[32], got[32];
		struct coord_var_shape sh;
		coord_var_t h;

		lay_var(i, name, &ndim, dims);
		n = lay_nelem(ndim, dims);
		if (seed < 0) {
			assert_int_equal(coord_var_lookup(c, name, &h, NULL, NULL), -ENOENT);
			continue;
		}
		assert_int_equal(coord_var_lookup(c, name, &h, &sh, NULL), 0);
		assert_int_equal(sh.ndim, ndim);
		assert_int_equal(sh.nelem, n);
		assert_int_equal(coord_var_task(h),
				 (unsigned)(coord_var_fnv1a64(name, strlen(name)) % nps));
		lay_vals(i, (unsigned)seed, want, n);
		assert_int_equal(coord_var_read(c, h, 0, n, got, NULL), 0);
		assert_memory_equal(got, want, n * sizeof(float)); /* bit for bit */
	}
}

/* Save steps 5 (seed 1) and 10 (seed 2) from @from ps tasks. */
static void lay_save(unsigned from)
{
	struct coord *c = lay_make(from);
	struct coord_error err;

	lay_fill(c, 1);
	assert_int_equal(coord_checkpoint_save(c, lay_dir, 5, &err), 0);
	lay_fill(c, 2);
	assert_int_equal(coord_checkpoint_save(c, lay_dir, 10, &err), 0);
	lay_destroy(c);
}

static void relayout(unsigned from, unsigned to)
{
	struct coord_error err;
	struct coord *c;
	uint64_t step = 0;
	char note[64];

	lay_save(from);
	c = lay_make(to);
	lay_check(c, -1);
	assert_int_equal(coord_checkpoint_restore(c, lay_dir, &step, &err), 0);
	assert_int_equal(step, 10);
	snprintf(note, sizeof(note), "saved by %u ps tasks, re-placed onto %u", from, to);
	if (!strstr(err.msg, note))
		fail_msg("no '%s' in: %s", note, err.msg);
	lay_check(c, 2);
	/* and it saves and restores in the new layout */
	assert_int_equal(coord_checkpoint_save(c, lay_dir, 11, &err), 0);
	lay_fill(c, 3);
	assert_int_equal(coord_checkpoint_restore(c, lay_dir, &step, &err), 0);
	assert_int_equal(step, 11);
	assert_string_equal(err.msg, "");
	lay_check(c, 2);
	lay_destroy(c);
}

static void test_restore_2_to_1(void **state)
{
	(void)state;
	relayout(2, 1);
}

static void test_restore_2_to_3(void **state)
{
	(void)state;
	relayout(2, 3);
}

/* Flip a byte of @dir/ps-@t/ckpt-@step.coord, past the header. */
static void lay_corrupt(unsigned t, uint64_t step)
{
	char p[160];
	uint8_t b;
	int fd;

	snprintf(p, sizeof(p), "%s/ps-%u/ckpt-%llu.coord", lay_dir, t, (unsigned long long)step);
	fd = open(p, O_RDWR);
	assert_true(fd >= 0);
	assert_int_equal(pread(fd, &b, 1, 60), 1);
	b ^= 0x40;
	assert_int_equal(pwrite(fd, &b, 1, 60), 1);
	close(fd);
}

/* An impossible restore changes no variable on any task. */
static void test_restore_refused_whole(void **state)
{
	uint64_t d1[1] = { 3 }, step = 77;
	float x[3] = { 7, 8, 9 }, got[3];
	struct coord_error err;
	struct coord *c;
	coord_var_t h;

	(void)state;
	lay_save(2);
	/* a corrupt file of one task: nothing anywhere */
	lay_corrupt(1, 10);
	c = lay_make(3);
	assert_int_equal(coord_var_create(c, "keep", 1, d1, x, &h, NULL), 0);
	assert_int_equal(coord_checkpoint_restore(c, lay_dir, &step, &err), -EBADMSG);
	if (!strstr(err.msg, "ps-1/ckpt-10.coord") || !strstr(err.msg, "checksum"))
		fail_msg("unexpected: %s", err.msg);
	assert_int_equal(step, 77);
	lay_check(c, -1);
	assert_int_equal(coord_var_read(c, h, 0, 3, got, NULL), 0);
	assert_memory_equal(got, x, sizeof(x));
	/* fallback: the newest intact step, and it says so */
	assert_int_equal(coord_checkpoint_restore_ex(c, lay_dir, COORD_CKPT_FALLBACK, &step, &err),
			 0);
	assert_int_equal(step, 5);
	assert_int_equal(err.code, 0);
	if (!strstr(err.msg, "fell back to step 5") || !strstr(err.msg, "step 10"))
		fail_msg("unexpected: %s", err.msg);
	lay_check(c, 1);
	lay_destroy(c);

	/* a shape conflict on one task: nothing anywhere */
	lay_corrupt(1, 10); /* flipped back */
	c = lay_make(3);
	{
		uint64_t d2[2] = { 9, 9 };
		float z[81] = { 0 };
		coord_var_t h2;

		assert_int_equal(coord_var_create(c, "lay/v7", 2, d2, z, &h2, NULL), 0);
		assert_int_equal(coord_var_create(c, "keep", 1, d1, x, &h, NULL), 0);
		assert_int_equal(coord_checkpoint_restore(c, lay_dir, &step, &err), -EEXIST);
		if (!strstr(err.msg, "lay/v7"))
			fail_msg("unexpected: %s", err.msg);
		for (unsigned i = 0; i < LAY_VARS; i++) {
			char name[32];
			coord_var_t hv;

			snprintf(name, sizeof(name), "lay/v%u", i);
			assert_int_equal(coord_var_lookup(c, name, &hv, NULL, NULL),
					 i == 7 ? 0 : -ENOENT);
		}
		assert_int_equal(coord_var_read(c, h2, 0, 81, z, NULL), 0);
		for (unsigned k = 0; k < 81; k++)
			assert_true(z[k] == 0.0f);
		assert_int_equal(coord_var_read(c, h, 0, 3, got, NULL), 0);
		assert_memory_equal(got, x, sizeof(x));
	}
	lay_destroy(c);
	/* a task's file missing: the step is incomplete, refused */
	{
		char p[160];

		snprintf(p, sizeof(p), "%s/ps-1/ckpt-10.coord", lay_dir);
		assert_int_equal(unlink(p), 0);
	}
	c = lay_make(1);
	assert_int_equal(coord_checkpoint_restore(c, lay_dir, &step, &err), -EBADMSG);
	if (!strstr(err.msg, "incomplete"))
		fail_msg("unexpected: %s", err.msg);
	lay_check(c, -1);
	lay_destroy(c);
}

/* Rewrite a version 2 file as version 1 (no layout in the header). */
static void to_v1(const char *path)
{
	uint8_t *b, *o;
	struct stat st;
	uint32_t crc, one = 1;
	uint64_t size;
	int fd = open(path, O_RDWR);

	assert_true(fd >= 0);
	assert_int_equal(fstat(fd, &st), 0);
	b = malloc((size_t)st.st_size);
	o = malloc((size_t)st.st_size);
	assert_int_equal(pread(fd, b, (size_t)st.st_size, 0), st.st_size);
	memcpy(o, b, 40);
	memcpy(o + 40, b + 48, (size_t)st.st_size - 48);
	size = (uint64_t)st.st_size - 8;
	memcpy(o + 8, &one, 4);
	memcpy(o + 32, &size, 8);
	crc = coord_crc32c(0, o, size - 4);
	memcpy(o + size - 4, &crc, 4);
	assert_int_equal(ftruncate(fd, (off_t)size), 0);
	assert_int_equal(pwrite(fd, o, size, 0), (ssize_t)size);
	close(fd);
	free(b);
	free(o);
}

static void test_restore_version1(void **state)
{
	struct coord_error err;
	struct coord *c;
	uint64_t step = 0;

	(void)state;
	lay_save(2);
	for (unsigned t = 0; t < 2; t++) {
		char p[160];

		snprintf(p, sizeof(p), "%s/ps-%u/ckpt-10.coord", lay_dir, t);
		to_v1(p);
	}
	c = lay_make(3);
	assert_int_equal(coord_checkpoint_restore(c, lay_dir, &step, &err), 0);
	assert_int_equal(step, 10);
	if (!strstr(err.msg, "saved by 2 ps tasks"))
		fail_msg("unexpected: %s", err.msg);
	lay_check(c, 2);
	lay_destroy(c);
}

/* Temp files of interrupted saves go at the next save into that directory. */
static void test_save_removes_temp_files(void **state)
{
	const char *tmp[] = { ".ckpt-10.coord.tmp.999999.0", ".latest.tmp.12.3" };
	char p[192];
	struct coord_error err;
	struct coord *c;
	struct stat st;

	(void)state;
	lay_save(2);
	for (unsigned i = 0; i < 2; i++) {
		snprintf(p, sizeof(p), "%s/ps-%u/%s", lay_dir, i, tmp[i]);
		close(open(p, O_CREAT | O_WRONLY, 0644));
	}
	snprintf(p, sizeof(p), "%s/ps-0/.ckpt-1.coord.tmp.x.1", lay_dir); /* not ours */
	close(open(p, O_CREAT | O_WRONLY, 0644));
	c = lay_make(2);
	assert_int_equal(coord_checkpoint_save(c, lay_dir, 12, &err), 0);
	for (unsigned i = 0; i < 2; i++) {
		snprintf(p, sizeof(p), "%s/ps-%u/%s", lay_dir, i, tmp[i]);
		assert_int_equal(stat(p, &st), -1);
	}
	snprintf(p, sizeof(p), "%s/ps-0/.ckpt-1.coord.tmp.x.1", lay_dir);
	assert_int_equal(stat(p, &st), 0);
	lay_destroy(c);
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
		if (coord_var_task(v[i]) == 0)
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
		if (coord_var_task(v[i]) == 1) {
			assert_int_equal(coord_var_read(c, v[i], 0, 1, &x, &err), 0);
			break;
		}
	destroy(c);
	assert_int_equal(ps_start(0, NULL), 0);
}

/*
 * Issue 21: a handle made before its ps task restarted (a real restart: a
 * new coord-ps process) is refused with COORD_ESTALE, although the new run
 * gave the same name the same id: the coordinator gets the typed error, a
 * worker function sees it too, and a closure that fails with it is a ps
 * failure (S11: put back K = 3 times, then UNAVAILABLE with the ps task as
 * cause), never applied to the new run's variable.
 */
static void test_stale_handle_after_ps_restart(void **state)
{
	uint64_t dims[1] = { 1 };
	float seven = 7.0f, x = -1.0f;
	struct coord_error err;
	struct coord *c;
	struct out res;
	coord_var_t v, v2;
	char name[16];
	int32_t code;
	int i;

	(void)state;
	for (i = 0; i < 64; i++) {
		snprintf(name, sizeof(name), "stale%d", i);
		if (coord_var_shard(name, NPS) == 0)
			break;
	}
	assert_true(i < 64);
	/* A fresh ps task 0: the variable is its first, id 0. */
	t_reap(ps_pid[0]);
	assert_int_equal(ps_start(0, NULL), 0);
	c = make();
	assert_int_equal(coord_var_create(c, name, 1, dims, &seven, &v, &err), 0);
	destroy(c);
	/* The restart: another process, no variables; the same name again. */
	t_reap(ps_pid[0]);
	assert_int_equal(ps_start(0, NULL), 0);
	c = make();
	assert_int_equal(coord_var_create(c, name, 1, dims, NULL, &v2, &err), 0);
	assert_int_equal(coord_var_task(v2), 0);
	assert_int_equal((uint32_t)v2, (uint32_t)v); /* the same id, */
	assert_true(v2 != v);			     /* of another run */
	assert_int_equal(coord_var_read(c, v, 0, 1, &x, &err), COORD_ESTALE);
	assert_non_null(strstr(err.msg, "another run of ps task 0"));
	assert_string_equal(
		coord_strerror(COORD_ESTALE),
		"stale variable handle: its parameter server restarted after it was made");
	{
		struct t_var_args a = { .var = v, .off = 0, .n = 1, .val = 1.0f };

		assert_int_equal(fetch(sched(c, "var_code", &a, sizeof(a)), &res), 0);
		assert_int_equal(res.len, sizeof(code));
		memcpy(&code, res.val, sizeof(code));
		assert_int_equal(code, COORD_ESTALE);
		t_reset_counters();
		assert_int_equal(fetch(sched(c, "var_add", &a, sizeof(a)), &res),
				 COORD_EUNAVAILABLE);
		assert_int_equal(res.err.cause, 1); /* typed: ps task 0 */
		assert_non_null(strstr(res.err.msg, "another run of ps task 0"));
		assert_int_equal(atomic_load(&t_sh->last_attempt), 4);
	}
	assert_int_equal(coord_join(c, &err), COORD_EUNAVAILABLE);
	assert_int_equal(err.cause, 1);
	/* nothing landed on the new run's variable */
	assert_int_equal(coord_var_read(c, v2, 0, 1, &x, &err), 0);
	assert_true(x == 0.0f);
	destroy(c);
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
		if (coord_var_task(v) == 0)
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

/* coord-ps writes only beneath its --ckpt-root: escapes are refused. */
static void test_ckpt_root_escape(void **state)
{
	char out[64], link[128], rel[128], up[192], deep[192], p[192];
	const char *bad[6];
	struct coord_error err;
	struct coord *c;
	uint64_t step;
	DIR *d;
	unsigned n = 0;

	(void)state;
	snprintf(out, sizeof(out), "/tmp/coord-out-XXXXXX");
	assert_non_null(mkdtemp(out));
	snprintf(link, sizeof(link), "%s/link", lay_root);
	assert_int_equal(symlink(out, link), 0);
	snprintf(rel, sizeof(rel), "../%s", strrchr(out, '/') + 1);
	snprintf(up, sizeof(up), "%s/../%s", lay_root, strrchr(out, '/') + 1);
	snprintf(deep, sizeof(deep), "%s/ck/../../%s", lay_root, strrchr(out, '/') + 1);
	bad[0] = rel;  /* .. */
	bad[1] = up;   /* absolute, through .. */
	bad[2] = out;  /* absolute elsewhere */
	bad[3] = link; /* a symlink out (absolute) */
	bad[4] = "link";
	bad[5] = deep;
	c = lay_make(1);
	lay_fill(c, 1);
	for (unsigned i = 0; i < 6; i++) {
		assert_int_equal(coord_checkpoint_save(c, bad[i], 1, &err), -EACCES);
		if (!strstr(err.msg, "escapes"))
			fail_msg("%s: %s", bad[i], err.msg);
		assert_int_equal(coord_checkpoint_restore(c, bad[i], &step, &err), -EACCES);
	}
	d = opendir(out);
	assert_non_null(d);
	for (struct dirent *de; n < 100 && (de = readdir(d));)
		n++;
	closedir(d);
	assert_int_equal(n, 2); /* . and .. : nothing was written outside */
	/* inside the root: relative to it, or absolute beneath it */
	assert_int_equal(coord_checkpoint_save(c, "ck", 1, &err), 0);
	assert_int_equal(coord_checkpoint_save(c, lay_dir, 2, &err), 0);
	assert_int_equal(coord_checkpoint_restore(c, "ck", &step, &err), 0);
	assert_int_equal(step, 2);
	lay_destroy(c);
	snprintf(p, sizeof(p), "rm -rf '%s'", out);
	(void)!system(p);
}

/*
 * A prepared restore belongs to the connection that prepared it: held, it
 * keeps a create from giving a staged name another shape; when that
 * connection closes, coord-ps drops it.
 */
static void test_stage_dies_with_connection(void **state)
{
	uint8_t res[COORD_PS_PREP_MAX];
	uint64_t d2[2] = { 9, 9 };
	char addr[32];
	const char *addrs[1] = { addr };
	struct coord_ps *ps = NULL;
	struct coord_ps_op op;
	struct coord_error err;
	struct coord *c;
	coord_var_t h;
	int r = -1;

	(void)state;
	lay_save(2);
	c = lay_make(1);
	snprintf(addr, sizeof(addr), "127.0.0.1:%u", lay_port[0]);
	assert_int_equal(coord_psc_create(addrs, 1, COORD_ROLE_COORDINATOR, NULL,
					  COORD_WIRE_MAX_FRAME_DEFAULT, 5000, 30000, 1000, 3, &ps,
					  &err),
			 0);
	memset(&op, 0, sizeof(op));
	op.op = COORD_PS_PREPARE;
	op.name = lay_dir;
	op.name_len = (uint16_t)strlen(lay_dir);
	op.off = COORD_CKPT_STEP_LATEST;
	op.n = 1;
	op.id = 5;
	op.dst = res;
	op.cap = sizeof(res);
	if (coord_ps_run(ps, &op, 1, &err) != 0)
		fail_msg("prepare: %s", err.msg);
	assert_true(op.dst_len >= COORD_PS_PREP_FIXED);
	assert_int_equal(res[16], LAY_VARS); /* nstaged, little-endian */
	assert_int_equal(coord_var_create(c, "lay/v7", 2, d2, NULL, &h, &err), -EEXIST);
	assert_non_null(strstr(err.msg, "restore being prepared"));
	coord_ps_destroy(ps); /* closes its connection */
	/* Bounded: the server drops the stage as it reaps the connection. */
	for (int i = 0; i < 400 && r != 0; i++) {
		r = coord_var_create(c, "lay/v7", 2, d2, NULL, &h, &err);
		if (r != 0)
			t_sleep_ns(25000000);
	}
	assert_int_equal(r, 0);
	for (unsigned i = 0; i < LAY_VARS; i++) { /* nothing was committed */
		char name[32];

		snprintf(name, sizeof(name), "lay/v%u", i);
		assert_int_equal(coord_var_lookup(c, name, &h, NULL, NULL), i == 7 ? 0 : -ENOENT);
	}
	lay_destroy(c);
}

/* coord-ps --ckpt-root removes its own task's temp files at start. */
static void test_ckpt_root_start_sweep(void **state)
{
	char a[256], b[160], dir[128];
	struct stat st;
	unsigned port;
	pid_t pid;

	(void)state;
	snprintf(dir, sizeof(dir), "%s/x/y/ps-0", lay_root);
	snprintf(a, sizeof(a), "mkdir -p '%s' '%s/ps-1'", dir, lay_root);
	assert_int_equal(system(a), 0);
	snprintf(a, sizeof(a), "%s/.ckpt-3.coord.tmp.4242.7", dir);
	snprintf(b, sizeof(b), "%s/ps-1/.latest.tmp.4242.8", lay_root);
	close(open(a, O_CREAT | O_WRONLY, 0644));
	close(open(b, O_CREAT | O_WRONLY, 0644));
	pid = lay_spawn(0, lay_root, &port); /* ready once it printed its port */
	assert_true(pid > 0);
	assert_int_equal(stat(a, &st), -1);
	assert_int_equal(stat(b, &st), 0); /* task 1's: not ours */
	t_reap(pid);
}

/* ---- partitioned variables: rows across shards, checked against a local copy ---- */

#define PV_ROWS 1000
#define PV_RL 8

static float pv_ref[PV_ROWS * PV_RL];
static uint32_t pv_seed = 12345;

static uint32_t pv_rand(void)
{
	pv_seed = pv_seed * 1664525u + 1013904223u;
	return pv_seed >> 8;
}

/* @n ids, duplicates likely, shard edges and both ends included. */
static void pv_ids(int64_t *ids, size_t n, uint64_t rows)
{
	for (size_t k = 0; k < n; k++)
		ids[k] = (int64_t)(pv_rand() % rows);
	if (n > 4) {
		ids[0] = 0;
		ids[1] = (int64_t)rows - 1;
		ids[2] = ids[0];
		ids[3] = (int64_t)rows / 4; /* a shard's first row (4 shards) */
		ids[4] = (int64_t)rows / 4 - 1;
	}
}

/* Every row of @pv equals pv_ref, read by the coordinator with one gather
 * (all ids, reversed), and with a range read. */
static void pv_check_all(struct coord *c, const struct coord_pvar *pv)
{
	static int64_t ids[PV_ROWS];
	static float got[PV_ROWS * PV_RL];
	struct coord_error err;

	for (int64_t k = 0; k < PV_ROWS; k++)
		ids[k] = PV_ROWS - 1 - k;
	if (coord_pvar_gather(c, pv, ids, PV_ROWS, got, &err) != 0)
		fail_msg("gather: %s", err.msg);
	for (size_t k = 0; k < PV_ROWS; k++)
		assert_memory_equal(got + k * PV_RL, pv_ref + (size_t)ids[k] * PV_RL, 4 * PV_RL);
	memset(got, 0, sizeof(got));
	assert_int_equal(coord_pvar_read(c, pv, 0, PV_ROWS * PV_RL, got, &err), 0);
	assert_memory_equal(got, pv_ref, sizeof(got));
}

/* A closure's pvar_rows args: @a then ids then (scatter) rows. */
static struct coord_rv *pv_sched(struct coord *c, const struct coord_pvar *pv, uint32_t op,
				 const int64_t *ids, uint32_t n, const float *rows)
{
	size_t len = sizeof(struct t_pvar_args) + 8 * (size_t)n +
		     (op == T_PV_SCATTER ? 4 * (size_t)n * pv->row_len : 0);
	uint8_t *b = calloc(1, len);
	struct t_pvar_args a = { .pv = *pv, .op = op, .n = n };
	struct coord_rv *rv;

	assert_non_null(b);
	memcpy(b, &a, sizeof(a));
	memcpy(b + sizeof(a), ids, 8 * (size_t)n);
	if (op == T_PV_SCATTER)
		memcpy(b + sizeof(a) + 8 * (size_t)n, rows, 4 * (size_t)n * pv->row_len);
	rv = sched(c, "pvar_rows", b, len);
	free(b);
	return rv;
}

static void test_pvar_rows(void **state)
{
	struct coord_partitioner part = { .num_shards = 4 };
	uint64_t dims[2] = { PV_ROWS, PV_RL };
	static float upd[512 * PV_RL], got[512 * PV_RL];
	struct coord_pvar pv, pv2;
	struct coord_error err;
	int64_t ids[512], bad[6];
	struct coord *c = make();
	unsigned tasks = 0;
	struct out o;

	(void)state;
	for (size_t i = 0; i < PV_ROWS * PV_RL; i++)
		pv_ref[i] = (float)i * 0.25f - 7.0f;
	if (coord_pvar_create(c, "emb", 2, dims, pv_ref, &part, &pv, &err) != 0)
		fail_msg("pvar_create: %s", err.msg);
	assert_int_equal(pv.nparts, 4);
	assert_int_equal(pv.rows, PV_ROWS);
	assert_int_equal(pv.row_len, PV_RL);
	for (unsigned j = 0; j < 4; j++)
		tasks |= 1u << coord_var_task(pv.part[j]);
	assert_int_equal(tasks, 3); /* the shards spread over both ps tasks */
	/* lookup by name, coordinator side: the same handle */
	assert_int_equal(coord_pvar_lookup(c, "emb", &pv2, &err), 0);
	assert_memory_equal(&pv2, &pv, sizeof(pv));
	/* create again: found, unchanged; another partitioning: refused */
	assert_int_equal(coord_pvar_create(c, "emb", 2, dims, NULL, &part, &pv2, &err), 0);
	assert_memory_equal(&pv2, &pv, sizeof(pv));
	part.num_shards = 3;
	assert_int_equal(coord_pvar_create(c, "emb", 2, dims, NULL, &part, &pv2, &err), -EEXIST);
	part.num_shards = 5;
	assert_int_equal(coord_pvar_create(c, "emb", 2, dims, NULL, &part, &pv2, &err), -EEXIST);
	pv_check_all(c, &pv);

	/* coordinator gather: duplicates, caller's order */
	pv_ids(ids, 300, PV_ROWS);
	assert_int_equal(coord_pvar_gather(c, &pv, ids, 300, got, &err), 0);
	for (size_t k = 0; k < 300; k++)
		assert_memory_equal(got + k * PV_RL, pv_ref + (size_t)ids[k] * PV_RL, 4 * PV_RL);
	/* coordinator scatter_add: a repeated id adds twice */
	pv_ids(ids, 400, PV_ROWS);
	for (size_t k = 0; k < 400 * PV_RL; k++)
		upd[k] = (float)(pv_rand() % 64) * 0.5f;
	assert_int_equal(coord_pvar_scatter_add(c, &pv, ids, 400, upd, &err), 0);
	for (size_t k = 0; k < 400; k++)
		for (size_t j = 0; j < PV_RL; j++)
			pv_ref[(size_t)ids[k] * PV_RL + j] += upd[k * PV_RL + j];
	pv_check_all(c, &pv);

	/* ids in shard order: rows straight into the caller's buffer (gather,
	 * distinct ids) and straight from it (scatter_add, repeats allowed) */
	for (size_t k = 0; k < 333; k++)
		ids[k] = (int64_t)(3 * k);
	assert_int_equal(coord_pvar_gather(c, &pv, ids, 333, got, &err), 0);
	for (size_t k = 0; k < 333; k++)
		assert_memory_equal(got + k * PV_RL, pv_ref + (size_t)ids[k] * PV_RL, 4 * PV_RL);
	ids[1] = ids[0]; /* a repeat, still in order */
	for (size_t k = 0; k < 333 * PV_RL; k++)
		upd[k] = (float)(k % 13);
	assert_int_equal(coord_pvar_scatter_add(c, &pv, ids, 333, upd, &err), 0);
	for (size_t k = 0; k < 333; k++)
		for (size_t j = 0; j < PV_RL; j++)
			pv_ref[(size_t)ids[k] * PV_RL + j] += upd[k * PV_RL + j];
	pv_check_all(c, &pv);

	/* out of range (anywhere in the batch): a clear error, nothing applied */
	bad[0] = 1;
	bad[1] = 700;
	bad[2] = 300;
	bad[3] = 999;
	for (int t = 0; t < 2; t++) {
		bad[4] = t ? -1 : PV_ROWS;
		bad[5] = 2;
		assert_int_equal(coord_pvar_scatter_add(c, &pv, bad, 6, upd, &err), -ERANGE);
		assert_non_null(strstr(err.msg, "position 4"));
		assert_int_equal(coord_pvar_gather(c, &pv, bad, 6, got, &err), -ERANGE);
	}
	pv_check_all(c, &pv);
	/* empty batches */
	assert_int_equal(coord_pvar_gather(c, &pv, NULL, 0, NULL, &err), 0);
	assert_int_equal(coord_pvar_scatter_add(c, &pv, NULL, 0, NULL, &err), 0);

	/* from functions: gather (by handle, and by a handle the worker looks up),
	 * scatter_add with duplicates, an id out of range */
	for (int round = 0; round < 6; round++) {
		uint32_t n = 64 + pv_rand() % 136;
		struct coord_rv *rv;
		const void *v;
		size_t len;

		pv_ids(ids, n, PV_ROWS);
		rv = pv_sched(c, &pv, round & 1 ? T_PV_LOOKUP_GATHER : T_PV_GATHER, ids, n, NULL);
		assert_int_equal(coord_rv_fetch_timeout(rv, 30000000000ll, &v, &len, &err), 0);
		assert_int_equal(len, 4 * (size_t)n * PV_RL);
		for (size_t k = 0; k < n; k++)
			assert_memory_equal((const float *)v + k * PV_RL,
					    pv_ref + (size_t)ids[k] * PV_RL, 4 * PV_RL);
		coord_rv_put(rv);
	}
	for (int round = 0; round < 8; round++) {
		uint32_t n = 1 + pv_rand() % 100;

		pv_ids(ids, n, PV_ROWS);
		for (size_t k = 0; k < n * PV_RL; k++)
			upd[k] = (float)(pv_rand() % 16) - 8.0f;
		assert_int_equal(fetch(pv_sched(c, &pv, T_PV_SCATTER, ids, n, upd), &o), 0);
		for (size_t k = 0; k < n; k++)
			for (size_t j = 0; j < PV_RL; j++)
				pv_ref[(size_t)ids[k] * PV_RL + j] += upd[k * PV_RL + j];
	}
	assert_int_equal(fetch(pv_sched(c, &pv, T_PV_SCATTER, ids, 0, upd), &o), 0);
	assert_int_equal(fetch(pv_sched(c, &pv, T_PV_GATHER, ids, 0, NULL), &o), 0);
	join_ok(c);
	/* a failed closure's error is join's (S3), which clears it */
	for (int t = 0; t < 2; t++) {
		assert_int_equal(
			fetch(pv_sched(c, &pv, t ? T_PV_GATHER : T_PV_SCATTER, bad, 6, upd), &o),
			-ERANGE);
		assert_non_null(strstr(o.err.msg, "outside"));
		assert_int_equal(coord_join(c, &err), -ERANGE);
	}
	pv_check_all(c, &pv);

	/* a range across shard edges */
	for (size_t k = 0; k < 600; k++)
		upd[k] = (float)k;
	assert_int_equal(coord_pvar_assign_add(c, &pv, 2000 - 300, 600, upd, &err), 0);
	for (size_t k = 0; k < 600; k++)
		pv_ref[2000 - 300 + k] += upd[k];
	pv_check_all(c, &pv);
	assert_int_equal(coord_pvar_read(c, &pv, PV_ROWS * PV_RL - 1, 2, got, &err), COORD_EINVAL);
	destroy(c);
}

/* ---- several partitioned variables in one call ---- */

#define PM_ROWS 500
#define PM_RL 3

static float pm_ref[PM_ROWS * PM_RL]; /* the second variable's copy */

/* Both variables' every row equals their reference: one gather_multi of
 * all rows of each, reversed for the first. */
static void pm_check_all(struct coord *c, const struct coord_pvar *a, const struct coord_pvar *b)
{
	static int64_t ia[PV_ROWS], ib[PM_ROWS];
	static float ga[PV_ROWS * PV_RL], gb[PM_ROWS * PM_RL];
	struct coord_pvar_rows v[2] = { { .pv = a, .ids = ia, .n = PV_ROWS, .out = ga },
					{ .pv = b, .ids = ib, .n = PM_ROWS, .out = gb } };
	struct coord_error err;

	for (int64_t k = 0; k < PV_ROWS; k++)
		ia[k] = PV_ROWS - 1 - k;
	for (int64_t k = 0; k < PM_ROWS; k++)
		ib[k] = k;
	if (coord_pvar_gather_multi(c, v, 2, &err) != 0)
		fail_msg("gather_multi: %s", err.msg);
	for (size_t k = 0; k < PV_ROWS; k++)
		assert_memory_equal(ga + k * PV_RL, pv_ref + (size_t)ia[k] * PV_RL, 4 * PV_RL);
	assert_memory_equal(gb, pm_ref, sizeof(gb));
}

/* A pvar_multi closure over @a and @b: ids @ia[@na], @ib[@nb] (+ rows). */
static struct coord_rv *pm_sched(struct coord *c, const struct coord_pvar *a,
				 const struct coord_pvar *b, uint32_t op, const int64_t *ia,
				 uint32_t na, const int64_t *ib, uint32_t nb, const float *ra,
				 const float *rb)
{
	size_t fa = (size_t)na * a->row_len, fb = (size_t)nb * b->row_len;
	size_t len = sizeof(struct t_pvar_multi) + 8 * ((size_t)na + nb) +
		     (op == T_PV_SCATTER ? 4 * (fa + fb) : 0);
	uint8_t *buf = calloc(1, len), *p;
	struct t_pvar_multi m = { .pv = { *a, *b }, .op = op, .n = { na, nb } };
	struct coord_rv *rv;

	assert_non_null(buf);
	memcpy(buf, &m, sizeof(m));
	p = buf + sizeof(m);
	memcpy(p, ia, 8 * (size_t)na);
	memcpy(p + 8 * (size_t)na, ib, 8 * (size_t)nb);
	p += 8 * ((size_t)na + nb);
	if (op == T_PV_SCATTER) {
		memcpy(p, ra, 4 * fa);
		memcpy(p + 4 * fa, rb, 4 * fb);
	}
	rv = sched(c, "pvar_multi", buf, len);
	free(buf);
	return rv;
}

/* Add @n rows of @upd at @ids to @ref (rows of @rl). */
static void pm_apply(float *ref, size_t rl, const int64_t *ids, size_t n, const float *upd)
{
	for (size_t k = 0; k < n; k++)
		for (size_t j = 0; j < rl; j++)
			ref[(size_t)ids[k] * rl + j] += upd[k * rl + j];
}

static void test_pvar_multi(void **state)
{
	struct coord_partitioner pa = { .num_shards = 4 }, pb = { .num_shards = 3 };
	uint64_t da[2] = { PV_ROWS, PV_RL }, db[2] = { PM_ROWS, PM_RL };
	static float ua[300 * PV_RL], ub[300 * PM_RL], ga[300 * PV_RL], gb[300 * PM_RL];
	int64_t ia[300], ib[300];
	struct coord_pvar a, b, bad_pv;
	struct coord_pvar_rows v[2];
	struct coord_error err;
	struct coord *c = make();
	struct out o;

	(void)state;
	for (size_t i = 0; i < PV_ROWS * PV_RL; i++)
		pv_ref[i] = (float)i * 0.5f + 1.0f;
	for (size_t i = 0; i < PM_ROWS * PM_RL; i++)
		pm_ref[i] = (float)i * -0.25f;
	assert_int_equal(coord_pvar_create(c, "m/a", 2, da, pv_ref, &pa, &a, &err), 0);
	assert_int_equal(coord_pvar_create(c, "m/b", 2, db, pm_ref, &pb, &b, &err), 0);
	pm_check_all(c, &a, &b);

	/* gather with duplicates, each in the caller's order */
	pv_ids(ia, 300, PV_ROWS);
	pv_ids(ib, 250, PM_ROWS);
	v[0] = (struct coord_pvar_rows){ .pv = &a, .ids = ia, .n = 300, .out = ga };
	v[1] = (struct coord_pvar_rows){ .pv = &b, .ids = ib, .n = 250, .out = gb };
	assert_int_equal(coord_pvar_gather_multi(c, v, 2, &err), 0);
	for (size_t k = 0; k < 300; k++)
		assert_memory_equal(ga + k * PV_RL, pv_ref + (size_t)ia[k] * PV_RL, 4 * PV_RL);
	for (size_t k = 0; k < 250; k++)
		assert_memory_equal(gb + k * PM_RL, pm_ref + (size_t)ib[k] * PM_RL, 4 * PM_RL);
	/* the same variable twice in one call */
	v[1] = (struct coord_pvar_rows){ .pv = &a, .ids = ib, .n = 250, .out = ga + 50 * PV_RL };
	v[0].n = 50;
	assert_int_equal(coord_pvar_gather_multi(c, v, 2, &err), 0);
	for (size_t k = 0; k < 300; k++)
		assert_memory_equal(ga + k * PV_RL,
				    pv_ref + (size_t)(k < 50 ? ia[k] : ib[k - 50]) * PV_RL,
				    4 * PV_RL);

	/* scatter_add: a repeated id adds twice, in both variables */
	pv_ids(ia, 300, PV_ROWS);
	pv_ids(ib, 200, PM_ROWS);
	for (size_t k = 0; k < 300 * PV_RL; k++)
		ua[k] = (float)(pv_rand() % 64) * 0.5f;
	for (size_t k = 0; k < 200 * PM_RL; k++)
		ub[k] = (float)(pv_rand() % 32) - 16.0f;
	v[0] = (struct coord_pvar_rows){ .pv = &a, .ids = ia, .n = 300, .updates = ua };
	v[1] = (struct coord_pvar_rows){ .pv = &b, .ids = ib, .n = 200, .updates = ub };
	assert_int_equal(coord_pvar_scatter_add_multi(c, v, 2, &err), 0);
	pm_apply(pv_ref, PV_RL, ia, 300, ua);
	pm_apply(pm_ref, PM_RL, ib, 200, ub);
	pm_check_all(c, &a, &b);

	/* out of range in the second variable, or a bad second handle:
	 * nothing applied to either */
	for (int t = 0; t < 3; t++) {
		ib[7] = t == 0 ? PM_ROWS : -1;
		bad_pv = b;
		if (t == 2) {
			ib[7] = 1;
			bad_pv.nparts = 0;
		}
		v[1].pv = &bad_pv;
		assert_int_equal(coord_pvar_scatter_add_multi(c, v, 2, &err),
				 t == 2 ? COORD_EINVAL : -ERANGE);
		if (t < 2)
			assert_non_null(strstr(err.msg, "position 7"));
		v[0].out = ga;
		v[1].out = gb;
		assert_int_equal(coord_pvar_gather_multi(c, v, 2, &err),
				 t == 2 ? COORD_EINVAL : -ERANGE);
	}
	ib[7] = 0;
	v[1].pv = &b;
	pm_check_all(c, &a, &b);
	/* empty: no variables, and variables with no rows */
	assert_int_equal(coord_pvar_gather_multi(c, NULL, 0, &err), 0);
	assert_int_equal(coord_pvar_scatter_add_multi(c, NULL, 0, &err), 0);
	assert_int_equal(coord_pvar_gather_multi(c, NULL, 1, &err), COORD_EINVAL);
	v[0] = (struct coord_pvar_rows){ .pv = &a };
	v[1] = (struct coord_pvar_rows){ .pv = &b };
	assert_int_equal(coord_pvar_gather_multi(c, v, 2, &err), 0);
	assert_int_equal(coord_pvar_scatter_add_multi(c, v, 2, &err), 0);
	assert_int_equal(coord_pvar_gather_multi(c, v, COORD_PVAR_MULTI_MAX + 1, &err),
			 COORD_EINVAL);

	/* from functions: gather and scatter_add with duplicates, then an id
	 * out of range (nothing applied), then empty */
	for (int round = 0; round < 4; round++) {
		uint32_t na = 1 + pv_rand() % 200, nb = 1 + pv_rand() % 200;
		struct coord_rv *rv;
		const float *got;
		const void *res;
		size_t len;

		pv_ids(ia, na, PV_ROWS);
		pv_ids(ib, nb, PM_ROWS);
		for (size_t k = 0; k < na * PV_RL; k++)
			ua[k] = (float)(pv_rand() % 16) - 8.0f;
		for (size_t k = 0; k < nb * PM_RL; k++)
			ub[k] = (float)(pv_rand() % 16) * 0.125f;
		assert_int_equal(
			fetch(pm_sched(c, &a, &b, T_PV_SCATTER, ia, na, ib, nb, ua, ub), &o), 0);
		pm_apply(pv_ref, PV_RL, ia, na, ua);
		pm_apply(pm_ref, PM_RL, ib, nb, ub);
		rv = pm_sched(c, &a, &b, T_PV_GATHER, ia, na, ib, nb, NULL, NULL);
		assert_int_equal(coord_rv_fetch_timeout(rv, 30000000000ll, &res, &len, &err), 0);
		assert_int_equal(len, 4 * ((size_t)na * PV_RL + (size_t)nb * PM_RL));
		got = res;
		for (size_t k = 0; k < na; k++)
			assert_memory_equal(got + k * PV_RL, pv_ref + (size_t)ia[k] * PV_RL,
					    4 * PV_RL);
		got += (size_t)na * PV_RL;
		for (size_t k = 0; k < nb; k++)
			assert_memory_equal(got + k * PM_RL, pm_ref + (size_t)ib[k] * PM_RL,
					    4 * PM_RL);
		coord_rv_put(rv);
	}
	join_ok(c);
	ib[3] = PM_ROWS;
	assert_int_equal(fetch(pm_sched(c, &a, &b, T_PV_SCATTER, ia, 10, ib, 10, ua, ub), &o),
			 -ERANGE);
	assert_non_null(strstr(o.err.msg, "outside"));
	assert_int_equal(coord_join(c, &err), -ERANGE);
	assert_int_equal(fetch(pm_sched(c, &a, &b, T_PV_SCATTER, ia, 0, ib, 0, ua, ub), &o), 0);
	assert_int_equal(fetch(pm_sched(c, &a, &b, T_PV_GATHER, ia, 0, ib, 0, NULL, NULL), &o), 0);
	join_ok(c);
	pm_check_all(c, &a, &b);
	destroy(c);
}

/* Shard counts, bad handles and names, a plain variable as a 1-part handle. */
static void test_pvar_partitioner(void **state)
{
	uint64_t dims[2] = { 100000, 16 }, small[2] = { 3, 2 }, pd[2] = { 10, 4 };
	struct coord_partitioner p = { 0 };
	struct coord_pvar pv;
	struct coord_error err;
	struct coord *c = make();
	coord_var_t plain;
	int64_t ids[3] = { 9, 0, 9 };
	float rows[12], init[40];

	(void)state;
	/* default: min 256 KiB a shard, at most one per ps task (6.4 MB, 2 ps) */
	assert_int_equal(coord_pvar_create(c, "p/def", 2, dims, NULL, NULL, &pv, &err), 0);
	assert_int_equal(pv.nparts, NPS);
	p.min_shard_bytes = 4 << 20; /* 6.4 MB: 1 shard of >= 4 MiB */
	assert_int_equal(coord_pvar_create(c, "p/min", 2, dims, NULL, &p, &pv, &err), 0);
	assert_int_equal(pv.nparts, 1);
	p = (struct coord_partitioner){ .max_shard_bytes = 1 << 20 }; /* 6.4 MB: 7 */
	assert_int_equal(coord_pvar_create(c, "p/max", 2, dims, NULL, &p, &pv, &err), 0);
	assert_int_equal(pv.nparts, 7);
	p.max_shards = 5;
	assert_int_equal(coord_pvar_create(c, "p/max5", 2, dims, NULL, &p, &pv, &err), 0);
	assert_int_equal(pv.nparts, 5);
	p = (struct coord_partitioner){ .num_shards = 8 };
	assert_int_equal(coord_pvar_create(c, "p/small", 2, small, NULL, &p, &pv, &err), 0);
	assert_int_equal(pv.nparts, 3); /* never more shards than rows */
	p.max_shards = 2;
	assert_int_equal(coord_pvar_create(c, "p/x", 2, small, NULL, &p, &pv, &err), COORD_EINVAL);
	p = (struct coord_partitioner){ .num_shards = COORD_VAR_MAX_PARTS + 1 };
	assert_int_equal(coord_pvar_create(c, "p/x", 2, small, NULL, &p, &pv, &err), COORD_EINVAL);
	assert_int_equal(coord_pvar_create(c, "p/x", 0, small, NULL, NULL, &pv, &err),
			 COORD_EINVAL);
	assert_int_equal(coord_pvar_create(c,
					   "a23456789012345678901234567890123456789012345678"
					   "90123456",
					   2, small, NULL, NULL, &pv, &err),
			 COORD_EINVAL);
	assert_int_equal(coord_pvar_lookup(c, "p/none", &pv, &err), -ENOENT);
	/* a plain variable: a handle of one part */
	for (int i = 0; i < 40; i++)
		init[i] = (float)i;
	assert_int_equal(coord_var_create(c, "p/plain", 2, pd, init, &plain, &err), 0);
	assert_int_equal(coord_pvar_lookup(c, "p/plain", &pv, &err), 0);
	assert_int_equal(pv.nparts, 1);
	assert_int_equal(pv.part[0], plain);
	assert_int_equal(coord_pvar_gather(c, &pv, ids, 3, rows, &err), 0);
	assert_memory_equal(rows, init + 36, 16);
	assert_memory_equal(rows + 4, init, 16);
	assert_memory_equal(rows + 8, init + 36, 16);
	assert_int_equal(coord_pvar_scatter_add(c, &pv, ids, 3, rows, &err), 0);
	assert_int_equal(coord_var_read(c, plain, 36, 4, rows, &err), 0);
	assert_float_equal(rows[1], 3 * 37.0f, 0);
	/* a corrupt handle (as from hostile closure args) is refused */
	pv.nparts = 0;
	assert_int_equal(coord_pvar_gather(c, &pv, ids, 3, rows, &err), COORD_EINVAL);
	pv.nparts = 2; /* more shards than rows' worth of handle */
	pv.rows = 1;
	assert_int_equal(coord_pvar_scatter_add(c, &pv, ids, 3, rows, &err), COORD_EINVAL);
	assert_int_equal(coord_pvar_gather(c, NULL, ids, 3, rows, &err), COORD_EINVAL);
	assert_int_equal(coord_pvar_lookup(c, "p/plain", &pv, &err), 0);
	memset(pv.name, 'x', sizeof(pv.name));
	assert_int_equal(coord_pvar_gather(c, &pv, ids, 3, rows, &err), COORD_EINVAL);
	destroy(c);
}

/* A partitioned variable saved by 2 ps tasks, restored onto 3 and then 1:
 * one variable, every row intact, shards placed for the new count. */
static void test_pvar_restore_relayout(void **state)
{
	struct coord_partitioner part = { .num_shards = 5 };
	uint64_t dims[2] = { PV_ROWS, PV_RL };
	struct coord_pvar pv, pv2;
	struct coord_error err;
	int64_t ids[64];
	float upd[64 * PV_RL];
	uint64_t step;
	struct coord *c;

	(void)state;
	for (size_t i = 0; i < PV_ROWS * PV_RL; i++)
		pv_ref[i] = (float)i * -0.5f;
	c = lay_make(2);
	assert_int_equal(coord_pvar_create(c, "lay/emb", 2, dims, pv_ref, &part, &pv, &err), 0);
	pv_ids(ids, 64, PV_ROWS);
	for (size_t k = 0; k < 64 * PV_RL; k++)
		upd[k] = (float)k;
	assert_int_equal(coord_pvar_scatter_add(c, &pv, ids, 64, upd, &err), 0);
	for (size_t k = 0; k < 64; k++)
		for (size_t j = 0; j < PV_RL; j++)
			pv_ref[(size_t)ids[k] * PV_RL + j] += upd[k * PV_RL + j];
	assert_int_equal(coord_checkpoint_save(c, lay_dir, 7, &err), 0);
	lay_destroy(c);
	for (unsigned t = 0; t < 2; t++) {
		unsigned nps = t ? 1 : 3;

		c = lay_make(nps);
		assert_int_equal(coord_pvar_lookup(c, "lay/emb", &pv2, &err), -ENOENT);
		if (coord_checkpoint_restore(c, lay_dir, &step, &err) != 0)
			fail_msg("restore onto %u: %s", nps, err.msg);
		assert_int_equal(step, t ? 11 : 7);
		assert_int_equal(coord_pvar_lookup(c, "lay/emb", &pv2, &err), 0);
		assert_int_equal(pv2.nparts, 5);
		for (unsigned j = 0; j < 5; j++)
			assert_int_equal(coord_var_task(pv2.part[j]),
					 (coord_var_fnv1a64("lay/emb", 7) % nps + j) % nps);
		/* create finds it as restored */
		assert_int_equal(coord_pvar_create(c, "lay/emb", 2, dims, NULL, &part, &pv, &err),
				 0);
		assert_memory_equal(&pv, &pv2, sizeof(pv));
		pv_check_all(c, &pv);
		if (coord_checkpoint_save(c, lay_dir, 8 + nps, &err) != 0)
			fail_msg("save onto %u: %s", nps, err.msg);
		lay_destroy(c);
	}
}

/* A partitioned variable saved as 4 shards by 2 ps tasks, restored re-split
 * into 3 shards on 3 tasks, then 7 on 1, then (a byte partitioner) 4 on 2:
 * every row bit for bit, the other variables restored as they are; refused
 * whole for a name not in the checkpoint and for a live shard beyond the
 * new count. */
static void test_pvar_restore_resplit(void **state)
{
	static const struct {
		unsigned nps, k;
		struct coord_partitioner part;
	} runs[] = {
		{ 3, 3, { .num_shards = 3 } },
		{ 1, 7, { .num_shards = 7 } },
		{ 2, 4, { .max_shard_bytes = 300 * 4 * PV_RL } },
	};
	struct coord_partitioner p4 = { .num_shards = 4 };
	uint64_t dims[2] = { PV_ROWS, PV_RL }, step;
	float plain[5] = { 1.5f, -2, 3, 4e-9f, 5 }, got[5];
	struct coord_ckpt_resplit rs = { .name = "rs/emb" };
	struct coord_pvar pv, pv2;
	struct coord_var_shape sh;
	struct coord_error err;
	coord_var_t v;
	int64_t ids[64];
	float upd[64 * PV_RL];
	struct coord *c;

	(void)state;
	for (size_t i = 0; i < PV_ROWS * PV_RL; i++)
		pv_ref[i] = (float)i * 0.375f - 1e-3f * (float)(i % 7);
	c = lay_make(2);
	assert_int_equal(coord_pvar_create(c, "rs/emb", 2, dims, pv_ref, &p4, &pv, &err), 0);
	assert_int_equal(pv.nparts, 4);
	pv_ids(ids, 64, PV_ROWS);
	for (size_t k = 0; k < 64 * PV_RL; k++)
		upd[k] = (float)k * 0.1f;
	assert_int_equal(coord_pvar_scatter_add(c, &pv, ids, 64, upd, &err), 0);
	pm_apply(pv_ref, PV_RL, ids, 64, upd);
	assert_int_equal(coord_var_create(c, "rs/plain", 1, (uint64_t[]){ 5 }, plain, &v, &err), 0);
	assert_int_equal(coord_checkpoint_save(c, lay_dir, 7, &err), 0);
	lay_destroy(c);
	for (unsigned t = 0; t < 3; t++) {
		c = lay_make(runs[t].nps);
		rs.part = runs[t].part;
		step = 0;
		if (coord_checkpoint_restore_resplit(c, lay_dir, 0, &rs, 1, &step, &err) != 0)
			fail_msg("restore re-split onto %u: %s", runs[t].k, err.msg);
		assert_int_equal(step, 7 + t);
		assert_int_equal(coord_pvar_lookup(c, "rs/emb", &pv2, &err), 0);
		assert_int_equal(pv2.nparts, runs[t].k);
		assert_int_equal(pv2.rows, PV_ROWS);
		pv_check_all(c, &pv2); /* bit for bit (assert_memory_equal) */
		/* create with the same partitioner finds it as restored */
		assert_int_equal(
			coord_pvar_create(c, "rs/emb", 2, dims, NULL, &runs[t].part, &pv, &err), 0);
		assert_memory_equal(&pv, &pv2, sizeof(pv));
		assert_int_equal(coord_var_lookup(c, "rs/plain", &v, &sh, &err), 0);
		assert_int_equal(coord_var_read(c, v, 0, 5, got, &err), 0);
		assert_memory_equal(got, plain, sizeof(plain));
		if (coord_checkpoint_save(c, lay_dir, 8 + t, &err) != 0)
			fail_msg("save: %s", err.msg);
		lay_destroy(c);
	}
	/* refused whole: a name not in the checkpoint (the other one is fine) */
	c = lay_make(2);
	{
		struct coord_ckpt_resplit two[2] = { { .name = "rs/emb", .part = p4 },
						     { .name = "rs/none", .part = p4 } };

		assert_int_equal(
			coord_checkpoint_restore_resplit(c, lay_dir, 0, two, 2, &step, &err),
			COORD_EINVAL);
		assert_non_null(strstr(err.msg, "rs/none"));
		assert_int_equal(coord_pvar_lookup(c, "rs/emb", &pv2, &err), -ENOENT);
		assert_int_equal(coord_var_lookup(c, "rs/plain", &v, &sh, &err), -ENOENT);
		two[0].name = NULL;
		assert_int_equal(
			coord_checkpoint_restore_resplit(c, lay_dir, 0, two, 1, &step, &err),
			COORD_EINVAL);
	}
	/* refused whole: a live shard beyond the new count */
	p4.num_shards = 5;
	assert_int_equal(coord_pvar_create(c, "rs/emb", 2, dims, NULL, &p4, &pv, &err), 0);
	rs.part.num_shards = 3;
	rs.part.max_shard_bytes = 0;
	assert_int_equal(coord_checkpoint_restore_resplit(c, lay_dir, 0, &rs, 1, &step, &err),
			 -EEXIST);
	assert_non_null(strstr(err.msg, "beyond the 3 shards"));
	assert_int_equal(coord_var_lookup(c, "rs/plain", &v, &sh, &err), -ENOENT);
	memset(upd, 0xff, sizeof(upd));
	assert_int_equal(coord_pvar_gather(c, &pv, ids, 64, upd, &err), 0);
	for (size_t k = 0; k < 64 * PV_RL; k++)
		assert_true(upd[k] == 0.0f); /* the live variable, untouched */
	lay_destroy(c);
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
		cmocka_unit_test(test_large_requests), cmocka_unit_test(test_lookup_batch_read),   \
		cmocka_unit_test(test_errors), cmocka_unit_test(test_checkpoint_round_trip),       \
		cmocka_unit_test(test_checkpoint_corrupt_refused), LAY_TEST(test_restore_2_to_1),  \
		LAY_TEST(test_restore_2_to_3), LAY_TEST(test_restore_refused_whole),               \
		LAY_TEST(test_restore_version1), LAY_TEST(test_save_removes_temp_files),           \
		cmocka_unit_test(test_pvar_rows), cmocka_unit_test(test_pvar_multi),               \
		cmocka_unit_test(test_pvar_partitioner), LAY_TEST(test_pvar_restore_relayout),     \
		LAY_TEST(test_pvar_restore_resplit)
#define LAY_TEST(f) cmocka_unit_test_setup_teardown(f, lay_setup, lay_teardown)
	const struct CMUnitTest inproc_tests[] = { VAR_TESTS };
	const struct CMUnitTest tcp_tests[] = {
		VAR_TESTS,
		cmocka_unit_test(test_hostile_at_ps),
		cmocka_unit_test(test_wrong_key_across_processes),
		cmocka_unit_test(test_stale_handle_after_ps_restart),
		cmocka_unit_test(test_ps_dies),
		cmocka_unit_test(test_ps_failure_threshold),
		cmocka_unit_test(test_ps_failure_restart_exit_code),
		LAY_TEST(test_ckpt_root_escape),
		LAY_TEST(test_ckpt_root_start_sweep),
		LAY_TEST(test_stage_dies_with_connection),
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
