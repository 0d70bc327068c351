// SPDX-License-Identifier: MIT
/*
 * tests/ps_pvar.c - part of test_ps: partitioned variables (rows across
 * shards checked against a local copy, several variables in one call, the
 * partitioner, restores that re-layout and re-split their shards).
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

/* Create "emb" (4 shards over both ps tasks) from pv_ref: lookup and a
 * second create find the same handle, another partitioning is refused. */
static void pv_rows_create(struct coord *c, struct coord_pvar *pv)
{
	struct coord_partitioner part = { .num_shards = 4 };
	uint64_t dims[2] = { PV_ROWS, PV_RL };
	struct coord_error err;
	struct coord_pvar pv2;
	unsigned tasks = 0;

	for (size_t i = 0; i < PV_ROWS * PV_RL; i++)
		pv_ref[i] = (float)i * 0.25f - 7.0f;
	if (coord_pvar_create(c, "emb", 2, dims, pv_ref, &part, pv, &err) != 0)
		fail_msg("pvar_create: %s", err.msg);
	assert_int_equal(pv->nparts, 4);
	assert_int_equal(pv->rows, PV_ROWS);
	assert_int_equal(pv->row_len, PV_RL);
	for (unsigned j = 0; j < 4; j++)
		tasks |= 1u << coord_var_task(pv->part[j]);
	assert_int_equal(tasks, 3); /* the shards spread over both ps tasks */
	/* lookup by name, coordinator side: the same handle */
	assert_int_equal(coord_pvar_lookup(c, "emb", &pv2, &err), 0);
	assert_memory_equal(&pv2, pv, sizeof(pv));
	/* create again: found, unchanged; another partitioning: refused */
	assert_int_equal(coord_pvar_create(c, "emb", 2, dims, NULL, &part, &pv2, &err), 0);
	assert_memory_equal(&pv2, pv, sizeof(pv));
	part.num_shards = 3;
	assert_int_equal(coord_pvar_create(c, "emb", 2, dims, NULL, &part, &pv2, &err), -EEXIST);
	part.num_shards = 5;
	assert_int_equal(coord_pvar_create(c, "emb", 2, dims, NULL, &part, &pv2, &err), -EEXIST);
}

/* The coordinator's gather and scatter_add: duplicates, the caller's order,
 * ids in shard order; an id out of range refused whole (@bad: the batch);
 * empty batches. */
static void pv_rows_coordinator(struct coord *c, const struct coord_pvar *pv, int64_t bad[6])
{
	static float upd[512 * PV_RL], got[512 * PV_RL];
	struct coord_error err;
	int64_t ids[512];

	/* coordinator gather: duplicates, caller's order */
	pv_ids(ids, 300, PV_ROWS);
	assert_int_equal(coord_pvar_gather(c, pv, ids, 300, got, &err), 0);
	for (size_t k = 0; k < 300; k++)
		assert_memory_equal(got + k * PV_RL, pv_ref + (size_t)ids[k] * PV_RL, 4 * PV_RL);
	/* coordinator scatter_add: a repeated id adds twice */
	pv_ids(ids, 400, PV_ROWS);
	for (size_t k = 0; k < 400 * PV_RL; k++)
		upd[k] = (float)(pv_rand() % 64) * 0.5f;
	assert_int_equal(coord_pvar_scatter_add(c, pv, ids, 400, upd, &err), 0);
	for (size_t k = 0; k < 400; k++)
		for (size_t j = 0; j < PV_RL; j++)
			pv_ref[(size_t)ids[k] * PV_RL + j] += upd[k * PV_RL + j];
	pv_check_all(c, pv);

	/* ids in shard order: rows straight into the caller's buffer (gather,
	 * distinct ids) and straight from it (scatter_add, repeats allowed) */
	for (size_t k = 0; k < 333; k++)
		ids[k] = (int64_t)(3 * k);
	assert_int_equal(coord_pvar_gather(c, pv, ids, 333, got, &err), 0);
	for (size_t k = 0; k < 333; k++)
		assert_memory_equal(got + k * PV_RL, pv_ref + (size_t)ids[k] * PV_RL, 4 * PV_RL);
	ids[1] = ids[0]; /* a repeat, still in order */
	for (size_t k = 0; k < 333 * PV_RL; k++)
		upd[k] = (float)(k % 13);
	assert_int_equal(coord_pvar_scatter_add(c, pv, ids, 333, upd, &err), 0);
	for (size_t k = 0; k < 333; k++)
		for (size_t j = 0; j < PV_RL; j++)
			pv_ref[(size_t)ids[k] * PV_RL + j] += upd[k * PV_RL + j];
	pv_check_all(c, pv);

	/* out of range (anywhere in the batch): a clear error, nothing applied */
	bad[0] = 1;
	bad[1] = 700;
	bad[2] = 300;
	bad[3] = 999;
	for (int t = 0; t < 2; t++) {
		bad[4] = t ? -1 : PV_ROWS;
		bad[5] = 2;
		assert_int_equal(coord_pvar_scatter_add(c, pv, bad, 6, upd, &err), -ERANGE);
		assert_non_null(strstr(err.msg, "position 4"));
		assert_int_equal(coord_pvar_gather(c, pv, bad, 6, got, &err), -ERANGE);
	}
	pv_check_all(c, pv);
	/* empty batches */
	assert_int_equal(coord_pvar_gather(c, pv, NULL, 0, NULL, &err), 0);
	assert_int_equal(coord_pvar_scatter_add(c, pv, NULL, 0, NULL, &err), 0);
}

/* From functions: gather (by handle, and by a handle the worker looks up),
 * scatter_add with duplicates, an id out of range (@bad: S3, join's error);
 * a range across shard edges. */
static void pv_rows_functions(struct coord *c, const struct coord_pvar *pv, const int64_t bad[6])
{
	static float upd[512 * PV_RL], got[512 * PV_RL];
	struct coord_error err;
	int64_t ids[512];
	struct out o;

	/* from functions: gather (by handle, and by a handle the worker looks up),
	 * scatter_add with duplicates, an id out of range */
	for (int round = 0; round < 6; round++) {
		uint32_t n = 64 + pv_rand() % 136;
		struct coord_rv *rv;
		const void *v;
		size_t len;

		pv_ids(ids, n, PV_ROWS);
		rv = pv_sched(c, pv, round & 1 ? T_PV_LOOKUP_GATHER : T_PV_GATHER, ids, n, NULL);
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
		assert_int_equal(fetch(pv_sched(c, pv, T_PV_SCATTER, ids, n, upd), &o), 0);
		for (size_t k = 0; k < n; k++)
			for (size_t j = 0; j < PV_RL; j++)
				pv_ref[(size_t)ids[k] * PV_RL + j] += upd[k * PV_RL + j];
	}
	assert_int_equal(fetch(pv_sched(c, pv, T_PV_SCATTER, ids, 0, upd), &o), 0);
	assert_int_equal(fetch(pv_sched(c, pv, T_PV_GATHER, ids, 0, NULL), &o), 0);
	join_ok(c);
	/* a failed closure's error is join's (S3), which clears it */
	for (int t = 0; t < 2; t++) {
		assert_int_equal(
			fetch(pv_sched(c, pv, t ? T_PV_GATHER : T_PV_SCATTER, bad, 6, upd), &o),
			-ERANGE);
		assert_non_null(strstr(o.err.msg, "outside"));
		assert_int_equal(coord_join(c, &err), -ERANGE);
	}
	pv_check_all(c, pv);

	/* a range across shard edges */
	for (size_t k = 0; k < 600; k++)
		upd[k] = (float)k;
	assert_int_equal(coord_pvar_assign_add(c, pv, 2000 - 300, 600, upd, &err), 0);
	for (size_t k = 0; k < 600; k++)
		pv_ref[2000 - 300 + k] += upd[k];
	pv_check_all(c, pv);
	assert_int_equal(coord_pvar_read(c, pv, PV_ROWS * PV_RL - 1, 2, got, &err), COORD_EINVAL);
}

void test_pvar_rows(void **state)
{
	struct coord *c = make();
	struct coord_pvar pv;
	int64_t bad[6];

	(void)state;
	pv_rows_create(c, &pv);
	pv_check_all(c, &pv);
	pv_rows_coordinator(c, &pv, bad);
	pv_rows_functions(c, &pv, bad);
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

/* From functions: gather and scatter_add with duplicates, then an id out
 * of range (nothing applied), then empty.  @ia, @ib, @ua, @ub: the test's
 * arrays (the refused batch reuses the rows past the last round's). */
static void pm_functions(struct coord *c, const struct coord_pvar *a, const struct coord_pvar *b,
			 int64_t *ia, int64_t *ib, float *ua, float *ub)
{
	struct coord_error err;
	struct out o;

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
		assert_int_equal(fetch(pm_sched(c, a, b, T_PV_SCATTER, ia, na, ib, nb, ua, ub), &o),
				 0);
		pm_apply(pv_ref, PV_RL, ia, na, ua);
		pm_apply(pm_ref, PM_RL, ib, nb, ub);
		rv = pm_sched(c, a, b, T_PV_GATHER, ia, na, ib, nb, NULL, NULL);
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
	assert_int_equal(fetch(pm_sched(c, a, b, T_PV_SCATTER, ia, 10, ib, 10, ua, ub), &o),
			 -ERANGE);
	assert_non_null(strstr(o.err.msg, "outside"));
	assert_int_equal(coord_join(c, &err), -ERANGE);
	assert_int_equal(fetch(pm_sched(c, a, b, T_PV_SCATTER, ia, 0, ib, 0, ua, ub), &o), 0);
	assert_int_equal(fetch(pm_sched(c, a, b, T_PV_GATHER, ia, 0, ib, 0, NULL, NULL), &o), 0);
	join_ok(c);
}

void test_pvar_multi(void **state)
{
	struct coord_partitioner pa = { .num_shards = 4 }, pb = { .num_shards = 3 };
	uint64_t da[2] = { PV_ROWS, PV_RL }, db[2] = { PM_ROWS, PM_RL };
	static float ua[300 * PV_RL], ub[300 * PM_RL], ga[300 * PV_RL], gb[300 * PM_RL];
	int64_t ia[300], ib[300];
	struct coord_pvar a, b, bad_pv;
	struct coord_pvar_rows v[2];
	struct coord_error err;
	struct coord *c = make();

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

	pm_functions(c, &a, &b, ia, ib, ua, ub);
	pm_check_all(c, &a, &b);
	destroy(c);
}

/* Shard counts, bad handles and names, a plain variable as a 1-part handle. */
void test_pvar_partitioner(void **state)
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
void test_pvar_restore_relayout(void **state)
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
void test_pvar_restore_resplit(void **state)
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
