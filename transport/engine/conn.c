// SPDX-License-Identifier: MIT
/*
 * transport/engine/conn.c - a coordinator's connection to a worker, the part the
 * tcp and rdma transports share (see conn.h).
 *
 * Synchronization: a connection belongs to its loop's tok holder (conn.h,
 * engine.h E1); it reads the coordinator's generation (acquire: struct
 * coord_view, dispatch.h) and bumps its worker's executed count (relaxed,
 * a metric).
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "transport/engine/conn.h"

/*
 * Event loops by default: one per 4 CPUs this process may run on, at least
 * 1 and at most 4.  A loop is a thread that sleeps and is woken; the
 * caller's threads, the loops and (often) workers share the CPUs, and a
 * cross-CPU wake-up costs 19-40 us of CPU on these VMs.  Measured on 2
 * CPUs (bench_tcp, 2 workers, 256 in flight, alternating runs of 5
 * repeats): one loop 1.9-2.3 M closures/s, two loops 0.39-0.70 M/s, with
 * the workers' CPU per closure 0.16-0.19 against 0.99-1.13 us (frames
 * carried fewer closures).  One loop sustains ~2.5 M/s here, so more are
 * for machines with CPUs to spare; that range is not measured here.
 */
static unsigned default_loops(void)
{
	cpu_set_t set;
	int n = 0;

	if (sched_getaffinity(0, sizeof(set), &set) == 0)
		n = CPU_COUNT(&set);
	n /= 4;
	return n < 1 ? 1 : n > 4 ? 4 : (unsigned)n;
}

unsigned coord_conn_ndispatchers(const struct coord *c)
{
	const struct coord_view *v = coord_cview(c);
	unsigned n = v->opts.tcp_loops ? v->opts.tcp_loops : default_loops();

	return n < v->nworkers ? n : v->nworkers;
}

int coord_conn_init(struct coord_conn *k, struct coord_worker *w, unsigned window, size_t ocap)
{
	k->w = w;
	k->window = window;
	k->ocap = ocap;
	k->obuf = malloc(ocap);
	k->slots = calloc(window, sizeof(*k->slots));
	k->seq = calloc(window, sizeof(*k->seq));
	k->sent_ns = calloc(window, sizeof(*k->sent_ns));
	k->freel = calloc(window, sizeof(*k->freel));
	k->run = calloc(window, sizeof(*k->run));
	if (!k->obuf || !k->slots || !k->seq || !k->sent_ns || !k->freel || !k->run)
		return -ENOMEM;
	for (unsigned s = 0; s < window; s++)
		k->freel[s] = window - 1 - s;
	k->nfree = window;
	coord_wire_writer_init(&k->ow, k->obuf, k->ocap);
	k->up = true;
	k->idle = true;
	k->last_rx_ns = coord_now_ns();
	return 0;
}

void coord_conn_fini(struct coord_conn *k)
{
	free(k->obuf);
	free(k->slots);
	free(k->seq);
	free(k->sent_ns);
	free(k->freel);
	free(k->run);
	k->run = NULL;
	k->obuf = NULL;
	k->slots = NULL;
	k->seq = NULL;
	k->sent_ns = NULL;
	k->freel = NULL;
}

/* Room for @need more bytes and a frame header in @k's output: grow it
 * (slow path); 0 or -ENOMEM. */
static int out_room(struct coord_conn *k, size_t need)
{
	size_t cap;
	uint8_t *b;

	if (k->ow.cap - k->ow.len >= need + COORD_WIRE_HDR)
		return 0;
	cap = (k->ow.len + need + COORD_WIRE_HDR) * 2;
	b = realloc(k->obuf, cap);
	if (!b)
		return -ENOMEM;
	k->obuf = b;
	k->ocap = cap;
	k->ow.buf = b;
	k->ow.cap = cap;
	return 0;
}

int coord_conn_put_req(struct coord_conn *k, struct coord_closure *cl, uint64_t now,
		       uint32_t max_frame, uint32_t *slotp)
{
	struct coord_wire_req q = { .attempt = cl->attempt,
				    .fn = cl->fn,
				    .len = cl->args_len,
				    .args = cl->args,
				    .npw = cl->npw };
	uint32_t slot = k->freel[--k->nfree];
	bool begin;
	size_t need;

	q.closure_id = (uint64_t)(k->seq[slot] + 1) << 32 | slot;
	q.rv_id = cl->id;	   /* B8: what the function sees is coord_rv_id() */
	q.gen = (uint32_t)cl->gen; /* S3: a CANCEL of a later one drops it unstarted */
	for (unsigned i = 0; i < cl->npw; i++) {
		q.pw[i].uid = cl->pw[i]->uid;
		q.pw[i].creator = cl->pw[i]->creator;
		q.pw[i].len = cl->pw[i]->len;
		q.pw[i].args = cl->pw[i]->args;
	}
	if (unlikely(cl->res_dirty & CL_HAS_IN)) /* B1: the inputs' values ride along */
		coord_wire_req_set_inputs(&q, cl->nin, coord_closure_input, cl);
	need = coord_wire_req_size(&q);
	if (need + COORD_WIRE_HDR > max_frame) {
		k->freel[k->nfree++] = slot;
		return -EMSGSIZE;
	}
	/* Close the open frame if this request would push it past the limit. */
	if (k->ow.frame != SIZE_MAX && k->ow.len - k->ow.frame + need > max_frame)
		coord_wire_end(&k->ow);
	if (unlikely(out_room(k, need) < 0)) {
		k->freel[k->nfree++] = slot;
		return -ENOMEM;
	}
	begin = k->ow.frame == SIZE_MAX;
	if (begin)
		coord_wire_begin(&k->ow, COORD_WIRE_REQ);
	if (coord_wire_put_req(&k->ow, &q) < 0)
		coord_die("wire encoder", ENOSPC); /* room was made above */
	k->seq[slot]++;
	k->slots[slot] = cl;
	k->sent_ns[slot] = now;
	*slotp = slot;
	return begin;
}

/* One PW_FREE frame of @n uids in @k's output, after what is there. */
static int put_pw_free(struct coord_conn *k, const uint64_t *uids, unsigned n)
{
	if (k->ow.frame != SIZE_MAX)
		coord_wire_end(&k->ow); /* the open REQ frame goes first */
	if (out_room(k, (size_t)n * 8) < 0)
		return -ENOMEM;
	coord_wire_begin(&k->ow, COORD_WIRE_PW_FREE);
	for (unsigned i = 0; i < n; i++)
		coord_wire_put_uid(&k->ow, uids[i]);
	coord_wire_end(&k->ow);
	return 0;
}

void coord_conn_pw_release(struct coord_dispatcher *d, struct coord_conn *(*conn)(void *, unsigned),
			   void *ctx, unsigned nconns, void (*flush)(struct coord_conn *))
{
	uint64_t uids[COORD_CONN_PW_BATCH];
	unsigned n;

	while ((n = coord_dispatch_pw_take(d, uids, COORD_CONN_PW_BATCH)) > 0)
		for (unsigned i = 0; i < nconns; i++) {
			struct coord_conn *k = conn(ctx, i);

			/* Down: nothing to free there (runtime/pw.c P2).  Out of
			 * memory: the worker keeps them until its connection
			 * ends, which frees them (logged). */
			if (!k->up)
				continue;
			if (put_pw_free(k, uids, n) < 0) {
				coord_log(COORD_LOG_WARN,
					  "worker %d: no memory to release %u per-worker "
					  "resources; they stay until it disconnects",
					  k->w->index, n);
				continue;
			}
			flush(k);
		}
}

void coord_conn_cancel(struct coord_dispatcher *d, uint32_t *sent,
		       struct coord_conn *(*conn)(void *, unsigned), void *ctx, unsigned nconns,
		       void (*flush)(struct coord_conn *))
{
	/* Acquire: pairs with the canceller's bump (seq_cst, cancel.c D1);
	 * a stale read only delays the CANCEL to the next round. */
	uint32_t g = (uint32_t)atomic_load_explicit(&coord_view(d->c)->gen, memory_order_acquire);

	if (g == *sent)
		return;
	*sent = g;
	for (unsigned i = 0; i < nconns; i++) {
		struct coord_conn *k = conn(ctx, i);

		if (!k->up)
			continue; /* its closures were put back (and cancelled) */
		if (k->ow.frame != SIZE_MAX)
			coord_wire_end(&k->ow); /* the open REQ frame goes first */
		if (out_room(k, 4) < 0 || coord_wire_put_cancel(&k->ow, g) < 0) {
			coord_log(COORD_LOG_WARN,
				  "worker %d: no memory for a CANCEL; what it has not started "
				  "runs",
				  k->w->index);
			continue;
		}
		flush(k);
	}
}

unsigned coord_conn_put_back_all(struct coord_conn *k, struct coord_dispatcher *d)
{
	struct coord_closure *back[256];
	unsigned n = 0, total = 0;

	for (unsigned s = 0; s < k->window; s++) {
		if (!k->slots[s])
			continue;
		back[n++] = k->slots[s];
		k->slots[s] = NULL;
		k->freel[k->nfree++] = s;
		total++;
		if (n == ARRAY_SIZE(back)) {
			coord_dispatch_put_back(d, back, n);
			n = 0;
		}
	}
	if (n)
		coord_dispatch_put_back(d, back, n);
	return total;
}

struct coord_closure *coord_conn_res_claim(struct coord_conn *k, const struct coord_wire_res *r,
					   uint32_t *slotp, int *rc)
{
	uint32_t slot = (uint32_t)r->closure_id, seq = (uint32_t)(r->closure_id >> 32);
	struct coord_closure *cl;

	if (slot >= k->window || !k->slots[slot] || k->seq[slot] != seq) {
		*rc = -EBADSLT; /* a result for nothing we sent */
		return NULL;
	}
	cl = k->slots[slot];
	if (r->attempt != cl->attempt || r->code > 0) {
		*rc = -EPROTO;
		return NULL;
	}
	k->slots[slot] = NULL;
	k->freel[k->nfree++] = slot;
	*slotp = slot;
	return cl;
}

bool coord_conn_res_finish(struct coord_conn *k, struct coord_dispatcher *d,
			   struct coord_closure *cl, const struct coord_wire_res *r)
{
	if (unlikely(coord_wire_returned(r))) {
		/* Take-back (srv_take.c T2): never started, the worker gave it
		 * back: to the queue's front as it was (attempt and ids
		 * unchanged, not a put-back), for whichever worker frees first
		 * (place.h PL7); one of a cancelled generation is cancelled
		 * there (S3). */
		coord_dispatch_give_back(d, &cl, 1);
		return false;
	}
	if (unlikely(r->code == COORD_ECANCELLED && r->cause == COORD_ECANCELLED)) {
		/* S3: not started; a CANCEL dropped it (wire.h).  Put back: a
		 * closure of an older generation is cancelled there, and one
		 * of the current one (none expected) runs again, never twice. */
		coord_dispatch_put_back(d, &cl, 1);
		return false;
	}
	if (r->code == 0) {
		void *b = coord_closure_result_buf(cl, r->len);

		if (b || r->len == 0) {
			if (r->len)
				memcpy(b, r->data, r->len);
			coord_dispatch_complete(d, cl, k->w->index, 0, 0, NULL);
		} else {
			coord_dispatch_complete(d, cl, k->w->index, COORD_ENOMEM, 0,
						"no memory for the result");
		}
	} else if (coord_dispatch_ps_retry(d, cl, r->code, r->cause)) {
		coord_dispatch_put_back(d, &cl, 1); /* S11: transient */
		return false;
	} else {
		char msg[COORD_ERRMSG_LEN];
		size_t n = r->len < sizeof(msg) - 1 ? r->len : sizeof(msg) - 1;

		memcpy(msg, r->data, n);
		msg[n] = 0;
		coord_dispatch_complete(d, cl, k->w->index, r->code, r->cause, n ? msg : NULL);
	}
	/* Relaxed: a statistic. */
	atomic_fetch_add_explicit(&k->w->executed, 1, memory_order_relaxed);
	return true;
}

uint64_t coord_conn_check_due(const struct coord_opts *o, uint64_t now, uint64_t *next_check_ns)
{
	uint64_t hb = (uint64_t)o->heartbeat_ms * 1000000ull;
	uint64_t dl = (uint64_t)o->closure_timeout_ms * 1000000ull, period;

	if (!hb && !dl) {
		*next_check_ns = 0;
		return 0;
	}
	if (now < *next_check_ns)
		return 0;
	period = hb ? hb / 8 : dl / 4;
	if (dl && dl / 4 < period)
		period = dl / 4;
	if (period < 2000000ull)
		period = 2000000ull;
	*next_check_ns = now + period;
	return period;
}

void coord_conn_check(struct coord_conn *k, const struct coord_opts *o, uint64_t now, uint64_t seen,
		      uint64_t period, const struct coord_conn_act *act)
{
	uint64_t hb = (uint64_t)o->heartbeat_ms * 1000000ull;
	uint64_t dl = (uint64_t)o->closure_timeout_ms * 1000000ull;
	uint64_t silent = seen > k->last_rx_ns ? seen - k->last_rx_ns : 0;
	uint64_t asked = k->ping_ns && seen > k->ping_ns ? seen - k->ping_ns : 0;
	char why[160];

	if (!k->up)
		return;
	if (hb && k->ping_ns && silent + period >= hb * (uint64_t)o->heartbeat_misses &&
	    asked + 2 * period >= hb * (uint64_t)(o->heartbeat_misses - 1)) {
		snprintf(why, sizeof(why),
			 "no heartbeat for %llu ms (a PING unanswered for %llu ms)",
			 (unsigned long long)(silent / 1000000),
			 (unsigned long long)(asked / 1000000));
		act->fail(k, why);
		return;
	}
	for (unsigned s = 0; dl && s < k->window; s++)
		if (k->slots[s] && seen > k->sent_ns[s] && seen - k->sent_ns[s] > dl) {
			snprintf(why, sizeof(why),
				 "closure %llu ran past its deadline of %lld ms (B6)",
				 (unsigned long long)k->slots[s]->id,
				 (long long)o->closure_timeout_ms);
			act->fail(k, why);
			return;
		}
	if (hb && silent >= hb && !k->ping_ns) {
		k->ping_ns = now;
		act->ping(k, (uint64_t)o->heartbeat_ms);
	}
}
