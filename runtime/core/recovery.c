// SPDX-License-Identifier: MIT
/*
 * runtime/core/recovery.c - the slow path: one thread that brings failed workers
 * back (S10, B2).
 *
 * A transport that loses a worker (EOF, a socket error, a missed heartbeat,
 * a closure past its deadline) puts that worker's closures back on the queue
 * itself, at once, and calls coord_worker_lost(): the worker goes UP -> DOWN
 * and this thread wakes.  For each DOWN worker it has the transport's
 * reconnect() run (connect, handshake, hand the connection to its event
 * loop; on an attempt thread, R2),
 * first at once and then with exponential backoff and jitter
 * (RECOVERY_BASE_MS doubling up to RECOVERY_MAX_MS, times 0.5-1.5), until
 * it succeeds (DOWN -> UP: the worker takes closures again; its per-worker
 * resources are made again, lazily, before the first closure that uses
 * them runs there, S9) or opts.recovery_limit_ms has passed since the loss
 * (DOWN -> DROPPED, for good).  When every worker is DROPPED the coordinator
 * reports UNAVAILABLE: queued closures are cancelled and schedule refuses,
 * rather than anything waiting for ever.
 *
 * Nothing here is on the fast path.  Worker states are single atomic words
 * that dispatchers read without a lock (the worker table itself never
 * changes after coord_create()); the bookkeeping fields of struct
 * coord_worker below `state` belong to this thread alone.
 *
 * Invariants
 *   R1  Only coord_worker_lost() moves UP -> DOWN (a CAS: one loss is
 *       counted once however many paths notice it); only this thread moves
 *       DOWN -> UP and DOWN -> DROPPED.
 *   R2  reconnect() runs on a short-lived attempt thread the recovery
 *       thread starts (at most RECOVERY_PAR at once, so one hanging connect
 *       does not hold back the other workers, B2), never two at once for
 *       one worker (rec_busy), and every attempt is joined before
 *       coord_recovery_stop() returns.
 *   R3  c->recovery stays valid until the transport has stopped (see
 *       coord_recovery_free()).
 *
 * Synchronization: the shared fields, who writes them, who reads them, and
 * what orders the two.
 *   field            written by (how)                read by (how)           order
 *   w->state         coord_worker_lost() on a        this thread and         R1: the CAS / the
 *                    transport's thread (acq_rel     sched.c all_dropped()   release store ->
 *                    CAS UP -> DOWN); this thread    (acquire);              the acquire: the
 *                    (release store DOWN -> UP or    coord_metrics()         put-backs before a
 *                    DROPPED, settle())              (relaxed: a count)      reconnect; the
 *                                                                            admission before UP
 *   w->losses,       coord_worker_lost() / settle()  coord_metrics()         none: statistics
 *   w->recoveries    (relaxed RMW)                   (relaxed)
 *   w->rec_*         this thread (plain)             this thread             one thread
 *   a->rc, a->err    the attempt thread (plain)      this thread, after      a->done's release
 *                                                    a->done (plain)         -> acquire; the join
 *   a->done          the attempt thread (release)    this thread (acquire)   as above
 *   r->stop          coord_recovery_stop()           this thread (relaxed,   E1 (futex.h): the
 *                    (relaxed, then the signal)      after ec_prepare())     signal's fence; the
 *                                                                            join
 *   r->wake          signals: coord_worker_lost(),   this thread waits       E1-E3 (futex.h)
 *                    attempts, stop
 *   r->rng           this thread (backoff_ns())      this thread             one thread
 *   c->recovery      coord_recovery_start() before   coord_worker_lost() on  R3: thread start
 *                    the transport starts; _free()   transport threads       and join
 *                    after it stopped (plain)        (plain)
 */
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/util/futex.h"
#include "runtime/core/internal.h"

#define RECOVERY_BASE_MS 50
#define RECOVERY_MAX_MS 5000
#define RECOVERY_IDLE_MS 1000 /* longest sleep with nothing due */

struct coord_recovery {
	struct coord *c;
	pthread_t thread;
	struct coord_ec wake;
	_Atomic int stop;
	uint64_t rng;
};

static uint64_t next_rand(struct coord_recovery *r)
{
	uint64_t z = (r->rng += 0x9e3779b97f4a7c15ull);

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* The wait before try number @tries + 1: base * 2^tries, capped, jittered. */
static uint64_t backoff_ns(struct coord_recovery *r, unsigned tries)
{
	uint64_t ms = RECOVERY_BASE_MS;

	for (unsigned i = 0; i < tries && ms < RECOVERY_MAX_MS; i++)
		ms *= 2;
	if (ms > RECOVERY_MAX_MS)
		ms = RECOVERY_MAX_MS;
	/* 0.5 .. 1.5 times: workers lost together do not retry in step */
	return ms * 1000000ull / 2 + next_rand(r) % (ms * 1000000ull);
}

void coord_worker_lost(struct coord *c, struct coord_worker *w, const char *why)
{
	int up = COORD_WORKER_UP;

	/* R1, acq_rel: the transport's put-backs happen-before the recovery
	 * thread's reconnect of this worker. */
	if (!atomic_compare_exchange_strong_explicit(&w->state, &up, COORD_WORKER_DOWN,
						     memory_order_acq_rel, memory_order_relaxed))
		return;
	/* Relaxed: a statistic (metrics). */
	atomic_fetch_add_explicit(&w->losses, 1, memory_order_relaxed);
	coord_log(COORD_LOG_WARN, "worker %d lost: %s; recovering (limit %lld s)", w->index, why,
		  (long long)(c->opts.recovery_limit_ms / 1000));
	if (c->recovery)
		coord_ec_signal(&c->recovery->wake);
}

/* Every worker DROPPED: nothing can run what is queued (S10). */
static bool all_dropped(struct coord *c)
{
	for (unsigned i = 0; i < c->nworkers; i++)
		/* Acquire: pairs with the state changes above (R1). */
		if (atomic_load_explicit(&c->workers[i].state, memory_order_acquire) !=
		    COORD_WORKER_DROPPED)
			return false;
	return true;
}

/*
 * One reconnect attempt runs on its own short-lived thread, so a worker
 * whose connect or handshake hangs until connect_timeout_ms (a stopped or
 * partitioned machine) does not hold back the others (B2).  At most
 * RECOVERY_PAR attempts run at once; the recovery thread settles each one
 * (R2: one attempt per worker at a time; all are joined before stop
 * returns).
 */
#define RECOVERY_PAR 16

struct attempt {
	struct coord_recovery *r;
	struct coord_worker *w;
	pthread_t thread;
	int rc;
	struct coord_error err;
	_Atomic int done; /* the attempt's result is in rc/err */
};

static void *attempt_main(void *arg)
{
	struct attempt *a = arg;

	a->rc = a->r->c->tp->reconnect(a->r->c, a->w, &a->err);
	/* Release: rc and err happen-before the recovery thread's acquire. */
	atomic_store_explicit(&a->done, 1, memory_order_release);
	coord_ec_signal(&a->r->wake);
	return NULL;
}

/* The outcome of @w's finished attempt: re-admitted, dropped, or due again. */
static void settle(struct coord_recovery *r, struct coord_worker *w, int rc,
		   const struct coord_error *err)
{
	struct coord *c = r->c;
	uint64_t limit = (uint64_t)c->opts.recovery_limit_ms * 1000000ull, now = coord_now_ns();

	if (rc == 0) {
		w->rec_active = false;
		/* R1, release: the transport's admission of the connection
		 * happens-before anyone who sees UP. */
		atomic_store_explicit(&w->state, COORD_WORKER_UP, memory_order_release);
		/* Relaxed: a statistic (metrics). */
		atomic_fetch_add_explicit(&w->recoveries, 1, memory_order_relaxed);
		coord_log(COORD_LOG_INFO, "worker %d re-admitted after %.1f s (%u tries)", w->index,
			  (double)(now - w->rec_down_ns) / 1e9, w->rec_tries + 1);
		coord_hq_worker_up(c); /* B4: closures bound to it may go now */
		return;
	}
	w->rec_tries++;
	if (now - w->rec_down_ns >= limit) {
		w->rec_active = false;
		/* R1, release: as above. */
		atomic_store_explicit(&w->state, COORD_WORKER_DROPPED, memory_order_release);
		coord_log(COORD_LOG_ERROR, "worker %d dropped: not back within %lld s (%s)",
			  w->index, (long long)(c->opts.recovery_limit_ms / 1000), err->msg);
		coord_hq_worker_dropped(c, (unsigned)w->index); /* B4: H3 */
		if (all_dropped(c))
			coord_report_unavailable(
				c, w->index, "every worker is lost and past the recovery limit");
		return;
	}
	w->rec_next_ns = now + backoff_ns(r, w->rec_tries - 1);
	if (w->rec_next_ns > w->rec_down_ns + limit)
		w->rec_next_ns = w->rec_down_ns + limit;
	coord_log(COORD_LOG_DEBUG, "worker %d: reconnect %u failed: %s", w->index, w->rec_tries,
		  err->msg);
}

static void *recovery_main(void *arg)
{
	struct coord_recovery *r = arg;
	struct coord *c = r->c;
	struct attempt *run[RECOVERY_PAR] = { 0 };
	unsigned nrun = 0;

	for (;;) {
		uint32_t v = coord_ec_prepare(&r->wake);
		uint64_t now = coord_now_ns(), due = now + RECOVERY_IDLE_MS * 1000000ull;
		/* Relaxed: a poll flag; the signal after it wakes us (E1). */
		bool stop = atomic_load_explicit(&r->stop, memory_order_relaxed);

		/* Settle finished attempts (and, stopping, wait for the rest:
		 * each is bounded by connect_timeout_ms; R2). */
		for (unsigned i = 0; i < nrun;) {
			struct attempt *a = run[i];

			/* Acquire: pairs with attempt_main()'s release. */
			if (!atomic_load_explicit(&a->done, memory_order_acquire) && !stop) {
				i++;
				continue;
			}
			pthread_join(a->thread, NULL);
			a->w->rec_busy = false;
			if (!stop)
				settle(r, a->w, a->rc, &a->err);
			free(a);
			run[i] = run[--nrun];
		}
		if (stop)
			break;
		for (unsigned i = 0; i < c->nworkers; i++) {
			struct coord_worker *w = &c->workers[i];
			struct attempt *a;

			/* Acquire: pairs with coord_worker_lost() (R1). */
			if (w->rec_busy || atomic_load_explicit(&w->state, memory_order_acquire) !=
						   COORD_WORKER_DOWN)
				continue;
			if (!w->rec_active) { /* a fresh loss: first try at once */
				w->rec_active = true;
				w->rec_down_ns = now;
				w->rec_tries = 0;
				w->rec_next_ns = now;
			}
			if (now < w->rec_next_ns || nrun == RECOVERY_PAR) {
				if (w->rec_next_ns < due)
					due = w->rec_next_ns > now ? w->rec_next_ns
								   : now + 1000000ull;
				continue;
			}
			a = calloc(1, sizeof(*a));
			if (!a)
				break; /* try again next round */
			a->r = r;
			a->w = w;
			if (pthread_create(&a->thread, NULL, attempt_main, a) != 0) {
				free(a);
				break;
			}
			w->rec_busy = true;
			run[nrun++] = a;
		}
		if (due > now)
			(void)coord_ec_wait(&r->wake, v, due);
	}
	return NULL;
}

int coord_recovery_start(struct coord *c, struct coord_error *err)
{
	struct coord_recovery *r;

	if (!c->tp->reconnect)
		return 0; /* this transport's workers cannot fail (inproc) */
	r = calloc(1, sizeof(*r));
	if (!r)
		return coord_seterr(err, COORD_ENOMEM, "no memory for the recovery thread");
	r->c = c;
	r->rng = coord_now_ns() ^ (uint64_t)(uintptr_t)c;
	if (pthread_create(&r->thread, NULL, recovery_main, r) != 0) {
		free(r);
		return coord_seterr(err, COORD_ENOMEM, "cannot start the recovery thread");
	}
	c->recovery = r;
	return 0;
}

/*
 * R3: c->recovery is written only before the transport's threads start
 * (coord_recovery_start()) and after they are joined (coord_recovery_free()),
 * so coord_worker_lost() on an event loop reads it without an atomic.  A
 * worker lost between coord_recovery_stop() and the transport's stop (in
 * coord_destroy()) still finds the struct: it goes DOWN and signals a wake
 * nobody waits for any more; destroy's last cancel retires its closures.
 */
void coord_recovery_stop(struct coord *c)
{
	struct coord_recovery *r = c->recovery;

	if (!r)
		return;
	/* Relaxed: the signal's fence publishes it (E1). */
	atomic_store_explicit(&r->stop, 1, memory_order_relaxed);
	coord_ec_signal(&r->wake);
	pthread_join(r->thread, NULL);
}

void coord_recovery_free(struct coord *c)
{
	free(c->recovery); /* R3: no transport thread is left to read it */
	c->recovery = NULL;
}
