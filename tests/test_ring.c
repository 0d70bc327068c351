// SPDX-License-Identifier: MIT
/*
 * tests/test_ring.c - the bounded MPMC ring: capacity, full/empty, FIFO,
 * batch pops across the wrap, and a multi-producer/multi-consumer validator
 * (every value exactly once, per-producer FIFO per consumer).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "runtime/core/ring.h"
#include "helpers.h"

static int ring_setup(void **state)
{
	struct coord_ring *r = calloc(1, sizeof(*r));

	if (!r || coord_ring_init(r, 6) < 0)
		return -1;
	*state = r;
	return 0;
}

static int ring_teardown(void **state)
{
	coord_ring_fini(*state);
	free(*state);
	return 0;
}

#define V(i) ((void *)(uintptr_t)(i))

/* S14: capacity is rounded up to a power of two and enforced. */
static void test_ring_capacity_and_full(void **state)
{
	struct coord_ring *r = *state;

	assert_int_equal(coord_ring_capacity(r), 8);
	for (uintptr_t i = 1; i <= 8; i++)
		assert_int_equal(coord_ring_push_mp(r, V(i)), 0);
	assert_int_equal(coord_ring_push_mp(r, V(9)), -EAGAIN);
	assert_int_equal(coord_ring_size(r), 8);
}

static void test_ring_fifo_and_batch_across_wrap(void **state)
{
	struct coord_ring *r = *state;
	void *out[8];
	uintptr_t next_in = 1, next_out = 1;

	assert_true(coord_ring_empty(r));
	assert_int_equal(coord_ring_pop_batch_mc(r, out, 8), 0);
	for (int round = 0; round < 100; round++) {
		unsigned k = (unsigned)(round % 7) + 1, n;

		for (unsigned i = 0; i < k; i++)
			assert_int_equal(coord_ring_push_mp(r, V(next_in++)), 0);
		n = coord_ring_pop_batch_mc(r, out, 3);
		assert_int_equal(n, k < 3 ? k : 3);
		for (unsigned i = 0; i < n; i++)
			assert_ptr_equal(out[i], V(next_out++));
		while ((n = coord_ring_pop_batch_mc(r, out, 8)) > 0)
			for (unsigned i = 0; i < n; i++)
				assert_ptr_equal(out[i], V(next_out++));
	}
	assert_int_equal(next_in, next_out);
	assert_true(coord_ring_empty(r));
	/* batched pushes: in order, across the wrap, partial when short of room */
	for (int round = 0; round < 100; round++) {
		void *in[9];
		unsigned k = (unsigned)(round % 9) + 1, n, cap = (unsigned)coord_ring_capacity(r);

		for (unsigned i = 0; i < k; i++)
			in[i] = V(next_in + i);
		n = coord_ring_push_batch_mp(r, in, k);
		assert_int_equal(n, k < cap ? k : cap);
		next_in += n;
		assert_int_equal(coord_ring_push_batch_mp(r, in, 0), 0);
		while ((n = coord_ring_pop_batch_mc(r, out, 3)) > 0)
			for (unsigned i = 0; i < n; i++)
				assert_ptr_equal(out[i], V(next_out++));
	}
	assert_int_equal(next_in, next_out);
	for (unsigned i = 0; i < 8; i++)
		out[i] = V(i + 1);
	assert_int_equal(coord_ring_push_batch_mp(r, out, 8), coord_ring_capacity(r));
	assert_int_equal(coord_ring_push_batch_mp(r, out, 1), 0); /* full */
}

#define PRODUCERS 2
#define CONSUMERS 2
#define PER_PRODUCER 200000

struct mpmc {
	struct coord_ring ring;
	_Atomic int done_producers;
	_Atomic unsigned char *seen;
	_Atomic long popped;
	_Atomic int errors;
};

struct prod_arg {
	struct mpmc *m;
	uintptr_t id;
};

static void *producer(void *arg)
{
	struct prod_arg *pa = arg;
	uint64_t deadline = t_now_ns() + 120000000000ull; /* TSan on a loaded 2-vCPU VM */

	for (uintptr_t s = 0; s < PER_PRODUCER && t_now_ns() < deadline;) {
		void *b[8];
		unsigned k = (unsigned)(s % 8) + 1;

		/* value: producer in the top bits, sequence below; never NULL */
		if (!(pa->id & 1)) {
			if (coord_ring_push_mp(&pa->m->ring, V((pa->id << 32) | (s + 1))) == 0)
				s++;
			continue;
		}
		/* odd producers push batches of 1..8 (the tail may go in part) */
		if (k > PER_PRODUCER - s)
			k = (unsigned)(PER_PRODUCER - s);
		for (unsigned i = 0; i < k; i++)
			b[i] = V((pa->id << 32) | (s + 1 + i));
		s += coord_ring_push_batch_mp(&pa->m->ring, b, k);
	}
	atomic_fetch_add(&pa->m->done_producers, 1);
	return NULL;
}

static void *consumer(void *arg)
{
	struct mpmc *m = arg;
	uintptr_t last[PRODUCERS] = { 0 };
	uint64_t deadline = t_now_ns() + 120000000000ull; /* TSan on a loaded 2-vCPU VM */
	void *out[16];

	while (t_now_ns() < deadline) {
		unsigned n = coord_ring_pop_batch_mc(&m->ring, out, 16);

		if (n == 0) {
			if (atomic_load(&m->done_producers) == PRODUCERS &&
			    coord_ring_empty(&m->ring))
				break;
			continue;
		}
		for (unsigned i = 0; i < n; i++) {
			uintptr_t v = (uintptr_t)out[i], p = v >> 32, s = v & 0xffffffffu;

			if (p >= PRODUCERS || s == 0 || s > PER_PRODUCER) {
				atomic_fetch_add(&m->errors, 1);
				continue;
			}
			/* per-producer FIFO as seen by one consumer */
			if (s <= last[p])
				atomic_fetch_add(&m->errors, 1);
			last[p] = s;
			/* exactly once: "we dequeued twice" */
			if (atomic_fetch_add(&m->seen[p * PER_PRODUCER + s - 1], 1) != 0)
				atomic_fetch_add(&m->errors, 1);
		}
		atomic_fetch_add(&m->popped, n);
	}
	return NULL;
}

static void test_ring_mpmc_exactly_once_fifo(void **state)
{
	struct mpmc *m = calloc(1, sizeof(*m));
	pthread_t pt[PRODUCERS], ct[CONSUMERS];
	struct prod_arg pa[PRODUCERS];

	assert_non_null(m);
	assert_int_equal(coord_ring_init(&m->ring, 64), 0);
	m->seen = calloc(PRODUCERS * PER_PRODUCER, 1);
	assert_non_null(m->seen);
	for (int i = 0; i < CONSUMERS; i++)
		pthread_create(&ct[i], NULL, consumer, m);
	for (int i = 0; i < PRODUCERS; i++) {
		pa[i].m = m;
		pa[i].id = (uintptr_t)i;
		pthread_create(&pt[i], NULL, producer, &pa[i]);
	}
	for (int i = 0; i < PRODUCERS; i++)
		pthread_join(pt[i], NULL);
	for (int i = 0; i < CONSUMERS; i++)
		pthread_join(ct[i], NULL);
	assert_int_equal(atomic_load(&m->errors), 0);
	/* conservation: pushed == popped + left */
	assert_int_equal(atomic_load(&m->popped) + (long)coord_ring_size(&m->ring),
			 PRODUCERS * PER_PRODUCER);
	assert_int_equal(coord_ring_size(&m->ring), 0);
	coord_ring_fini(&m->ring);
	free((void *)m->seen);
	free(m);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_ring_capacity_and_full, ring_setup,
						ring_teardown),
		cmocka_unit_test_setup_teardown(test_ring_fifo_and_batch_across_wrap, ring_setup,
						ring_teardown),
		cmocka_unit_test(test_ring_mpmc_exactly_once_fifo),
	};

	t_watchdog(120);
	return cmocka_run_group_tests_name("ring", tests, NULL, NULL);
}
