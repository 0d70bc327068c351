// SPDX-License-Identifier: MIT
/*
 * tests/test_pool.c - type-stable pools: growth, distinct objects, index
 * mapping, concurrent get/put with ownership checks, byte-buffer classes.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/pool.h"
#include "helpers.h"

struct obj {
	uint32_t idx;
	_Atomic int owner;
	char pad[40];
};

static void obj_init(void *o, uint32_t idx, void *arg)
{
	((struct obj *)o)->idx = idx;
}

static void test_pool_grows_and_maps_indices(void **state)
{
	struct coord_pool *p;
	struct obj *objs[1000];

	assert_int_equal(coord_pool_create(sizeof(struct obj), 4, 16, obj_init, NULL, &p), 0);
	for (int i = 0; i < 1000; i++) { /* 16 per slab: many growths */
		objs[i] = coord_pool_get(p);
		assert_non_null(objs[i]);
		assert_ptr_equal(coord_pool_obj(p, objs[i]->idx), objs[i]);
		for (int j = 0; j < i; j++)
			assert_ptr_not_equal(objs[i], objs[j]);
	}
	for (int i = 0; i < 1000; i++)
		coord_pool_put(p, objs[i]->idx);
	/* reuse: no new slab needed for another 1000 */
	for (int i = 0; i < 1000; i++)
		objs[i] = coord_pool_get(p);
	assert_true(atomic_load(&p->nslabs) <= 63);
	coord_pool_destroy(p);
}

/* A chain returned with one CAS comes back object by object, none lost. */
static void test_pool_put_chain(void **state)
{
	struct coord_pool *p;
	struct obj *o[40];

	assert_int_equal(coord_pool_create(sizeof(struct obj), 3, 0, obj_init, NULL, &p), 0);
	for (int i = 0; i < 40; i++)
		o[i] = coord_pool_get(p);
	for (int i = 0; i + 1 < 40; i++)
		coord_pool_link(p, o[i]->idx, o[i + 1]->idx);
	coord_pool_put_chain(p, o[0]->idx, o[39]->idx);
	uint32_t slabs = atomic_load(&p->nslabs);

	for (int i = 0; i < 40; i++) {
		struct obj *x = coord_pool_get(p);

		assert_ptr_equal(x, o[i]); /* LIFO chain: first out is the head */
	}
	assert_int_equal(atomic_load(&p->nslabs), slabs); /* no growth needed */
	/* get_many takes the same chain in one claim, growing when short */
	for (int i = 0; i + 1 < 40; i++)
		coord_pool_link(p, o[i]->idx, o[i + 1]->idx);
	coord_pool_put_chain(p, o[0]->idx, o[39]->idx);
	{
		void *m[40];
		unsigned n = coord_pool_get_many(p, m, 40);

		assert_int_equal(n, 40);
		for (int i = 0; i < 40; i++)
			assert_ptr_equal(m[i], o[i]);
		for (int i = 0; i < 40; i++)
			assert_true(((uintptr_t)m[i] & (CACHELINE - 1)) == 0);
	}
	coord_pool_destroy(p);
}

#define THREADS 4
#define ROUNDS 200000

static _Atomic int pool_errors;

static void *pool_worker(void *arg)
{
	struct coord_pool *p = arg;
	int me = (int)(uintptr_t)pthread_self() | 1;
	struct obj *held[8];
	uint64_t deadline = t_now_ns() + 30000000000ull;

	for (int r = 0; r < ROUNDS && t_now_ns() < deadline; r++) {
		int k = r % 8 + 1;

		/* odd rounds take them with one claim (get_many) */
		if (r & 1)
			for (int got = 0; got < k;)
				got += (int)coord_pool_get_many(p, (void **)held + got,
								(unsigned)(k - got));
		for (int i = 0; i < k; i++) {
			int zero = 0;

			if (!(r & 1))
				held[i] = coord_pool_get(p);
			/* nobody else may own it: "we dequeued twice" */
			if (!atomic_compare_exchange_strong(&held[i]->owner, &zero, me))
				atomic_fetch_add(&pool_errors, 1);
		}
		for (int i = 0; i < k; i++) {
			if (atomic_exchange(&held[i]->owner, 0) != me)
				atomic_fetch_add(&pool_errors, 1);
			coord_pool_put(p, held[i]->idx);
		}
	}
	return NULL;
}

static void test_pool_concurrent_exclusive_ownership(void **state)
{
	/* without, then with a recycle ring small enough that both it and the
	 * free list are used (P4: an index in one of them at a time), then with
	 * a small spill ring behind it as well (P5: cache, spill or list) */
	for (int cached = 0; cached < 3; cached++) {
		struct coord_pool *p;
		pthread_t t[THREADS];

		assert_int_equal(coord_pool_create(sizeof(struct obj), 3, 0, obj_init, NULL, &p),
				 0);
		if (cached)
			assert_int_equal(coord_pool_cache_init(p, 8), 0);
		if (cached == 2)
			assert_int_equal(coord_pool_spill_init(p, 16), 0);
		for (int i = 0; i < THREADS; i++)
			pthread_create(&t[i], NULL, pool_worker, p);
		for (int i = 0; i < THREADS; i++)
			pthread_join(t[i], NULL);
		assert_int_equal(atomic_load(&pool_errors), 0);
		coord_pool_destroy(p);
	}
}

static void test_bufs_size_classes(void **state)
{
	struct coord_bufs b;
	char inl[64];
	uint8_t cls;
	void *x;

	assert_int_equal(coord_bufs_init(&b), 0);
	x = coord_buf_get(&b, 10, inl, sizeof(inl), &cls);
	assert_ptr_equal(x, inl);
	assert_int_equal(cls, COORD_BUF_INLINE);
	for (size_t len = 65; len <= COORD_BUF_MAX_POOLED; len = len * 3 + 1) {
		x = coord_buf_get(&b, len, inl, sizeof(inl), &cls);
		assert_non_null(x);
		assert_true(cls < COORD_BUF_CLASSES);
		assert_true(((size_t)1 << (cls + COORD_BUF_MIN_SHIFT)) >= len);
		memset(x, 0xab, len); /* ASan checks the size */
		coord_buf_put(&b, x, cls);
	}
	x = coord_buf_get(&b, COORD_BUF_MAX_POOLED + 1, inl, sizeof(inl), &cls);
	assert_int_equal(cls, COORD_BUF_MALLOC);
	memset(x, 0, COORD_BUF_MAX_POOLED + 1);
	coord_buf_put(&b, x, cls);
	coord_bufs_fini(&b);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_pool_grows_and_maps_indices),
		cmocka_unit_test(test_pool_put_chain),
		cmocka_unit_test(test_pool_concurrent_exclusive_ownership),
		cmocka_unit_test(test_bufs_size_classes),
	};

	t_watchdog(120);
	return cmocka_run_group_tests_name("pool", tests, NULL, NULL);
}
