// SPDX-License-Identifier: MIT
/*
 * tests/coord_s13_s15.c - part of test_coord: S13 (staggered start; its
 * spreading test, a gap test, stays in test_coord.c), S14 (unbounded queue),
 * S15 (unknown function), B8 (closure ids, attempts), error texts and
 * arguments refused, a worker lacking a function, values outliving destroy.
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <errno.h>
#include <limits.h>
#include <math.h>
#include <pthread.h>
#include <signal.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/coord_pvt.h"
#include "runtime/core/internal.h"
#include "transport/rdma_provider.h"
#include "helpers.h"
#include "coord_tests.h"

/* ---- S13 ------------------------------------------------------------------------ */

/* S13: worker i waits min(delay * i, max); no max means no cap; env vars. */
void test_s13_stagger_formula_and_env(void **state)
{
	struct coord_opts o;

	coord_opts_init(&o);
	o.start_delay_ms = 100;
	o.start_delay_max_ms = -1;
	assert_int_equal(coord_stagger_ns(&o, 0), 0);
	assert_int_equal(coord_stagger_ns(&o, 3), 300000000ull);
	assert_int_equal(coord_stagger_ns(&o, 50), 5000000000ull); /* no cap */
	o.start_delay_max_ms = 250;
	assert_int_equal(coord_stagger_ns(&o, 1), 100000000ull);
	assert_int_equal(coord_stagger_ns(&o, 3), 250000000ull);
	o.start_delay_ms = 0;
	assert_int_equal(coord_stagger_ns(&o, 7), 0);

	/* From the seed's environment variables when the options say -1. */
	struct coord_registry *reg = t_registry();
	struct coord *c;

	coord_opts_init(&o);
	o.registry = reg;
	o.inproc_workers = 3;
	setenv("TF_COORDINATOR_SCHEDULE_START_DELAY", "0.05", 1);
	setenv("TF_COORDINATOR_SCHEDULE_START_DELAY_MAX", "0.07", 1);
	assert_int_equal(coord_create(NULL, &o, &c, NULL), 0);
	assert_int_equal(c->opts.start_delay_ms, 50);
	assert_int_equal(c->opts.start_delay_max_ms, 70);
	assert_int_equal(c->workers[2].start_at_ns - c->created_ns, 70000000ull);
	coord_destroy(c);
	unsetenv("TF_COORDINATOR_SCHEDULE_START_DELAY");
	unsetenv("TF_COORDINATOR_SCHEDULE_START_DELAY_MAX");
	coord_registry_destroy(reg);
}

/* S13: end to end, no worker starts its first closure before its delay. */
void test_s13_stagger_observed(void **state)
{
	struct coord_registry *reg = t_registry();
	struct coord_opts o;
	struct coord *c;
	uint32_t stamp;
	uint64_t t0;

	t_reset_counters();
	t_opts(&o, reg);
	o.start_delay_ms = 80;
	o.start_delay_max_ms = -1;
	t0 = t_now_ns();
	assert_int_equal(t_create(&o, 3, &c, NULL), 0);
	stamp = t_fn(c, "stamp");
	for (int i = 0; i < 400; i++)
		assert_int_equal(coord_schedule(c, stamp, NULL, 0, NULL, NULL), 0);
	assert_int_equal(coord_join(c, NULL), 0);
	for (int w = 0; w < 3; w++) {
		uint64_t first = atomic_load(&t_first_ns[w]);

		if (first) /* a worker may get nothing if the others drained all */
			assert_true(first - t0 >= (uint64_t)w * 80000000ull);
	}
	assert_true(atomic_load(&t_first_ns[0]) != 0);
	coord_destroy(c);
	coord_registry_destroy(reg);
}

/* ---- S14 / S15 / B8 / misc --------------------------------------------------------- */

/*
 * S14: capacity 0 is unbounded: schedule never blocks, even past the ring,
 * and the queue stays FIFO across the overflow (regression, review of
 * 78d83b0: the overflow was a stack, drained in quadratic time and out of
 * order, and could starve under sustained load).
 */
void test_s14_unbounded(void **state)
{
	struct t_fx *f;
	uint32_t gated, order;
	/* Over rdma (the rig's TCG guest, ~1-2 K closures/s through one
	 * worker) a shorter run past the ring, or it takes minutes. */
	const long n = COORD_RING_DEFAULT + (strcmp(t_transport, "rdma") ? 50000 : 1000);

	setup_n((void **)&f, 1, 0);
	assert_true(f->c->unbounded);
	assert_true(n <= T_ORDER_MAX);
	atomic_store(&t_norder, 0);
	gated = t_fn(f->c, "gated");
	order = t_fn(f->c, "order");
	assert_int_equal(coord_schedule(f->c, gated, NULL, 0, NULL, NULL), 0);
	wait_entered(1);
	for (int64_t i = 0; i < n; i++)
		assert_int_equal(coord_schedule(f->c, order, &i, sizeof(i), NULL, NULL), 0);
	assert_true(atomic_load(&f->c->ov_count) > 0); /* past the ring */
	atomic_store(&t_gate, 1);
	assert_int_equal(coord_join(f->c, NULL), 0);
	assert_int_equal(atomic_load(&t_exited), n + 1);
	assert_int_equal(atomic_load(&t_norder), n);
	for (long i = 0; i < n; i++)
		if (t_order[i] != i)
			fail_msg("run order broken at %ld: got %lld", i, (long long)t_order[i]);
	teardown((void **)&f);
}

/* S15: an unknown function is refused at schedule with a clear error. */
void test_s15_unknown_function_refused(void **state)
{
	struct t_fx *f = *state;
	struct coord_error err;
	struct coord_rv *rv = (void *)1;
	uint32_t id;

	assert_int_equal(coord_schedule(f->c, 12345, NULL, 0, &rv, &err), COORD_ENOFN);
	assert_null(rv);
	assert_non_null(strstr(err.msg, "12345"));
	assert_int_equal(coord_fn_lookup(f->c, "no_such_fn", &id, &err), COORD_ENOFN);
	assert_non_null(strstr(err.msg, "no_such_fn"));
	/* a resource creator is not a schedulable function */
	assert_int_equal(coord_fn_lookup(f->c, "counter", &id, &err), COORD_ENOFN);
	/* nothing was queued, nothing failed later */
	assert_int_equal(coord_join(f->c, NULL), 0);
	assert_int_equal(atomic_load(&t_entered), 0);
}

/* B8: coord_ctx_closure() in the function is coord_rv_id() of its RemoteValue,
 * whatever path the closure took: plain, with a per-worker argument, bound
 * to a worker (hints), with arguments too large to travel inline, in a
 * batch; and the ids of the values held at once are distinct. */
void test_b8_closure_id_is_rv_id(void **state)
{
	struct t_fx *f = *state;
	enum { N = 2000 };
	struct coord_rv **rv = calloc(N, sizeof(*rv));
	uint64_t *ids = calloc(N, sizeof(*ids));
	uint32_t fn = t_fn(f->c, "closure_id");
	char big[200] = { 0 };
	struct coord_pw *pw;

	assert_non_null(rv);
	assert_non_null(ids);
	assert_int_equal(coord_per_worker_create(f->c, "counter", NULL, 0, &pw, NULL), 0);
	for (int i = 0; i < N;) {
		struct coord_call call = { .fn = fn };

		switch (i % 5) {
		case 1:
			call.pw = &pw;
			call.npw = 1;
			break;
		case 2:
			call.affinity = COORD_ON_WORKER((unsigned)i % 2);
			break;
		case 3:
			call.args = big;
			call.len = sizeof(big);
			break;
		case 4: { /* a batch of 8 (or what is left) */
			struct coord_call calls[8];
			int m = N - i < 8 ? N - i : 8;

			for (int k = 0; k < m; k++)
				calls[k] = call;
			assert_int_equal(
				coord_schedule_many(f->c, calls, (size_t)m, &rv[i], NULL, NULL), 0);
			i += m;
			continue;
		}
		}
		assert_int_equal(coord_schedule_call(f->c, &call, &rv[i], NULL), 0);
		i++;
	}
	for (int i = 0; i < N; i++) {
		struct {
			uint64_t id;
			uint32_t attempt;
			int32_t worker;
		} out;

		fetch_exact(rv[i], &out, sizeof(out));
		assert_int_equal(out.id, coord_rv_id(rv[i]));
		assert_int_equal(out.attempt, 1);
		ids[i] = out.id;
	}
	for (int i = 0; i < N; i++) /* distinct while held (sorted check) */
		for (int j = i + 1; j < N && j < i + 64; j++)
			assert_int_not_equal(ids[i], ids[j]);
	for (int i = 0; i < N; i++)
		coord_rv_put(rv[i]);
	coord_per_worker_put(pw);
	free(rv);
	free(ids);
}

/* B8: the function sees its attempt number (1 on the first run). */
void test_b8_attempt_visible(void **state)
{
	struct t_fx *f = *state;
	struct coord_rv *rv;
	const void *v;
	uint32_t a;

	assert_int_equal(coord_schedule(f->c, t_fn(f->c, "attempt"), NULL, 0, &rv, NULL), 0);
	assert_int_equal(coord_rv_fetch(rv, &v, NULL, NULL), 0);
	memcpy(&a, v, sizeof(a));
	assert_int_equal(a, 1);
	coord_rv_put(rv);
}

/*
 * S2/B8: a closure whose worker was lost goes back on the queue and runs
 * again with its attempt number raised; its RemoteValue stays NOT_READY
 * meanwhile.  The test acts as a dispatcher that takes a closure and loses it.
 */
void test_s2_b8_put_back_runs_again(void **state)
{
	struct t_fx *f = *state;
	struct coord_dispatcher d = { .c = f->c };
	struct coord_closure *taken[4];
	struct coord_rv *g[2], *rv;
	const void *v;
	uint32_t a;
	unsigned n = 0;

	/* keep both workers busy so the closure stays queued for us */
	for (int i = 0; i < 2; i++)
		assert_int_equal(coord_schedule(f->c, t_fn(f->c, "gated"), NULL, 0, &g[i], NULL),
				 0);
	wait_entered(2);
	assert_int_equal(coord_schedule(f->c, t_fn(f->c, "attempt"), NULL, 0, &rv, NULL), 0);
	for (int i = 0; i < 1000 && n == 0; i++)
		n = coord_dispatch_try_take(&d, taken, 4);
	assert_int_equal(n, 1);
	assert_ptr_equal(taken[0], (struct coord_closure *)rv);
	coord_dispatch_put_back(&d, taken, n); /* its worker was lost */
	assert_int_equal(atomic_load(&d.inflight), 0);
	assert_int_equal(coord_rv_state(rv), COORD_RV_NOT_READY);
	atomic_store(&t_gate, 1);
	assert_int_equal(coord_rv_fetch(rv, &v, NULL, NULL), 0);
	memcpy(&a, v, sizeof(a));
	assert_int_equal(a, 2);
	assert_int_equal(coord_join(f->c, NULL), 0);
	coord_rv_put(rv);
	coord_rv_put(g[0]);
	coord_rv_put(g[1]);
}

/* B8: a closure put back (its worker lost) runs again with attempt 2 and
 * the same id: coord_ctx_closure() is still coord_rv_id(). */
void test_b8_closure_id_after_put_back(void **state)
{
	struct t_fx *f = *state;
	struct coord_dispatcher d = { .c = f->c };
	struct coord_closure *taken[4];
	struct coord_rv *g[2], *rv;
	struct {
		uint64_t id;
		uint32_t attempt;
		int32_t worker;
	} out;
	unsigned n = 0;

	for (int i = 0; i < 2; i++) /* both workers busy: the closure waits for us */
		assert_int_equal(coord_schedule(f->c, t_fn(f->c, "gated"), NULL, 0, &g[i], NULL),
				 0);
	wait_entered(2);
	assert_int_equal(coord_schedule(f->c, t_fn(f->c, "closure_id"), NULL, 0, &rv, NULL), 0);
	for (int i = 0; i < 1000 && n == 0; i++)
		n = coord_dispatch_try_take(&d, taken, 4);
	assert_int_equal(n, 1);
	coord_dispatch_put_back(&d, taken, n);
	atomic_store(&t_gate, 1);
	fetch_exact(rv, &out, sizeof(out));
	assert_int_equal(out.attempt, 2);
	assert_int_equal(out.id, coord_rv_id(rv));
	assert_int_equal(coord_join(f->c, NULL), 0);
	coord_rv_put(rv);
	coord_rv_put(g[0]);
	coord_rv_put(g[1]);
}

/* Registry rules and option errors are clear and do not crash. */
void test_registry_and_options_errors(void **state)
{
	struct coord_registry *reg;
	struct coord_opts o;
	struct coord_error err;
	struct coord *c;
	char longname[100];

	assert_int_equal(coord_registry_create(&reg), 0);
	assert_int_equal(coord_registry_add(reg, "a", NULL), COORD_EINVAL);
	assert_int_equal(coord_registry_add(reg, "", (coord_fn_t)1), COORD_EINVAL);
	memset(longname, 'x', sizeof(longname) - 1);
	longname[sizeof(longname) - 1] = 0;
	assert_int_equal(coord_registry_add(reg, longname, (coord_fn_t)1), COORD_EINVAL);
	assert_int_equal(coord_registry_add(reg, "a", (coord_fn_t)1), 0);
	assert_int_equal(coord_registry_add(reg, "a", (coord_fn_t)1), COORD_EINVAL);
	coord_opts_init(&o);
	assert_int_equal(coord_create(NULL, &o, &c, &err), COORD_EINVAL); /* no registry */
	o.registry = reg;
	o.transport = "carrier-pigeon";
	assert_int_equal(coord_create(NULL, &o, &c, &err), COORD_EINVAL);
	assert_non_null(strstr(err.msg, "carrier-pigeon"));
	o.transport = "inproc";
	o.inproc_workers = 0;
	assert_int_equal(coord_create(NULL, &o, &c, &err), COORD_EINVAL);
	o.inproc_workers = 1;
	o.heartbeat_misses = 0; /* with heartbeats on, a silent worker would fail at once */
	assert_int_equal(coord_create(NULL, &o, &c, &err), COORD_EINVAL);
	assert_non_null(strstr(err.msg, "heartbeat_misses"));
	o.heartbeat_misses = 3;
	o.heartbeat_ms = -1;
	assert_int_equal(coord_create(NULL, &o, &c, &err), COORD_EINVAL);
	o.heartbeat_ms = 0; /* off: misses do not matter */
	o.heartbeat_misses = 0;
	assert_int_equal(coord_create(NULL, &o, &c, &err), 0);
	coord_destroy(c);
	o.closure_timeout_ms = -5;
	assert_int_equal(coord_create(NULL, &o, &c, &err), COORD_EINVAL);
	coord_registry_destroy(reg);
}

/*
 * Issue 21: every code prints its own meaning.  coord's codes are in a range
 * no errno uses, each with its own text; an errno value prints strerror's
 * text (-ENOENT is a missing file, not "no such function").
 */
void test_each_code_prints_its_own_text(void **state)
{
	static const struct {
		int code;
		const char *text;
	} own[] = {
		{ COORD_ECANCELLED, "cancelled: the closure was cancelled or its value aborted" },
		{ COORD_EUNAVAILABLE, "unavailable: a parameter server or every worker is lost" },
		{ COORD_EINPUT, "input error: an input of the closure failed" },
		{ COORD_ENOFN, "no such function" },
		{ COORD_ESTALE,
		  "stale variable handle: its parameter server restarted after it was made" },
	};
	int plain[] = {
		EINVAL, ENOMEM, ETIMEDOUT, ENOENT,  ECANCELED, EHOSTDOWN,    EBADE,  ESTALE,
		EEXIST, ERANGE, ENOSPC,	   EBADMSG, EFBIG,     ENAMETOOLONG, EACCES, EPROTO
	};

	(void)state;
	for (size_t i = 0; i < sizeof(own) / sizeof(own[0]); i++) {
		assert_true(COORD_ERR_OWN(own[i].code));
		assert_string_equal(coord_strerror(own[i].code), own[i].text);
		for (size_t j = 0; j < i; j++)
			assert_int_not_equal(own[i].code, own[j].code);
	}
	/* errno values: their own text, never one of coord's */
	for (size_t i = 0; i < sizeof(plain) / sizeof(plain[0]); i++) {
		assert_false(COORD_ERR_OWN(-plain[i]));
		assert_string_equal(coord_strerror(-plain[i]), strerror(plain[i]));
	}
	assert_int_equal(COORD_EINVAL, -EINVAL);
	assert_int_equal(COORD_ENOMEM, -ENOMEM);
	assert_int_equal(COORD_ETIMEDOUT, -ETIMEDOUT);
	assert_string_equal(coord_strerror(-ENOENT), "No such file or directory");
	assert_string_equal(coord_strerror(0), "success");
	assert_string_equal(coord_strerror(5), "not an error code");
	assert_string_equal(coord_strerror(-COORD_ERR_LAST), "unknown error");
	assert_string_equal(coord_strerror(INT_MIN), "unknown error");
	assert_string_equal(coord_strerror(-4095), "unknown error");
}

/* NULL handles get a clear error (or a documented no-op), never a crash. */
void test_null_handles_refused(void **state)
{
	struct t_fx *f = *state;
	struct coord_call call = { .fn = t_fn(f->c, "add") };
	struct coord_rv *rv = (struct coord_rv *)1, *rvs[2];
	struct coord_result res[2];
	struct coord_pw *pw = NULL;
	struct coord_error err;
	int64_t ab[2] = { 2, 3 };
	const void *v;
	size_t len;
	uint32_t id;

	assert_int_equal(coord_rv_fetch(NULL, &v, &len, &err), COORD_EINVAL);
	assert_non_null(strstr(err.msg, "NULL"));
	assert_int_equal(coord_rv_fetch(NULL, NULL, NULL, NULL), COORD_EINVAL);
	assert_int_equal(coord_rv_fetch_timeout(NULL, 1000, NULL, NULL, &err), COORD_EINVAL);
	assert_int_equal(coord_rv_state(NULL), COORD_RV_CANCELLED);
	assert_true(coord_rv_id(NULL) == COORD_NO_CLOSURE);
	coord_rv_put(NULL); /* ignored */
	assert_int_equal(coord_rv_fetch_many(NULL, 1, res, -1), COORD_EINVAL);
	assert_int_equal(coord_rv_fetch_many(rvs, 1, NULL, -1), COORD_EINVAL);
	assert_int_equal(coord_rv_fetch_many(NULL, 0, NULL, -1), 0);
	assert_int_equal(coord_join(NULL, &err), COORD_EINVAL);
	assert_non_null(strstr(err.msg, "NULL"));
	assert_int_equal(coord_join_timeout(NULL, 1000, NULL), COORD_EINVAL);
	assert_int_equal(coord_done(NULL, &err), COORD_EINVAL);
	assert_int_equal(coord_schedule(NULL, call.fn, ab, sizeof(ab), &rv, &err), COORD_EINVAL);
	assert_null(rv);
	assert_non_null(strstr(err.msg, "NULL"));
	assert_int_equal(coord_schedule_call(NULL, &call, NULL, &err), COORD_EINVAL);
	assert_int_equal(coord_schedule_call(f->c, NULL, &rv, &err), COORD_EINVAL);
	assert_int_equal(coord_schedule_many(NULL, &call, 1, NULL, NULL, &err), COORD_EINVAL);
	assert_int_equal(coord_fn_lookup(NULL, "add", &id, &err), COORD_EINVAL);
	assert_int_equal(coord_fn_lookup(f->c, "add", NULL, &err), COORD_EINVAL);
	assert_int_equal(coord_per_worker_create(NULL, "counter", NULL, 0, &pw, &err),
			 COORD_EINVAL);
	assert_int_equal(coord_per_worker_create(f->c, "counter", NULL, 0, NULL, &err),
			 COORD_EINVAL);
	assert_null(pw);
	assert_int_equal(coord_per_worker_state(NULL, 0), COORD_RV_NOT_READY);
	coord_per_worker_put(NULL); /* ignored */
	assert_int_equal(coord_num_workers(NULL), 0);
	coord_destroy(NULL); /* ignored */
	/* A NULL among real RemoteValues: that outcome alone is refused. */
	call.args = ab;
	call.len = sizeof(ab);
	assert_int_equal(coord_schedule_call(f->c, &call, &rvs[0], &err), 0);
	rvs[1] = NULL;
	assert_int_equal(coord_rv_fetch_many(rvs, 2, res, -1), 0);
	assert_int_equal(res[0].code, 0);
	assert_int_equal(res[0].len, sizeof(int64_t));
	assert_int_equal(*(const int64_t *)res[0].val, 5);
	assert_int_equal(res[1].code, COORD_EINVAL);
	coord_rv_put(rvs[0]);
	/* and the coordinator goes on */
	assert_int_equal(coord_join(f->c, &err), 0);
	assert_int_equal(coord_done(f->c, &err), 1);
}

/* ---- servers whose function library lacks a function ----------------------------- */

/* Registered by this coordinator only: coord-worker's library (testfns.c)
 * has neither, so its FN_TABLE maps them to nothing. */
static int f_coordinator_only(struct coord_ctx *ctx, const void *args, size_t len)
{
	(void)ctx;
	(void)args;
	(void)len;
	return 0;
}

static int r_coordinator_only(struct coord_ctx *ctx, const void *args, size_t len, void **res)
{
	(void)ctx;
	(void)args;
	(void)len;
	*res = NULL;
	return 0;
}

int setup_extra_fns(void **state)
{
	struct t_fx *f = calloc(1, sizeof(*f));

	if (!f)
		return -1;
	t_reset_counters();
	f->reg = t_registry();
	if (coord_registry_add(f->reg, "coordinator_only", f_coordinator_only) ||
	    coord_registry_add_resource(f->reg, "coordinator_only_res", r_coordinator_only, NULL))
		return -1;
	f->c = t_coord(f->reg, 2, COORD_RING_DEFAULT);
	*state = f;
	return 0;
}

/* The error names what the worker lacks (from the coordinator's function
 * table) and how to serve it, not an id; the coordinator goes on. */
void test_worker_lacks_function_named(void **state)
{
	struct t_fx *f = *state;
	struct coord_call call = { .fn = t_fn(f->c, "coordinator_only") };
	struct coord_error err;
	struct coord_rv *rv;
	struct coord_pw *pw;

	assert_int_equal(coord_schedule_call(f->c, &call, &rv, &err), 0);
	assert_int_equal(coord_rv_fetch(rv, NULL, NULL, &err), COORD_ENOFN);
	print_message("%s\n", err.msg);
	assert_non_null(strstr(err.msg, "no function 'coordinator_only'"));
	assert_non_null(strstr(err.msg, "--fns LIB"));
	assert_null(strstr(err.msg, "4294967295"));
	coord_rv_put(rv);
	assert_int_equal(coord_join(f->c, &err), COORD_ENOFN); /* S3: once */
	/* a per-worker creator it lacks: an input error that names it */
	assert_int_equal(coord_per_worker_create(f->c, "coordinator_only_res", NULL, 0, &pw, &err),
			 0);
	call.fn = t_fn(f->c, "pw_next");
	call.pw = &pw;
	call.npw = 1;
	assert_int_equal(coord_schedule_call(f->c, &call, &rv, &err), 0);
	assert_int_equal(coord_rv_fetch(rv, NULL, NULL, &err), COORD_EINPUT);
	assert_int_equal(err.cause, COORD_ENOFN);
	assert_non_null(strstr(err.msg, "no resource creator 'coordinator_only_res'"));
	assert_non_null(strstr(err.msg, "--fns LIB"));
	coord_rv_put(rv);
	coord_per_worker_put(pw);
	assert_int_equal(coord_join(f->c, &err), COORD_EINPUT);
	assert_int_equal(atomic_load(&t_entered), 0); /* nothing ran */
	/* the functions it has still run */
	call = (struct coord_call){ .fn = t_fn(f->c, "sleep_us") };
	assert_int_equal(coord_schedule_call(f->c, &call, &rv, &err), 0);
	assert_int_equal(coord_rv_fetch(rv, NULL, NULL, &err), 0);
	coord_rv_put(rv);
	assert_int_equal(coord_join(f->c, &err), 0);
}

/* A spec's "worker" job sizes the in-process cluster. */
void test_spec_sizes_cluster(void **state)
{
	struct coord_registry *reg = t_registry();
	struct coord_spec *spec;
	struct coord_opts o;
	struct coord *c;

	assert_int_equal(coord_spec_local(3, 1, &spec), 0);
	coord_opts_init(&o);
	o.registry = reg;
	assert_int_equal(coord_create(spec, &o, &c, NULL), 0);
	assert_int_equal(coord_num_workers(c), 3);
	coord_destroy(c);
	coord_spec_destroy(spec);
	coord_registry_destroy(reg);
}

/*
 * Destroy with closures still queued cancels them and returns; the values
 * the caller holds outlive the coordinator, final and readable, and the last
 * put frees their memory (regression, review of 78d83b0: use after free).
 */
void test_destroy_with_queued_work_values_outlive(void **state)
{
	struct t_fx *f;
	struct coord_rv *rv[50], *ok;
	struct coord_pw *pw;
	uint32_t us = 1000;
	int64_t ab[2] = { 40, 2 };
	int ran = 0, cancelled = 0;

	setup_n((void **)&f, 1, 1024);
	assert_int_equal(coord_schedule(f->c, t_fn(f->c, "add"), ab, sizeof(ab), &ok, NULL), 0);
	assert_int_equal(fetch_i64(ok), 42);
	assert_int_equal(coord_per_worker_create(f->c, "counter", NULL, 0, &pw, NULL), 0);
	for (int i = 0; i < 50; i++)
		assert_int_equal(
			coord_schedule(f->c, t_fn(f->c, "sleep_us"), &us, sizeof(us), &rv[i], NULL),
			0);
	teardown((void **)&f); /* the coordinator is gone; the values are not */
	assert_int_equal(atomic_load(&t_entered), atomic_load(&t_exited));
	assert_int_equal(fetch_i64(ok), 42);
	assert_int_equal(coord_rv_state(ok), COORD_RV_READY);
	for (int i = 0; i < 50; i++) {
		int r = coord_rv_fetch(rv[i], NULL, NULL, NULL);

		assert_true(r == 0 || r == COORD_ECANCELLED);
		ran += r == 0;
		cancelled += r == COORD_ECANCELLED;
	}
	assert_int_equal(ran + 1, atomic_load(&t_exited)); /* + the add */
	assert_true(cancelled > 0);
	for (int i = 0; i < 50; i++)
		coord_rv_put(rv[i]);
	coord_per_worker_put(pw);
	coord_rv_put(ok); /* the last put frees the coordinator's memory */
}
