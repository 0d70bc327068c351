// SPDX-License-Identifier: MIT
/*
 * runtime/core/cancel.c - completion, cancellation and the error rule (S3-S5): the
 * error slot (C4), the canceller (gen bump, drain, wait: C2, C5, C7), the
 * outstanding count (C1, C9) and the UNAVAILABLE report (C8).
 * Invariants: C1-C10 in coord_pvt.h, with its synchronization table (who
 * writes and reads each shared field of struct coord).
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/coord_pvt.h"

/* C1: closures outstanding, a sum read in the order C1 requires. */
uint64_t outstanding_total(struct coord *c)
{
	/* Acquire: pairs with the drops in outstanding_sub(): the closures
	 * counted out are final and their raises visible to the loads below
	 * (C1); join() reads their results after this. */
	uint64_t n = atomic_load_explicit(&c->outstanding, memory_order_acquire);

	for (unsigned i = 0; i < COORD_PSTASH_SLOTS; i++)
		/* Relaxed: C1: each raise that matters happened-before the
		 * drop acquired above, so coherence shows it here. */
		n += atomic_load_explicit(&c->pstash[i].added, memory_order_relaxed);
	return n;
}

void outstanding_sub(struct coord *c, uint64_t n)
{
	uint32_t w;

	if (!n)
		return;
	/* seq_cst: C1, release the final RemoteValues to join() and acquire
	 * the earlier drops for the sum below (acq_rel would do); seq_cst
	 * lets the wake skip its fence (E3 in futex.h). */
	atomic_fetch_sub_explicit(&c->outstanding, n, memory_order_seq_cst);
	/* seq_cst: E3, after the RMW above in the total order.  The sum is
	 * only worth reading when a joiner sleeps. */
	w = atomic_load_explicit(&c->idle.word, memory_order_seq_cst);
	if ((w & COORD_EC_WAITERS) && outstanding_total(c) == 0)
		ec_wake_if_waiters(&c->idle, w);
}

/* C9: take what @d finished and nobody took yet off `outstanding`.  Any
 * thread: the CAS hands each finished closure to exactly one settler. */
void fin_settle(struct coord_dispatcher *d)
{
	/* C9 (acquire), pairs with fin_add()'s release: what it counts is
	 * final, and outstanding_sub()'s seq_cst RMW below passes that on to
	 * join() (C1). */
	uint64_t t = atomic_load_explicit(&d->fin_done, memory_order_acquire);
	/* Relaxed: the CAS below checks it. */
	uint64_t k = atomic_load_explicit(&d->fin_taken, memory_order_relaxed);

	/* Relaxed CAS: it only decides who owns (k, t]; fin_taken never
	 * passes fin_done, and moves only forward. */
	while (k < t)
		if (atomic_compare_exchange_weak_explicit(
			    &d->fin_taken, &k, t, memory_order_relaxed, memory_order_relaxed)) {
			outstanding_sub(d->c, t - k);
			return;
		}
}

/* C9: settle every deferring dispatcher, so that `outstanding` counts no
 * closure that is final: the canceller after its wait, done() and join()
 * before they report a count (a dispatcher may be preempted between its
 * finish and its own settle). */
void fin_settle_all(struct coord *c)
{
	/* Every dispatcher: one that does not defer has nothing to settle
	 * (fin_done stays 0), and defer_fin is its own thread's to read. */
	for (unsigned i = 0; i < c->ndisp; i++)
		fin_settle(&c->disp[i]);
}

static void rcu_put_cb(struct rcu_head *head)
{
	struct coord_closure *cl = container_of(head, struct coord_closure, rcu);
	struct coord *c = cl->c; /* alive: coord_destroy() waits for us */

	coord_closure_put(cl);
	/* Release: pairs with the acquire in coord_destroy() after its
	 * urcu_bp_barrier(): this callback's uses of the closure and the pool
	 * happen-before their memory is freed, in a way TSan sees (liburcu's
	 * own ordering it does not). */
	atomic_fetch_sub_explicit(&c->rcu_puts, 1, memory_order_release);
}

/* Drop the runtime's reference of @cl after a grace period (call_rcu): a
 * transport may still resolve its id in a read-side section. */
static void rcu_put(struct coord *c, struct coord_closure *cl)
{
	/* Relaxed: counted before the callback can run (call_rcu orders it);
	 * read by coord_destroy() after the barrier only. */
	atomic_fetch_add_explicit(&c->rcu_puts, 1, memory_order_relaxed);
	urcu_bp_register_thread();
	urcu_bp_call_rcu(&cl->rcu, rcu_put_cb);
}

/* Make a queued closure CANCELLED and retire it.  Caller owns it (popped). */
void cancel_one(struct coord *c, struct coord_closure *cl)
{
	if (coord_closure_local(cl)) {
		/* Q2: a dispatcher's own closure: no handle, no reader, not the
		 * pool's; only the counts move.  One put back stale after a run
		 * (S11) may hold that run's result: drop it, for the next take. */
		coord_closure_drop_contents(cl);
		/* Relaxed: a statistic (B7). */
		atomic_fetch_add_explicit(&c->cancelled, 1, memory_order_relaxed);
		outstanding_sub(c, 1);
		return;
	}
	if (cl->res_cls != COORD_BUF_INLINE && cl->res_cls != CL_RES_SMALL)
		coord_buf_put(&c->bufs, cl->res, cl->res_cls);
	cl->res_cls = COORD_BUF_INLINE; /* no value, small (V5 in rv.c) or not */
	cl->res_dirty &= (uint8_t)~CL_SMALL_MASK;
	cl->res = cl->inline_res;
	cl->res_len = 0;
	coord_rv_set_final(cl, COORD_RV_CANCELLED);
	/* Relaxed: a statistic (B7). */
	atomic_fetch_add_explicit(&c->cancelled, 1, memory_order_relaxed);
	outstanding_sub(c, 1);
	/* The runtime's reference goes through epoch reclamation: a transport
	 * may still resolve this closure's id in a read-side section. */
	rcu_put(c, cl);
}

void coord_cancel_queued(struct coord *c, struct coord_closure *cl)
{
	cancel_one(c, cl);
}

/* An error outcome in @cl's result fields: the message (as its result
 * bytes, V2: read once the state is final), code, cause and worker. */
void closure_set_err(struct coord_closure *cl, int code, int cause, int worker, const char *msg)
{
	size_t len = strlen(msg) + 1;
	char *b = coord_closure_result_buf(cl, len);

	if (b)
		memcpy(b, msg, len);
	cl->res_dirty |= CL_DIRTY_RES;
	cl->err_code = code;
	cl->err_cause = cause;
	cl->err_worker = worker;
}

void coord_fail_queued(struct coord *c, struct coord_closure *cl, int code, int worker,
		       const char *msg)
{
	closure_set_err(cl, code, 0, worker, msg);
	record_error(c, worker, cl, code, 0, msg); /* S3 */
	coord_rv_set_final(cl, COORD_RV_READY | RV_READY_ERR);
	outstanding_sub(c, 1);
	/* Through epoch reclamation, as cancel_one(): a put-back closure's id
	 * may still be resolved by a transport. */
	rcu_put(c, cl);
}

void record_error(struct coord *c, int worker, struct coord_closure *cl, int code, int cause,
		  const char *msg)
{
	for (;;) {
		/* Acquire: see the generation bumped before a canceller's EMPTY
		 * (C4), for the check below. */
		uint32_t e = atomic_load_explicit(&c->err_state, memory_order_acquire);

		if (e == ERR_SET)
			return; /* the first error wins (S3) */
		if (e != ERR_EMPTY) {
			cpu_relax(); /* WRITING or TAKEN: a few stores away (C4) */
			continue;
		}
		/* C4: acquire on success, so our writes below cannot move above
		 * the claim. */
		if (atomic_compare_exchange_weak_explicit(&c->err_state, &e, ERR_WRITING,
							  memory_order_acquire,
							  memory_order_relaxed))
			break;
	}
	/* C7: a closure of a generation whose error was already taken keeps
	 * its own outcome, but its error is not the coordinator's.  Relaxed:
	 * the claim above synchronized with the canceller's EMPTY, which it
	 * stored after the bump. */
	if (cl->gen < atomic_load_explicit(&c->gen, memory_order_relaxed)) {
		/* Release: nothing written; hand the slot back. */
		atomic_store_explicit(&c->err_state, ERR_EMPTY, memory_order_release);
		return;
	}
	c->err.code = code;
	c->err.cause = cause;
	c->err.worker = worker;
	c->err.closure = cl->id;
	snprintf(c->err.msg, sizeof(c->err.msg), "%s", msg ? msg : coord_strerror(code));
	/* C4 (release): publishes the record to the canceller's acquire CAS. */
	atomic_store_explicit(&c->err_state, ERR_SET, memory_order_release);
	coord_ec_signal(&c->idle);
}

static uint64_t inflight_sum(struct coord *c)
{
	uint64_t s = 0;

	for (unsigned i = 0; i < c->ndisp; i++)
		/* D1 (seq_cst): after the gen bump in gen_bump(); see C2. */
		s += atomic_load_explicit(&c->disp[i].inflight, memory_order_seq_cst);
	return s;
}

uint64_t gen_bump(struct coord *c)
{
	/* D1 (seq_cst): see C2.  New closures get the new generation; older
	 * ones are cancelled. */
	return atomic_fetch_add_explicit(&c->gen, 1, memory_order_seq_cst) + 1;
}

/* Pop the whole queue: cancel what is older than @g, queue the rest again. */
static void drain_older(struct coord *c, uint64_t g)
{
	struct coord_closure *buf[64], *keep = NULL, *keep_last = NULL;
	/* A bound for the drain, so a producer that never stops cannot keep
	 * us here; anything missed is cancelled by C5. */
	uint64_t budget = outstanding_total(c) + 64;
	unsigned n, spins = 0;
	int64_t nkeep = 0;

	while (budget > 0) {
		n = queue_pop(c, buf, 64, true, NULL);
		if (n == 0) {
			/* Empty, or a producer claimed a ring slot and has not
			 * published it yet: it will, within a few instructions.
			 * Only the main queue: hinted closures are drained below,
			 * never popped here (B4; waiting on them spun ~5 ms). */
			if (coord_main_queue_empty(c) || ++spins > 100000)
				break;
			coord_spin_pause(spins);
			continue;
		}
		budget = budget > n ? budget - n : 0;
		for (unsigned i = 0; i < n; i++) {
			if (buf[i]->gen < g) {
				cancel_one(c, buf[i]);
				continue;
			}
			buf[i]->next = keep; /* a new closure: queue it again */
			keep = buf[i];
			if (!keep_last)
				keep_last = buf[i];
			nkeep++;
		}
	}
	if (keep) {
		ov_push(c, keep, keep_last, nkeep);
		coord_ec_signal_sc(&c->not_empty);
	}
	coord_hq_drain(c, g); /* B4: hinted closures, which never enter the ring */
	coord_ec_signal(&c->not_full);
}

/*
 * cancel_older() - S3: cancel every queued closure of a generation older
 * than @g, then wait until no worker has one in flight.  Several threads may
 * run this at once (two errors taken back to back); each pop is exclusive.
 */
void cancel_older(struct coord *c, uint64_t g)
{
	uint64_t until = coord_now_ns() + c->opts.spin_ns;

	if (c->tp->cancel)
		c->tp->cancel(c); /* S3: workers drop what they have not started */
	drain_older(c, g);
	for (unsigned i = 1;; i++) {
		uint32_t v = coord_ec_prepare(&c->drained);

		if (inflight_sum(c) == 0)
			break;
		/* Spin as other waits do (opts.spin_ns), then sleep: a bound in
		 * time, not pauses, whatever a pause costs (sanitizers, an
		 * emulated CPU). */
		if (i < 1000 && ((i & 15) || coord_now_ns() < until)) {
			coord_spin_pause(i);
			continue;
		}
		coord_ec_wait(&c->drained, v, COORD_FOREVER);
	}
	fin_settle_all(c); /* C9: what finished is off `outstanding` now */
	/* DF3: consumers that in-flight completions queued with a generation
	 * they read before our bump are in the queue now (each completion came
	 * before its dispatcher's inflight release): cancel them too.
	 * Relaxed: set once, before the first consumer is counted. */
	if (unlikely(atomic_load_explicit(&c->dataflow, memory_order_relaxed)) && !queue_empty(c))
		drain_older(c, g);
}

/*
 * take_error() - S3-S5: if an error is recorded, become the canceller,
 * return it once and clear it.  Returns 0 when there is none to return.
 */
int take_error(struct coord *c, struct coord_error *err)
{
	for (;;) {
		/* Acquire: pairs with the release stores of err_state (C4). */
		uint32_t s = atomic_load_explicit(&c->err_state, memory_order_acquire);
		uint64_t g;
		int code, cause;

		if (s == ERR_EMPTY)
			return 0;
		if (s == ERR_SET) {
			/* C4: acquire, to read the record released by SET. */
			if (!atomic_compare_exchange_strong_explicit(&c->err_state, &s, ERR_TAKEN,
								     memory_order_acquire,
								     memory_order_relaxed))
				continue;
			code = c->err.code;
			cause = c->err.cause;
			if (err)
				*err = c->err;
			g = gen_bump(c);
			/* C4 (release): our reads of the record are done, and the
			 * bump is visible to record_error()'s check (C7).  The
			 * slot is free again before we drain, so an error of the
			 * new generation is kept for the next caller. */
			atomic_store_explicit(&c->err_state, ERR_EMPTY, memory_order_release);
			coord_ec_signal(&c->idle);
			cancel_older(c, g);
			if (code == COORD_EUNAVAILABLE && cause > 0 &&
			    c->opts.restart_exit_code >= 0) {
				/* S12: nothing runs now; let a supervisor restart us. */
				coord_log(COORD_LOG_ERROR,
					  "ps task %d failed: %s; exiting with the restart code %d",
					  cause - 1, c->err.msg, c->opts.restart_exit_code);
				exit(c->opts.restart_exit_code);
			}
			return code;
		}
		/* WRITING or TAKEN by another thread: a few stores away (C4). */
		cpu_relax();
	}
}

/* Cancel everything queued: nothing will ever run it (C8). */
void drain_cancel(struct coord *c)
{
	struct coord_closure *buf[64];
	unsigned n;

	while ((n = queue_pop(c, buf, 64, true, NULL)) > 0)
		for (unsigned i = 0; i < n; i++)
			cancel_one(c, buf[i]);
	coord_hq_drain(c, UINT64_MAX);
	coord_ec_signal(&c->not_full); /* schedule() blocked on a full ring */
}

void coord_report_unavailable(struct coord *c, int worker, const char *msg)
{
	struct coord_closure none = { .id = COORD_NO_CLOSURE };

	/* seq_cst: C8 (and schedule_admit() refuses from now on). */
	atomic_store_explicit(&c->unavailable, true, memory_order_seq_cst);
	/* Relaxed: a generation no older than current, so C7 keeps it. */
	none.gen = atomic_load_explicit(&c->gen, memory_order_relaxed);
	record_error(c, worker, &none, COORD_EUNAVAILABLE, 0, msg);
	/* Nothing will ever run what is queued: cancel it now, so fetches
	 * return instead of waiting for ever.  (No wait for in-flight ones:
	 * with no worker there are none.) */
	drain_cancel(c);
}
