// SPDX-License-Identifier: MIT
/*
 * tests/varstore_ckpt.c - part of test_varstore: checkpoints (round trip,
 * saves during updates, the latest pointer and keep, crash leftovers and live
 * temp files, corrupted files refused with the store unchanged) and the
 * two-phase restore (prepare, commit, abort; inconsistent files refused).
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

void test_varstore_checkpoint_round_trip(void **state)
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
void test_varstore_save_during_updates(void **state)
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

void test_varstore_checkpoint_latest_and_keep(void **state)
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
void test_varstore_checkpoint_after_crash(void **state)
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
void test_varstore_live_temp_file_kept(void **state)
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

/* Damaged bytes in checkpoint file @good (@len bytes, copied to @b and
 * written to @dir): flipped, truncated, trailing garbage, wrong magic. */
static void corrupt_framing(struct coord_varstore *vs, const char *dir, const unsigned char *good,
			    unsigned char *b, size_t len)
{
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
}

/* Lies behind a valid checksum in @good's header and index (as above): a
 * version, a layout, counts and lengths that cannot be. */
static void corrupt_structure(struct coord_varstore *vs, const char *dir, const unsigned char *good,
			      unsigned char *b, size_t len)
{
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
}

/* The good file @good in @dir against stores it cannot go into (a variable
 * of another shape, a byte limit), then latest pointers that name nothing
 * sensible. */
static void corrupt_store_side(struct coord_varstore *vs, const char *dir,
			       const unsigned char *good, size_t len)
{
	struct coord_varstore_opts o;
	float x = 42.0f;

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
}

void test_varstore_checkpoint_corrupt_refused(void **state)
{
	struct coord_varstore *src = filled_store(3.0f, 5), *vs = new_store(5);
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

	corrupt_framing(vs, dir, good, b, len);
	corrupt_structure(vs, dir, good, b, len);
	corrupt_store_side(vs, dir, good, len);
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

void test_varstore_prepare_commit(void **state)
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
void test_varstore_prepare_inconsistent(void **state)
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
