// SPDX-License-Identifier: MIT
/*
 * transport/inproc/inproc.c - the in-process transport (the embedded default).
 *
 * Synchronization: each worker thread is its own dispatcher (dispatch.h);
 * the fields of struct coord it touches are in coord_pvt.h's table.
 *
 * Each worker is a thread of the coordinator's process and is its own
 * dispatcher: it takes a batch from the queue, runs each closure through the
 * same worker-side code a coord-worker process uses (runtime/core/exec.c), writes
 * the result straight into the closure and completes it.  No copy of the
 * arguments, no frames, no system call unless a thread sleeps.  A small call
 * without a handle arrives inline in its ring entry (runtime/core/inline.c Q2) and
 * runs in one of the dispatcher's own closures (d->local), so the worker
 * touches no pool closure for it.  The worker thread also destroys its
 * components of per-worker resources whose last handle was put (S9,
 * runtime/core/pw.c), before it runs the next batch it took.
 *
 * Placement (S2, issue 20).  A closure never waits in a worker's batch
 * behind one of unknown or long run time while another worker could run
 * it: before a worker starts such a closure, it gives the rest of its
 * batch back to the front of the queue (coord_dispatch_give_back(): as
 * they were, attempt unchanged), for whichever worker frees first, and
 * after it takes one closure at a time until it runs a short one again.
 * Each worker keeps its own table of run times (transport/engine/runest.h: a
 * function is short while one of its last two runs took under
 * COORD_RUN_SHORT_NS); it times a closure whose function is not known
 * short, and the first of every batch (so a short function that turned
 * long is noticed), never the others.  The same rule the network engine
 * keeps (transport/engine/place.h PL6).  Not covered: inline entries run
 * inside the take (runtime/core/inline.c Q3), and a closure behind one of
 * a short function that turns long.
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/dispatch.h"
#include "runtime/ps/ps.h"
#include "transport/engine/runest.h"

struct inproc_worker {
	pthread_t thread;
	bool started;
	struct coord_exec_env env;
};

static void *closure_result_buf(void *sink, size_t len)
{
	return coord_closure_result_buf(sink, len);
}

/* S9 (runtime/core/pw.c P2, P3): destroy this worker's components of the
 * resources released to @d. */
static void pw_release(struct coord_dispatcher *d, struct coord_exec_env *env)
{
	uint64_t uids[16];
	unsigned n;

	while ((n = coord_dispatch_pw_take(d, uids, 16)) > 0)
		for (unsigned i = 0; i < n; i++)
			coord_exec_res_release(env, uids[i]);
}

/* Sleep until @w's staggered start (S13), or until the coordinator stops. */
static void stagger_wait(struct coord_worker *w)
{
	struct coord_view *v = coord_view(w->c);

	/* Relaxed: a wake on `stopping` (coord_destroy) re-checks it. */
	while (!atomic_load_explicit(&v->stopping, memory_order_relaxed) &&
	       coord_now_ns() < w->start_at_ns)
		coord_futex_wait(&v->stopping, 0, w->start_at_ns);
}

static void *inproc_main(void *arg)
{
	struct coord_dispatcher *d = arg;
	struct coord *c = d->c;
	struct coord_view *v = coord_view(c);
	struct coord_worker *w = &v->workers[d->index];
	struct inproc_worker *iw = w->tp;
	struct coord_closure **batch, **done;
	struct coord_runest *run;
	uint32_t nfn = v->reg->n;
	/* S2: may others wait behind us (more than one worker), and was the
	 * last closure run of unknown or long run time? */
	bool share = v->ndisp > 1, last_long = false;
	unsigned n;

	batch = calloc(v->opts.batch, sizeof(*batch));
	done = calloc(v->opts.batch, sizeof(*done));
	run = malloc((nfn ? nfn : 1) * sizeof(*run));
	if (!batch || !done || !run)
		coord_die("inproc worker batch", ENOMEM);
	for (uint32_t f = 0; f < nfn; f++)
		coord_runest_init(&run[f]);
	/* C9: this thread waits only inside coord_dispatch_take(). */
	d->defer_fin = true;
	/* Q3: inline entries run inside coord_dispatch_take(), here. */
	if (d->ents)
		d->exec_env = &iw->env;
	stagger_wait(w);
	/* The take returns 0 when stopping, or with resources to release. */
	while ((n = coord_dispatch_take(d, batch, last_long ? 1 : v->opts.batch)) > 0 ||
	       coord_dispatch_pw_pending(d)) {
		unsigned nd = 0;

		if (coord_dispatch_pw_pending(d))
			pw_release(d, &iw->env); /* S9: before the batch runs (pw.c P3) */
		if (n == 0)
			continue;

		for (unsigned i = 0; i < n; i++) {
			struct coord_closure *cl = batch[i];
			struct coord_exec_call call;
			struct coord_ctx ctx;
			struct coord_runest *e = cl->fn < nfn ? &run[cl->fn] : NULL;
			bool known = e && coord_runest_short(e, COORD_RUN_SHORT_NS);
			uint64_t t0 = 0;
			int code, cause;

			if (coord_dispatch_stale(c, cl)) {
				coord_dispatch_cancel(d, cl); /* S3: not started */
				continue;
			}
			if (!known && share && i + 1 < n) {
				/* S2: the rest would wait behind this one. */
				coord_dispatch_give_back(d, &batch[i + 1], n - i - 1);
				n = i + 1;
			}
			if (e && (!known || i == 0))
				t0 = coord_now_ns();
			call.id = cl->id;
			call.fn = cl->fn;
			call.attempt = cl->attempt;
			call.args = cl->args;
			call.len = cl->args_len;
			call.npw = cl->npw;
			for (unsigned k = 0; k < cl->npw; k++) {
				call.pw[k].uid = cl->pw[k]->uid;
				call.pw[k].creator = cl->pw[k]->creator;
				call.pw[k].len = cl->pw[k]->len;
				call.pw[k].args = cl->pw[k]->args;
			}
			/* B1: inputs read in place, from their RemoteValues. */
			call.nin = unlikely(cl->res_dirty & CL_HAS_IN) ? cl->nin : 0;
			call.in_get = coord_closure_input;
			call.in_src = cl;
			code = coord_exec(&iw->env, &call, closure_result_buf, cl, &ctx, &cause);
			if (t0) {
				uint64_t ns = coord_now_ns() - t0;

				coord_runest_note(e, ns < COORD_RUN_UNKNOWN
							     ? (uint32_t)ns
							     : COORD_RUN_UNKNOWN - 1);
				known = coord_runest_short(e, COORD_RUN_SHORT_NS);
			}
			last_long = share && !known;
			if (coord_dispatch_ps_retry(d, cl, code, cause)) {
				coord_dispatch_put_back(d, &cl, 1); /* S11: transient */
				continue;
			}
			coord_dispatch_complete(d, cl, w->index, code, cause,
						ctx.has_msg ? ctx.msg : NULL);
			done[nd++] = cl;
		}
		coord_dispatch_finish(d, w, done, nd);
	}
	coord_exec_env_fini(&iw->env);
	free(run);
	free(batch);
	free(done);
	return NULL;
}

static void inproc_stop(struct coord *c)
{
	struct coord_view *v = coord_view(c);
	struct inproc_worker *iws = v->tp_state;

	for (unsigned i = 0; iws && i < v->nworkers; i++)
		if (iws[i].started)
			pthread_join(iws[i].thread, NULL);
	free(iws);
	v->tp_state = NULL;
}

static int inproc_start(struct coord *c, struct coord_error *err)
{
	struct coord_view *v = coord_view(c);
	struct inproc_worker *iws = calloc(v->nworkers, sizeof(*iws));
	int r;

	if (!iws)
		return coord_seterr(err, COORD_ENOMEM, "no memory for in-process workers");
	v->tp_state = iws;
	for (unsigned i = 0; i < v->nworkers; i++) {
		iws[i].env.reg = v->reg;
		iws[i].env.worker = (int)i;
		iws[i].env.ps = v->ps;
		iws[i].env.sess = v->ps ? v->ps->sess : 0; /* at most once (ps.h) */
		v->workers[i].tp = &iws[i];
		r = pthread_create(&iws[i].thread, NULL, inproc_main, &v->disp[i]);
		if (r) {
			coord_stop_dispatchers(c);
			inproc_stop(c);
			return coord_seterr(err, -r, "cannot start in-process worker %u", i);
		}
		iws[i].started = true;
	}
	return 0;
}

/* One dispatcher per worker: each worker thread is its own dispatcher. */
static unsigned inproc_ndispatchers(const struct coord *c)
{
	return coord_cview(c)->nworkers;
}

/* B4: each dispatcher serves its own worker, which is always up. */
static int inproc_room(struct coord_dispatcher *d, unsigned w)
{
	struct coord_view *v = coord_view(d->c);

	if (w != d->index || coord_now_ns() < v->workers[w].start_at_ns)
		return -1;
	return (int)v->opts.batch;
}

/* In-process dispatchers sleep on the queue's futex, never in the kernel. */
static void inproc_wake(struct coord *c)
{
}

const struct coord_tp_ops coord_tp_inproc = {
	.name = "inproc",
	.caps = COORD_TP_INLINE,
	.ndispatchers = inproc_ndispatchers,
	.wake = inproc_wake,
	.start = inproc_start,
	.stop = inproc_stop,
	.room = inproc_room,
};
