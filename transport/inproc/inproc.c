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
 */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/dispatch.h"
#include "runtime/ps/ps.h"

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
	unsigned n;

	batch = calloc(v->opts.batch, sizeof(*batch));
	done = calloc(v->opts.batch, sizeof(*done));
	if (!batch || !done)
		coord_die("inproc worker batch", ENOMEM);
	/* C9: this thread waits only inside coord_dispatch_take(). */
	d->defer_fin = true;
	/* Q3: inline entries run inside coord_dispatch_take(), here. */
	if (d->ents)
		d->exec_env = &iw->env;
	stagger_wait(w);
	/* The take returns 0 when stopping, or with resources to release. */
	while ((n = coord_dispatch_take(d, batch, v->opts.batch)) > 0 ||
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
			int code, cause;

			if (coord_dispatch_stale(c, cl)) {
				coord_dispatch_cancel(d, cl); /* S3: not started */
				continue;
			}
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
