// SPDX-License-Identifier: MIT
/*
 * tests/helpers_part.c - the bookkeeping of a partition run (helpers.h
 * "partition runs"), shared by tests/test_pspart.c (tcp, network
 * namespaces) and tests/rdma/test_rdma_giveup.c (rdma, the rig's two
 * guests): batches of assign_add(+1) closures, what succeeded and failed,
 * and each cut's delays (its first failure, the first success after its
 * heal); and one coordinator assign_add on its own thread (t_one_add_main,
 * also tests/test_psstop.c's).
 */
#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>
#include <errno.h>
#include <stdio.h>

#include "helpers.h"

void t_part_batch(struct coord *c, coord_var_t var, unsigned n, struct t_part_run *r)
{
	struct t_var_args a = { .var = var, .off = 0, .n = 1, .val = 1.0f };
	static struct coord_rv *rv[1024];
	struct coord_error err;
	unsigned m = 0;

	if (n > 1024)
		n = 1024;
	for (; m < n; m++)
		if (coord_schedule(c, t_fn(c, "var_add"), &a, sizeof(a), &rv[m], &err) != 0) {
			if (coord_join(c, &err) == 0) /* the error is taken: schedule again */
				t_sleep_ns(1000000);
			break;
		}
	for (unsigned i = 0; i < m; i++) {
		int e = coord_rv_fetch_timeout(rv[i], 60000000000ll, NULL, NULL, &err);
		uint64_t now = t_now_ns();

		assert_int_not_equal(e, -ETIMEDOUT); /* every closure ends */
		if (e == 0) {
			r->ok++;
			if (r->heal_ns && !r->ok_ns)
				r->ok_ns = now;
		} else {
			r->failed++;
			if (r->cut_ns && !r->heal_ns && !r->err_ns)
				r->err_ns = now;
		}
		coord_rv_put(rv[i]);
	}
	if (coord_join(c, &err) != 0) { /* take any error (S3), so the next batch runs */
		r->joins++;
		/* a ps failure past the threshold: UNAVAILABLE, typed (the ps task) */
		if (err.code != COORD_EUNAVAILABLE || err.cause != 1) {
			r->other_joins++;
			snprintf(r->other, sizeof(r->other), "%d/%d: %.200s", err.code, err.cause,
				 err.msg);
		}
	}
}

void t_part_cut_done(struct t_part_run *r)
{
	if (r->err_ns) {
		r->noticed++;
		if (r->err_ns - r->cut_ns > r->err_max)
			r->err_max = r->err_ns - r->cut_ns;
	}
	if (r->ok_ns) {
		r->resumed++;
		if (r->ok_ns - r->heal_ns > r->ok_max)
			r->ok_max = r->ok_ns - r->heal_ns;
	}
	r->cut_ns = r->heal_ns = r->err_ns = r->ok_ns = 0;
}

void *t_one_add_main(void *arg)
{
	struct t_one_add *q = arg;
	float one = 1.0f;
	struct coord_var_op op = {
		.op = COORD_VAR_ASSIGN_ADD, .var = q->var, .off = 0, .n = 1, .src = &one
	};
	struct coord_error err = { 0 };
	uint64_t t0 = t_now_ns();

	q->r = coord_var_batch(q->c, &op, 1, &err);
	q->ns = t_now_ns() - t0;
	snprintf(q->msg, sizeof(q->msg), "%s", err.msg);
	return NULL;
}
