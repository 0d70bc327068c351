// SPDX-License-Identifier: MIT
/*
 * tests/test_stress.c - 4 producer threads x 1,000,000 closures on 2
 * in-process workers.  Every result is checked; injected failures make
 * schedule() return errors and cancel queued closures of all producers;
 * counts are conserved:
 *
 *	scheduled = completed + cancelled + failed
 *
 * COORD_STRESS_N overrides the closures per producer (the sanitizer builds
 * in .ci/run use the default too).  Bounded in count and in time (watchdog).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "helpers.h"

#define PRODUCERS 4
#define WINDOW 512
#define FAIL_EVERY 100000 /* producer 0 injects a failure this often */

struct stress {
	struct coord *c;
	uint32_t add, fail;
	long n;
	_Atomic long scheduled, completed, cancelled, failed, wrong, sched_errors;
};

struct pending {
	struct coord_rv *rv;
	int64_t expect; /* INT64_MIN: an injected failure */
};

static void settle(struct stress *s, struct pending *p)
{
	const void *v;
	size_t len;
	int64_t x;
	int r = coord_rv_fetch(p->rv, &v, &len, NULL);

	if (r == COORD_ECANCELLED) {
		atomic_fetch_add(&s->cancelled, 1);
	} else if (p->expect == INT64_MIN) {
		if (r == -EIO)
			atomic_fetch_add(&s->failed, 1);
		else
			atomic_fetch_add(&s->wrong, 1);
	} else if (r == 0 && len == sizeof(x)) {
		memcpy(&x, v, sizeof(x));
		if (x == p->expect)
			atomic_fetch_add(&s->completed, 1);
		else
			atomic_fetch_add(&s->wrong, 1);
	} else {
		atomic_fetch_add(&s->wrong, 1);
	}
	coord_rv_put(p->rv);
}

struct parg {
	struct stress *s;
	int id;
};

static void *producer(void *arg)
{
	struct parg *pa = arg;
	struct stress *s = pa->s;
	struct pending *win = calloc(WINDOW, sizeof(*win));
	uint64_t deadline = t_now_ns() + 500000000000ull;
	long head = 0, tail = 0;

	for (long i = 0; i < s->n && t_now_ns() < deadline; i++) {
		struct pending *p;
		int64_t ab[2] = { ((int64_t)pa->id << 40) | i, 7 };
		bool inject = pa->id == 0 && i % FAIL_EVERY == FAIL_EVERY / 2;
		int r;

		if (head - tail == WINDOW)
			settle(s, &win[tail++ % WINDOW]);
		p = &win[head % WINDOW];
		p->expect = inject ? INT64_MIN : ab[0] + ab[1];
		r = inject ? coord_schedule(s->c, s->fail, NULL, 0, &p->rv, NULL)
			   : coord_schedule(s->c, s->add, ab, sizeof(ab), &p->rv, NULL);
		if (r < 0) {
			/* an earlier failure, returned once (S3); not queued */
			if (r != -EIO)
				atomic_fetch_add(&s->wrong, 1);
			atomic_fetch_add(&s->sched_errors, 1);
			continue;
		}
		atomic_fetch_add(&s->scheduled, 1);
		head++;
	}
	while (tail < head)
		settle(s, &win[tail++ % WINDOW]);
	free(win);
	return NULL;
}

static void test_stress_conservation(void **state)
{
	struct coord_registry *reg = t_registry();
	struct stress s;
	pthread_t t[PRODUCERS];
	struct parg pa[PRODUCERS];
	const char *env = getenv("COORD_STRESS_N");
	long total;
	int r;

	memset(&s, 0, sizeof(s));
	s.n = env ? atol(env) : 1000000;
	s.c = t_coord(reg, 2, COORD_RING_DEFAULT);
	s.add = t_fn(s.c, "add");
	s.fail = t_fn(s.c, "fail");
	for (int i = 0; i < PRODUCERS; i++) {
		pa[i].s = &s;
		pa[i].id = i;
		pthread_create(&t[i], NULL, producer, &pa[i]);
	}
	for (int i = 0; i < PRODUCERS; i++)
		pthread_join(t[i], NULL);
	/* a failure that happened after the last schedule is still pending */
	r = coord_join(s.c, NULL);
	assert_true(r == 0 || r == -EIO);
	assert_int_equal(coord_join(s.c, NULL), 0);
	total = atomic_load(&s.scheduled) + atomic_load(&s.sched_errors);
	printf("# stress: %ld scheduled (%ld refused with the S3 error), %ld completed, "
	       "%ld cancelled, %ld failed\n",
	       atomic_load(&s.scheduled), atomic_load(&s.sched_errors), atomic_load(&s.completed),
	       atomic_load(&s.cancelled), atomic_load(&s.failed));
	assert_int_equal(atomic_load(&s.wrong), 0);
	assert_int_equal(total, PRODUCERS * s.n);
	assert_int_equal(atomic_load(&s.scheduled), atomic_load(&s.completed) +
							    atomic_load(&s.cancelled) +
							    atomic_load(&s.failed));
	/* every injected failure either failed or was cancelled by another */
	assert_true(atomic_load(&s.failed) >= 1 || s.n < FAIL_EVERY);
	assert_int_equal(coord_done(s.c, NULL), 1);
	coord_destroy(s.c);
	coord_registry_destroy(reg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_stress_conservation),
	};

	t_watchdog(560);
	return cmocka_run_group_tests_name("stress", tests, NULL, NULL);
}
