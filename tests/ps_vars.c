// SPDX-License-Identifier: MIT
/*
 * tests/ps_vars.c - part of test_ps: variables through closures and the
 * coordinator (assign_add, scatter_add, large requests from the caller's
 * buffers, lookups and batches, errors) and checkpoints on one layout.
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
#include "ps_tests.h"

void test_assign_add_exact(void **state)
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

void test_scatter_add(void **state)
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

#define LG_N (1u << 18) /* 1 MiB of floats: over PSC_EXT_MIN and PSC_RX_DIRECT_MIN */
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

void test_large_requests(void **state)
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

#define SN_N (1u << 20) /* 4 MiB of floats: a read streamed from the variable */
#define SN_ASSIGNS 12

struct sn_arg {
	struct coord *c;
	coord_var_t v;
	atomic_int done;
	int code;
};

/* Assigns SN_ASSIGNS values, 1, 2, ..., each to the whole variable. */
static void *sn_writer(void *p)
{
	struct sn_arg *a = p;
	float *d = malloc(4 * (size_t)SN_N);
	struct coord_error err;

	a->code = d ? 0 : -ENOMEM;
	for (int k = 1; k <= SN_ASSIGNS && !a->code; k++) {
		for (size_t i = 0; i < SN_N; i++)
			d[i] = (float)k;
		a->code = coord_var_assign(a->c, a->v, 0, SN_N, d, &err);
	}
	free(d);
	atomic_store(&a->done, 1);
	return NULL;
}

/* Large reads over tcp are sent from the variable under its stripes, what
 * the socket does not take at once copied (srv_var.c stream_vres()): each
 * is still one value of the variable, never a mix, while another
 * connection (a second coordinator) assigns it whole again and again. */
void test_large_read_snapshot(void **state)
{
	struct coord *c = make(), *c2 = make();
	uint64_t dims[1] = { SN_N };
	struct sn_arg a = { .c = c2 };
	float *got = malloc(4 * (size_t)SN_N);
	struct coord_error err;
	coord_var_t v = var(c, "sn/big", 1, dims);
	uint64_t until = t_now_ns() + 60000000000ull;
	unsigned reads = 0, seen = 0;
	float last = -1;
	pthread_t th;

	(void)state;
	assert_non_null(got);
	if (strcmp(t_transport, "tcp") == 0) /* inproc: a coordinator's own stores */
		assert_int_equal(coord_var_lookup(c2, "sn/big", &a.v, NULL, &err), 0);
	else
		a.c = c, a.v = v; /* inproc: threads of one coordinator */
	assert_int_equal(pthread_create(&th, NULL, sn_writer, &a), 0);
	while (reads < 400 && t_now_ns() < until) {
		bool end = atomic_load(&a.done);

		assert_int_equal(coord_var_read(c, v, 0, SN_N, got, &err), 0);
		reads++;
		for (size_t i = 1; i < SN_N; i++)
			if (got[i] != got[0])
				fail_msg("read %u: element %zu is %g, element 0 %g", reads, i,
					 got[i], got[0]);
		assert_true(got[0] >= last && got[0] <= SN_ASSIGNS);
		seen += got[0] != last;
		last = got[0];
		if (end)
			break;
	}
	pthread_join(th, NULL);
	assert_int_equal(a.code, 0);
	assert_true(last == SN_ASSIGNS); /* the last read came after the last assign */
	print_message("large reads: %u, %u distinct values seen\n", reads, seen);
	free(got);
	destroy(c2);
	destroy(c);
}

/* A worker resolves a name to the coordinator's handle; batches; reads. */
void test_lookup_batch_read(void **state)
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

void test_errors(void **state)
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

char ckpt_dir[64];

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

void test_checkpoint_round_trip(void **state)
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

void test_checkpoint_corrupt_refused(void **state)
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
