// SPDX-License-Identifier: MIT
/*
 * tests/varstore_rules.c - part of test_varstore: create / read / assign /
 * assign_add / scatter_add rules and errors, delete, no lost update under
 * concurrent adds and scatter_adds, the placement functions and crc32c.
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
#include "varstore_tests.h"

/* --- rules ----------------------------------------------------------------- */

void test_varstore_create_rules(void **state)
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

void test_varstore_read_assign_add(void **state)
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

void test_varstore_scatter_add_rules(void **state)
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

void test_varstore_delete(void **state)
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

void *adder(void *p)
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
void test_varstore_concurrent_assign_add(void **state)
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

#define LA_N                                                                                       \
	((1u << 20) + 4099) /* with its range, over vs_add.c's ADD_PAR_MIN, not a whole piece */
#define LA_ADDS 6

struct la_arg {
	struct coord_varstore *vs;
	uint32_t id, id2;
	int t, bad;
	_Atomic int *stop;
};

/* Whole-variable adds of t + 1 (split over the store's helpers), each
 * followed by a large add to another variable (one job at a time: alone). */
static void *la_adder(void *p)
{
	struct la_arg *a = p;
	float *d = malloc(4 * (size_t)LA_N);

	if (!d) {
		a->bad++;
		return NULL;
	}
	for (size_t i = 0; i < LA_N; i++)
		d[i] = (float)(a->t + 1);
	for (int i = 0; i < LA_ADDS; i++)
		if (coord_vs_assign_add(a->vs, a->id, 0, LA_N, d, NULL) ||
		    coord_vs_assign_add(a->vs, a->id2, 5, LA_N - 9, d, NULL))
			a->bad++;
	free(d);
	return NULL;
}

/* Whole reads while the adds run: every element equal. */
static void *la_reader(void *p)
{
	struct la_arg *a = p;
	float *out = malloc(4 * (size_t)LA_N);
	uint64_t t0 = t_now_ns();

	for (int i = 0; out && i < 1000 && t_now_ns() - t0 < TIME_LIMIT_NS; i++) {
		bool end = atomic_load(a->stop);

		if (coord_vs_read(a->vs, a->id, 0, LA_N, out, NULL))
			a->bad++;
		for (size_t j = 1; j < LA_N; j++)
			if (out[j] != out[0]) {
				a->bad++;
				break;
			}
		if (end)
			break;
	}
	a->bad += !out;
	free(out);
	return NULL;
}

/* Large assign_adds, split between the caller and the store's helper
 * threads (vs_add.c), concurrent: exact sums, atomic to readers, and a
 * range that starts and ends inside pieces. */
void test_varstore_large_add(void **state)
{
	struct coord_varstore *vs = new_store(5);
	uint64_t d[1] = { LA_N };
	struct la_arg a[4];
	pthread_t th[4];
	_Atomic int stop = 0;
	float *out = malloc(4 * (size_t)LA_N);
	uint32_t id = mk(vs, "la", 1, d, NULL), id2 = mk(vs, "la2", 1, d, NULL);

	(void)state;
	assert_non_null(out);
	for (int t = 0; t < 4; t++) {
		a[t] = (struct la_arg){ .vs = vs, .id = id, .id2 = id2, .t = t, .stop = &stop };
		assert_int_equal(pthread_create(&th[t], NULL, t < 3 ? la_adder : la_reader, &a[t]),
				 0);
	}
	for (int t = 0; t < 3; t++)
		pthread_join(th[t], NULL);
	atomic_store(&stop, 1);
	pthread_join(th[3], NULL);
	for (int t = 0; t < 4; t++)
		assert_int_equal(a[t].bad, 0);
	assert_int_equal(coord_vs_read(vs, id, 0, LA_N, out, NULL), 0);
	for (size_t j = 0; j < LA_N; j++)
		if (out[j] != (float)(LA_ADDS * (1 + 2 + 3)))
			fail_msg("element %zu: %g", j, out[j]);
	assert_int_equal(coord_vs_read(vs, id2, 0, LA_N, out, NULL), 0);
	for (size_t j = 0; j < LA_N; j++)
		if (out[j] != (j < 5 || j >= LA_N - 4 ? 0.0f : (float)(LA_ADDS * (1 + 2 + 3))))
			fail_msg("element %zu of the range: %g", j, out[j]);
	free(out);
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

void test_varstore_concurrent_scatter_add(void **state)
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

/* --- placement and checksum ---------------------------------------------------- */

void test_varstore_shard_functions(void **state)
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

void test_varstore_crc32c(void **state)
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
