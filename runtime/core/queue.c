// SPDX-License-Identifier: MIT
/*
 * runtime/core/queue.c - the queue closures wait in: the bounded MPMC ring (ring.c)
 * plus the overflow FIFO for put-backs and the unbounded mode; pushes,
 * pops, the waits for room (S1) and the event-loop sleep protocol.
 * Invariants: C1-C10 in coord_pvt.h, with its synchronization table (who
 * writes and reads each shared field of struct coord); Q1 below.
 */
#include <errno.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "runtime/core/coord_pvt.h"

/* ---- the queue: ring + overflow FIFO ---------------------------------------- */

/*
 * The overflow FIFO holds put-backs and, in unbounded mode, closures that
 * did not fit in the ring.  It is off the fast path.  Producers push onto
 * ov_in, a Treiber stack (push-one, take-all: no ABA); a consumer, under
 * ov_lock, takes all of ov_in at once, reverses it onto the tail of ov_out
 * and pops from ov_out's head: a two-stack FIFO, O(1) amortised.
 * ov_count (Q1) is raised before a push and lowered after a pop, so it is
 * never below the number of closures in the FIFO.
 */

/* Push @newest..@oldest (@n closures linked newest-first through next). */
void ov_push(struct coord *c, struct coord_closure *newest, struct coord_closure *oldest, int64_t n)
{
	struct coord_closure *h;

	/* seq_cst: Q1 and E3 in futex.h: this RMW makes queue_empty() false
	 * before the push lands, so coord_ec_signal_sc() needs no fence. */
	atomic_fetch_add_explicit(&c->ov_count, n, memory_order_seq_cst);
	/* Relaxed: the CAS below re-validates. */
	h = atomic_load_explicit(&c->ov_in, memory_order_relaxed);
	do {
		oldest->next = h;
		/* R3 (release): pairs with A3 in ov_pop(): the closures and
		 * their links are visible to the consumer that takes them. */
	} while (!atomic_compare_exchange_weak_explicit(&c->ov_in, &h, newest, memory_order_release,
							memory_order_relaxed));
}

/* Pop up to @max from the overflow FIFO.  @block: wait for ov_lock rather
 * than leave it to the consumer that holds it. */
static unsigned ov_pop(struct coord *c, struct coord_closure **out, unsigned max, bool block)
{
	unsigned n = 0;

	if (ov_empty(c) || max == 0)
		return 0;
	if (block)
		pthread_mutex_lock(&c->ov_lock);
	else if (pthread_mutex_trylock(&c->ov_lock) != 0)
		return 0;
	if (!c->ov_out) {
		/* A3 (acquire): pairs with R3 in ov_push(). */
		struct coord_closure *h = atomic_exchange_explicit(&c->ov_in, NULL,
								   memory_order_acquire);
		struct coord_closure *rev = NULL, *nx;

		while (h) { /* newest-first -> oldest-first */
			nx = h->next;
			h->next = rev;
			rev = h;
			h = nx;
		}
		c->ov_out = rev;
	}
	while (c->ov_out && n < max) {
		out[n++] = c->ov_out;
		c->ov_out = c->ov_out->next;
	}
	pthread_mutex_unlock(&c->ov_lock);
	/* Release: Q1, lowered only after the closures left the FIFO. */
	atomic_fetch_sub_explicit(&c->ov_count, n, memory_order_release);
	return n;
}

bool coord_main_queue_empty(struct coord *c)
{
	return coord_ring_empty(&c->ring) && ov_empty(c);
}

bool queue_empty(struct coord *c)
{
	return coord_main_queue_empty(c) && hq_queued(c) <= 0;
}

/* Is there anything @d may take?  Hinted closures count only when @d can
 * serve one (sched.c H2), so one waiting for another worker costs @d no
 * spinning. */
bool work_for(struct coord_dispatcher *d)
{
	return !coord_main_queue_empty(d->c) || (hq_queued(d->c) > 0 && coord_hq_work(d)) ||
	       coord_dispatch_pw_pending(d); /* S9: resources to release (pw.c) */
}

/* work_for() for a dispatcher's spinning polls: the same, but the ring is
 * looked at through the slot at its tail (coord_ring_ready_ent()), not its
 * head, whose line the producer claims with a CAS on every push: a poll
 * then costs the producer nothing.  A slot claimed and not yet published
 * reads as empty here (work_for() sees it): the poll comes back to it. */
bool work_hint(struct coord_dispatcher *d)
{
	return coord_ring_ready_ent(&d->c->ring, 0) || !ov_empty(d->c) ||
	       (hq_queued(d->c) > 0 && coord_hq_work(d)) || coord_dispatch_pw_pending(d);
}

/* Closures waiting, a snapshot for batch sizing. */
uint64_t coord_queue_size(struct coord *c)
{
	/* Relaxed: a sizing hint only. */
	int64_t ov = atomic_load_explicit(&c->ov_count, memory_order_relaxed), h = hq_queued(c);

	return coord_ring_size(&c->ring) + (ov > 0 ? (uint64_t)ov : 0) + (h > 0 ? (uint64_t)h : 0);
}

/* Q2: an inline entry's flag, argument length and function in w[1]. */
/*
 * queue_pop() - up to @max closures, oldest first.  Bounded mode: the
 * overflow holds only put-backs, which were queued before anything in the
 * ring, so it goes first.  Unbounded mode: producers divert to the overflow
 * while it is non-empty (queue_push()), so the ring holds the older ones.
 * @d: the dispatcher taking, whose own closures take inline entries (Q2),
 * or NULL.
 */
unsigned queue_pop(struct coord *c, struct coord_closure **out, unsigned max, bool block,
		   struct coord_dispatcher *d)
{
	unsigned n = 0;

	if (!c->unbounded)
		n = ov_pop(c, out, max, block);
	n += ring_pop(c, out + n, max - n, d, n);
	if (c->unbounded && n < max)
		n += ov_pop(c, out + n, max - n, block);
	return n;
}

unsigned coord_queue_pop(struct coord *c, struct coord_closure **out, unsigned max)
{
	return queue_pop(c, out, max, false, NULL);
}

/* A producer that found the ring full waits until this many slots are free
 * (at most a quarter of the ring): see wait_not_full(). */
#define COORD_ROOM_MIN 2048u

/*
 * wait_not_full() - wait (spin, then futex) until the ring has room (S1);
 * false if no worker will ever make room (UNAVAILABLE:
 * coord_report_unavailable() wakes us).  "Room" is COORD_ROOM_MIN free
 * slots, not one: a worker claims a batch (the tail CAS) before it frees
 * the slots one by one, and a producer let in at the first free slot would
 * push into the very lines the worker is still writing, taking each from
 * it in turn.  Let in a few thousand slots later, it writes lines the
 * worker has finished with.  The ring stays bounded by its capacity, and
 * a producer that finds room pushes at once, as before.
 */
static bool wait_not_full(struct coord *c)
{
	uint64_t cap = coord_ring_capacity(&c->ring);
	uint64_t until = coord_now_ns() + c->opts.spin_ns;
	unsigned i = 1;

	/* Room: at most this many queued (a tiny ring: one slot free). */
	cap -= cap / 4 < COORD_ROOM_MIN ? (cap / 4 ? cap / 4 : 1) : COORD_ROOM_MIN;
	cap += 1;
	while (coord_now_ns() < until) {
		if (coord_ring_size(&c->ring) < cap)
			return true;
		coord_spin_pause(i++);
	}
	for (;;) {
		uint32_t v = coord_ec_prepare(&c->not_full);

		/* Relaxed: set before the signal that wakes us (E1); checked
		 * first, as the drain that follows it empties the ring. */
		if (atomic_load_explicit(&c->unavailable, memory_order_relaxed))
			return false;
		if (coord_ring_size(&c->ring) < cap)
			return true;
		coord_ec_wait(&c->not_full, v, COORD_FOREVER);
	}
}

/* S1 for hinted closures (B4): the hint queue holds at most the ring's
 * capacity; false if no worker will ever make room (as wait_not_full()). */
static bool wait_hq_room(struct coord *c)
{
	uint64_t cap = coord_ring_capacity(&c->ring);

	if (c->unbounded || hq_queued(c) < (int64_t)cap)
		return true;
	for (;;) {
		uint32_t v = coord_ec_prepare(&c->not_full);

		/* Relaxed: as in wait_not_full(). */
		if (atomic_load_explicit(&c->unavailable, memory_order_relaxed))
			return false;
		if (hq_queued(c) < (int64_t)cap)
			return true;
		coord_ec_wait(&c->not_full, v, coord_now_ns() + 1000000ull);
	}
}

/* Queue closure @cl, or (Q2) inline entry @e when @cl is NULL. */
void queue_push(struct coord *c, struct coord_closure *cl, const struct coord_ring_ent *e)
{
	struct coord_ring_ent ce;

	if (cl && unlikely(cl->res_dirty & CL_HINT)) { /* B4: the hint queue */
		if (!wait_hq_room(c)) {
			cancel_one(c, cl); /* no worker left: never runs */
			return;
		}
		coord_hq_push(c, cl);
	} else if (c->unbounded && !ov_empty(c)) {
		/* Unbounded: once closures overflowed, later ones queue behind
		 * them, so the ring drains and the overflow is served. */
		cl = cl ? cl : ent_closure(c, e);
		ov_push(c, cl, cl, 1);
	} else {
		if (cl) {
			ce.w[0] = (uintptr_t)cl;
			ce.w[1] = 0;
			ce.w[2] = 0;
			e = &ce;
		}
		while (coord_ring_push_ent_mp(&c->ring, e) < 0) {
			if (c->unbounded) {
				cl = cl ? cl : ent_closure(c, e);
				ov_push(c, cl, cl, 1);
				break;
			}
			if (!wait_not_full(c)) {
				/* No worker left: never runs. */
				cancel_one(c, cl ? cl : ent_closure(c, e));
				return;
			}
		}
	}
	check_unavailable(c);
	/* Either push made queue_empty() false with a seq_cst RMW (E3). */
	coord_ec_signal_sc(&c->not_empty);
	/* seq_cst: the same Dekker pair as E3, with a transport event loop
	 * that registers in loop_sleepers and then re-checks the queue
	 * (coord_loop_sleep()).  A plain load on x86. */
	if (unlikely(atomic_load_explicit(&c->loop_sleepers, memory_order_seq_cst)))
		c->tp->wake(c);
}

/* Wake whoever takes from the queue after a push (a seq_cst RMW, E3). */
void queue_pushed(struct coord *c)
{
	coord_ec_signal_sc(&c->not_empty);
	/* seq_cst: as in queue_push(). */
	if (unlikely(atomic_load_explicit(&c->loop_sleepers, memory_order_seq_cst)))
		c->tp->wake(c);
}

void coord_queue_wake(struct coord *c)
{
	queue_pushed(c);
}

/* queue_push() for @n entries (closures or inline calls, Q2), in order: one
 * ring claim and one wake per run of free slots rather than per closure. */
void queue_push_ents(struct coord *c, const struct coord_ring_ent *e, unsigned n)
{
	unsigned done = 0, k;

	while (done < n) {
		if (!(c->unbounded && !ov_empty(c))) {
			k = coord_ring_push_batch_ent_mp(&c->ring, e + done, n - done);
			done += k;
			if (done == n)
				break;
			if (k) {
				/* Wake takers before we wait for the room they make. */
				queue_pushed(c);
				continue;
			}
			if (!c->unbounded) {
				if (wait_not_full(c))
					continue;
				while (done < n) /* no worker left: these never run */
					cancel_one(c, ent_taken(c, NULL, 0, &e[done++]));
				return;
			}
		}
		/* Unbounded, and the ring is full or the overflow is in use: the
		 * rest go to the overflow FIFO behind what is there (S14). */
		struct coord_closure *newest = NULL, *oldest = NULL;

		for (unsigned i = done; i < n; i++) {
			struct coord_closure *cl = ent_taken(c, NULL, 0, &e[i]);

			cl->next = newest;
			newest = cl;
			if (!oldest)
				oldest = cl;
		}
		ov_push(c, newest, oldest, (int64_t)(n - done));
		break;
	}
	check_unavailable(c);
	/* Either push made queue_empty() false with a seq_cst RMW (E3). */
	queue_pushed(c);
}

/* queue_push_ents() for @n <= SCHED_CHUNK closures. */
void queue_push_many(struct coord *c, struct coord_closure **cls, unsigned n)
{
	struct coord_ring_ent e[SCHED_CHUNK];

	for (unsigned i = 0; i < n; i++) {
		e[i].w[0] = (uintptr_t)cls[i];
		e[i].w[1] = 0;
		e[i].w[2] = 0;
	}
	queue_push_ents(c, e, n);
}

bool coord_loop_sleep(struct coord_dispatcher *d)
{
	struct coord *c = d->c;

	/* seq_cst: pairs with the load in queue_push() (see there). */
	atomic_fetch_add_explicit(&c->loop_sleepers, 1, memory_order_seq_cst);
	coord_smp_mb(); /* the registration before the re-check below */
	if (work_for(d)) {
		coord_loop_wake_done(c);
		return false;
	}
	return true;
}

void coord_loop_wake_done(struct coord *c)
{
	/* Relaxed: only producers read it, and a stale non-zero costs one
	 * spurious wake. */
	atomic_fetch_sub_explicit(&c->loop_sleepers, 1, memory_order_relaxed);
}
