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
 *
 * Groups ($T_GROUPS, a comma list; default all): "inproc" runs both tests;
 * "tcp" runs the error rule's counts over two coord-worker processes with
 * the default options (issue 20, item 5: the rule holds on every
 * transport).
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

/* Threads that keep both CPUs busy, so that a dispatcher is preempted at
 * any instruction, between a finish and what follows it too. */
static _Atomic int hog_stop;

static void *hog(void *arg)
{
	volatile uint64_t x = 0;

	while (!atomic_load_explicit(&hog_stop, memory_order_relaxed))
		for (int i = 0; i < 4096; i++)
			x = x + (uint64_t)i;
	return arg;
}

#define EROUNDS 300
#define EHELD 32

/*
 * S3, S5, C9 (issue 20, item 5): when the raising schedule() returns, every
 * RemoteValue is final, nothing is outstanding and done() says so at once,
 * even though a dispatcher that finished the last closures may not have
 * run since.  Rounds of handled and handle-less closures with one failure
 * among them, under load; bounded by EROUNDS and 60 s.
 */
static void test_stress_error_rule_counts(void **state)
{
	struct coord_registry *reg = t_registry();
	struct coord *c = t_coord(reg, 2, COORD_RING_DEFAULT);
	uint32_t add = t_fn(c, "add"), sleep_us = t_fn(c, "sleep_us"), fail = t_fn(c, "fail");
	uint64_t deadline = t_now_ns() + 60000000000ull;
	struct coord_rv *held[EHELD], *frv;
	pthread_t hogs[2];
	int rounds = 0;

	atomic_store(&hog_stop, 0);
	for (int i = 0; i < 2; i++)
		pthread_create(&hogs[i], NULL, hog, NULL);
	for (; rounds < EROUNDS && t_now_ns() < deadline; rounds++) {
		struct coord_metrics m;
		uint32_t us = (uint32_t)(rounds & 1);
		uint64_t until;
		int r = 0;
		long tries = 0;

		for (int i = 0; i < EHELD; i++) {
			int64_t ab[2] = { i, rounds };

			assert_int_equal(coord_schedule(c, add, ab, sizeof(ab), &held[i], NULL), 0);
			for (int k = 0; k < 8; k++)
				assert_int_equal(
					coord_schedule(c, sleep_us, &us, sizeof(us), NULL, NULL),
					0);
		}
		assert_int_equal(coord_schedule(c, fail, NULL, 0, &frv, NULL), 0);
		/* Until the failure is taken: bounded in tries and in time,
		 * 30 s of its own, not what is left of the rounds' 60 s (over
		 * tcp its result may take a while on a loaded machine; the
		 * ring's backpressure paces us). */
		until = t_now_ns() + 30000000000ull;
		while (tries++ < 100000000 && t_now_ns() < until) {
			r = coord_schedule(c, sleep_us, &us, sizeof(us), NULL, NULL);
			if (r < 0)
				break;
		}
		assert_int_equal(r, -EIO);
		assert_int_equal(coord_metrics(c, &m, NULL, 0), 0);
		assert_int_equal(m.outstanding, 0);
		assert_int_equal(m.in_flight, 0);
		assert_int_equal(coord_done(c, NULL), 1);
		for (int i = 0; i < EHELD; i++) {
			assert_int_not_equal(coord_rv_state(held[i]), COORD_RV_NOT_READY);
			coord_rv_put(held[i]);
		}
		assert_int_not_equal(coord_rv_state(frv), COORD_RV_NOT_READY);
		coord_rv_put(frv);
	}
	atomic_store(&hog_stop, 1);
	for (int i = 0; i < 2; i++)
		pthread_join(hogs[i], NULL);
	printf("# error rule: %d rounds\n", rounds);
	assert_true(rounds >= 10);
	assert_int_equal(coord_join(c, NULL), 0);
	coord_destroy(c);
	coord_registry_destroy(reg);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test(test_stress_conservation),
		cmocka_unit_test(test_stress_error_rule_counts),
	};
	const struct CMUnitTest tcp_tests[] = {
		cmocka_unit_test(test_stress_error_rule_counts),
	};
	int failed = 0;

	t_watchdog(560);
	if (getenv("T_FILTER"))
		cmocka_set_test_filter(getenv("T_FILTER"));
	if (t_group_on("inproc"))
		failed += cmocka_run_group_tests_name("stress", tests, NULL, NULL);
	if (t_group_on("tcp"))
		failed += cmocka_run_group_tests_name("stress/tcp", tcp_tests, t_group_tcp,
						      t_group_inproc);
	return failed;
}
