// SPDX-License-Identifier: MIT
/*
 * runtime/core/schedule.c - the user's side of the queue: coord_schedule*() (checks,
 * closures from the producer stashes C10, pushes), join and done.
 * Invariants: C1-C10 in coord_pvt.h, with its synchronization table (who
 * writes and reads each shared field of struct coord).
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/coord_pvt.h"

/* Set around a user's schedule()'s push (coord_wake_in_schedule()). */
static __thread bool tl_in_schedule;

bool coord_wake_in_schedule(void)
{
	return tl_in_schedule;
}
int coord_fn_lookup(const struct coord *c, const char *name, uint32_t *id, struct coord_error *err)
{
	if (!c || !id)
		return coord_seterr(err, COORD_EINVAL, "coord_fn_lookup: NULL coordinator or id");
	for (uint32_t i = 0; name && i < c->reg->n; i++)
		if (c->reg->fns[i].fn && !strcmp(c->reg->fns[i].name, name)) {
			*id = i;
			return 0;
		}
	return coord_seterr(err, COORD_ENOFN, "no function named '%s' is registered",
			    name ? name : "(null)");
}

/* The checks every schedule makes before it queues anything (S3, S15). */
static int schedule_admit(struct coord *c, struct coord_error *err)
{
	if (unlikely(error_pending(c))) {
		int r = take_error(c, err);

		if (r < 0)
			return r;
	}
	/* Relaxed: a hint set once by the transport when its last worker
	 * went down; closures would wait for ever. */
	if (unlikely(atomic_load_explicit(&c->unavailable, memory_order_relaxed)))
		return coord_seterr(err, COORD_EUNAVAILABLE, "no worker is available");
	return 0;
}

/* B1: the inputs of @call are RemoteValues of @c. */
static int inputs_check(struct coord *c, const struct coord_call *call, struct coord_error *err)
{
	if (call->ninputs > COORD_MAX_INPUTS || !call->inputs)
		return coord_seterr(err, COORD_EINVAL, "bad call: %u inputs (max %u)",
				    call->ninputs, COORD_MAX_INPUTS);
	for (unsigned i = 0; i < call->ninputs; i++)
		if (!call->inputs[i] || rv_cl(call->inputs[i])->c != c)
			return coord_seterr(err, COORD_EINVAL,
					    "input %u is not a RemoteValue of this coordinator", i);
	return 0;
}

static int call_check(struct coord *c, const struct coord_call *call, struct coord_error *err)
{
	/* S15: refuse what cannot run, here and not on a worker. */
	if (unlikely(call->fn >= c->reg->n || !c->reg->fns[call->fn].fn))
		return coord_seterr(err, COORD_ENOFN,
				    "function id %u is not a registered function (%u known)",
				    call->fn, c->reg->n);
	if (unlikely(call->npw > COORD_MAX_PW || (call->npw && !call->pw) ||
		     call->len > UINT32_MAX || (call->len && !call->args)))
		return coord_seterr(err, COORD_EINVAL,
				    "bad call: %u per-worker args (max %u), "
				    "%zu argument bytes",
				    call->npw, COORD_MAX_PW, call->len);
	for (unsigned i = 0; i < call->npw; i++)
		if (unlikely(!call->pw[i] || call->pw[i]->c != c))
			return coord_seterr(err, COORD_EINVAL,
					    "per-worker argument %u is not of this coordinator", i);
	if (unlikely(call->priority || call->affinity || call->affinity_mode)) {
		int r = coord_hq_check(c, call, err); /* B4 */

		if (r < 0)
			return r;
	}
	if (unlikely(call->ninputs))
		return inputs_check(c, call, err);
	return 0;
}

/* Does @call take the hint queue (B4)? */
static inline bool call_hinted(const struct coord_call *call)
{
	return call->priority || call->affinity;
}

/* closure_fill_args() for @call, per-worker arguments included. */
static int closure_fill(struct coord *c, struct coord_closure *cl, const struct coord_call *call,
			bool want_rv)
{
	int r = closure_fill_args(c, cl, call->fn, call->args, call->len, want_rv);

	if (unlikely(r < 0))
		return r;
	cl->npw = (uint8_t)call->npw;
	for (unsigned i = 0; i < call->npw; i++) {
		cl->pw[i] = call->pw[i];
		/* Relaxed: the caller holds a reference, so this is not the
		 * 0 -> 1 edge; the drop in coord_per_worker_put() is acq_rel. */
		atomic_fetch_add_explicit(&call->pw[i]->refs, 1, memory_order_relaxed);
	}
	return 0;
}

/*
 * Producer stashes (C10): slot s of every coordinator's pstash[] belongs
 * to the one thread that holds stash_owned[s], process-wide; it takes the
 * slot on its first schedule or put (a CAS, once per thread) and gives it
 * back when it exits (a pthread key's destructor, which touches only
 * stash_owned[], never a coordinator, so it cannot race a destroy; a
 * fork()'s child frees the slots of the threads it does not have).  The
 * owner uses its stashes with plain loads and stores: no RMW per call.  A
 * thread that finds every slot taken goes to the pool (and looks for a
 * free slot again every STASH_RETRY calls), so a program that starts a
 * thread per request keeps at most COORD_PSTASH_SLOTS stashes in use.
 */
#define STASH_RETRY 1024u
static _Atomic uint32_t stash_owned[COORD_PSTASH_SLOTS];
static pthread_once_t stash_once = PTHREAD_ONCE_INIT;
static pthread_key_t stash_key;
static bool stash_key_ok;
/* This thread's slot + 1, or 0: none (yet); calls since it last looked. */
static __thread uint32_t tl_pstash, tl_pstash_miss;

/* A thread's exit: its slot (+ 1 in @arg) to the next thread. */
static void stash_slot_release(void *arg)
{
	uint32_t s = (uint32_t)(uintptr_t)arg - 1;

	tl_pstash = 0; /* a later call in this exit takes one anew */
	/* Release (C10): this thread's accesses to slot s of every
	 * coordinator happen-before the next owner's (its acquire CAS in
	 * stash_slot_claim()). */
	atomic_store_explicit(&stash_owned[s], 0, memory_order_release);
}

/* A child of fork() has only the forking thread: the other owners' slots
 * are free again there. */
static void stash_after_fork(void)
{
	for (uint32_t s = 0; s < COORD_PSTASH_SLOTS; s++)
		if (s + 1 != tl_pstash)
			/* Relaxed: the child has no other thread yet. */
			atomic_store_explicit(&stash_owned[s], 0, memory_order_relaxed);
}

static void stash_key_make(void)
{
	stash_key_ok = pthread_key_create(&stash_key, stash_slot_release) == 0 &&
		       pthread_atfork(NULL, NULL, stash_after_fork) == 0;
}

/* A free slot for this thread (+ 1), or 0: none free. */
static __attribute__((noinline)) uint32_t stash_slot_claim(void)
{
	pthread_once(&stash_once, stash_key_make);
	for (uint32_t s = 0; stash_key_ok && s < COORD_PSTASH_SLOTS; s++) {
		/* Relaxed: a look before the CAS, which decides. */
		uint32_t idle = atomic_load_explicit(&stash_owned[s], memory_order_relaxed);

		/* Acquire (C10): pairs with the release in
		 * stash_slot_release(): the previous owner's accesses to the
		 * slot's stashes happen-before ours. */
		if (idle || !atomic_compare_exchange_strong_explicit(&stash_owned[s], &idle, 1,
								     memory_order_acquire,
								     memory_order_relaxed))
			continue;
		if (pthread_setspecific(stash_key, (void *)(uintptr_t)(s + 1)) == 0)
			return s + 1;
		stash_slot_release((void *)(uintptr_t)(s + 1)); /* no exit hook: give it back */
		break;
	}
	return 0;
}

/* This thread's stash in @c (C10), or NULL: it owns none. */
static inline struct coord_pstash *my_stash(struct coord *c)
{
	if (unlikely(!tl_pstash) && tl_pstash_miss++ % STASH_RETRY == 0)
		tl_pstash = stash_slot_claim();
	return likely(tl_pstash) ? &c->pstash[tl_pstash - 1] : NULL;
}

/* Raise outstanding by one for a closure about to be queued (C1), in this
 * thread's stash @st if it has one: a plain store. */
static inline void stash_count(struct coord *c, struct coord_pstash *st)
{
	if (st)
		/* Relaxed: C1: only the slot's owner writes `added` (C10),
		 * and the push of this closure (R1 in ring.c) publishes the
		 * raise before any drop of it; readers sum it
		 * (outstanding_total()). */
		atomic_store_explicit(&st->added,
				      atomic_load_explicit(&st->added, memory_order_relaxed) + 1,
				      memory_order_relaxed);
	else
		/* Relaxed: C1, as in schedule_one(). */
		atomic_fetch_add_explicit(&c->outstanding, 1, memory_order_relaxed);
}

/* A free closure for schedule(), through this thread's stash (C10);
 * @count: raise outstanding for it (C1), in the stash if it has one. */
static struct coord_closure *closure_get(struct coord *c, bool count)
{
	struct coord_pstash *st = my_stash(c);
	struct coord_closure *cl;

	if (!st) {
		/* The pool is thread-safe. */
		cl = coord_pool_get(c->closures);
		if (cl && count)
			stash_count(c, NULL);
		return cl;
	}
	if (st->n <= COORD_PSTASH / 4) {
		/* Top up below what is left, which is used first: those lines
		 * were asked for a batch ago and are here by now. */
		struct coord_closure *top[COORD_PSTASH / 4];
		uint32_t left = st->n, k;

		memcpy(top, st->cl, left * sizeof(top[0]));
		k = coord_pool_get_many(c->closures, (void **)st->cl, COORD_PSTASH - left);
		/* The workers that freed them last had these lines: fetch the
		 * whole batch now, for writing, so the misses overlap. */
		for (uint32_t i = 0; i < k; i++)
			coord_prefetch_w(st->cl[i]);
		memcpy(st->cl + k, top, left * sizeof(top[0]));
		st->n = k + left;
	}
	cl = st->n ? st->cl[--st->n] : NULL;
	if (cl && count)
		stash_count(c, st);
	return cl;
}

/*
 * closure_stash_put() - C10: free closure @cl (refs == 0, contents dropped)
 * goes into this thread's stash, where its next schedule() takes it while
 * its lines are still in this cache; false if this thread owns no stash
 * or it is full (the caller returns it to the pool).
 */
bool closure_stash_put(struct coord *c, struct coord_closure *cl)
{
	struct coord_pstash *st = my_stash(c);

	if (!st || st->n >= COORD_PSTASH)
		return false;
	st->cl[st->n++] = cl;
	return true;
}

/* Q2: calls of a thread that could travel inline; every 64th does not. */
static __thread uint32_t tl_inline;

/* B7 (coord_pvt.h closure_next_life()): closures this thread filled, and
 * sampled lives it still owes. */
__thread uint32_t coord_tl_fill, coord_tl_force;

/* Q2: make the next @n lives this thread fills (closure_next_life()) sampled
 * ones (B7): they stand for the calls before them that travelled inline and
 * were not sampled, so the histograms keep their rate of one in 64. */
static inline void closure_sample_next(unsigned n)
{
	coord_tl_force = n;
}

/* The end of a user's schedule() of one counted closure: its generation,
 * the push (flagged for the transport's wake, rdma.c D5), its handle. */
static int schedule_push(struct coord *c, struct coord_closure *cl, struct coord_rv **out)
{
	cl->gen = stamp_gen(c); /* C3 */
	tl_in_schedule = true;
	queue_push(c, cl, NULL);
	tl_in_schedule = false;
	if (out)
		*out = (struct coord_rv *)cl;
	return 0;
}

/* Queue one checked @call (S1), or start it waiting for its inputs (B1). */
static int schedule_one(struct coord *c, const struct coord_call *call, struct coord_rv **out,
			struct coord_error *err)
{
	struct coord_closure *cl;

	cl = closure_get(c, false);
	if (unlikely(!cl))
		return coord_seterr(err, COORD_ENOMEM, "no memory for a closure");
	if (unlikely(closure_fill(c, cl, call, out != NULL) < 0)) {
		coord_pool_put(c->closures, cl->idx);
		return coord_seterr(err, COORD_ENOMEM, "no memory for %zu argument bytes",
				    call->len);
	}
	if (unlikely(call_hinted(call)))
		coord_hq_fill(cl, call); /* B4 */
	if (unlikely(call->ninputs))	 /* B1: waits for its inputs instead */
		return schedule_consumer(c, cl, call, out, err);
	/* Relaxed: C1 only needs the increment before the push, and the push's
	 * release orders it before any completion's decrement. */
	atomic_fetch_add_explicit(&c->outstanding, 1, memory_order_relaxed);
	return schedule_push(c, cl, out);
}

int coord_schedule_call(struct coord *c, const struct coord_call *call, struct coord_rv **out,
			struct coord_error *err)
{
	int r;

	if (out)
		*out = NULL;
	if (unlikely(!c || !call))
		return coord_seterr(err, COORD_EINVAL, "coord_schedule: NULL coordinator or call");
	r = schedule_admit(c, err);
	if (r < 0)
		return r;
	r = call_check(c, call, err);
	if (r < 0)
		return r;
	return schedule_one(c, call, out, err);
}

/* coord_schedule_many() when some calls have inputs (B1) or hints (B4):
 * one at a time. */
static int schedule_many_each(struct coord *c, const struct coord_call *calls, size_t n,
			      struct coord_rv **out, size_t *queued, struct coord_error *err)
{
	for (size_t i = 0; i < n; i++) {
		int r = schedule_one(c, &calls[i], out ? &out[i] : NULL, err);

		if (r < 0)
			return r;
		if (queued)
			*queued = i + 1;
	}
	return 0;
}

/* Q2: queue @n <= SCHED_CHUNK checked calls without handles as inline
 * entries, if they all fit (no per-worker arguments, at most 8 argument
 * bytes) and this is not the thread's 64th chunk (B7 samples: then
 * *@sample is set); false: the caller queues them as closures. */
static bool schedule_many_inline(struct coord *c, const struct coord_call *calls, unsigned n,
				 bool *sample)
{
	struct coord_ring_ent e[SCHED_CHUNK];
	uint64_t g;

	for (unsigned i = 0; i < n; i++)
		if (calls[i].npw || calls[i].len > sizeof(e[i].w[0]))
			return false;
	if (unlikely(!(++tl_inline & COORD_SAMPLE_MASK))) {
		*sample = true; /* B7: this chunk's closures are all sampled */
		return false;
	}
	for (unsigned i = 0; i < n; i++)
		qe_encode(&e[i], calls[i].fn, calls[i].args, calls[i].len);
	/* Relaxed: C1, as in coord_schedule_call(): one increment for the
	 * chunk, before its push. */
	atomic_fetch_add_explicit(&c->outstanding, n, memory_order_relaxed);
	g = stamp_gen(c); /* C3: one generation for the chunk */
	for (unsigned i = 0; i < n; i++)
		e[i].w[2] = g;
	queue_push_ents(c, e, n);
	return true;
}

int coord_schedule_many(struct coord *c, const struct coord_call *calls, size_t n,
			struct coord_rv **out, size_t *queued, struct coord_error *err)
{
	struct coord_closure *cls[SCHED_CHUNK];
	size_t done = 0;
	bool each = false;
	int r;

	if (queued)
		*queued = 0;
	if (out)
		for (size_t i = 0; i < n; i++)
			out[i] = NULL;
	if (!c || (n && !calls))
		return coord_seterr(err, COORD_EINVAL,
				    "coord_schedule_many: NULL coordinator or calls");
	r = schedule_admit(c, err);
	if (r < 0)
		return r;
	for (size_t i = 0; i < n; i++) {
		r = call_check(c, &calls[i], err);
		if (r < 0) {
			if (err) {
				struct coord_error e = *err;

				coord_seterr(err, r, "call %zu: %s", i, e.msg);
			}
			return r;
		}
		each |= calls[i].ninputs != 0 || call_hinted(&calls[i]);
	}
	if (unlikely(each)) /* B1, B4: one at a time, in order */
		return schedule_many_each(c, calls, n, out, queued, err);
	while (done < n) {
		unsigned want = n - done < SCHED_CHUNK ? (unsigned)(n - done) : SCHED_CHUNK;
		unsigned k = 0, got;
		uint64_t g;
		bool sample = false;

		if (!out && c->inline_q && schedule_many_inline(c, calls + done, want, &sample)) {
			done += want;
			if (queued)
				*queued = done;
			continue;
		}

		/* One claim of the free list for the chunk (a short list may
		 * take a few, growth included). */
		while (k < want) {
			got = coord_pool_get_many(c->closures, (void **)cls + k, want - k);
			if (unlikely(got == 0))
				break;
			k += got;
		}
		/* Their first lines were last written by the workers that freed
		 * them: fetch them all at once rather than one miss per fill. */
		for (unsigned i = 0; i < k; i++)
			coord_prefetch_w(cls[i]);
		if (unlikely(sample))
			closure_sample_next(k);
		for (unsigned i = 0; i < k && r == 0; i++)
			if (unlikely(closure_fill(c, cls[i], &calls[done + i], out != NULL) < 0)) {
				/* cls[0..i) hold buffers: drop them; the rest are bare. */
				for (unsigned j = 0; j < i; j++)
					coord_closure_drop_contents(cls[j]);
				r = COORD_ENOMEM;
			}
		if (unlikely(k < want || r < 0)) {
			closure_sample_next(0); /* none owed past this chunk */
			for (unsigned j = 0; j < k; j++) {
				/* Relaxed: never published; destroy's count of held
				 * closures must not see it. */
				atomic_store_explicit(&cls[j]->refs, 0, memory_order_relaxed);
				coord_pool_put(c->closures, cls[j]->idx);
			}
			if (queued)
				*queued = done;
			return coord_seterr(err, COORD_ENOMEM,
					    "no memory for closure %zu of %zu (%zu queued)", done,
					    n, done);
		}
		/* Relaxed: C1, as in coord_schedule_call(): one increment for
		 * the chunk, before its push. */
		atomic_fetch_add_explicit(&c->outstanding, k, memory_order_relaxed);
		g = stamp_gen(c); /* C3: one generation for the chunk */
		for (unsigned i = 0; i < k; i++) {
			cls[i]->gen = g;
			if (out)
				out[done + i] = (struct coord_rv *)cls[i];
		}
		queue_push_many(c, cls, k);
		done += k;
		if (queued)
			*queued = done;
	}
	return 0;
}

int coord_schedule(struct coord *c, uint32_t fn, const void *args, size_t len,
		   struct coord_rv **out, struct coord_error *err)
{
	struct coord_closure *cl;
	bool sample;
	int r;

	/* The checks of call_check() for a call with nothing but arguments
	 * (S15); anything it would refuse goes the general way, for its
	 * message (a NULL @c too). */
	if (unlikely(!c || fn >= c->reg->n || !c->reg->fns[fn].fn || len > CL_INLINE_ARGS ||
		     (len && !args))) {
		struct coord_call call = { .fn = fn, .args = args, .len = len };

		return coord_schedule_call(c, &call, out, err);
	}
	if (out)
		*out = NULL;
	r = schedule_admit(c, err);
	if (r < 0)
		return r;
	sample = !out && len <= sizeof(uint64_t) && c->inline_q;
	if (sample && likely(++tl_inline & COORD_SAMPLE_MASK)) {
		/* Q2: the call travels in its ring entry; no closure. */
		struct coord_ring_ent e;

		qe_encode(&e, fn, args, len);
		stash_count(c, my_stash(c)); /* C1, before the push */
		e.w[2] = stamp_gen(c);	     /* C3 */
		queue_push(c, NULL, &e);     /* inproc: no wake to do (not rdma.c D5) */
		return 0;
	}
	/* schedule_one() without per-worker arguments, hints or inputs; the
	 * closure comes counted in outstanding (C1). */
	cl = closure_get(c, true);
	if (unlikely(!cl))
		return coord_seterr(err, COORD_ENOMEM, "no memory for a closure");
	if (unlikely(sample)) /* Q2: the thread's 64th, for B7 */
		closure_sample_next(1);
	closure_fill_args(c, cl, fn, args, len, out != NULL); /* inline: cannot fail */
	return schedule_push(c, cl, out);
}

int coord_join_timeout(struct coord *c, int64_t timeout_ns, struct coord_error *err)
{
	uint64_t deadline = coord_deadline(timeout_ns), spin_until;
	unsigned spins = 0;
	bool settled = false;

	if (!c)
		return coord_seterr(err, COORD_EINVAL, "coord_join: NULL coordinator");
	spin_until = coord_now_ns() + c->opts.spin_ns;
	for (;;) {
		uint32_t v = coord_ec_prepare(&c->idle);
		int r = take_error(c, err);

		if (r < 0)
			return r;
		/* C1: results are final (outstanding_total() acquires). */
		if (outstanding_total(c) == 0)
			return take_error(c, err);
		if (coord_now_ns() < spin_until) {
			coord_spin_pause(++spins);
			continue;
		}
		if (!settled) {
			/* C9: once before the first sleep, as in done(). */
			fin_settle_all(c);
			settled = true;
			continue;
		}
		if (coord_ec_wait(&c->idle, v, deadline) == -ETIMEDOUT) {
			/* A number for the message only. */
			uint64_t left = outstanding_total(c);

			return coord_seterr(err, COORD_ETIMEDOUT,
					    "join: %llu closures still pending after %lld ns",
					    (unsigned long long)left, (long long)timeout_ns);
		}
	}
}

int coord_join(struct coord *c, struct coord_error *err)
{
	return coord_join_timeout(c, -1, err);
}

int coord_done(struct coord *c, struct coord_error *err)
{
	int r;

	if (!c)
		return coord_seterr(err, COORD_EINVAL, "coord_done: NULL coordinator");
	r = take_error(c, err);
	if (r < 0)
		return r;
	/* C1, as in join; C9: closures final but not yet settled by a
	 * dispatcher are not outstanding. */
	if (outstanding_total(c) != 0) {
		fin_settle_all(c);
		if (outstanding_total(c) != 0)
			return 0;
	}
	r = take_error(c, err);
	return r < 0 ? r : 1;
}
