// SPDX-License-Identifier: MIT
/*
 * transport/engine/engine.c - the connection engine's connections (engine.h):
 * set-up and tear-down, the greeting, results and failure, liveness,
 * re-admission after recovery, and the coord_tp_ops entries.  The loop
 * itself (rounds, sleeps, takes, corking) is transport/engine/loop.c.
 *
 * Failure.  EOF, a broken link, a bad frame, heartbeat_misses heartbeat
 * intervals of silence (a PING goes out after one interval; the worker
 * answers, or keeps a busy connection alive with unsolicited PONGs,
 * transport/server/srv_proto.h P5), or a closure in flight past
 * opts.closure_timeout_ms (B6) fail the connection (coord_eng_fail()): the
 * closures in flight on it go back on the queue at once (attempt + 1, S2,
 * E2), the backend shuts it down (its worker sees that), its worker is
 * handed to the recovery thread (coord_worker_lost()), and the others go
 * on (B2).  The recovery thread dials it again (ops->dial(), again) and
 * queues it on the loop's admission list; the loop installs it at the
 * start of a round once the backend says the old one is quiet (admit()).
 * When every worker is past the recovery limit the coordinator reports
 * UNAVAILABLE (runtime/core/recovery.c).
 *
 * Synchronization: E1 (engine.h): a loop's connections belong to the tok's
 * holder.  The shared fields, who writes them, who reads them, and what
 * orders the two:
 *   field            written by (how)               read by (how)           order
 *   l->tok           the holder (acquire CAS to     every would-be driver   acquire / release:
 *                    take, release exchange to      (loop.c)                one holder's rounds
 *                    give back; TOK_WANT: relaxed)                          before the next's
 *   l->armed         the loop's thread (relaxed,    coord_eng_wake()        coord_loop_sleep()'s
 *                    before it sleeps and after)    (acq_rel exchange)      RMW and fence
 *   admit,           a reconnect attempt (recovery  the loop (under         admit_lock
 *   admit_next       thread) and the loop putting   admit_lock)
 *                    one back, under admit_lock
 *   admit_pending    the same, after the list       the loop (relaxed       release / acquire:
 *                    (release)                      look, acquire xchg)     the dialled connection
 *   up, idle,        the loops (relaxed)            loops, rdma.c's         none: counters and
 *   rt_hint                                         drivers (relaxed)       hints
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "runtime/ps/ps.h"
#include "transport/engine/engine.h"
#include "transport/engine/loop.h"

/* ---- the greeting ---------------------------------------------------------------- */

/* The function table (our ids, by name: the worker maps them), where the
 * ps tasks are and the ps options the workers follow (PS_OPTS, PS_TABLE:
 * runtime/ps/ps.h), and a PING carrying our heartbeat
 * interval (so the worker keeps a busy connection alive). */
static int hello(const struct coord_view *c, uint8_t **out, size_t *len)
{
	struct coord_wire_writer fw;
	size_t cap = 64 + 4 * COORD_WIRE_HDR + 16;

	for (uint32_t i = 0; i < c->reg->n; i++)
		cap += 6 + strlen(c->reg->fns[i].name);
	cap += coord_psc_table_len(c->ps);
	*out = malloc(cap);
	if (!*out)
		return -ENOMEM;
	coord_wire_writer_init(&fw, *out, cap);
	coord_wire_begin(&fw, COORD_WIRE_FN_TABLE);
	for (uint32_t i = 0; i < c->reg->n; i++)
		coord_wire_put_fn(&fw, i, c->reg->fns[i].name);
	coord_wire_end(&fw);
	coord_psc_put_table(&fw, c->ps); /* PS_OPTS, PS_TABLE */
	if (c->opts.heartbeat_ms > 0)
		coord_wire_put_ping(&fw, COORD_WIRE_PING, (uint64_t)c->opts.heartbeat_ms);
	/* place.h PL7: with another worker to run them, take closures back
	 * from one that runs long (srv_take.c T5). */
	if (c->nworkers >= 2)
		coord_wire_put_ping(&fw, COORD_WIRE_PING, COORD_WIRE_PING_TAKE_BACK);
	*len = fw.len;
	return 0;
}

int coord_eng_greet(struct coord_conn *k, const struct coord_frame_io *io, struct coord_error *err)
{
	struct coord_eng *e = k->loop->e;
	const struct coord_view *c = coord_cview(e->c);
	uint8_t *fb;
	size_t len;
	int r;

	r = coord_handshake_client_io(io, &e->key, COORD_ROLE_COORDINATOR, COORD_ROLE_WORKER,
				      (uint32_t)k->w->index, c->opts.connect_timeout_ms, k->peer,
				      err);
	if (r < 0)
		return r;
	if (hello(c, &fb, &len) < 0)
		return coord_seterr(err, COORD_ENOMEM, "no memory");
	r = io->write(io->ctx, fb, len);
	free(fb);
	if (r < 0)
		return coord_seterr(err, r, "%s: cannot send the function table: %s", k->peer,
				    strerror(-r));
	return 0;
}

/* ---- failure and results --------------------------------------------------------- */

void coord_eng_fail(struct coord_conn *k, int code, const char *why)
{
	struct coord_eloop *l = k->loop;
	char msg[COORD_ERRMSG_LEN];
	unsigned total;

	if (!k->up)
		return;
	k->up = false;
	coord_place_down(&l->place, k);
	total = coord_conn_put_back_all(k, l->d); /* E2 */
	l->inflight -= total;
	l->e->ops->down(k, code, why);
	/* Relaxed: a count of live connections (logs). */
	atomic_fetch_sub_explicit(&l->e->up, 1, memory_order_relaxed);
	snprintf(msg, sizeof(msg), "%s (%s, %s); %u closures put back", why, k->peer,
		 l->e->ops->name, total);
	/* S10: the recovery thread brings it back, or drops it and, when none
	 * is left, reports UNAVAILABLE (runtime/core/recovery.c). */
	coord_worker_lost(l->e->c, k->w, msg);
}

void coord_eng_bad(struct coord_conn *k, int r)
{
	char why[160];

	if (r == -EPIPE) {
		coord_eng_fail(k, 0, "connection closed by the worker");
		return;
	}
	snprintf(why, sizeof(why), "bad frame from the worker (%s)",
		 r == -EBADSLT ? "a result for no closure sent" : strerror(-r));
	coord_eng_fail(k, r, why);
}

/*
 * A sample of the round trip, one a frame (rdma.c D2's waiters use it):
 * from the send to the result.  One whose function ran at least as long
 * as the rest (@run, the worker's report, wire.h) counts as at most 2 ms,
 * the others up to 10 ms: a waiter spins twice this average, which must
 * outlast the wake-ups that slow short closures on a loaded host (round
 * trips of 5-7 ms) but not keep a CPU spinning through long functions
 * (W1, test_w1_long_waits_sleep: 30 ms closures over rig.sh pair's wire,
 * 12 ms a round trip, took a fifth of a CPU with a 10 ms bound for all).
 */
static void rt_sample(struct coord_eloop *l, const struct coord_conn *k, uint32_t slot,
		      uint32_t run)
{
	uint64_t ns;
	bool tp = false; /* the transport's part is the most of it */

	if (k->last_rx_ns <= k->sent_ns[slot])
		return;
	ns = k->last_rx_ns - k->sent_ns[slot];
	tp = run != UINT32_MAX && 2 * (uint64_t)run < ns;
	/* over about 8 frames */
	l->rt_ns = coord_spin_avg(l->rt_ns, ns, tp ? 2500000 : 500000);
	/* Relaxed: a hint for waiters' spin. */
	atomic_store_explicit(&l->e->rt_hint, l->rt_ns, memory_order_relaxed);
}

static int on_res_frame(struct coord_conn *k, const struct coord_wire_hdr *h, const uint8_t *p)
{
	struct coord_eloop *l = k->loop;
	struct coord_wire_iter it;
	struct coord_wire_res r;
	bool sampled = false;
	uint32_t slot;
	int rc;

	coord_wire_iter_init(&it, h, p);
	/* One RES frame answers a REQ frame, or several do (an early flush,
	 * srv_proto.c): the count only runs low, uncorking early, never late. */
	if (k->reqs_out)
		k->reqs_out--;
	while ((rc = coord_wire_next_res(&it, &r)) == 1) {
		struct coord_closure *cl = coord_conn_res_claim(k, &r, &slot, &rc);
		bool returned = coord_wire_returned(&r);

		if (!cl)
			return rc;
		if (!sampled && !returned)
			rt_sample(l, k, slot, coord_wire_run_ns(&r));
		sampled |= !returned;
		coord_place_result(&l->place, k, cl->fn, slot, coord_wire_run_ns(&r), returned);
		if (!coord_conn_res_finish(k, l->d, cl, &r)) {
			l->inflight--; /* put back (S3, S11) */
			continue;
		}
		coord_eng_done(l, cl);
	}
	/* Everything sent is answered: nothing can hold the output back. */
	if (k->window - k->nfree == k->ow_cl)
		k->reqs_out = 0;
	return rc;
}

bool coord_eng_frame(struct coord_conn *k, const struct coord_wire_hdr *h, const uint8_t *payload)
{
	int r = 0;

	if (h->type == COORD_WIRE_RES) {
		r = on_res_frame(k, h, payload);
	} else if (h->type == COORD_WIRE_ERROR) {
		int32_t code;
		const char *m = "";
		uint16_t len = 0;
		char why[200];

		coord_wire_get_error(h, payload, &code, &m, &len);
		snprintf(why, sizeof(why), "the worker closed: %.*s", (int)len, m);
		coord_eng_fail(k, 0, why);
		return false;
	} else if (h->type != COORD_WIRE_PONG) {
		r = -EPROTO;
	}
	if (r < 0)
		coord_eng_bad(k, r);
	return r >= 0;
}

/* ---- liveness -------------------------------------------------------------------- */

/* Append a PING (token: our heartbeat interval) to @k's output; it goes
 * out at once, never corked. */
static void act_ping(struct coord_conn *k, uint64_t token)
{
	if (k->ow.frame != SIZE_MAX)
		coord_wire_end(&k->ow);
	if (k->ow.cap - k->ow.len < COORD_WIRE_HDR + 8)
		return; /* output full: traffic is flowing anyway */
	coord_wire_put_ping(&k->ow, COORD_WIRE_PING, token);
	k->urgent = true;
	coord_eng_flush(k);
}

static void act_fail(struct coord_conn *k, const char *why)
{
	coord_eng_fail(k, 0, why);
}

static const struct coord_conn_act conn_act = { .fail = act_fail, .ping = act_ping };

uint64_t coord_eng_check(struct coord_eloop *l, uint64_t now)
{
	const struct coord_opts *o = &coord_cview(l->e->c)->opts;
	uint64_t period = coord_conn_check_due(o, now, &l->next_check_ns);

	for (unsigned i = 0; period && i < l->place.nconns; i++)
		coord_conn_check(l->place.conns[i], o, now, l->read_ns, period, &conn_act);
	return l->next_check_ns;
}

/* ---- re-admission ---------------------------------------------------------------- */

int coord_eng_reconnect(struct coord *c, struct coord_worker *w, struct coord_error *err)
{
	struct coord_eng *e = coord_view(c)->tp_state;
	struct coord_conn *k = coord_eng_conn(e, (unsigned)w->index);
	struct coord_eloop *l = k->loop;
	uint64_t one = 1;
	int r = e->ops->dial(k, true, err);

	if (r < 0)
		return r;
	pthread_mutex_lock(&l->admit_lock);
	k->admit_next = l->admit;
	l->admit = k;
	pthread_mutex_unlock(&l->admit_lock);
	/* Release: pairs with admit()'s acquire; the list (under the mutex)
	 * and the dialled connection before the flag the loop polls (E1). */
	atomic_store_explicit(&l->admit_pending, true, memory_order_release);
	(void)!write(l->efd, &one, sizeof(one));
	return 0;
}

/* Install @k, dialled again: false if the backend says not yet. */
static bool install(struct coord_eloop *l, struct coord_conn *k)
{
	if (k->up) { /* cannot happen (R1: one attempt while DOWN); be safe */
		l->e->ops->drop(k);
		return true;
	}
	if (!l->e->ops->install(k))
		return false;
	coord_wire_writer_init(&k->ow, k->obuf, k->ocap);
	k->ow_reqs = k->ow_cl = k->reqs_out = 0;
	k->urgent = false;
	coord_eng_rx(k, coord_now_ns());
	k->up = true;
	coord_place_up(&l->place, k);
	/* Relaxed: a count of live connections (logs). */
	atomic_fetch_add_explicit(&l->e->up, 1, memory_order_relaxed);
	coord_log(COORD_LOG_INFO, "worker %d (%s) connected again over %s", k->w->index, k->peer,
		  l->e->ops->name);
	return true;
}

/* @list back on the admission list, for the next round. */
static void admit_later(struct coord_eloop *l, struct coord_conn *list)
{
	struct coord_conn *k;

	pthread_mutex_lock(&l->admit_lock);
	for (k = list; k->admit_next; k = k->admit_next)
		;
	k->admit_next = l->admit;
	l->admit = list;
	pthread_mutex_unlock(&l->admit_lock);
	/* Release: as in coord_eng_reconnect(); the old I/O's end wakes us. */
	atomic_store_explicit(&l->admit_pending, true, memory_order_release);
}

void coord_eng_admit(struct coord_eloop *l)
{
	struct coord_conn *list, *k, *later = NULL;
	bool installed = false;

	/* Relaxed: a cheap look every round; the exchange below orders. */
	if (!atomic_load_explicit(&l->admit_pending, memory_order_relaxed))
		return;
	/* Acquire: pairs with coord_eng_reconnect()'s release (E1). */
	if (!atomic_exchange_explicit(&l->admit_pending, false, memory_order_acquire))
		return;
	pthread_mutex_lock(&l->admit_lock);
	list = l->admit;
	l->admit = NULL;
	pthread_mutex_unlock(&l->admit_lock);
	while ((k = list)) {
		list = k->admit_next;
		k->admit_next = NULL;
		if (install(l, k)) {
			installed = true;
			continue;
		}
		k->admit_next = later;
		later = k;
	}
	/* B4 (sched.c H2): closures bound to these workers may go now.  The
	 * recovery thread says so too when it marks them UP, but that may
	 * come before this (a take in between saw no room and stopped
	 * looking), or the installation may have waited here. */
	if (installed)
		coord_hq_worker_up(l->e->c);
	if (later)
		admit_later(l, later);
}

/* ---- set-up and tear-down --------------------------------------------------------- */

/* @bye: stopping (live peers are told). */
static void eng_free(struct coord_eng *e, bool bye)
{
	struct coord_view *c = coord_view(e->c);

	for (unsigned i = 0; e->loops && i < e->nloops; i++) {
		struct coord_eloop *l = coord_eng_loop(e, i);

		if (l->e)
			e->ops->loop_fini(l);
		if (l->efd >= 0)
			close(l->efd);
		for (struct coord_conn *k = l->admit; k; k = k->admit_next)
			e->ops->drop(k); /* reconnected, never installed */
		if (l->admit_lock_init)
			pthread_mutex_destroy(&l->admit_lock);
		free(l->batch);
		free(l->done);
		coord_place_fini(&l->place);
	}
	for (unsigned i = 0; e->conns && i < c->nworkers; i++) {
		struct coord_conn *k = coord_eng_conn(e, i);

		if (k->w)
			e->ops->close(k, bye && k->up);
		coord_conn_fini(k);
	}
	free(e->conns);
	free(e->loops);
	coord_key_wipe(&e->key);
	free(e);
	c->tp_state = NULL;
}

static int loop_init(struct coord_eng *e, unsigned i, struct coord_error *err)
{
	struct coord_view *c = coord_view(e->c);
	struct coord_eloop *l = coord_eng_loop(e, i);
	unsigned nconns = (c->nworkers - i + e->nloops - 1) / e->nloops;

	pthread_mutex_init(&l->admit_lock, NULL);
	l->admit_lock_init = true;
	l->d = &c->disp[i];
	l->d->tp = l;
	l->batch = calloc(c->opts.batch, sizeof(*l->batch));
	l->done_cap = c->opts.batch;
	l->done = calloc(l->done_cap, sizeof(*l->done));
	if (!l->batch || !l->done || coord_place_init(&l->place, nconns, c->reg->n, &e->idle) < 0)
		return coord_seterr(err, COORD_ENOMEM, "no memory for an event loop");
	l->place.nconns = 0; /* counted as they are added */
	l->e = e;
	return e->ops->loop_init(l, nconns, err);
}

static int conn_open(struct coord_eng *e, unsigned i, const struct coord_spec *spec,
		     struct coord_error *err)
{
	struct coord_view *c = coord_view(e->c);
	struct coord_eloop *l = coord_eng_loop(e, i % e->nloops);
	struct coord_conn *k = coord_eng_conn(e, i);
	const char *addr;
	int r;

	k->loop = l;
	l->place.conns[l->place.nconns++] = k;
	r = coord_spec_task_address(spec, "worker", (int)i, &addr, err);
	if (r < 0)
		return r;
	snprintf(k->peer, sizeof(k->peer), "%s", addr);
	k->w = &c->workers[i]; /* from here on ops->close() at the end */
	r = e->ops->dial(k, false, err);
	if (r < 0)
		return r;
	if (coord_conn_init(k, k->w, c->opts.window, 64 * 1024))
		return coord_seterr(err, COORD_ENOMEM, "no memory for a connection");
	/* Relaxed: before the loops start (pthread_create orders it). */
	atomic_fetch_add_explicit(&e->idle, 1, memory_order_relaxed);
	return 0;
}

static int eng_check(struct coord *c, const struct coord_eng_ops *ops, struct coord_error *err)
{
	const struct coord_view *v = coord_cview(c);

	if (!v->spec)
		return coord_seterr(err, COORD_EINVAL,
				    "the %s transport needs a spec with a \"worker\" job",
				    ops->name);
	if (v->opts.window == 0 || v->opts.window > 65536 || v->opts.max_frame < 4096 ||
	    v->opts.max_frame > COORD_WIRE_MAX_FRAME_LIMIT)
		return coord_seterr(err, COORD_EINVAL,
				    "%s: window must be 1..65536 and max_frame 4 KiB..1 GiB",
				    ops->name);
	return ops->available ? ops->available(err) : 0;
}

int coord_eng_start(struct coord *c, const struct coord_eng_ops *ops, struct coord_error *err)
{
	struct coord_view *v = coord_view(c);
	struct coord_eng *e;
	int r = eng_check(c, ops, err);

	if (r < 0)
		return r;
	e = calloc(1, sizeof(*e));
	if (!e)
		return coord_seterr(err, COORD_ENOMEM, "no memory");
	e->c = c;
	e->ops = ops;
	v->tp_state = e;
	e->nloops = v->ndisp;
	e->conns = calloc(v->nworkers, ops->conn_size);
	e->loops = calloc(e->nloops, ops->loop_size);
	if (!e->conns || !e->loops) {
		r = coord_seterr(err, COORD_ENOMEM, "no memory");
		goto fail;
	}
	r = coord_key_load(v->opts.key_file, &e->key, err);
	for (unsigned i = 0; i < e->nloops; i++)
		coord_eng_loop(e, i)->efd = -1;
	for (unsigned i = 0; r >= 0 && i < e->nloops; i++)
		r = loop_init(e, i, err);
	for (unsigned i = 0; r >= 0 && i < v->nworkers; i++)
		r = conn_open(e, i, v->spec, err);
	if (r < 0)
		goto fail;
	for (unsigned i = 0; i < e->nloops; i++)
		coord_place_start(&coord_eng_loop(e, i)->place);
	/* Relaxed: written before the loops start (pthread_create orders it). */
	atomic_store_explicit(&e->up, v->nworkers, memory_order_relaxed);
	r = coord_eng_threads(e, err);
	if (r < 0)
		coord_eng_stop(c);
	return r;
fail:
	eng_free(e, false);
	return r;
}

/* Stopping, or a CANCEL to send (S3, E3): wake every loop, armed or not. */
static void wake_all(struct coord_eng *e)
{
	uint64_t one = 1;

	for (unsigned i = 0; i < e->nloops; i++)
		(void)!write(coord_eng_loop(e, i)->efd, &one, sizeof(one));
}

void coord_eng_cancel(struct coord *c)
{
	struct coord_eng *e = coord_view(c)->tp_state;

	if (e)
		wake_all(e);
}

/* schedule() saw a loop asleep: one eventfd write per sleep, not per
 * schedule (the exchange disarms it). */
void coord_eng_wake(struct coord *c)
{
	struct coord_eng *e = coord_view(c)->tp_state;
	uint64_t one = 1;

	for (unsigned i = 0; e && i < e->nloops; i++) {
		struct coord_eloop *l = coord_eng_loop(e, i);

		/* Acquire/release: pairs with the loop's store of armed
		 * (loop.c); only one waker writes per sleep. */
		if (atomic_exchange_explicit(&l->armed, false, memory_order_acq_rel))
			(void)!write(l->efd, &one, sizeof(one));
	}
}

void coord_eng_stop(struct coord *c)
{
	struct coord_view *v = coord_view(c);
	struct coord_eng *e = v->tp_state;

	if (!e)
		return;
	wake_all(e);
	for (unsigned i = 0; i < e->nloops; i++)
		if (coord_eng_loop(e, i)->started)
			pthread_join(coord_eng_loop(e, i)->thread, NULL);
	/* Anything still in flight will never complete: put it back, so
	 * destroy's final cancel retires it. */
	for (unsigned i = 0; i < v->nworkers; i++)
		coord_conn_put_back_all(coord_eng_conn(e, i), coord_eng_conn(e, i)->loop->d);
	eng_free(e, true);
}

int coord_eng_room(struct coord_dispatcher *d, unsigned w)
{
	struct coord_eng *e = coord_view(d->c)->tp_state;
	struct coord_conn *k = coord_eng_conn(e, w);
	uint64_t now = coord_now_ns();

	if (k->loop->d != d || !k->up || k->w->start_at_ns > now)
		return -1;
	return coord_place_room(&k->loop->place, k, now); /* place.h PL1 */
}
