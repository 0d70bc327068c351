// SPDX-License-Identifier: MIT
/*
 * runtime/core/coordinator.c - the coordinator's life: options (and the TF_* environment
 * variables that set them), per-worker resources (coord_per_worker_*()),
 * coord_create() and coord_destroy().  The rest of the coordinator is in
 * the files coord_pvt.h lists.
 *
 * coord_create() runs past 100 lines on purpose: it is one constructor with
 * one unwind ladder (err_disp .. err_free, the reverse of the order things
 * are made in), and each step is already a call (opts_check(),
 * workers_init(), disp_init(), the ps and recovery set-up, tp->start()).
 * Split, the ladder would be split too, and a reader would have to check
 * that the halves unwind each other; whole, it reads top to bottom.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/coord_pvt.h"
#include "runtime/util/abi.h"
#include "runtime/util/fdlimit.h"

/* ---- options --------------------------------------------------------------- */

void coord_opts_defaults(struct coord_opts *o)
{
	memset(o, 0, sizeof(*o));
	o->transport = "inproc";
	o->inproc_workers = 2;
	o->ring_capacity = COORD_RING_DEFAULT;
	o->start_delay_ms = -1;
	o->start_delay_max_ms = -1;
	o->spin_ns = 50000;
	o->spin_max_ns = 500000;
	o->batch = 32;
	o->window = 128;
	o->max_frame = 16u << 20;
	o->connect_timeout_ms = 5000;
	o->inproc_ps = 1;
	o->ps_timeout_ms = 30000;
	o->ps_failure_threshold = -1;
	o->restart_exit_code = -1;
	o->recovery_limit_ms = 3600000;
	o->heartbeat_ms = 1000;
	o->heartbeat_misses = 3;
	o->closure_timeout_ms = 0;
	o->affinity_fallback_ms = 100;
	o->priority_aging_ms = 100;
}

/* Seconds (a decimal number) from the environment, as ms; -1 if unset. */
static int64_t env_seconds_ms(const char *name)
{
	const char *v = getenv(name);
	char *end;
	double s;

	if (!v || !*v)
		return -1;
	s = strtod(v, &end);
	if (*end || s < 0 || s > 1e9) {
		coord_log(COORD_LOG_WARN, "%s=\"%s\" is not a number of seconds; ignored", name, v);
		return -1;
	}
	return (int64_t)(s * 1000.0 + 0.5);
}

uint64_t coord_stagger_ns(const struct coord_opts *o, unsigned i)
{
	int64_t d = o->start_delay_ms > 0 ? o->start_delay_ms * (int64_t)i : 0;

	/* S13: min(delay * i, max); no max means no cap (the reference only
	 * multiplies when MAX is set: we always do). */
	if (o->start_delay_max_ms >= 0 && d > o->start_delay_max_ms)
		d = o->start_delay_max_ms;
	return (uint64_t)d * 1000000ull;
}

/* ---- per-worker resources ---------------------------------------------------- */

int coord_per_worker_create(struct coord *c, const char *creator, const void *args, size_t len,
			    struct coord_pw **out, struct coord_error *err)
{
	struct coord_pw *pw;
	uint32_t id = UINT32_MAX;

	if (!c || !out)
		return coord_seterr(err, COORD_EINVAL,
				    "coord_per_worker_create: NULL coordinator or out");
	for (uint32_t i = 0; creator && i < c->reg->n; i++)
		if (c->reg->fns[i].create && !strcmp(c->reg->fns[i].name, creator))
			id = i;
	if (id == UINT32_MAX)
		return coord_seterr(err, COORD_ENOFN, "no resource creator named '%s'",
				    creator ? creator : "(null)");
	if (len > UINT32_MAX || (len && !args))
		return coord_seterr(err, COORD_EINVAL, "bad creator arguments");
	pw = calloc(1, sizeof(*pw) + c->nworkers * sizeof(*pw->made) +
			       c->ndisp * sizeof(*pw->node) + len);
	if (!pw)
		return coord_seterr(err, COORD_ENOMEM, "no memory for a per-worker resource");
	pw->c = c;
	pw->nworkers = c->nworkers;
	pw->made = (_Atomic uint64_t *)(pw + 1);
	/* Relaxed: uniqueness is all that is needed. */
	pw->uid = atomic_fetch_add_explicit(&c->pw_next_uid, 1, memory_order_relaxed) + 1;
	pw->creator = id;
	pw->len = (uint32_t)len;
	pw->node = (struct coord_pw_node *)(pw->made + c->nworkers); /* runtime/core/pw.c */
	pw->args = pw->node + c->ndisp;
	/* Relaxed: a count for coord_destroy() (runtime/core/pw.c P4). */
	atomic_fetch_add_explicit(&c->pw_live, 1, memory_order_relaxed);
	if (len)
		memcpy(pw->args, args, len);
	/* Relaxed: private until returned. */
	atomic_store_explicit(&pw->refs, 1, memory_order_relaxed);
	*out = pw;
	return 0;
}

enum coord_rv_state coord_per_worker_state(const struct coord_pw *pw, unsigned worker)
{
	/* Relaxed: as in coord_pw_retire(); after coord_destroy() no worker
	 * is left to hold it (runtime/core/pw.c P4). */
	if (!pw || worker >= pw->nworkers ||
	    atomic_load_explicit(&pw->c->dead, memory_order_relaxed))
		return COORD_RV_NOT_READY;
	/* Made since the worker's last loss: READY; else (never made there,
	 * or lost since) ABORTED, made again before its next use (S7, S9). */
	return stat_rd(&pw->made[worker]) == stat_rd(&pw->c->workers[worker].losses) + 1
		       ? COORD_RV_READY
		       : COORD_RV_ABORTED;
}

void coord_per_worker_put(struct coord_pw *pw)
{
	/* acq_rel: the last dropper sees every other user's accesses. */
	if (pw && atomic_fetch_sub_explicit(&pw->refs, 1, memory_order_acq_rel) == 1)
		coord_pw_retire(pw); /* S9: destroyed on the workers (runtime/core/pw.c) */
}

/* ---- create / destroy ------------------------------------------------------------- */

static void closure_init(void *obj, uint32_t idx, void *arg)
{
	struct coord_closure *cl = obj;

	cl->c = arg;
	cl->idx = idx;
	cl->res = cl->inline_res;
	cl->res_cls = COORD_BUF_INLINE;
	cl->args_cls = COORD_BUF_INLINE;
	cl->args = cl->inline_args;
}

/* Q2: @d's own closures, as closure_init() makes pool ones, with indices
 * from CL_IDX_LOCAL up (distinct per dispatcher, so their ids are too). */
static int local_init(struct coord *c, struct coord_dispatcher *d)
{
	size_t bytes = (sizeof(*d->local) * c->opts.batch + CACHELINE - 1) &
		       ~(size_t)(CACHELINE - 1);

	d->nlocal = c->opts.batch;
	d->local = aligned_alloc(CACHELINE, bytes);
	d->ents = calloc(c->opts.batch, sizeof(*d->ents));	   /* Q3 */
	d->released = calloc(c->opts.batch, sizeof(*d->released)); /* RL1 */
	if (!d->local || !d->ents || !d->released)
		return COORD_ENOMEM;
	memset(d->local, 0, bytes);
	for (unsigned i = 0; i < d->nlocal; i++) {
		struct coord_closure *cl = &d->local[i];

		closure_init(cl, CL_IDX_LOCAL + d->index * c->opts.batch + i, c);
		cl->args = cl->inline_args;
		/* Never sampled (coord_sampled()): B7 samples come from the
		 * pool closures Q2 leaves in the mix. */
		cl->reuse = (1u - cl->idx) & COORD_SAMPLE_MASK;
	}
	return 0;
}

static const struct coord_transport *find_transport(const char *name)
{
	for (const struct coord_transport *t = coord_transports; t->name; t++)
		if (!strcmp(t->name, name ? name : "inproc"))
			return t;
	return NULL;
}

/* coord_create()'s checks of @opts; *@nw: the number of workers. */
static int opts_check(const struct coord_spec *spec, const struct coord_opts *opts, unsigned *nw,
		      struct coord_error *err)
{
	*nw = spec ? (unsigned)coord_spec_num_tasks(spec, "worker") : opts->inproc_workers;
	if (*nw == 0 || *nw > 65536)
		return coord_seterr(err, COORD_EINVAL,
				    "a cluster needs 1 to 65536 workers (got %u)", *nw);
	if (opts->batch == 0 || opts->batch > 1024)
		return coord_seterr(err, COORD_EINVAL, "batch must be 1..1024 (got %u)",
				    opts->batch);
	if (opts->affinity_fallback_ms < 0 || opts->priority_aging_ms <= 0)
		return coord_seterr(err, COORD_EINVAL,
				    "affinity_fallback_ms must be >= 0 and priority_aging_ms > 0");
	if (opts->heartbeat_ms < 0 || (opts->heartbeat_ms > 0 && opts->heartbeat_misses < 1) ||
	    opts->closure_timeout_ms < 0)
		return coord_seterr(
			err, COORD_EINVAL,
			"heartbeat_ms and closure_timeout_ms must be >= 0 (0: off), and "
			"heartbeat_misses >= 1 with heartbeats on (got %d, %lld, %d)",
			opts->heartbeat_ms, (long long)opts->closure_timeout_ms,
			opts->heartbeat_misses);
	return 0;
}

/*
 * Descriptors (issue 27): a networked coordinator holds one per worker
 * connection over tcp (an rdma connection: its event and completion
 * channels and a spare), one per ps task, and some of its own (event loops,
 * eventfds, the recovery thread's dials, the user's files): raise the soft
 * limit to the hard one, and fail now, saying what to do, rather than with
 * EMFILE at the thousandth connection.
 */
#define FD_SLACK 64u

static int fd_check(const struct coord_spec *spec, const char *transport, unsigned nw,
		    struct coord_error *err)
{
	unsigned per = !strcmp(transport, "tcp") ? 1 : !strcmp(transport, "rdma") ? 3 : 0;
	unsigned nps = spec ? (unsigned)coord_spec_num_tasks(spec, "ps") : 0;
	char what[96];

	if (!per)
		return 0; /* in process: no descriptor per worker */
	snprintf(what, sizeof(what), "%u %s worker connections, %u ps tasks, %u of its own", nw,
		 transport, nps, FD_SLACK);
	return coord_fd_limit_need((unsigned long)per * nw + nps + FD_SLACK, "the coordinator",
				   what, err);
}

/* The TF_* environment variables, for the options left at -1. */
static void opts_from_env(struct coord_opts *o)
{
	if (o->start_delay_ms < 0)
		o->start_delay_ms = env_seconds_ms("TF_COORDINATOR_SCHEDULE_START_DELAY");
	if (o->start_delay_max_ms < 0)
		o->start_delay_max_ms = env_seconds_ms("TF_COORDINATOR_SCHEDULE_START_DELAY_MAX");
	if (o->ps_failure_threshold < 0)
		o->ps_failure_threshold = coord_env_int(
			"TF_COORDINATOR_IGNORE_TRANSIENT_PS_FAILURES", 3);
	if (o->restart_exit_code < 0)
		o->restart_exit_code = coord_env_int("TF_CLIENT_NON_FATAL_RESTART_EXIT_CODE", -1);
}

/* The coordinator's view of its @nw workers, each with its start time
 * (S13); 0 or COORD_ENOMEM. */
static int workers_init(struct coord *c, unsigned nw)
{
	c->workers = aligned_alloc(CACHELINE, sizeof(*c->workers) * nw);
	if (!c->workers)
		return COORD_ENOMEM;
	memset(c->workers, 0, sizeof(*c->workers) * nw);
	c->created_ns = coord_now_ns();
	for (unsigned i = 0; i < nw; i++) {
		c->workers[i].c = c;
		c->workers[i].index = (int)i;
		c->workers[i].start_at_ns = c->created_ns + coord_stagger_ns(&c->opts, i);
	}
	return 0;
}

/* The transport's dispatchers; 0 or COORD_ENOMEM (c->disp NULL if not
 * even the array was made; else the caller frees what is in it). */
static int disp_init(struct coord *c)
{
	c->ndisp = c->tp->ndispatchers(c);
	c->disp = aligned_alloc(CACHELINE, sizeof(*c->disp) * c->ndisp);
	if (!c->disp)
		return COORD_ENOMEM;
	memset(c->disp, 0, sizeof(*c->disp) * c->ndisp);
	/* Q2: in-process dispatchers take inline entries into closures of
	 * their own, one per place of a take (opts.batch). */
	c->inline_q = c->tp->caps & COORD_TP_INLINE;
	for (unsigned i = 0; i < c->ndisp; i++) {
		c->disp[i].c = c;
		c->disp[i].index = i;
		if (c->inline_q && local_init(c, &c->disp[i]) < 0)
			return COORD_ENOMEM;
	}
	return 0;
}

/* The closure queue's memory: the ring, the closure pool with its cache
 * and spill ring, the buffer classes.  0 or a negative code, nothing left. */
static int queue_mem_init(struct coord *c)
{
	size_t cap = c->unbounded ? COORD_RING_DEFAULT : c->opts.ring_capacity;
	int r = coord_ring_init_wide(&c->ring, cap);

	if (r < 0)
		return r;
	r = coord_pool_create(sizeof(struct coord_closure), 12, 4096, closure_init, c,
			      &c->closures);
	if (r < 0)
		goto err_ring;
	r = coord_pool_cache_init(c->closures, COORD_CLOSURE_CACHE);
	/* Free closures beyond the cache (a backlog drained, handles dropped
	 * at once): as many as the ring holds, then the pool's list. */
	if (r == 0)
		r = coord_pool_spill_init(c->closures, cap);
	if (r == 0)
		r = coord_bufs_init(&c->bufs);
	if (r == 0)
		return 0;
	coord_pool_destroy(c->closures);
err_ring:
	coord_ring_fini(&c->ring);
	return r;
}

static void queue_mem_fini(struct coord *c)
{
	coord_bufs_fini(&c->bufs);
	coord_pool_destroy(c->closures);
	coord_ring_fini(&c->ring);
}

/* *@out: a zeroed coordinator for transport @t with options @opts and @nw
 * workers, its queue's memory made.  0, or a negative code with @err set. */
static int coord_alloc(const struct coord_transport *t, const struct coord_opts *opts, unsigned nw,
		       struct coord **out, struct coord_error *err)
{
	const struct coord_tp_ops *tp = t->tp;
	struct coord *c;
	int r;

	/* A transport in a provider (rdma) is loaded here, on first use. */
	if (!tp) {
		r = t->load(&tp, err);
		if (r < 0)
			return r;
	}
	c = aligned_alloc(CACHELINE, (sizeof(*c) + CACHELINE - 1) & ~(size_t)(CACHELINE - 1));
	if (!c)
		return coord_seterr(err, COORD_ENOMEM, "no memory for a coordinator");
	memset(c, 0, sizeof(*c));
	c->opts = *opts;
	c->reg = opts->registry;
	c->tp = tp;
	c->ps_ops = t->ps;
	c->nworkers = nw;
	opts_from_env(&c->opts);
	c->unbounded = opts->ring_capacity == 0;
	if (c->unbounded)
		coord_log(COORD_LOG_WARN,
			  "ring capacity 0: the closure queue is unbounded; "
			  "schedule() never blocks and memory grows with the backlog (S14)");
	r = queue_mem_init(c);
	if (r < 0) {
		free(c);
		return coord_seterr(err, r, "cannot make the closure queue: %s", coord_strerror(r));
	}
	pthread_mutex_init(&c->ov_lock, NULL);
	*out = c;
	return 0;
}

/* Start what runs: the ps client, the recovery thread (S10), the
 * transport's threads.  0, or a negative code with nothing of them left. */
static int coord_start(struct coord *c, const struct coord_spec *spec, struct coord_error *err)
{
	int r = c->ps_ops->setup(c, spec, err); /* before start: tcp tells workers */

	if (r < 0)
		return r;
	/* The slow path (S10), if any, before the transport's threads start:
	 * they read c->recovery when they lose a worker (coord_worker_lost()),
	 * and every worker is UP until then, so the thread waits idle. */
	r = coord_recovery_start(c, err);
	if (r < 0)
		return r;
	c->spec = spec;
	r = c->tp->start(c, err);
	c->spec = NULL;
	if (r < 0) {
		coord_recovery_stop(c);
		coord_recovery_free(c); /* start joined its threads */
	}
	return r;
}

int coord_create(const struct coord_spec *spec, const struct coord_opts *opts, struct coord **out,
		 struct coord_error *err)
{
	const struct coord_transport *t;
	struct coord_opts o; /* @opts as this library's struct (runtime/util/abi.h) */
	struct coord *c = NULL;
	unsigned nw;
	int r;

	if (opts && coord_opts_in(&o, opts, err) < 0)
		return COORD_EINVAL;
	opts = opts ? &o : NULL;
	if (!opts || !opts->registry || !out)
		return coord_seterr(err, COORD_EINVAL,
				    "coord_create: opts with a registry and "
				    "an out pointer are required");
	t = find_transport(opts->transport);
	if (!t)
		return coord_seterr(err, COORD_EINVAL,
				    "unknown transport '%s' (known: inproc, tcp, rdma)",
				    opts->transport);
	r = opts_check(spec, opts, &nw, err);
	if (r == 0)
		r = fd_check(spec, t->name, nw, err);
	if (r < 0)
		return r;
	r = coord_alloc(t, opts, nw, &c, err);
	if (r < 0)
		return r;
	r = workers_init(c, nw);
	if (r < 0)
		goto err_mem;
	r = disp_init(c);
	if (r < 0 && !c->disp)
		goto err_workers;
	if (r == 0)
		r = coord_start(c, spec, err);
	if (r == 0) {
		*out = c;
		return 0;
	}
	c->ps_ops->destroy(c->ps);
	for (unsigned i = 0; i < c->ndisp; i++) {
		free(c->disp[i].local);
		free(c->disp[i].ents);
		free(c->disp[i].released);
	}
	free(c->disp);
err_workers:
	free(c->workers);
err_mem:
	queue_mem_fini(c);
	pthread_mutex_destroy(&c->ov_lock);
	free(c);
	if (r == COORD_ENOMEM)
		coord_seterr(err, r, "no memory for the coordinator");
	return r;
}

/* The last of a coordinator's memory: pools, buffers and itself. */
static void coord_free_memory(struct coord *c)
{
	coord_bufs_fini(&c->bufs);
	coord_pool_destroy(c->closures);
	free(c);
}

/* RemoteValues the user still holds: closures with a reference left. */
static uint64_t count_held(struct coord *c)
{
	struct coord_pool *p = c->closures;
	uint64_t held = 0;
	/* Relaxed: no other thread uses the coordinator now (destroy). */
	uint32_t nobj = atomic_load_explicit(&p->nslabs, memory_order_relaxed) << p->slab_shift;

	for (uint32_t i = 0; i < nobj; i++) {
		struct coord_closure *cl = coord_pool_obj(p, i);

		/* Relaxed: as above. */
		held += atomic_load_explicit(&cl->refs, memory_order_relaxed) != 0;
	}
	return held;
}

void coord_closure_release_dead(struct coord_closure *cl)
{
	coord_dead_put(cl->c);
}

void coord_dead_put(struct coord *c)
{
	/* acq_rel: the last put sees every other put's use of the memory. */
	if (atomic_fetch_sub_explicit(&c->held_after_destroy, 1, memory_order_acq_rel) == 1)
		coord_free_memory(c);
}

void coord_destroy(struct coord *c)
{
	uint64_t held, pw_held;

	if (!c)
		return;
	cancel_older(c, gen_bump(c)); /* queued: CANCELLED; in flight: finish */
	coord_stop_dispatchers(c);
	coord_recovery_stop(c); /* no reconnect races the transport's stop */
	coord_pw_close(c);	/* no per-worker release wakes it either (pw.c P4) */
	c->tp->stop(c);
	coord_recovery_free(c);	   /* no loop reads c->recovery now (R3) */
	c->ps_ops->destroy(c->ps); /* no function runs any more */
	c->ps = NULL;
	cancel_older(c, gen_bump(c)); /* anything left (none expected) */
	urcu_bp_barrier();	      /* every deferred closure release has run */
	/* Acquire: pairs with the release in cancel.c's rcu_put_cb(): what
	 * the barrier waited for, as TSan can see it; 0 by now. */
	if (atomic_load_explicit(&c->rcu_puts, memory_order_acquire) != 0)
		coord_log(COORD_LOG_ERROR, "coord_destroy: deferred closure puts still pending");
	pw_held = coord_pw_fini(c); /* per-worker handles the user holds (pw.c P4) */
	coord_hq_destroy(c);
	coord_ring_fini(&c->ring);
	pthread_mutex_destroy(&c->ov_lock);
	free(c->workers);
	for (unsigned i = 0; i < c->ndisp; i++) {
		free(c->disp[i].local);
		free(c->disp[i].ents);
		free(c->disp[i].released);
	}
	free(c->disp);
	c->workers = NULL;
	c->disp = NULL;
	c->nworkers = c->ndisp = 0;
	/*
	 * RemoteValues the caller still holds are final now (ready or
	 * cancelled) and stay readable: the pools live on until the last of
	 * them is put (coord_closure_release_dead()).
	 */
	held = count_held(c) + pw_held;
	if (held == 0) {
		coord_free_memory(c);
		return;
	}
	coord_log(COORD_LOG_INFO,
		  "coord_destroy: %llu RemoteValues or per-worker handles still held; "
		  "their memory is freed by the last put",
		  (unsigned long long)held);
	/* Relaxed: published to later puts by whatever hands them the handles
	 * (the caller's own synchronization after destroy returns). */
	atomic_store_explicit(&c->held_after_destroy, held, memory_order_relaxed);
	atomic_store_explicit(&c->dead, true, memory_order_relaxed);
}

unsigned coord_num_workers(const struct coord *c)
{
	return c ? c->nworkers : 0;
}
