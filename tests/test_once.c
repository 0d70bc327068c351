// SPDX-License-Identifier: MIT
/*
 * tests/test_once.c - at most once (runtime/ps/ps_once.c): a ps task's
 * table of closure keys over a real store: an update whose key was applied
 * is answered "done" and not applied again (O1), a late attempt of a final
 * closure is refused (O2), another update under the same key, a later
 * closure of the same slot and an update without a key are applied (O3);
 * the table stays within its bound; concurrent copies of one update apply
 * once.  Then the keys from worker functions, in process: each update of a
 * run has its own number, so a closure's repeated updates all land; and
 * the coordinator's own call keys (a thread's slot and call count).
 * Every loop is bounded in count (and t_watchdog bounds the time).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include <coord/var.h>

#include "runtime/ps/ps.h"
#include "runtime/store/varstore.h"
#include "helpers.h"

#define SESS 0x5e55100000000001ull

struct fix {
	struct coord_varstore *vs;
	struct coord_ps_once *o;
	uint32_t id, tag;
};

static int fix_setup_max(void **state, uint32_t max)
{
	struct fix *f = calloc(1, sizeof(*f));
	uint64_t dims[2] = { 8, 2 };
	struct coord_error err;

	assert_non_null(f);
	assert_int_equal(coord_varstore_create(NULL, &f->vs, &err), 0);
	assert_int_equal(coord_varstore_var_create(f->vs, "once/x", 2, dims, NULL, &f->id, &err),
			 0);
	f->tag = coord_varstore_tag(f->vs);
	assert_int_equal(coord_ps_once_create(max, &f->o), 0);
	*state = f;
	return 0;
}

static int fix_setup(void **state)
{
	return fix_setup_max(state, COORD_PS_ONCE_MAX);
}

static int fix_setup_small(void **state)
{
	return fix_setup_max(state, COORD_PS_ONCE_MIN);
}

static int fix_teardown(void **state)
{
	struct fix *f = *state;

	coord_ps_once_destroy(f->o);
	coord_varstore_destroy(f->vs);
	free(f);
	return 0;
}

static int emit_count(void *arg, const void *p, size_t len)
{
	(void)p;
	assert_int_equal(len, 0);
	(*(unsigned *)arg)++;
	return 0;
}

/* One update through the table: @opc on element @off (n elements of @v). */
static int apply(struct fix *f, uint16_t opc, uint64_t sess, uint64_t closure, uint32_t seq,
		 uint64_t off, uint64_t n, float v)
{
	float d[16];
	int64_t idx[2] = { 3, 5 };
	struct coord_ps_op op = { .op = opc,
				  .id = f->id,
				  .tag = f->tag,
				  .off = off,
				  .n = n,
				  .src = d,
				  .src_len = (uint32_t)(4 * n),
				  .sess = sess,
				  .closure = closure,
				  .seq = seq };
	struct coord_ps_scratch s = { 0 };
	struct coord_error err = { 0 };
	unsigned emitted = 0;
	int r;

	for (unsigned i = 0; i < 16; i++)
		d[i] = v;
	if (opc == COORD_PS_SCATTER_ADD) { /* rows 3 and 5, of 2 elements */
		op.n = 2;
		op.src = idx;
		op.src_len = sizeof(idx);
		op.src2 = d;
		op.src2_len = 16;
	}
	r = coord_ps_apply_once(f->o, f->vs, 0, &op, &s, emit_count, &emitted, &err);
	free(s.buf);
	assert_int_equal(emitted, r == 0 ? 1 : 0); /* answered once, or failed */
	return r;
}

static float at(struct fix *f, uint64_t off)
{
	struct coord_error err;
	float v = -1;

	assert_int_equal(coord_vs_read(f->vs, f->id, off, 1, &v, &err), 0);
	return v;
}

static struct coord_ps_once_stats stats(struct fix *f)
{
	struct coord_ps_once_stats st;

	coord_ps_once_stats(f->o, &st);
	return st;
}

/* O1: a key applied is answered "done" and not applied again, on any
 * later attempt; other numbers, other sessions are other keys. */
static void test_once_dup_answered_not_applied(void **state)
{
	struct fix *f = *state;
	uint64_t cl = (7ull << 32) | 42;

	assert_int_equal(apply(f, COORD_PS_ASSIGN_ADD, SESS, cl, 1, 0, 1, 1.0f), 0);
	for (int i = 0; i < 3; i++) /* the re-runs of update 1 */
		assert_int_equal(apply(f, COORD_PS_ASSIGN_ADD, SESS, cl, 1, 0, 1, 1.0f), 0);
	assert_true(at(f, 0) == 1.0f);
	assert_int_equal(apply(f, COORD_PS_ASSIGN_ADD, SESS, cl, 2, 0, 1, 1.0f), 0);
	assert_int_equal(apply(f, COORD_PS_ASSIGN_ADD, SESS + 1, cl, 1, 0, 1, 1.0f), 0);
	assert_true(at(f, 0) == 3.0f);
	assert_int_equal(stats(f).applied, 3);
	assert_int_equal(stats(f).dups, 3);
	assert_int_equal(stats(f).entries, 3);
	/* assign and scatter_add are keyed alike */
	assert_int_equal(apply(f, COORD_PS_SCATTER_ADD, SESS, cl, 3, 0, 0, 2.0f), 0);
	assert_int_equal(apply(f, COORD_PS_SCATTER_ADD, SESS, cl, 3, 0, 0, 2.0f), 0);
	assert_true(at(f, 6) == 2.0f && at(f, 7) == 2.0f && at(f, 10) == 2.0f);
	assert_int_equal(apply(f, COORD_PS_ASSIGN, SESS, cl, 4, 12, 2, 5.0f), 0);
	assert_int_equal(apply(f, COORD_PS_ASSIGN_ADD, SESS, cl, 5, 12, 2, 1.0f), 0);
	assert_int_equal(apply(f, COORD_PS_ASSIGN, SESS, cl, 4, 12, 2, 5.0f), 0); /* a re-run */
	assert_int_equal(apply(f, COORD_PS_ASSIGN_ADD, SESS, cl, 5, 12, 2, 1.0f), 0);
	assert_true(at(f, 12) == 6.0f && at(f, 13) == 6.0f);
	assert_int_equal(stats(f).dups, 6);
}

/* O2, O3: a later closure of the slot (reuse + 1) is applied and replaces
 * the key; the earlier closure is then final, and its late update refused. */
static void test_once_later_closure_of_slot(void **state)
{
	struct fix *f = *state;
	uint64_t c1 = (7ull << 32) | 42, c2 = (8ull << 32) | 42, cw = (0xffffffffull << 32) | 9;
	struct coord_error err = { 0 };

	assert_int_equal(apply(f, COORD_PS_ASSIGN_ADD, SESS, c1, 1, 0, 1, 1.0f), 0);
	assert_int_equal(apply(f, COORD_PS_ASSIGN_ADD, SESS, c2, 1, 0, 1, 1.0f), 0);
	assert_true(at(f, 0) == 2.0f);
	assert_int_equal(apply(f, COORD_PS_ASSIGN_ADD, SESS, c1, 1, 0, 1, 1.0f), COORD_ECANCELLED);
	assert_int_equal(apply(f, COORD_PS_ASSIGN_ADD, SESS, c2, 1, 0, 1, 1.0f), 0);
	assert_true(at(f, 0) == 2.0f);
	assert_int_equal(stats(f).finals, 1);
	assert_int_equal(stats(f).entries, 1); /* one slot, one key */
	/* reuse counts in serial order: 0xffffffff, then 0 (wrapped) is later */
	assert_int_equal(apply(f, COORD_PS_ASSIGN_ADD, SESS, cw, 1, 1, 1, 1.0f), 0);
	assert_int_equal(apply(f, COORD_PS_ASSIGN_ADD, SESS, 9, 1, 1, 1, 1.0f), 0);
	assert_int_equal(apply(f, COORD_PS_ASSIGN_ADD, SESS, cw, 1, 1, 1, 1.0f), COORD_ECANCELLED);
	assert_true(at(f, 1) == 2.0f);
	(void)err;
}

/* O3: another update under a key (the re-run went another way), an
 * update without a key, a failed update: applied (or failed) each time. */
static void test_once_other_update_applied(void **state)
{
	struct fix *f = *state;
	uint64_t cl = (1ull << 32) | 1;

	assert_int_equal(apply(f, COORD_PS_ASSIGN_ADD, SESS, cl, 1, 0, 1, 1.0f), 0);
	assert_int_equal(apply(f, COORD_PS_ASSIGN_ADD, SESS, cl, 1, 1, 1, 1.0f), 0); /* off */
	assert_int_equal(apply(f, COORD_PS_ASSIGN_ADD, SESS, cl, 1, 0, 2, 1.0f), 0); /* n */
	assert_true(at(f, 0) == 2.0f && at(f, 1) == 2.0f);
	for (int i = 0; i < 3; i++) {
		assert_int_equal(apply(f, COORD_PS_ASSIGN_ADD, SESS, cl, 0, 4, 1, 1.0f), 0);
		assert_int_equal(apply(f, COORD_PS_ASSIGN_ADD, 0, cl, 5, 5, 1, 1.0f), 0);
	}
	assert_true(at(f, 4) == 3.0f && at(f, 5) == 3.0f);
	/* a failed update is not recorded: it fails again, then can succeed */
	assert_int_equal(apply(f, COORD_PS_ASSIGN_ADD, SESS, cl, 9, 15, 2, 1.0f), COORD_EINVAL);
	assert_int_equal(apply(f, COORD_PS_ASSIGN_ADD, SESS, cl, 9, 15, 2, 1.0f), COORD_EINVAL);
	assert_int_equal(stats(f).dups, 0);
	assert_int_equal(stats(f).applied, 3);
}

/*
 * The bound: 100,000 closures (each its own slot) in a table of
 * COORD_PS_ONCE_MIN entries: it never holds more; the oldest keys go first,
 * so the newest still answers "done"; every update was applied once.
 */
static void test_once_bounded(void **state)
{
	struct fix *f = *state;
	struct coord_ps_once_stats st;
	const unsigned n = 100000;

	for (unsigned i = 0; i < n; i++) {
		assert_int_equal(
			apply(f, COORD_PS_ASSIGN_ADD, SESS, (1ull << 32) | i, 1, 0, 1, 1.0f), 0);
		if (i % 10000 == 0)
			assert_true(stats(f).entries <= COORD_PS_ONCE_MIN);
	}
	st = stats(f);
	assert_true(st.entries <= COORD_PS_ONCE_MIN);
	assert_true(st.entries >= COORD_PS_ONCE_MIN / 2); /* it does use its room */
	assert_int_equal(st.evicted, n - st.entries);
	assert_int_equal(st.applied, n);
	assert_true(at(f, 0) == (float)n);
	for (unsigned i = n - 8; i < n; i++) /* the newest keys are kept */
		assert_int_equal(
			apply(f, COORD_PS_ASSIGN_ADD, SESS, (1ull << 32) | i, 1, 0, 1, 1.0f), 0);
	assert_true(at(f, 0) == (float)n);
	assert_int_equal(stats(f).dups, 8);
}

/*
 * The default ring's worth: 262,144 unfinished closures (each its own
 * slot) with one update each fill a quarter of a full-size table, and none
 * of their keys is forgotten; every one still answers "done".
 */
static void test_once_quarter_kept(void **state)
{
	struct fix *f = *state;
	const unsigned n = COORD_PS_ONCE_MAX / 4;

	for (unsigned i = 0; i < n; i++)
		assert_int_equal(
			apply(f, COORD_PS_ASSIGN_ADD, SESS, (1ull << 32) | i, 1, 0, 1, 1.0f), 0);
	assert_int_equal(stats(f).evicted, 0);
	assert_int_equal(stats(f).entries, n);
	for (unsigned i = 0; i < n; i += 97)
		assert_int_equal(
			apply(f, COORD_PS_ASSIGN_ADD, SESS, (1ull << 32) | i, 1, 0, 1, 1.0f), 0);
	assert_true(at(f, 0) == (float)n);
}

struct race {
	struct fix *f;
	unsigned t;
};

#define RACE_THREADS 6
#define RACE_KEYS 3000

static void *race_main(void *arg)
{
	struct race *r = arg;

	for (unsigned k = 0; k < RACE_KEYS; k++) {
		unsigned i = (k * 7919u + r->t * 1013u) % RACE_KEYS; /* each its own order */

		if (apply(r->f, COORD_PS_ASSIGN_ADD, SESS, (3ull << 32) | i, 1 + (i & 3), i % 16, 1,
			  1.0f) != 0)
			abort();
	}
	return NULL;
}

/* Copies of each update applied by threads at once (attempts that
 * overlap): each key once, the sum exact. */
static void test_once_concurrent_copies(void **state)
{
	struct fix *f = *state;
	pthread_t th[RACE_THREADS];
	struct race r[RACE_THREADS];
	float sum = 0;

	for (unsigned t = 0; t < RACE_THREADS; t++) {
		r[t] = (struct race){ f, t };
		assert_int_equal(pthread_create(&th[t], NULL, race_main, &r[t]), 0);
	}
	for (unsigned t = 0; t < RACE_THREADS; t++)
		pthread_join(th[t], NULL);
	for (unsigned e = 0; e < 16; e++)
		sum += at(f, e);
	assert_true(sum == (float)RACE_KEYS);
	assert_int_equal(stats(f).applied, RACE_KEYS);
	assert_int_equal(stats(f).dups, (RACE_THREADS - 1) * RACE_KEYS);
}

/* ---- keys from worker functions, in process ----------------------------------------- */

/* args: coord_var_t, then a coord_pvar: 3 assign_adds of 1 on element 0 of
 * the variable and a scatter_add of 1 to rows 0 and 9 of the partitioned one. */
struct add3_args {
	coord_var_t var;
	struct coord_pvar pv;
};

static int f_add3(struct coord_ctx *ctx, const void *args, size_t len)
{
	struct add3_args a;
	float one = 1.0f, rows[4] = { 1, 1, 1, 1 };
	int64_t ids[2] = { 0, 9 };
	int r = 0;

	if (len != sizeof(a))
		return coord_ctx_fail(ctx, COORD_EINVAL, "add3: bad args");
	memcpy(&a, args, sizeof(a));
	for (int i = 0; i < 3 && r == 0; i++)
		r = coord_ctx_var_assign_add(ctx, a.var, 0, 1, &one);
	if (r == 0)
		r = coord_ctx_pvar_scatter_add(ctx, &a.pv, ids, 2, rows);
	return r;
}

/* Each update of a run has its own number: a closure that makes the same
 * update three times makes it three times (inproc, 2 ps tasks, 4 workers). */
static void test_once_each_update_of_a_run(void **state)
{
	struct coord_registry *reg = t_registry();
	uint64_t dims[2] = { 10, 2 }, d1[1] = { 1 };
	struct coord_partitioner part = { .num_shards = 2 };
	struct coord_error err;
	struct add3_args a;
	struct coord_opts o;
	struct coord *c;
	float v = 0, rows[4];
	uint32_t fn;

	(void)state;
	assert_int_equal(coord_registry_add(reg, "once_add3", f_add3), 0);
	coord_opts_init(&o);
	o.registry = reg;
	o.inproc_workers = 4;
	o.inproc_ps = 2;
	assert_int_equal(coord_create(NULL, &o, &c, &err), 0);
	assert_int_equal(coord_var_create(c, "once/v", 1, d1, NULL, &a.var, &err), 0);
	assert_int_equal(coord_pvar_create(c, "once/p", 2, dims, NULL, &part, &a.pv, &err), 0);
	assert_int_equal(coord_fn_lookup(c, "once_add3", &fn, &err), 0);
	for (int i = 0; i < 200; i++)
		assert_int_equal(coord_schedule(c, fn, &a, sizeof(a), NULL, &err), 0);
	assert_int_equal(coord_join(c, &err), 0);
	assert_int_equal(coord_var_read(c, a.var, 0, 1, &v, &err), 0);
	assert_true(v == 600.0f);
	assert_int_equal(coord_pvar_gather(c, &a.pv, (int64_t[]){ 0, 9 }, 2, rows, &err), 0);
	for (int i = 0; i < 4; i++)
		assert_true(rows[i] == 200.0f);
	coord_destroy(c);
	coord_registry_destroy(reg);
}

/* One coordinator call of @ops[0..3) then one of @ops[3], keyed. */
static void *call_keys_main(void *arg)
{
	struct coord_ps_op *ops = arg;

	coord_ps_call_key(SESS, ops, 3);
	coord_ps_call_key(SESS, ops + 3, 1);
	return NULL;
}

/*
 * The coordinator's own call keys (coord_ps_call_key()): the updates of a
 * call are numbered 1, 2, ... under (session, the thread's slot, its call
 * count); reads and ops already keyed are left alone; a thread's next call
 * is a later reuse of its slot; a live thread has another slot; an exited
 * thread's slot goes to the next new thread, at a later reuse still.
 */
static void test_once_call_keys(void **state)
{
	struct coord_ps_op a[4] = { { .op = COORD_PS_ASSIGN_ADD },
				    { .op = COORD_PS_READ },
				    { .op = COORD_PS_SCATTER_ADD },
				    { .op = COORD_PS_ASSIGN } },
			   b[4], mine = { .op = COORD_PS_ASSIGN_ADD },
			   keyed = { .op = COORD_PS_ASSIGN, .sess = 9, .closure = 9, .seq = 9 };
	pthread_t th;

	(void)state;
	memcpy(b, a, sizeof(a));
	coord_ps_call_key(SESS, &mine, 1); /* this thread's slot, held while it lives */
	assert_int_equal(pthread_create(&th, NULL, call_keys_main, a), 0);
	pthread_join(th, NULL);
	assert_true(a[0].sess == SESS && a[0].seq == 1);
	assert_true(a[1].sess == 0 && a[1].seq == 0 && a[1].closure == 0); /* a read */
	assert_true(a[2].sess == SESS && a[2].seq == 2 && a[2].closure == a[0].closure);
	assert_true(a[3].seq == 1 && (uint32_t)a[3].closure == (uint32_t)a[0].closure);
	assert_int_equal((uint32_t)(a[3].closure >> 32), (uint32_t)(a[0].closure >> 32) + 1);
	assert_int_not_equal((uint32_t)mine.closure, (uint32_t)a[0].closure); /* another */
	coord_ps_call_key(SESS, &keyed, 1); /* keyed already: left alone */
	assert_true(keyed.sess == 9 && keyed.closure == 9 && keyed.seq == 9);
	coord_ps_call_key(0, b, 1); /* no session: no key */
	assert_true(b[0].seq == 0);
	assert_int_equal(pthread_create(&th, NULL, call_keys_main, b), 0);
	pthread_join(th, NULL);
	assert_int_equal((uint32_t)b[0].closure, (uint32_t)a[0].closure); /* the slot again */
	assert_int_equal((uint32_t)(b[0].closure >> 32), (uint32_t)(a[3].closure >> 32) + 1);
}

int main(void)
{
	const struct CMUnitTest tests[] = {
		cmocka_unit_test_setup_teardown(test_once_dup_answered_not_applied, fix_setup,
						fix_teardown),
		cmocka_unit_test_setup_teardown(test_once_later_closure_of_slot, fix_setup,
						fix_teardown),
		cmocka_unit_test_setup_teardown(test_once_other_update_applied, fix_setup,
						fix_teardown),
		cmocka_unit_test_setup_teardown(test_once_bounded, fix_setup_small, fix_teardown),
		cmocka_unit_test_setup_teardown(test_once_quarter_kept, fix_setup, fix_teardown),
		cmocka_unit_test_setup_teardown(test_once_concurrent_copies, fix_setup,
						fix_teardown),
		cmocka_unit_test(test_once_each_update_of_a_run),
		cmocka_unit_test(test_once_call_keys),
	};

	t_watchdog(120);
	return cmocka_run_group_tests_name("once", tests, NULL, NULL);
}
