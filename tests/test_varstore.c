// SPDX-License-Identifier: MIT
/*
 * tests/test_varstore.c - the ps variable store: create/read/assign/
 * assign_add/scatter_add rules and errors, no lost update under concurrent
 * adds, checkpoint round trip, latest pointer, crash leftovers, corrupted
 * checkpoints refused with the store unchanged, placement functions.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <fcntl.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/store/varstore.h"
#include "helpers.h"

#define NTHREADS 4
#define NITERS 10000
/* A concurrency test gives up (and fails) after this long. */
#define TIME_LIMIT_NS (40ull * 1000000000ull)

static struct coord_varstore *new_store(unsigned keep)
{
	struct coord_varstore_opts o;
	struct coord_varstore *vs = NULL;

	coord_varstore_opts_init(&o);
	o.keep_checkpoints = keep;
	assert_int_equal(coord_varstore_create(&o, &vs, NULL), 0);
	return vs;
}

static uint32_t mk(struct coord_varstore *vs, const char *name, unsigned ndim, const uint64_t *dims,
		   const float *init)
{
	struct coord_error e = { 0 };
	uint32_t id = UINT32_MAX;
	int ret = coord_varstore_var_create(vs, name, ndim, dims, init, &id, &e);

	if (ret)
		fail_msg("create %s: %d %s", name, ret, e.msg);
	return id;
}

/* A fresh directory under /tmp, removed by rm_dir(). */
static char *mk_dir(void)
{
	char *d = strdup("/tmp/coord-varstore-XXXXXX");

	assert_non_null(d);
	assert_non_null(mkdtemp(d));
	return d;
}

static void rm_dir(char *d)
{
	DIR *dd = opendir(d);
	struct dirent *de;
	char p[512];

	assert_non_null(dd);
	for (int i = 0; i < 10000 && (de = readdir(dd)); i++) {
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		snprintf(p, sizeof(p), "%s/%s", d, de->d_name);
		unlink(p);
	}
	closedir(dd);
	assert_int_equal(rmdir(d), 0);
	free(d);
}

static bool file_exists(const char *dir, const char *name)
{
	char p[512];

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	return access(p, F_OK) == 0;
}

static void write_file(const char *dir, const char *name, const void *b, size_t len)
{
	char p[512];
	FILE *f;

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	f = fopen(p, "wb");
	assert_non_null(f);
	assert_int_equal(fwrite(b, 1, len, f), len);
	assert_int_equal(fclose(f), 0);
}

static unsigned char *read_file(const char *dir, const char *name, size_t *len)
{
	char p[512];
	unsigned char *b;
	struct stat st;
	FILE *f;

	snprintf(p, sizeof(p), "%s/%s", dir, name);
	assert_int_equal(stat(p, &st), 0);
	b = malloc((size_t)st.st_size + 1);
	assert_non_null(b);
	f = fopen(p, "rb");
	assert_non_null(f);
	assert_int_equal(fread(b, 1, (size_t)st.st_size, f), (size_t)st.st_size);
	fclose(f);
	*len = (size_t)st.st_size;
	return b;
}

/* --- rules ----------------------------------------------------------------- */

static void test_varstore_create_rules(void **state)
{
	struct coord_varstore *vs = new_store(5);
	struct coord_error e = { 0 };
	char longname[80];
	uint64_t d2[2] = { 3, 4 }, d3[2] = { 4, 3 }, big[2] = { 1ull << 14, (1ull << 14) + 1 };
	uint64_t huge[4] = { UINT64_MAX, UINT64_MAX, 2, 2 }, zero[1] = { 0 };
	uint64_t d5[5] = { 1, 1, 1, 1, 1 };
	float init[12], out[12];
	struct coord_var_info info;
	uint32_t id, id2;

	for (int i = 0; i < 12; i++)
		init[i] = (float)i;
	memset(longname, 'a', sizeof(longname));
	longname[64] = '\0';

	assert_int_equal(coord_varstore_var_create(vs, NULL, 0, NULL, NULL, &id, &e), -EINVAL);
	assert_non_null(strstr(e.msg, "NULL"));
	assert_int_equal(coord_varstore_var_create(vs, "", 0, NULL, NULL, &id, &e), -EINVAL);
	assert_non_null(strstr(e.msg, "empty"));
	assert_int_equal(coord_varstore_var_create(vs, longname, 0, NULL, NULL, &id, &e), -EINVAL);
	longname[63] = '\0'; /* 63 bytes: allowed */
	assert_int_equal(coord_varstore_var_create(vs, longname, 0, NULL, NULL, &id, &e), 0);
	assert_int_equal(coord_varstore_var_create(vs, "a b", 0, NULL, NULL, &id, &e), -EINVAL);
	assert_non_null(strstr(e.msg, "'a b'"));
	assert_int_equal(coord_varstore_var_create(vs, "w", 5, d5, NULL, &id, &e), -EINVAL);
	assert_int_equal(coord_varstore_var_create(vs, "w", 1, zero, NULL, &id, &e), -EINVAL);
	assert_non_null(strstr(e.msg, "'w'"));
	assert_int_equal(coord_varstore_var_create(vs, "w", 2, big, NULL, &id, &e), -EINVAL);
	assert_non_null(strstr(e.msg, "2^28"));
	assert_int_equal(coord_varstore_var_create(vs, "w", 4, huge, NULL, &id, &e), -EINVAL);
	assert_int_equal(coord_varstore_var_create(vs, "w", 2, NULL, NULL, &id, &e), -EINVAL);
	assert_int_equal(coord_varstore_var_create(NULL, "w", 2, d2, NULL, &id, &e), -EINVAL);
	assert_int_equal(coord_varstore_count(vs), 1);

	id = mk(vs, "layer0/kernel_0-x.y", 2, d2, init);
	assert_int_equal(coord_vs_info(vs, id, &info, &e), 0);
	assert_string_equal(info.name, "layer0/kernel_0-x.y");
	assert_int_equal(info.ndim, 2);
	assert_int_equal(info.nelem, 12);
	/* idempotent with the same shape: same id, value kept */
	id2 = mk(vs, "layer0/kernel_0-x.y", 2, d2, NULL);
	assert_int_equal(id, id2);
	assert_int_equal(coord_vs_read(vs, id, 0, 12, out, &e), 0);
	assert_memory_equal(out, init, sizeof(init));
	/* another shape: refused, naming both */
	assert_int_equal(
		coord_varstore_var_create(vs, "layer0/kernel_0-x.y", 2, d3, NULL, &id2, &e),
		-EEXIST);
	assert_non_null(strstr(e.msg, "[3,4]"));
	assert_non_null(strstr(e.msg, "[4,3]"));
	assert_int_equal(coord_varstore_lookup(vs, "layer0/kernel_0-x.y", &id2, &e), 0);
	assert_int_equal(id, id2);
	assert_int_equal(coord_varstore_lookup(vs, "nope", &id2, &e), -ENOENT);
	assert_non_null(strstr(e.msg, "'nope'"));
	assert_int_equal(coord_varstore_lookup(vs, NULL, &id2, &e), -EINVAL);
	assert_int_equal(coord_vs_info(vs, 999, &info, &e), -ENOENT);
	assert_int_equal(coord_varstore_count(vs), 2);
	coord_varstore_destroy(vs);
	coord_varstore_destroy(NULL);
}

static void test_varstore_read_assign_add(void **state)
{
	struct coord_varstore *vs = new_store(5);
	struct coord_error e = { 0 };
	uint64_t d[3] = { 2, 3, 4 };
	float buf[24], one[24], out[24];
	uint32_t id, s;

	id = mk(vs, "v", 3, d, NULL);
	assert_int_equal(coord_vs_read(vs, id, 0, 24, out, &e), 0);
	for (int i = 0; i < 24; i++) {
		assert_true(out[i] == 0.0f);
		buf[i] = (float)i;
		one[i] = 1.0f;
	}
	assert_int_equal(coord_vs_assign(vs, id, 0, 24, buf, &e), 0);
	assert_int_equal(coord_vs_assign_add(vs, id, 4, 8, one, &e), 0);
	assert_int_equal(coord_vs_read(vs, id, 0, 24, out, &e), 0);
	for (int i = 0; i < 24; i++)
		assert_true(out[i] == (float)i + (i >= 4 && i < 12 ? 1.0f : 0.0f));
	assert_int_equal(coord_vs_read(vs, id, 23, 1, out, &e), 0);
	assert_true(out[0] == 23.0f);
	assert_int_equal(coord_vs_read(vs, id, 24, 0, out, &e), 0); /* empty at the end */

	/* ranges and buffers */
	assert_int_equal(coord_vs_read(vs, id, 20, 5, out, &e), -EINVAL);
	assert_non_null(strstr(e.msg, "'v'"));
	assert_int_equal(coord_vs_read(vs, id, 25, 0, out, &e), -EINVAL);
	assert_int_equal(coord_vs_read(vs, id, 1, SIZE_MAX, out, &e), -EINVAL);
	assert_int_equal(coord_vs_assign(vs, id, SIZE_MAX, 2, buf, &e), -EINVAL);
	assert_int_equal(coord_vs_read(vs, id, 0, 1, NULL, &e), -EINVAL);
	assert_int_equal(coord_vs_assign_add(vs, id, 0, 1, NULL, &e), -EINVAL);
	assert_int_equal(coord_vs_read(vs, 77, 0, 1, out, &e), -ENOENT);
	assert_int_equal(coord_vs_read(NULL, id, 0, 1, out, &e), -EINVAL);
	assert_int_equal(coord_vs_assign(vs, id, 0, 24, buf, NULL), 0); /* err optional */

	/* a scalar */
	s = mk(vs, "step", 0, NULL, NULL);
	assert_int_equal(coord_vs_assign_add(vs, s, 0, 1, one, &e), 0);
	assert_int_equal(coord_vs_assign_add(vs, s, 0, 1, one, &e), 0);
	assert_int_equal(coord_vs_read(vs, s, 0, 1, out, &e), 0);
	assert_true(out[0] == 2.0f);
	assert_int_equal(coord_vs_read(vs, s, 0, 2, out, &e), -EINVAL);
	coord_varstore_destroy(vs);
}

static void test_varstore_scatter_add_rules(void **state)
{
	struct coord_varstore *vs = new_store(5);
	struct coord_error e = { 0 };
	uint64_t d[2] = { 5, 3 };
	float upd[4 * 3], out[15];
	int64_t idx[4] = { 4, 0, 4, 2 }, bad[3] = { 1, 5, 2 }, neg[2] = { 0, -1 };
	uint32_t id, s;

	for (int i = 0; i < 12; i++)
		upd[i] = (float)(i + 1);
	id = mk(vs, "emb", 2, d, NULL);
	assert_int_equal(coord_vs_scatter_add(vs, id, idx, 4, upd, &e), 0);
	assert_int_equal(coord_vs_read(vs, id, 0, 15, out, &e), 0);
	/* row 0 += upd[1]; row 2 += upd[3]; row 4 += upd[0] + upd[2] (duplicates add) */
	for (int j = 0; j < 3; j++) {
		assert_true(out[0 * 3 + j] == upd[3 + j]);
		assert_true(out[1 * 3 + j] == 0.0f);
		assert_true(out[2 * 3 + j] == upd[9 + j]);
		assert_true(out[3 * 3 + j] == 0.0f);
		assert_true(out[4 * 3 + j] == upd[j] + upd[6 + j]);
	}
	/* one bad index fails the call, nothing applied */
	float before[15];

	memcpy(before, out, sizeof(out));
	assert_int_equal(coord_vs_scatter_add(vs, id, bad, 3, upd, &e), -ERANGE);
	assert_non_null(strstr(e.msg, "'emb'"));
	assert_non_null(strstr(e.msg, "index 5 at position 1"));
	assert_int_equal(coord_vs_scatter_add(vs, id, neg, 2, upd, &e), -ERANGE);
	assert_int_equal(coord_vs_read(vs, id, 0, 15, out, &e), 0);
	assert_memory_equal(out, before, sizeof(out));
	assert_int_equal(coord_vs_scatter_add(vs, id, idx, 0, NULL, &e), 0);
	assert_int_equal(coord_vs_scatter_add(vs, id, NULL, 1, upd, &e), -EINVAL);
	assert_int_equal(coord_vs_scatter_add(vs, id, idx, SIZE_MAX / 2, upd, &e), -EINVAL);
	s = mk(vs, "scalar", 0, NULL, NULL);
	assert_int_equal(coord_vs_scatter_add(vs, s, idx, 1, upd, &e), -EINVAL);
	assert_non_null(strstr(e.msg, "scalar"));
	coord_varstore_destroy(vs);
}

static void test_varstore_delete(void **state)
{
	struct coord_varstore *vs = new_store(5);
	struct coord_error e = { 0 };
	uint64_t d[1] = { 4 }, d2[1] = { 8 };
	float out[8];
	int64_t idx = 0;
	uint32_t id, id2, got;

	id = mk(vs, "gone", 1, d, NULL);
	mk(vs, "stays", 1, d, NULL);
	assert_int_equal(coord_vs_delete(vs, id, &e), 0);
	assert_int_equal(coord_varstore_count(vs), 1);
	assert_int_equal(coord_vs_read(vs, id, 0, 4, out, &e), -ENOENT);
	assert_non_null(strstr(e.msg, "'gone'"));
	assert_int_equal(coord_vs_assign_add(vs, id, 0, 4, out, &e), -ENOENT);
	assert_int_equal(coord_vs_scatter_add(vs, id, &idx, 1, out, &e), -ENOENT);
	assert_int_equal(coord_vs_delete(vs, id, &e), -ENOENT);
	assert_int_equal(coord_varstore_lookup(vs, "gone", &got, &e), -ENOENT);
	/* the name is free again, with another shape and a new id */
	id2 = mk(vs, "gone", 1, d2, NULL);
	assert_int_not_equal(id, id2);
	assert_int_equal(coord_varstore_lookup(vs, "gone", &got, &e), 0);
	assert_int_equal(got, id2);
	assert_int_equal(coord_varstore_lookup(vs, "stays", &got, &e), 0);
	coord_varstore_destroy(vs);
}

/* --- concurrency ------------------------------------------------------------- */

struct cargs {
	struct coord_varstore *vs;
	uint32_t id;
	int t;
	_Atomic int *stop;
	long bad;
	long done;
};

static void *adder(void *p)
{
	struct cargs *a = p;
	float one[256];
	uint64_t t0 = t_now_ns();

	for (int i = 0; i < 256; i++)
		one[i] = 1.0f;
	for (int i = 0; i < NITERS && t_now_ns() - t0 < TIME_LIMIT_NS; i++) {
		if (coord_vs_assign_add(a->vs, a->id, 0, 256, one, NULL))
			a->bad++;
		else
			a->done++;
	}
	return NULL;
}

/* Every whole read sees all elements equal: adds are atomic over all stripes. */
static void *reader(void *p)
{
	struct cargs *a = p;
	float out[256];
	uint64_t t0 = t_now_ns();

	for (long i = 0; i < 1000000 && t_now_ns() - t0 < TIME_LIMIT_NS; i++) {
		if (atomic_load(a->stop))
			break;
		if (coord_vs_read(a->vs, a->id, 0, 256, out, NULL)) {
			a->bad++;
			continue;
		}
		for (int j = 1; j < 256; j++)
			if (out[j] != out[0]) {
				a->bad++;
				break;
			}
		a->done++;
	}
	return NULL;
}

/* 4 threads x 10,000 assign_add on one variable: the sum is exact. */
static void test_varstore_concurrent_assign_add(void **state)
{
	struct coord_varstore *vs = new_store(5);
	uint64_t d[2] = { 64, 4 }; /* 64 rows: 32 stripes, each add takes all */
	struct cargs a[NTHREADS + 1];
	pthread_t th[NTHREADS + 1];
	_Atomic int stop = 0;
	float out[256];
	uint32_t id = mk(vs, "acc", 2, d, NULL);

	for (int t = 0; t <= NTHREADS; t++) {
		a[t] = (struct cargs){ .vs = vs, .id = id, .t = t, .stop = &stop };
		assert_int_equal(pthread_create(&th[t], NULL, t < NTHREADS ? adder : reader, &a[t]),
				 0);
	}
	for (int t = 0; t < NTHREADS; t++)
		pthread_join(th[t], NULL);
	atomic_store(&stop, 1);
	pthread_join(th[NTHREADS], NULL);
	for (int t = 0; t <= NTHREADS; t++)
		assert_int_equal(a[t].bad, 0);
	for (int t = 0; t < NTHREADS; t++)
		assert_int_equal(a[t].done, NITERS);
	assert_int_equal(coord_vs_read(vs, id, 0, 256, out, NULL), 0);
	for (int j = 0; j < 256; j++)
		assert_true(out[j] == (float)(NTHREADS * NITERS));
	coord_varstore_destroy(vs);
}

#define SROWS 1000
#define SCOLS 8

static void scatter_rows(int t, int i, int64_t idx[3])
{
	idx[0] = (i * 7 + t) % SROWS;
	idx[1] = (i * 13 + 3 * t) % SROWS;
	idx[2] = idx[0]; /* a duplicate in the same call */
}

static void *scatterer(void *p)
{
	struct cargs *a = p;
	float upd[3 * SCOLS];
	int64_t idx[3];
	uint64_t t0 = t_now_ns();

	for (int i = 0; i < 3 * SCOLS; i++)
		upd[i] = 1.0f;
	for (int i = 0; i < NITERS && t_now_ns() - t0 < TIME_LIMIT_NS; i++) {
		scatter_rows(a->t, i, idx);
		if (coord_vs_scatter_add(a->vs, a->id, idx, 3, upd, NULL))
			a->bad++;
		else
			a->done++;
	}
	return NULL;
}

/* Creates variables across a chunk boundary (and bucket growth) while the
 * scatterers run, then looks each up and reads it. */
static void *creator(void *p)
{
	struct cargs *a = p;
	char name[32];
	uint64_t d[1] = { 2 };
	float init[2], out[2];
	uint32_t id, got;

	for (int i = 0; i < 1500; i++) {
		snprintf(name, sizeof(name), "c/%d", i);
		init[0] = init[1] = (float)i;
		if (coord_varstore_var_create(a->vs, name, 1, d, init, &id, NULL) ||
		    coord_varstore_lookup(a->vs, name, &got, NULL) || got != id ||
		    coord_vs_read(a->vs, id, 0, 2, out, NULL) || out[1] != (float)i)
			a->bad++;
		else
			a->done++;
	}
	return NULL;
}

static void test_varstore_concurrent_scatter_add(void **state)
{
	struct coord_varstore *vs = new_store(5);
	uint64_t d[2] = { SROWS, SCOLS };
	static float expect[SROWS], out[SROWS * SCOLS];
	struct cargs a[NTHREADS + 1];
	pthread_t th[NTHREADS + 1];
	uint32_t id = mk(vs, "emb", 2, d, NULL);
	int64_t idx[3];

	memset(expect, 0, sizeof(expect));
	for (int t = 0; t < NTHREADS; t++)
		for (int i = 0; i < NITERS; i++) {
			scatter_rows(t, i, idx);
			for (int k = 0; k < 3; k++)
				expect[idx[k]] += 1.0f;
		}
	for (int t = 0; t <= NTHREADS; t++) {
		a[t] = (struct cargs){ .vs = vs, .id = id, .t = t };
		assert_int_equal(
			pthread_create(&th[t], NULL, t < NTHREADS ? scatterer : creator, &a[t]), 0);
	}
	for (int t = 0; t <= NTHREADS; t++)
		pthread_join(th[t], NULL);
	for (int t = 0; t <= NTHREADS; t++)
		assert_int_equal(a[t].bad, 0);
	for (int t = 0; t < NTHREADS; t++)
		assert_int_equal(a[t].done, NITERS);
	assert_int_equal(a[NTHREADS].done, 1500);
	assert_int_equal(coord_vs_read(vs, id, 0, SROWS * SCOLS, out, NULL), 0);
	for (int r = 0; r < SROWS; r++)
		for (int j = 0; j < SCOLS; j++)
			assert_true(out[r * SCOLS + j] == expect[r]);
	assert_int_equal(coord_varstore_count(vs), 1501);
	coord_varstore_destroy(vs);
}

/* --- checkpoints --------------------------------------------------------------- */

#define BIGN (600u * 1000u) /* 2.4 MB: spans several 1 MiB write buffers */

/* A store with a scalar, a 1-D, a 3-D and a large variable, values from @seed. */
static struct coord_varstore *filled_store(float seed, unsigned keep)
{
	struct coord_varstore *vs = new_store(keep);
	uint64_t d1[1] = { 5 }, d3[3] = { 2, 3, 4 }, db[2] = { BIGN / 100, 100 };
	float *big = malloc(BIGN * sizeof(float)), v[24];

	assert_non_null(big);
	for (unsigned i = 0; i < BIGN; i++)
		big[i] = seed + (float)(i % 1000) * 0.5f;
	for (int i = 0; i < 24; i++)
		v[i] = seed * 10 + (float)i;
	mk(vs, "global_step", 0, NULL, &seed);
	mk(vs, "dense/bias", 1, d1, v);
	mk(vs, "conv-1/kernel.w", 3, d3, v);
	mk(vs, "embedding", 2, db, big);
	free(big);
	return vs;
}

/* Every variable of @a has the same name, shape and value in @b. */
static void assert_same_vars(struct coord_varstore *a, struct coord_varstore *b)
{
	uint32_t n = 0;

	for (uint32_t id = 0; id < 100000; id++) {
		struct coord_var_info ia, ib;
		float *x, *y;
		uint32_t idb;

		if (coord_vs_info(a, id, &ia, NULL))
			break;
		n++;
		assert_int_equal(coord_varstore_lookup(b, ia.name, &idb, NULL), 0);
		assert_int_equal(coord_vs_info(b, idb, &ib, NULL), 0);
		assert_memory_equal(&ia, &ib, sizeof(ia));
		x = malloc(ia.nelem * sizeof(float));
		y = malloc(ia.nelem * sizeof(float));
		assert_int_equal(coord_vs_read(a, id, 0, ia.nelem, x, NULL), 0);
		assert_int_equal(coord_vs_read(b, idb, 0, ia.nelem, y, NULL), 0);
		assert_memory_equal(x, y, ia.nelem * sizeof(float));
		free(x);
		free(y);
	}
	assert_int_equal(n, coord_varstore_count(a));
}

static void test_varstore_checkpoint_round_trip(void **state)
{
	struct coord_varstore *vs = filled_store(1.5f, 5), *back = new_store(5);
	struct coord_error e = { 0 };
	char *dir = mk_dir();
	uint64_t d1[1] = { 5 }, step = 0;
	float junk[5] = { 9, 9, 9, 9, 9 }, out[5];
	uint32_t id;

	assert_int_equal(coord_varstore_save(vs, dir, 10, &e), 0);
	assert_true(file_exists(dir, "ckpt-10.coord"));
	assert_true(file_exists(dir, "latest"));
	/* a variable that exists (same shape) is overwritten; one only in the
	 * store is left alone */
	mk(back, "dense/bias", 1, d1, junk);
	id = mk(back, "only-here", 1, d1, junk);
	assert_int_equal(coord_varstore_restore(back, dir, &step, &e), 0);
	assert_int_equal(step, 10);
	assert_same_vars(vs, back);
	assert_int_equal(coord_varstore_count(back), 5);
	assert_int_equal(coord_vs_read(back, id, 0, 5, out, &e), 0);
	assert_memory_equal(out, junk, sizeof(junk));
	/* restored variables are usable */
	assert_int_equal(coord_varstore_lookup(back, "global_step", &id, &e), 0);
	assert_int_equal(coord_vs_assign_add(back, id, 0, 1, junk, &e), 0);
	assert_int_equal(coord_vs_read(back, id, 0, 1, out, &e), 0);
	assert_true(out[0] == 10.5f);
	/* an empty store saves and restores too */
	coord_varstore_destroy(back);
	back = new_store(5);
	assert_int_equal(coord_varstore_save(back, dir, 11, &e), 0);
	assert_int_equal(coord_varstore_restore(vs, dir, &step, &e), 0);
	assert_int_equal(step, 11);
	assert_int_equal(coord_varstore_count(vs), 4);

	coord_varstore_destroy(vs);
	coord_varstore_destroy(back);
	rm_dir(dir);
}

struct dargs {
	struct coord_varstore *vs;
	uint32_t id;
	long bad;
};

/* Deletes and re-creates "churn" while its old id is in use elsewhere. */
static void *churner(void *p)
{
	struct dargs *a = p;
	uint64_t d[1] = { 8 };
	uint32_t id;

	for (int i = 0; i < 200; i++) {
		if (coord_varstore_lookup(a->vs, "churn", &id, NULL) ||
		    coord_vs_delete(a->vs, id, NULL) ||
		    coord_varstore_var_create(a->vs, "churn", 1, d, NULL, &id, NULL))
			a->bad++;
	}
	return NULL;
}

static void *churn_user(void *p)
{
	struct dargs *a = p;
	float one[8] = { 1, 1, 1, 1, 1, 1, 1, 1 }, out[8];
	int64_t idx = 3;

	for (int i = 0; i < 2000; i++) {
		int r1 = coord_vs_assign_add(a->vs, a->id, 0, 8, one, NULL);
		int r2 = coord_vs_read(a->vs, a->id, 0, 8, out, NULL);
		int r3 = coord_vs_scatter_add(a->vs, a->id, &idx, 1, one, NULL);

		if ((r1 && r1 != -ENOENT) || (r2 && r2 != -ENOENT) || (r3 && r3 != -ENOENT))
			a->bad++;
	}
	return NULL;
}

/* Saves while adders run (each checkpoint holds a consistent small
 * variable) and while another variable is deleted and re-created under
 * users of its first id: no race, no crash, only 0 or -ENOENT / -EAGAIN. */
static void test_varstore_save_during_updates(void **state)
{
	struct coord_varstore *vs = new_store(2), *back;
	struct coord_error e = { 0 };
	uint64_t d[2] = { 64, 4 }, d8[1] = { 8 }, step;
	struct cargs a[NTHREADS];
	struct dargs da = { 0 }, du = { 0 };
	pthread_t th[NTHREADS], tc, tu;
	char *dir = mk_dir();
	uint32_t id = mk(vs, "acc", 2, d, NULL), cid = mk(vs, "churn", 1, d8, NULL);
	float out[256];
	int saved = 0;

	da.vs = du.vs = vs;
	du.id = cid;
	for (int t = 0; t < NTHREADS; t++) {
		a[t] = (struct cargs){ .vs = vs, .id = id, .t = t };
		assert_int_equal(pthread_create(&th[t], NULL, adder, &a[t]), 0);
	}
	assert_int_equal(pthread_create(&tc, NULL, churner, &da), 0);
	assert_int_equal(pthread_create(&tu, NULL, churn_user, &du), 0);
	for (int s = 1; s <= 5; s++) {
		int r = coord_varstore_save(vs, dir, (uint64_t)s, &e);

		if (r == -EAGAIN)
			assert_non_null(strstr(e.msg, "'churn'"));
		else
			assert_int_equal(r, 0);
		saved += r == 0;
	}
	for (int t = 0; t < NTHREADS; t++)
		pthread_join(th[t], NULL);
	pthread_join(tc, NULL);
	pthread_join(tu, NULL);
	for (int t = 0; t < NTHREADS; t++)
		assert_int_equal(a[t].bad, 0);
	assert_int_equal(da.bad, 0);
	assert_int_equal(du.bad, 0);
	if (saved) {
		back = new_store(2);
		assert_int_equal(coord_varstore_restore(back, dir, &step, &e), 0);
		assert_int_equal(coord_varstore_lookup(back, "acc", &id, &e), 0);
		assert_int_equal(coord_vs_read(back, id, 0, 256, out, &e), 0);
		for (int j = 1; j < 256; j++)
			assert_true(out[j] == out[0]);
		assert_true(out[0] >= 0.0f && out[0] <= (float)(NTHREADS * NITERS));
		coord_varstore_destroy(back);
	}
	coord_varstore_destroy(vs);
	rm_dir(dir);
}

static void test_varstore_checkpoint_latest_and_keep(void **state)
{
	struct coord_varstore *vs = new_store(2), *back;
	struct coord_error e = { 0 };
	char *dir = mk_dir();
	unsigned char *b;
	size_t len;
	float x;
	uint64_t step;
	uint32_t id = mk(vs, "x", 0, NULL, NULL);

	for (int s = 1; s <= 3; s++) {
		x = (float)s;
		assert_int_equal(coord_vs_assign(vs, id, 0, 1, &x, &e), 0);
		assert_int_equal(coord_varstore_save(vs, dir, (uint64_t)s * 100, &e), 0);
	}
	b = read_file(dir, "latest", &len);
	assert_int_equal(len, strlen("ckpt-300.coord\n"));
	assert_memory_equal(b, "ckpt-300.coord\n", len);
	free(b);
	/* keep 2: the oldest is gone */
	assert_false(file_exists(dir, "ckpt-100.coord"));
	assert_true(file_exists(dir, "ckpt-200.coord"));
	assert_true(file_exists(dir, "ckpt-300.coord"));

	back = new_store(2);
	assert_int_equal(coord_varstore_restore(back, dir, &step, &e), 0);
	assert_int_equal(step, 300);
	assert_int_equal(coord_varstore_lookup(back, "x", &id, &e), 0);
	assert_int_equal(coord_vs_read(back, id, 0, 1, &x, &e), 0);
	assert_true(x == 3.0f);
	assert_int_equal(coord_varstore_restore_step(back, dir, 200, &e), 0);
	assert_int_equal(coord_vs_read(back, id, 0, 1, &x, &e), 0);
	assert_true(x == 2.0f);
	assert_int_equal(coord_varstore_restore_step(back, dir, 100, &e), -ENOENT);
	assert_non_null(strstr(e.msg, "ckpt-100.coord"));
	/* saving the same step again replaces it */
	assert_int_equal(coord_varstore_save(back, dir, 200, &e), 0);
	assert_true(file_exists(dir, "ckpt-300.coord"));
	coord_varstore_destroy(back);
	coord_varstore_destroy(vs);
	rm_dir(dir);
}

/* A crash leaves a stray temp file, or a renamed checkpoint that latest does
 * not name yet: restore uses latest and ignores both. */
static void test_varstore_checkpoint_after_crash(void **state)
{
	struct coord_varstore *vs = new_store(0), *back = new_store(0);
	struct coord_error e = { 0 };
	char *dir = mk_dir();
	float x = 1.0f, y;
	uint64_t step;
	uint32_t id = mk(vs, "x", 0, NULL, &x);

	assert_int_equal(coord_varstore_save(vs, dir, 1, &e), 0);
	x = 2.0f;
	assert_int_equal(coord_vs_assign(vs, id, 0, 1, &x, &e), 0);
	assert_int_equal(coord_varstore_save(vs, dir, 2, &e), 0);
	/* crash after renaming ckpt-2 but before latest moved */
	write_file(dir, "latest", "ckpt-1.coord\n", 13);
	/* crash in the middle of writing ckpt-3 */
	write_file(dir, ".ckpt-3.coord.tmp.4242.0", "COORDCKP\x01", 9);
	write_file(dir, ".latest.tmp.4242.1", "ckpt-3.coord\n", 13);
	assert_int_equal(coord_varstore_restore(back, dir, &step, &e), 0);
	assert_int_equal(step, 1);
	assert_int_equal(coord_varstore_lookup(back, "x", &id, &e), 0);
	assert_int_equal(coord_vs_read(back, id, 0, 1, &y, &e), 0);
	assert_true(y == 1.0f);
	/* the next save works with the leftovers present */
	assert_int_equal(coord_varstore_save(vs, dir, 3, &e), 0);
	assert_int_equal(coord_varstore_restore(back, dir, &step, &e), 0);
	assert_int_equal(step, 3);
	coord_varstore_destroy(back);
	coord_varstore_destroy(vs);
	rm_dir(dir);
}

/* CK-T1 (checkpoint.c): a save removes the temp files of interrupted saves,
 * but never one whose writer is alive (it holds the file's lock), as when
 * two clusters' ps tasks save beneath one root. */
static void test_varstore_live_temp_file_kept(void **state)
{
	struct coord_varstore *vs = new_store(0);
	struct coord_error e = { 0 };
	char *dir = mk_dir(), live[512], dead[512];
	float x = 1.0f;
	int fd;

	(void)state;
	mk(vs, "x", 0, NULL, &x);
	snprintf(live, sizeof(live), "%s/.ckpt-5.coord.tmp.777.0", dir);
	snprintf(dead, sizeof(dead), "%s/.ckpt-5.coord.tmp.778.0", dir);
	write_file(dir, ".ckpt-5.coord.tmp.777.0", "COORDCKP", 8);
	write_file(dir, ".ckpt-5.coord.tmp.778.0", "COORDCKP", 8);
	fd = open(live, O_RDONLY | O_CLOEXEC);
	assert_true(fd >= 0);
	assert_int_equal(flock(fd, LOCK_EX), 0); /* a writer at work */
	assert_int_equal(coord_varstore_save(vs, dir, 1, &e), 0);
	assert_int_equal(access(live, F_OK), 0);
	assert_int_equal(access(dead, F_OK), -1);
	close(fd); /* the writer died: its lock went with it */
	assert_int_equal(coord_varstore_save(vs, dir, 2, &e), 0);
	assert_int_equal(access(live, F_OK), -1);
	coord_varstore_destroy(vs);
	rm_dir(dir);
}

/* Restore into @vs must fail with @code and a message holding @what and the
 * file name; @vs must be unchanged (its "x" is 42, it has @nvars). */
static void expect_refused(struct coord_varstore *vs, const char *dir, int code, const char *what)
{
	struct coord_error e = { 0 };
	uint64_t step = 12345;
	uint32_t n = coord_varstore_count(vs), id;
	float x;

	assert_int_equal(coord_varstore_restore(vs, dir, &step, &e), code);
	assert_int_equal(e.code, code);
	if (!strstr(e.msg, what))
		fail_msg("expected '%s' in: %s", what, e.msg);
	if (code != -ENOENT && !strstr(e.msg, "ckpt-7.coord") && !strstr(e.msg, "latest"))
		fail_msg("no file name in: %s", e.msg);
	assert_int_equal(step, 12345);
	assert_int_equal(coord_varstore_count(vs), n);
	assert_int_equal(coord_varstore_lookup(vs, "x", &id, NULL), 0);
	assert_int_equal(coord_vs_read(vs, id, 0, 1, &x, NULL), 0);
	assert_true(x == 42.0f);
	assert_int_equal(coord_varstore_lookup(vs, "embedding", &id, NULL), -ENOENT);
}

static void put32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

/* Rewrite the trailer so only the structural checks can catch the change. */
static void fix_crc(unsigned char *b, size_t len)
{
	put32(b + len - 4, coord_crc32c(0, b, len - 4));
}

static void test_varstore_checkpoint_corrupt_refused(void **state)
{
	struct coord_varstore *src = filled_store(3.0f, 5), *vs = new_store(5);
	struct coord_varstore_opts o;
	struct coord_error e = { 0 };
	char *dir = mk_dir();
	unsigned char *good, *b;
	uint64_t ds[1] = { 5 };
	size_t len;
	float x = 42.0f;

	mk(vs, "x", 0, NULL, &x);
	/* no checkpoint at all */
	expect_refused(vs, dir, -ENOENT, "no 'latest'");
	assert_int_equal(coord_varstore_save(src, dir, 7, &e), 0);
	good = read_file(dir, "ckpt-7.coord", &len);
	b = malloc(len);
	assert_non_null(b);

	/* a flipped byte in the data */
	memcpy(b, good, len);
	b[len / 2] ^= 0x10;
	write_file(dir, "ckpt-7.coord", b, len);
	expect_refused(vs, dir, -EBADMSG, "checksum mismatch");
	/* a flipped byte in the trailer */
	memcpy(b, good, len);
	b[len - 1] ^= 1;
	write_file(dir, "ckpt-7.coord", b, len);
	expect_refused(vs, dir, -EBADMSG, "checksum");
	/* truncated, at several places */
	write_file(dir, "ckpt-7.coord", good, len - 1);
	expect_refused(vs, dir, -EBADMSG, "truncated");
	write_file(dir, "ckpt-7.coord", good, 100);
	expect_refused(vs, dir, -EBADMSG, "truncated");
	write_file(dir, "ckpt-7.coord", good, 10);
	expect_refused(vs, dir, -EBADMSG, "truncated");
	write_file(dir, "ckpt-7.coord", good, 0);
	expect_refused(vs, dir, -EBADMSG, "truncated");
	/* trailing garbage */
	memcpy(b, good, len);
	write_file(dir, "ckpt-7.coord", b, len); /* restore the good one first */
	{
		unsigned char *longer = calloc(1, len + 3);

		memcpy(longer, good, len);
		write_file(dir, "ckpt-7.coord", longer, len + 3);
		free(longer);
	}
	expect_refused(vs, dir, -EBADMSG, "trailing");
	/* wrong magic */
	memcpy(b, good, len);
	b[0] = 'X';
	write_file(dir, "ckpt-7.coord", b, len);
	expect_refused(vs, dir, -EBADMSG, "magic");
	/* wrong version, even with a matching checksum */
	memcpy(b, good, len);
	put32(b + 8, 3);
	fix_crc(b, len);
	write_file(dir, "ckpt-7.coord", b, len);
	expect_refused(vs, dir, -EBADMSG, "version 3");
	/* a layout that cannot be: task 1 of 1 */
	memcpy(b, good, len);
	put32(b + 40, 1);
	fix_crc(b, len);
	write_file(dir, "ckpt-7.coord", b, len);
	expect_refused(vs, dir, -EBADMSG, "task 1 of 1");
	/* structural lies behind a valid checksum */
	memcpy(b, good, len);
	put32(b + 24, 0x7fffffff); /* variable count */
	fix_crc(b, len);
	write_file(dir, "ckpt-7.coord", b, len);
	expect_refused(vs, dir, -EBADMSG, "cannot fit");
	memcpy(b, good, len);
	put32(b + 48, 200); /* first name length */
	fix_crc(b, len);
	write_file(dir, "ckpt-7.coord", b, len);
	expect_refused(vs, dir, -EBADMSG, "name length");
	memcpy(b, good, len);
	b[52] = ' '; /* first name's first byte */
	fix_crc(b, len);
	write_file(dir, "ckpt-7.coord", b, len);
	expect_refused(vs, dir, -EBADMSG, "not one of");
	memcpy(b, good, len);
	b[16] = 8; /* header step */
	fix_crc(b, len);
	write_file(dir, "ckpt-7.coord", b, len);
	expect_refused(vs, dir, -EBADMSG, "step 8");
	memcpy(b, good, len);
	put32(b + 24, 3); /* one variable fewer: bytes left over */
	fix_crc(b, len);
	write_file(dir, "ckpt-7.coord", b, len);
	expect_refused(vs, dir, -EBADMSG, "unaccounted");
	/* global_step is first: name length 11, then ndim; say 4 dims */
	memcpy(b, good, len);
	assert_memory_equal(b + 52, "global_step", 11);
	put32(b + 63, 4);
	fix_crc(b, len);
	write_file(dir, "ckpt-7.coord", b, len);
	expect_refused(vs, dir, -EBADMSG, "ckpt-7.coord");

	/* the good file, but a store variable has another shape: refused, and
	 * none of the file's other variables is created */
	write_file(dir, "ckpt-7.coord", good, len);
	{
		struct coord_varstore *clash = new_store(5);
		uint64_t d2[1] = { 6 };
		float zero = 42.0f;

		mk(clash, "x", 0, NULL, &zero);
		mk(clash, "dense/bias", 1, d2, NULL);
		expect_refused(clash, dir, -EEXIST, "'dense/bias'");
		coord_varstore_destroy(clash);
	}
	/* too big for the configured limit */
	coord_varstore_opts_init(&o);
	o.max_ckpt_bytes = 1000;
	{
		struct coord_varstore *small = NULL;

		assert_int_equal(coord_varstore_create(&o, &small, NULL), 0);
		mk(small, "x", 0, NULL, &x);
		expect_refused(small, dir, -EFBIG, "over the limit");
		coord_varstore_destroy(small);
	}
	/* a latest pointer that names nothing sensible */
	write_file(dir, "latest", "../../etc/passwd\n", 17);
	expect_refused(vs, dir, -EBADMSG, "does not name");
	write_file(dir, "latest", "", 0);
	expect_refused(vs, dir, -EBADMSG, "does not name");
	write_file(dir, "latest", "ckpt-99999999999999999999999.coord", 34);
	expect_refused(vs, dir, -EBADMSG, "does not name");
	/* and after all that the good one still loads */
	write_file(dir, "latest", "ckpt-7.coord\n", 13);
	assert_int_equal(coord_varstore_restore(vs, dir, NULL, &e), 0);
	assert_same_vars(src, vs);
	(void)ds;

	/* bad arguments */
	assert_int_equal(coord_varstore_save(vs, NULL, 1, &e), -EINVAL);
	assert_int_equal(coord_varstore_save(vs, "", 1, &e), -EINVAL);
	assert_int_equal(coord_varstore_save(NULL, dir, 1, &e), -EINVAL);
	assert_int_equal(coord_varstore_save(vs, "/nonexistent/coord-dir", 1, &e), -ENOENT);
	assert_non_null(strstr(e.msg, "/nonexistent/coord-dir"));
	assert_int_equal(coord_varstore_restore(vs, "/nonexistent/coord-dir", NULL, &e), -ENOENT);
	assert_int_equal(coord_varstore_restore(NULL, dir, NULL, &e), -EINVAL);

	free(b);
	free(good);
	coord_varstore_destroy(src);
	coord_varstore_destroy(vs);
	rm_dir(dir);
}

/* --- placement and checksum ---------------------------------------------------- */

static void test_varstore_shard_functions(void **state)
{
	unsigned count[4] = { 0 };
	char name[32];
	uint64_t first, cnt, next;

	/* FNV-1a 64 reference values */
	assert_true(coord_var_fnv1a64("", 0) == 0xcbf29ce484222325ull);
	assert_true(coord_var_fnv1a64("a", 1) == 0xaf63dc4c8601ec8cull);
	assert_true(coord_var_fnv1a64("foobar", 6) == 0x85944171f73967e8ull);
	/* stable: a fixed name always lands on the same task */
	assert_int_equal(coord_var_shard("a", 4), 0xaf63dc4c8601ec8cull % 4);
	assert_int_equal(coord_var_shard("x", 1), 0);
	assert_int_equal(coord_var_shard("x", 0), 0);
	assert_int_equal(coord_var_shard(NULL, 3), 0xcbf29ce484222325ull % 3);
	/* balanced over many names: each task within 10% of a quarter */
	for (int i = 0; i < 10000; i++) {
		snprintf(name, sizeof(name), "layer_%d/kernel", i);
		unsigned s = coord_var_shard(name, 4);

		assert_true(s < 4);
		assert_int_equal(coord_var_shard(name, 4), s);
		count[s]++;
	}
	for (int s = 0; s < 4; s++)
		assert_true(count[s] > 2250 && count[s] < 2750);
	/* a partition's shard J: J tasks after its base name's task */
	{
		static const char *const notpart[] = { "e/part_",   "e/part_01", "/part_1",
						       "e/part_1x", "e/part_-1", "e/part_12345678",
						       "e/Part_1" };
		size_t bl = 0;

		for (unsigned j = 0; j < 9; j++) {
			snprintf(name, sizeof(name), "emb/x/part_%u", j);
			assert_int_equal(coord_var_part_of(name, &bl), j);
			assert_int_equal(bl, 5);
			for (unsigned n = 1; n <= 5; n++)
				assert_int_equal(coord_var_shard(name, n),
						 (coord_var_fnv1a64("emb/x", 5) % n + j) % n);
		}
		for (size_t i = 0; i < sizeof(notpart) / sizeof(notpart[0]); i++) {
			assert_int_equal(coord_var_part_of(notpart[i], &bl), -1);
			assert_int_equal(coord_var_shard(notpart[i], 7),
					 coord_var_fnv1a64(notpart[i], strlen(notpart[i])) % 7);
		}
		assert_int_equal(coord_var_part_of(NULL, &bl), -1);
	}
	/* round-robin */
	for (uint64_t i = 0; i < 12; i++)
		assert_int_equal(coord_var_shard_rr(i, 3), i % 3);
	assert_int_equal(coord_var_shard_rr(5, 0), 0);
	/* row partitions: contiguous, covering, sizes differ by at most one */
	for (uint64_t rows = 0; rows < 40; rows++)
		for (unsigned nps = 1; nps <= 7; nps++) {
			next = 0;
			for (unsigned i = 0; i < nps; i++) {
				assert_int_equal(
					coord_var_partition_rows(rows, nps, i, &first, &cnt), 0);
				assert_int_equal(first, next);
				assert_true(cnt == rows / nps || cnt == rows / nps + 1);
				next += cnt;
			}
			assert_int_equal(next, rows);
		}
	assert_int_equal(coord_var_partition_rows(10, 0, 0, &first, &cnt), -EINVAL);
	assert_int_equal(coord_var_partition_rows(10, 2, 2, &first, &cnt), -EINVAL);
	assert_int_equal(coord_var_partition_rows(10, 2, 0, NULL, &cnt), -EINVAL);
	/* 10 rows over 3: 4, 3, 3 */
	assert_int_equal(coord_var_partition_rows(10, 3, 0, &first, &cnt), 0);
	assert_true(first == 0 && cnt == 4);
	assert_int_equal(coord_var_partition_rows(10, 3, 2, &first, &cnt), 0);
	assert_true(first == 7 && cnt == 3);
}

static void test_varstore_crc32c(void **state)
{
	static unsigned char big[4099];
	uint32_t whole, parts;

	assert_true(coord_crc32c(0, "123456789", 9) == 0xe3069283u);
	assert_true(coord_crc32c(0, "", 0) == 0);
	for (size_t i = 0; i < sizeof(big); i++)
		big[i] = (unsigned char)(i * 31 + 7);
	whole = coord_crc32c(0, big, sizeof(big));
	parts = coord_crc32c(coord_crc32c(coord_crc32c(0, big, 5), big + 5, 1000), big + 1005,
			     sizeof(big) - 1005);
	assert_true(whole == parts);
	/* the table path agrees with the SSE4.2 path, at every length/offset */
	assert_true(coord_crc32c_sw(0, "123456789", 9) == 0xe3069283u);
	for (size_t off = 0; off < 9; off++)
		for (size_t n = 0; n < 40; n++)
			assert_true(coord_crc32c(7, big + off, n) ==
				    coord_crc32c_sw(7, big + off, n));
	assert_true(coord_crc32c_sw(0, big, sizeof(big)) == whole);
}

/*
 * A prepared restore (the ps side of coord_checkpoint_restore()): it stays
 * invisible until its session commits it; another session cannot commit
 * it; a new PREPARE or the owner's abort drops it; while it is held, a
 * create cannot give one of its names another shape.
 */
static void test_varstore_prepare_commit(void **state)
{
	struct coord_varstore *a = new_store(0), *b = new_store(0);
	struct coord_ckpt_prep q = { .step = COORD_CKPT_STEP_LATEST, .task = 0, .nps = 1 };
	struct coord_ckpt_prep_res res;
	struct coord_error e = { 0 };
	uint64_t d1[1] = { 4 }, d2[1] = { 5 };
	float x[4] = { 1.5f, -2, 3, 4 }, got[4];
	char *dir = mk_dir(), cmd[128];
	int owner1, owner2;
	uint32_t id, n = 0;

	(void)state;
	mk(a, "w", 1, d1, x);
	mk(a, "s", 0, NULL, x);
	assert_int_equal(coord_varstore_save_task(a, dir, 0, 1, 3, &e), 0);
	q.dir = dir;
	q.owner = &owner1;
	q.nonce = 11;
	assert_int_equal(coord_varstore_prepare(b, &q, &res, &e), 0);
	assert_int_equal(res.step, 3);
	assert_int_equal(res.nstaged, 2);
	assert_int_equal(res.ntotal, 2);
	assert_int_equal(res.old_nps, 1);
	assert_int_equal(res.version, 2);
	assert_true(res.dig_staged == res.dig_total);
	assert_int_equal(coord_varstore_count(b), 0); /* invisible */
	/* a create may not change a staged name's shape; the same shape is fine */
	assert_int_equal(coord_varstore_var_create(b, "w", 1, d2, NULL, &id, &e), -EEXIST);
	assert_non_null(strstr(e.msg, "restore being prepared"));
	mk(b, "w", 1, d1, NULL);
	/* another session can neither commit nor abort it */
	assert_int_equal(coord_varstore_commit(b, &owner2, 11, &n, &e), -ESTALE);
	coord_varstore_abort(b, &owner2);
	assert_int_equal(coord_varstore_commit(b, &owner1, 12, &n, &e), -ESTALE);
	/* its owner commits: the created "w" is overwritten, "s" published */
	assert_int_equal(coord_varstore_commit(b, &owner1, 11, &n, &e), 0);
	assert_int_equal(n, 2);
	assert_int_equal(coord_varstore_count(b), 2);
	assert_int_equal(coord_varstore_lookup(b, "w", &id, &e), 0);
	assert_int_equal(coord_vs_read(b, id, 0, 4, got, &e), 0);
	assert_memory_equal(got, x, sizeof(x));
	assert_int_equal(coord_varstore_commit(b, &owner1, 11, &n, &e), -ESTALE); /* once */
	/* a new PREPARE drops the old stage; an abort drops its own */
	assert_int_equal(coord_varstore_prepare(b, &q, &res, &e), 0);
	q.owner = &owner2;
	q.nonce = 13;
	assert_int_equal(coord_varstore_prepare(b, &q, &res, &e), 0);
	assert_int_equal(coord_varstore_commit(b, &owner1, 11, &n, &e), -ESTALE);
	coord_varstore_abort(b, &owner2);
	assert_int_equal(coord_varstore_commit(b, &owner2, 13, &n, &e), -ESTALE);
	/* a task of 2 stages only what places on it; the digests add up */
	{
		struct coord_ckpt_prep_res r0, r1;

		q.nps = 2;
		assert_int_equal(coord_varstore_prepare(b, &q, &r0, &e), 0);
		q.task = 1;
		assert_int_equal(coord_varstore_prepare(b, &q, &r1, &e), 0);
		assert_int_equal(r0.nstaged + r1.nstaged, 2);
		assert_true(r0.dig_staged + r1.dig_staged == r0.dig_total);
		coord_varstore_abort(b, &owner2);
	}
	/* a stage left behind is freed with its store (ASan: no leak) */
	q.task = 0;
	q.nps = 1;
	assert_int_equal(coord_varstore_prepare(a, &q, &res, &e), 0);
	coord_varstore_destroy(a);
	coord_varstore_destroy(b);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	(void)!system(cmd);
	free(dir);
}

/* Files of one step that disagree, or overlap, are refused by PREPARE. */
static void test_varstore_prepare_inconsistent(void **state)
{
	struct coord_varstore *a = new_store(0), *b = new_store(0), *t = new_store(0);
	struct coord_ckpt_prep q = { .step = COORD_CKPT_STEP_LATEST, .task = 0, .nps = 1 };
	struct coord_ckpt_prep_res res;
	struct coord_error e = { 0 };
	float x = 1;
	char *dir = mk_dir(), cmd[128];
	int owner;

	(void)state;
	q.dir = dir;
	q.owner = &owner;
	mk(a, "a", 0, NULL, &x);
	mk(b, "b", 0, NULL, &x);
	/* task 0 says 2 tasks, task 1 says 3 */
	assert_int_equal(coord_varstore_save_task(a, dir, 0, 2, 4, &e), 0);
	assert_int_equal(coord_varstore_save_task(b, dir, 1, 3, 4, &e), 0);
	assert_int_equal(coord_varstore_prepare(t, &q, &res, &e), -EBADMSG);
	if (!strstr(e.msg, "disagree"))
		fail_msg("unexpected: %s", e.msg);
	/* both hold "a": in two files */
	mk(b, "a", 0, NULL, &x);
	assert_int_equal(coord_varstore_save_task(b, dir, 1, 2, 4, &e), 0);
	assert_int_equal(coord_varstore_prepare(t, &q, &res, &e), -EBADMSG);
	if (!strstr(e.msg, "'a' is in two"))
		fail_msg("unexpected: %s", e.msg);
	/* a task's directory missing altogether: incomplete */
	snprintf(cmd, sizeof(cmd), "rm -rf '%s/ps-1'", dir);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(coord_varstore_prepare(t, &q, &res, &e), -EBADMSG);
	if (!strstr(e.msg, "incomplete"))
		fail_msg("unexpected: %s", e.msg);
	/* no checkpoint at all */
	snprintf(cmd, sizeof(cmd), "rm -rf '%s/ps-0'", dir);
	assert_int_equal(system(cmd), 0);
	assert_int_equal(coord_varstore_prepare(t, &q, &res, &e), -ENOENT);
	assert_int_equal(coord_varstore_count(t), 0);
	coord_varstore_destroy(a);
	coord_varstore_destroy(b);
	coord_varstore_destroy(t);
	snprintf(cmd, sizeof(cmd), "rm -rf '%s'", dir);
	(void)!system(cmd);
	free(dir);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_varstore_create_rules),
		cmocka_unit_test(test_varstore_read_assign_add),
		cmocka_unit_test(test_varstore_scatter_add_rules),
		cmocka_unit_test(test_varstore_delete),
		cmocka_unit_test(test_varstore_concurrent_assign_add),
		cmocka_unit_test(test_varstore_concurrent_scatter_add),
		cmocka_unit_test(test_varstore_checkpoint_round_trip),
		cmocka_unit_test(test_varstore_save_during_updates),
		cmocka_unit_test(test_varstore_checkpoint_latest_and_keep),
		cmocka_unit_test(test_varstore_checkpoint_after_crash),
		cmocka_unit_test(test_varstore_live_temp_file_kept),
		cmocka_unit_test(test_varstore_checkpoint_corrupt_refused),
		cmocka_unit_test(test_varstore_prepare_commit),
		cmocka_unit_test(test_varstore_prepare_inconsistent),
		cmocka_unit_test(test_varstore_shard_functions),
		cmocka_unit_test(test_varstore_crc32c),
	};

	t_watchdog(55);
	return cmocka_run_group_tests_name("varstore", tests, NULL, NULL);
}
