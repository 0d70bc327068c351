// SPDX-License-Identifier: MIT
/*
 * runtime/core/sched.c - worker affinity and priority (B4): the hint queue.
 *
 * A closure scheduled with neither a priority nor an affinity never comes
 * here: it takes the ring (queue.c), and the default path pays one
 * relaxed load of hq_count per take for this file's existence.  A hinted
 * closure is pushed onto `in`, a Treiber stack (one CAS, no lock, no
 * malloc), and dispatchers match hinted closures to workers in batches:
 *
 *   Sets.  Every closure names an affinity set: 0 = any worker (a closure
 *   with only a priority), 1..N = worker i - 1 alone (COORD_ON_WORKER()),
 *   beyond that the sets of coord_affinity_set().  Each set keeps one FIFO
 *   per (mode, level): strict or preferred, LOW..URGENT.
 *
 *   Matching.  A dispatcher, under `lock`, first moves `in` into the FIFOs,
 *   asks the transport how much room each worker it serves has (ops->room),
 *   and then repeatedly takes the best head among the FIFOs it may serve
 *   and the main queue (ring + overflow), which competes as NORMAL.  A FIFO
 *   is servable when a member of its set has room (then the closure is
 *   targeted at the member with the most room: cl->target), or, for
 *   preferred closures, when the head waited opts.affinity_fallback_ms or
 *   every member is dropped (then any worker: target -1).
 *
 *   Order.  A head's effective level is its level plus one per
 *   opts.priority_aging_ms it has waited (capped at URGENT); higher first,
 *   then older first.  The main queue's age is the time since a take first
 *   passed it over while it was not empty, or since a hinted push found it
 *   not empty, if that came first (a take may come long after: every worker
 *   busy).  So a lower priority is never starved: after (URGENT - level)
 *   agings it ties with the newest urgent closure and wins on age.
 *
 * Invariants
 *   H1  hq_count is raised (seq_cst RMW) before a push lands on `in` and
 *       lowered (release) only after the closures left the queue, so it is
 *       never below the number of hinted closures queued; queue_empty()
 *       reads it (E3 with the push's signal, as ov_count, Q1).
 *   H2  hq_ver is bumped (seq_cst RMW) after every push and every change
 *       that may make a closure servable by someone who could not serve it
 *       before (a worker back UP, from the recovery thread and from the
 *       transport when it installs the connection, as ops->room may turn
 *       from -1 only then; a set whose members are all dropped).  A
 *       dispatcher that took nothing records the version it read before it
 *       looked (hq_seen) and does not look again until the version moves,
 *       a deadline it computed passes (a preferred fallback, a staggered
 *       start: hq_due), or a worker it found without room has room again
 *       (blk): so a closure no dispatcher can serve yet costs no spinning,
 *       and none is missed.
 *   H3  Strict closures of a set whose members are all DROPPED fail with
 *       COORD_EUNAVAILABLE (the coordinator's error, S3), when the last
 *       member is dropped or when they arrive later (a put-back); schedule
 *       refuses new ones up front.  Preferred ones run anywhere.
 *   H4  A closure is in exactly one place: `in`, one FIFO, or a
 *       dispatcher's batch; everything but `in` and the counters is
 *       guarded by `lock`, which only dispatchers, cancellers and the
 *       recovery thread take (never a scheduling thread).
 *
 * Synchronization: the shared fields of the hint queue (struct coord_hq),
 * of struct coord and of a dispatcher d that this file uses, who writes
 * them, who reads them, and what orders the two.
 *   field            written by (how)                read by (how)           order
 *   c->hq            the first hq_get() (acq_rel     everyone, hq_of()       the CAS -> acquire:
 *                    CAS from NULL; a loser frees    (acquire); destroy      the structure is
 *                    its own); destroy (relaxed)     (relaxed)               initialised first
 *   cap, aging_ns,   hq_get(), before the CAS        everyone (plain)        the CAS -> hq_of()'s
 *   fallback_ns,                                                             acquire; immutable
 *   stagger_end_ns                                                           after
 *   nsets            hq_get() (relaxed, before the   coord_hq_check()        release -> acquire:
 *                    CAS); coord_affinity_set()      (acquire, no lock);     the new set's mem
 *                    (release, under lock)           lock holders (relaxed)  and nmem first
 *   sets[s].mem,     hq_get() (sets 1..N) or         schedule (check),       published by nsets
 *   sets[s].nmem     coord_affinity_set(), once,     lock holders (plain)    or the c->hq CAS;
 *                    before nsets covers s                                   immutable after
 *   in               hinted pushes (release CAS,     absorb() (acquire       the push's release
 *                    coord_hq_push())                exchange, under lock)   -> absorb's acquire:
 *                                                                            the closure's fields
 *   sets[].q, .n,    lock holders: takes, drains,    lock holders (plain)    `lock` (H4)
 *   .on_ne,          worker_dropped() (plain)
 *   .ne_next, .dead,
 *   ne
 *   main_skip_ns     pushes (relaxed CAS from 0),    pushes, takes           none: a ranking
 *                    takes (relaxed CAS / store,     (relaxed)               hint (Order)
 *                    under lock)
 *   c->hq_count      pushes + (seq_cst, before the   hq_queued() (relaxed    H1; E3 (futex.h)
 *                    push), takes / drains /         hint): queue_empty(),
 *                    drops - (release, after)        takes, the room wait,
 *                                                    coord_dispatch_due()
 *   c->hq_ver        pushes, worker up / dropped     takes, coord_hq_work()  H2 (seq_cst: the
 *                    (seq_cst RMW after the change)  (seq_cst load)          bump or the look
 *                                                                            comes first)
 *   cl->t_q, lvl,    the scheduling thread before    lock holders after      the push's release
 *   aff, pref, next  its push (plain)                absorb()                CAS -> absorb()
 *   cl->target       a take, under lock (plain)      the taking dispatcher   its own thread
 *   c->workers[]     the recovery thread and the     all_dropped() (acquire) recovery.c R1
 *   .state           transports (recovery.c R1)
 *   d->room, blk,    d's thread (takes; the first    d's thread              one thread
 *   nblk, cands,     take allocates them)            (coord_hq_work(),       (coord_hq_destroy()
 *   any_blocked,                                     coord_dispatch_due())   after the join)
 *   hq_due, hq_seen
 */
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/internal.h"

#define HQ_LEVELS 4 /* COORD_PRIO_LOW .. COORD_PRIO_URGENT as 0..3 */
#define HQ_NORMAL 1

struct hq_fifo {
	struct coord_closure *head, *tail;
};

struct hq_set {
	unsigned nmem;
	unsigned *mem;			/* member workers; NULL for the any-set */
	struct hq_fifo q[2][HQ_LEVELS]; /* [preferred][level] */
	uint64_t n;			/* closures in q */
	struct hq_set *ne_next;		/* on the non-empty list */
	bool on_ne;
	bool dead; /* every member dropped (H3) */
};

struct coord_hq {
	pthread_mutex_t lock;		    /* H4 */
	_Atomic(struct coord_closure *) in; /* new pushes, newest first */
	/* Sets: [0] any, [1..nworkers] one worker each, then named ones.  The
	 * array never moves; nsets is published with release after a set is
	 * filled in, so a scheduler may read sets below it without the lock. */
	struct hq_set *sets;
	_Atomic uint32_t nsets;
	uint32_t cap;
	struct hq_set *ne; /* sets with closures */
	/* When the main queue was first seen waiting: by a take that passed it
	 * over, or by a hinted push (Order); 0 when not.  Atomic because
	 * pushers set it too (CAS from 0); a ranking hint only. */
	_Atomic uint64_t main_skip_ns;
	uint64_t aging_ns, fallback_ns, stagger_end_ns;
};

static struct coord_hq *hq_of(struct coord *c)
{
	/* Acquire: pairs with the release CAS in hq_get(): the structure is
	 * initialised before anyone uses it. */
	return atomic_load_explicit(&c->hq, memory_order_acquire);
}

/* The hint queue, made on first use (off the default path). */
static struct coord_hq *hq_get(struct coord *c)
{
	struct coord_hq *hq = hq_of(c), *exp = NULL;
	uint64_t end = 0;

	if (hq)
		return hq;
	hq = calloc(1, sizeof(*hq));
	if (!hq)
		return NULL;
	hq->cap = 1 + c->nworkers + COORD_MAX_AFFINITY_SETS;
	hq->sets = calloc(hq->cap, sizeof(*hq->sets));
	if (!hq->sets) {
		free(hq);
		return NULL;
	}
	pthread_mutex_init(&hq->lock, NULL);
	for (unsigned i = 0; i < c->nworkers; i++) {
		hq->sets[1 + i].nmem = 1;
		hq->sets[1 + i].mem = calloc(1, sizeof(unsigned));
		if (!hq->sets[1 + i].mem) {
			for (unsigned j = 0; j < i; j++)
				free(hq->sets[1 + j].mem);
			free(hq->sets);
			free(hq);
			return NULL;
		}
		hq->sets[1 + i].mem[0] = i;
		if (c->workers[i].start_at_ns > end)
			end = c->workers[i].start_at_ns;
	}
	hq->stagger_end_ns = end;
	hq->aging_ns = (uint64_t)(c->opts.priority_aging_ms > 0 ? c->opts.priority_aging_ms : 1) *
		       1000000ull;
	hq->fallback_ns = (uint64_t)(c->opts.affinity_fallback_ms > 0 ? c->opts.affinity_fallback_ms
								      : 0) *
			  1000000ull;
	/* Relaxed: published by the CAS below. */
	atomic_store_explicit(&hq->nsets, 1 + c->nworkers, memory_order_relaxed);
	/* Release: the initialised structure before its pointer (hq_of()). */
	if (!atomic_compare_exchange_strong_explicit(&c->hq, &exp, hq, memory_order_acq_rel,
						     memory_order_acquire)) {
		for (unsigned i = 0; i < c->nworkers; i++)
			free(hq->sets[1 + i].mem);
		pthread_mutex_destroy(&hq->lock);
		free(hq->sets);
		free(hq);
		return exp; /* another thread made it first */
	}
	return hq;
}

void coord_hq_destroy(struct coord *c)
{
	/* Relaxed: destroy; no other thread uses the coordinator. */
	struct coord_hq *hq = atomic_load_explicit(&c->hq, memory_order_relaxed);

	if (!hq)
		return;
	for (uint32_t i = 1; i < hq->cap; i++)
		free(hq->sets[i].mem);
	pthread_mutex_destroy(&hq->lock);
	free(hq->sets);
	free(hq);
	/* Relaxed: as above. */
	atomic_store_explicit(&c->hq, NULL, memory_order_relaxed);
	for (unsigned i = 0; i < c->ndisp; i++) {
		free(c->disp[i].room);
		free(c->disp[i].blk);
		free(c->disp[i].cands);
		c->disp[i].room = NULL;
		c->disp[i].blk = NULL;
		c->disp[i].cands = NULL;
	}
}

static int cmp_unsigned(const void *a, const void *b)
{
	unsigned x = *(const unsigned *)a, y = *(const unsigned *)b;

	return x < y ? -1 : x > y;
}

int coord_affinity_set(struct coord *c, const unsigned *workers, unsigned n, uint32_t *id,
		       struct coord_error *err)
{
	struct coord_hq *hq;
	unsigned *mem, m = 0;
	uint32_t ns;

	if (!c || !id || !workers || n == 0)
		return coord_seterr(err, COORD_EINVAL,
				    "coord_affinity_set: workers, n >= 1 and id are required");
	for (unsigned i = 0; i < n; i++)
		if (workers[i] >= c->nworkers)
			return coord_seterr(
				err, COORD_EINVAL,
				"coord_affinity_set: worker %u out of range (%u workers)",
				workers[i], c->nworkers);
	mem = malloc(n * sizeof(*mem));
	hq = hq_get(c);
	if (!mem || !hq) {
		free(mem);
		return coord_seterr(err, COORD_ENOMEM, "no memory for an affinity set");
	}
	memcpy(mem, workers, n * sizeof(*mem));
	qsort(mem, n, sizeof(*mem), cmp_unsigned);
	for (unsigned i = 0; i < n; i++)
		if (i == 0 || mem[i] != mem[m - 1])
			mem[m++] = mem[i];
	if (m == 1) {
		*id = COORD_ON_WORKER(mem[0]);
		free(mem);
		return 0;
	}
	pthread_mutex_lock(&hq->lock);
	/* Relaxed: written under the lock we hold. */
	ns = atomic_load_explicit(&hq->nsets, memory_order_relaxed);
	for (uint32_t s = 1 + c->nworkers; s < ns; s++)
		if (hq->sets[s].nmem == m && !memcmp(hq->sets[s].mem, mem, m * sizeof(*mem))) {
			pthread_mutex_unlock(&hq->lock);
			free(mem);
			*id = s;
			return 0;
		}
	if (ns == hq->cap) {
		pthread_mutex_unlock(&hq->lock);
		free(mem);
		return coord_seterr(err, COORD_EINVAL, "coord_affinity_set: more than %u sets",
				    COORD_MAX_AFFINITY_SETS);
	}
	hq->sets[ns].mem = mem;
	hq->sets[ns].nmem = m;
	/* Release: the set's members before its id is usable (schedule reads
	 * them without the lock). */
	atomic_store_explicit(&hq->nsets, ns + 1, memory_order_release);
	pthread_mutex_unlock(&hq->lock);
	*id = ns;
	return 0;
}

static bool all_dropped(struct coord *c, const struct hq_set *s)
{
	for (unsigned i = 0; i < s->nmem; i++)
		/* Acquire: pairs with the recovery thread's state stores (R1). */
		if (atomic_load_explicit(&c->workers[s->mem[i]].state, memory_order_acquire) !=
		    COORD_WORKER_DROPPED)
			return false;
	return true;
}

int coord_hq_check(struct coord *c, const struct coord_call *call, struct coord_error *err)
{
	struct coord_hq *hq;

	if (call->priority < COORD_PRIO_LOW || call->priority > COORD_PRIO_URGENT)
		return coord_seterr(err, COORD_EINVAL, "bad call: priority %d (%d..%d)",
				    call->priority, COORD_PRIO_LOW, COORD_PRIO_URGENT);
	if (call->affinity_mode > COORD_AFFINITY_PREFERRED ||
	    (call->affinity_mode && !call->affinity))
		return coord_seterr(err, COORD_EINVAL,
				    "bad call: affinity_mode %u (strict 0 or preferred 1, "
				    "with an affinity)",
				    call->affinity_mode);
	hq = hq_get(c);
	if (!hq)
		return coord_seterr(err, COORD_ENOMEM, "no memory for the hint queue");
	/* Acquire: pairs with coord_affinity_set()'s release. */
	if (call->affinity >= atomic_load_explicit(&hq->nsets, memory_order_acquire))
		return coord_seterr(err, COORD_EINVAL,
				    "bad call: affinity %u is neither COORD_ON_WORKER(0..%u) "
				    "nor a set of coord_affinity_set()",
				    call->affinity, c->nworkers - 1);
	if (call->affinity && call->affinity_mode == COORD_AFFINITY_STRICT &&
	    all_dropped(c, &hq->sets[call->affinity]))
		return coord_seterr(err, COORD_EUNAVAILABLE,
				    "strict affinity %u: its workers are all dropped (S10)",
				    call->affinity);
	return 0;
}

void coord_hq_fill(struct coord_closure *cl, const struct coord_call *call)
{
	cl->res_dirty |= CL_HINT;
	cl->lvl = (uint8_t)(call->priority + 1);
	cl->aff = call->affinity;
	cl->pref = call->affinity && call->affinity_mode == COORD_AFFINITY_PREFERRED;
	cl->target = -1;
}

void coord_hq_push(struct coord *c, struct coord_closure *cl)
{
	struct coord_hq *hq = hq_of(c); /* made by coord_hq_check() */
	struct coord_closure *h;
	uint64_t t = coord_now_ns(), z = 0;

	cl->t_q = t;
	/* seq_cst: H1 (and E3: the caller's signal needs no fence). */
	atomic_fetch_add_explicit(&c->hq_count, 1, memory_order_seq_cst);
	/* Relaxed: the CAS below re-validates. */
	h = atomic_load_explicit(&hq->in, memory_order_relaxed);
	do {
		cl->next = h;
		/* Release: the closure's fields to the dispatcher that takes
		 * `in` (acquire in absorb()). */
	} while (!atomic_compare_exchange_weak_explicit(&hq->in, &h, cl, memory_order_release,
							memory_order_relaxed));
	/* Order: a main queue waiting now is older than @cl (t, not cl->t_q:
	 * @cl may be taken already).  Relaxed: a ranking hint; a take that
	 * resets it meanwhile only makes the main queue look younger. */
	if (!atomic_load_explicit(&hq->main_skip_ns, memory_order_relaxed) &&
	    !coord_main_queue_empty(c))
		/* Relaxed: as above; a failed CAS keeps an older time. */
		atomic_compare_exchange_strong_explicit(&hq->main_skip_ns, &z, t - 1,
							memory_order_relaxed, memory_order_relaxed);
	/* seq_cst: H2, after the push. */
	atomic_fetch_add_explicit(&c->hq_ver, 1, memory_order_seq_cst);
}

static void fifo_push(struct hq_fifo *f, struct coord_closure *cl)
{
	cl->next = NULL;
	if (f->tail)
		f->tail->next = cl;
	else
		f->head = cl;
	f->tail = cl;
}

static struct coord_closure *fifo_pop(struct hq_fifo *f)
{
	struct coord_closure *cl = f->head;

	f->head = cl->next;
	if (!f->head)
		f->tail = NULL;
	return cl;
}

static void ne_add(struct coord_hq *hq, struct hq_set *s)
{
	if (!s->on_ne) {
		s->on_ne = true;
		s->ne_next = hq->ne;
		hq->ne = s;
	}
}

/* Lower hq_count by @n closures that left the queue (H1). */
static void count_sub(struct coord *c, int64_t n)
{
	if (n)
		/* Release: H1, after the closures left. */
		atomic_fetch_sub_explicit(&c->hq_count, n, memory_order_release);
}

/* A strict closure of a dead set (H3): fail it; under the lock. */
static void fail_dead(struct coord *c, struct hq_set *s, struct coord_closure *cl)
{
	char msg[COORD_ERRMSG_LEN];

	snprintf(msg, sizeof(msg),
		 "closure %llu has strict affinity to worker%s %u%s, all dropped "
		 "(not back within the recovery limit)",
		 (unsigned long long)cl->id, s->nmem > 1 ? "s" : "", s->mem[0],
		 s->nmem > 1 ? ", ..." : "");
	coord_fail_queued(c, cl, COORD_EUNAVAILABLE, (int)s->mem[0], msg);
}

/* Move `in` into the FIFOs, oldest first; under the lock.  Returns how
 * many of them failed at once (H3). */
static int64_t absorb(struct coord *c, struct coord_hq *hq)
{
	/* Acquire: pairs with the push's release CAS. */
	struct coord_closure *h = atomic_exchange_explicit(&hq->in, NULL, memory_order_acquire);
	struct coord_closure *rev = NULL, *nx;
	int64_t failed = 0;

	while (h) { /* newest-first -> oldest-first */
		nx = h->next;
		h->next = rev;
		rev = h;
		h = nx;
	}
	for (; rev; rev = nx) {
		struct hq_set *s = &hq->sets[rev->aff];

		nx = rev->next;
		if (s->dead && !rev->pref) {
			fail_dead(c, s, rev);
			failed++;
			continue;
		}
		fifo_push(&s->q[rev->pref][rev->lvl], rev);
		s->n++;
		ne_add(hq, s);
	}
	return failed;
}

/* A candidate source of a take: one non-empty FIFO of a set. */
struct cand {
	struct hq_set *s;
	struct hq_fifo *f;
};

/* The member of @s with the most room (> 0), or -1. */
static int best_member(const struct hq_set *s, const int32_t *room)
{
	int best = -1;

	for (unsigned i = 0; i < s->nmem; i++)
		if (room[s->mem[i]] > 0 && (best < 0 || room[s->mem[i]] > room[best]))
			best = (int)s->mem[i];
	return best;
}

/* (effective level, age) of a head queued at @t_q with level @lvl. */
static uint64_t rank(const struct coord_hq *hq, unsigned lvl, uint64_t t_q, uint64_t now,
		     uint64_t *age)
{
	uint64_t a = now > t_q ? now - t_q : 0, eff = lvl + a / hq->aging_ns;

	*age = a;
	return eff < HQ_LEVELS - 1 ? eff : HQ_LEVELS - 1;
}

/* The worker list (blk) a dispatcher must watch for room (H2). */
static void blk_add(struct coord_dispatcher *d, unsigned w)
{
	for (unsigned i = 0; i < d->nblk; i++)
		if (d->blk[i] == w)
			return;
	d->blk[d->nblk++] = w;
}

/* A dispatcher's scratch for hinted takes, made at its first one. */
static void take_scratch(struct coord_dispatcher *d, const struct coord_hq *hq)
{
	struct coord *c = d->c;

	d->room = calloc(c->nworkers, sizeof(*d->room));
	d->blk = calloc(c->nworkers, sizeof(*d->blk));
	/* 2 modes x 4 levels per set, for every set there can be */
	d->cands = calloc((size_t)hq->cap * 2 * HQ_LEVELS, sizeof(struct cand));
	if (!d->room || !d->blk || !d->cands)
		coord_die("hint queue", ENOMEM);
}

/* Ask the transport how much room each worker has (ops->room) into
 * d->room; the earliest staggered start still to come lowers *@due.
 * Return: the room of all of them. */
static uint64_t measure_room(struct coord_dispatcher *d, uint64_t now, uint64_t *due)
{
	struct coord *c = d->c;
	uint64_t total = 0;

	for (unsigned w = 0; w < c->nworkers; w++) {
		d->room[w] = c->tp->room(d, w);
		total += d->room[w] > 0 ? (uint64_t)d->room[w] : 0;
		if (c->workers[w].start_at_ns > now && (!*due || c->workers[w].start_at_ns < *due))
			*due = c->workers[w].start_at_ns; /* staggered start (S13) */
	}
	return total;
}

/* Candidates: every non-empty FIFO of every set with closures (an
 * emptied set leaves the list); under the lock.  Return: how many. */
static unsigned gather_cands(struct coord_hq *hq, struct cand *cands)
{
	unsigned ncand = 0;

	for (struct hq_set **pp = &hq->ne, *s; (s = *pp);) {
		if (!s->n) { /* emptied: off the list */
			s->on_ne = false;
			*pp = s->ne_next;
			continue;
		}
		pp = &s->ne_next;
		for (unsigned p = 0; p < 2; p++)
			for (unsigned l = 0; l < HQ_LEVELS; l++)
				if (s->q[p][l].head)
					cands[ncand++] = (struct cand){ .s = s, .f = &s->q[p][l] };
	}
	return ncand;
}

/*
 * The best servable head among @cands (Order), or NULL, with its rank in
 * *@beffp and *@bagep; a preferred head not servable yet lowers *@due to
 * its fallback time.  Under the lock.
 */
static struct cand *best_cand(const struct coord_hq *hq, const struct coord_dispatcher *d,
			      struct cand *cands, unsigned ncand, uint64_t now, uint64_t *due,
			      uint64_t *beffp, uint64_t *bagep)
{
	struct cand *best = NULL;
	uint64_t beff = 0, bage = 0, age, eff;

	for (unsigned i = 0; i < ncand; i++) {
		struct cand *x = &cands[i];
		struct coord_closure *h = x->f->head;
		bool ok;

		if (!h)
			continue;
		if (x->s == &hq->sets[0])
			ok = true;
		else if (best_member(x->s, d->room) >= 0)
			ok = true;
		else
			ok = h->pref && (x->s->dead || now - h->t_q >= hq->fallback_ns);
		if (!ok) {
			if (h->pref) {
				uint64_t t = h->t_q + hq->fallback_ns;

				if (!*due || t < *due)
					*due = t;
			}
			continue;
		}
		eff = rank(hq, h->lvl, h->t_q, now, &age);
		if (!best || eff > beff || (eff == beff && age > bage)) {
			best = x;
			beff = eff;
			bage = age;
		}
	}
	*beffp = beff;
	*bagep = bage;
	return best;
}

/* What is left and waits for room on a worker of ours (H2): d->blk, and
 * d->any_blocked for the any-set.  Under the lock. */
static void note_blocked(struct coord_dispatcher *d, const struct coord_hq *hq,
			 const struct cand *cands, unsigned ncand)
{
	for (unsigned i = 0; i < ncand; i++) {
		struct hq_set *s = cands[i].s;

		if (!cands[i].f->head)
			continue;
		if (s == &hq->sets[0]) {
			d->any_blocked = true;
			continue;
		}
		for (unsigned j = 0; j < s->nmem; j++)
			if (d->room[s->mem[j]] == 0) /* ours, up, full */
				blk_add(d, s->mem[j]);
	}
}

unsigned coord_hq_take(struct coord_dispatcher *d, struct coord_closure **out, unsigned max)
{
	struct coord *c = d->c;
	struct coord_hq *hq = hq_of(c);
	struct cand *cands;
	unsigned ncand, k = 0, nhint = 0;
	uint64_t total, now, due = 0, ver, skip, z = 0;
	bool main_live, main_taken = false;
	int64_t failed;

	if (!hq)
		return 0;
	if (!d->room) /* first hinted take of this dispatcher */
		take_scratch(d, hq);
	cands = d->cands;
	/* seq_cst: H2, read before we look. */
	ver = atomic_load_explicit(&c->hq_ver, memory_order_seq_cst);
	pthread_mutex_lock(&hq->lock);
	failed = absorb(c, hq);
	now = coord_now_ns();
	total = measure_room(d, now, &due);
	if (total > max)
		total = max;
	d->nblk = 0;
	d->any_blocked = false;
	ncand = gather_cands(hq, cands);
	main_live = !coord_main_queue_empty(c);
	/* Relaxed: Order, a ranking hint (pushers may set it, see there). */
	skip = atomic_load_explicit(&hq->main_skip_ns, memory_order_relaxed);
	while (k < max && total > 0) {
		uint64_t beff, bage, age, eff;
		struct cand *best = best_cand(hq, d, cands, ncand, now, &due, &beff, &bage);
		bool best_main = false;
		int target = -1;

		if (main_live) {
			uint64_t t = skip ? skip : now;

			eff = rank(hq, HQ_NORMAL, t, now, &age);
			if (!best || eff > beff || (eff == beff && age > bage))
				best_main = true;
		}
		if (best_main) {
			unsigned n = coord_queue_pop(c, out + k,
						     (unsigned)(max - k < total ? max - k : total));

			k += n;
			total -= n;
			main_taken |= n > 0;
			main_live = n > 0 && !coord_main_queue_empty(c);
			continue;
		}
		if (!best)
			break;
		if (best->s != &hq->sets[0])
			target = best_member(best->s, d->room);
		out[k] = fifo_pop(best->f);
		best->s->n--;
		out[k]->target = target; /* -1: the transport places it */
		if (target >= 0)
			d->room[target]--;
		k++;
		nhint++;
		total--;
	}
	note_blocked(d, hq, cands, ncand);
	if (main_live && !main_taken && !skip)
		/* Relaxed: as above; a pusher's older time wins. */
		atomic_compare_exchange_strong_explicit(&hq->main_skip_ns, &z, now,
							memory_order_relaxed, memory_order_relaxed);
	else if (main_taken)
		/* Relaxed: as above. */
		atomic_store_explicit(&hq->main_skip_ns, 0, memory_order_relaxed);
	pthread_mutex_unlock(&hq->lock);
	count_sub(c, (int64_t)nhint + failed);
	d->hq_due = due;
	/* H2: nothing for us as of @ver; after a take that got some, look
	 * again (what is left may be ours too). */
	d->hq_seen = k ? ver - 1 : ver;
	return k;
}

bool coord_hq_work(struct coord_dispatcher *d)
{
	struct coord *c = d->c;

	/* seq_cst: H2 (pairs with the bump after a push). */
	if (atomic_load_explicit(&c->hq_ver, memory_order_seq_cst) != d->hq_seen || d->any_blocked)
		return true;
	if (d->hq_due && coord_now_ns() >= d->hq_due)
		return true;
	for (unsigned i = 0; i < d->nblk; i++)
		if (c->tp->room(d, d->blk[i]) > 0)
			return true;
	return false;
}

uint64_t coord_dispatch_due(struct coord_dispatcher *d)
{
	/* Relaxed: a hint; 0 when there are no hinted closures. */
	return atomic_load_explicit(&d->c->hq_count, memory_order_relaxed) > 0 ? d->hq_due : 0;
}

/* Cancel every queued hinted closure of a generation older than @g. */
void coord_hq_drain(struct coord *c, uint64_t g)
{
	struct coord_hq *hq = hq_of(c);
	int64_t gone;

	if (!hq)
		return;
	pthread_mutex_lock(&hq->lock);
	gone = absorb(c, hq);
	for (struct hq_set *s = hq->ne; s; s = s->ne_next)
		for (unsigned p = 0; p < 2; p++)
			for (unsigned l = 0; l < HQ_LEVELS; l++) {
				struct hq_fifo *f = &s->q[p][l], keep = { 0 };

				while (f->head) {
					struct coord_closure *cl = fifo_pop(f);

					if (cl->gen < g) {
						s->n--;
						gone++;
						coord_cancel_queued(c, cl);
					} else {
						fifo_push(&keep, cl);
					}
				}
				*f = keep;
			}
	pthread_mutex_unlock(&hq->lock);
	count_sub(c, gone);
}

/* H2: something may be servable now that was not: wake the dispatchers. */
static void hq_changed(struct coord *c)
{
	/* seq_cst: H2 (and E3 for the signal). */
	atomic_fetch_add_explicit(&c->hq_ver, 1, memory_order_seq_cst);
	coord_queue_wake(c);
}

void coord_hq_worker_up(struct coord *c)
{
	if (hq_of(c))
		hq_changed(c);
}

void coord_hq_worker_dropped(struct coord *c, unsigned w)
{
	struct coord_hq *hq = hq_of(c);
	int64_t failed = 0;
	uint32_t ns;

	if (!hq)
		return;
	pthread_mutex_lock(&hq->lock);
	failed = absorb(c, hq);
	/* Relaxed: written under the lock we hold. */
	ns = atomic_load_explicit(&hq->nsets, memory_order_relaxed);
	for (uint32_t i = 1; i < ns; i++) {
		struct hq_set *s = &hq->sets[i];
		bool member = false;

		for (unsigned j = 0; j < s->nmem && !member; j++)
			member = s->mem[j] == w;
		if (!member || s->dead || !all_dropped(c, s))
			continue;
		s->dead = true; /* H3 */
		for (unsigned l = 0; l < HQ_LEVELS; l++)
			while (s->q[0][l].head) {
				fail_dead(c, s, fifo_pop(&s->q[0][l]));
				s->n--;
				failed++;
			}
	}
	pthread_mutex_unlock(&hq->lock);
	count_sub(c, failed);
	hq_changed(c);
}
