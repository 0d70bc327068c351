// SPDX-License-Identifier: MIT
/*
 * transport/rdma/rdma.c - the rdma transport, coordinator side: workers are
 * coord-worker processes serving rdma (the spec's "worker" job addresses,
 * each on an RDMA device), one RC queue pair each (rdma_chan.h).  A backend
 * of the connection engine (transport/engine/engine.h), which does all but
 * move the bytes: here a channel per connection, and epoll over each
 * channel's completion channel fd and rdma_cm fd, the loop's eventfd and
 * its timer (D6).
 *
 * Moving bytes.  A connection's output is posted as one chain of SENDs as
 * far as credits allow, whole frames only (coord_rdma_chan_send_min(); the
 * rest goes when credits come back, after its frames are read), keeping one
 * credit besides rdma_chan.c C2's for a CANCEL, which goes before the REQ
 * frames still waiting (S3: hoist_cancel()) and may take the last (C4);
 * frames are read in place
 * from the receive buffers (zero copy for frames within one buffer), at
 * most a window of them per connection per round.  A failed channel leaves
 * the epoll set and is shut down at once (its worker sees that); it has no
 * completions in flight the loop could still reap, so re-admission
 * destroys it right there and the new one, whose fds the recovery thread
 * put in the epoll set, takes its place.
 *
 * Driving.  A thread waiting for a result (rv_wait(): a fetch) runs the
 * loop's rounds itself while the loop's thread sleeps, instead of waiting
 * for that thread to wake on the completion and then wake it in turn: the
 * reply is reaped by the thread that wants it, as a verbs ping-pong does.
 * With one closure at a time this takes the loop's thread off the round
 * trip's path (in the rig, where every wake-up costs hundreds of
 * microseconds, that was most of the round trip).
 *   D1  Whoever runs a round holds the loop's tok (engine.h E1): the
 *       loop's thread while it is awake, a driver while it drives.
 *   D2  A driver runs rounds until a closure finishes or its spin ends.
 *       While closures are out, a waiter spins (driving whenever the
 *       loop's thread sleeps) for up to twice the recent time from a
 *       closure's send to its result (rt_ns, engine.c rt_sample();
 *       DRIVE_MAX_NS at most), not just opts.spin_ns: else, with results
 *       slower than the loop's own spin, the loop would sleep, the waiter
 *       park, and the result need two wake-ups again.  DRIVE_MAX_NS is
 *       10 ms, above a wake-up in the rig (3-8 ms: a tick or a host time
 *       slice under TCG): with a lower bound, once the wake-ups slow the
 *       round trip past it, the waiter parks, its own wake-up slows the
 *       next one, and the round trip stays at milliseconds (rdma_chan.c
 *       "Often", the worker's side of the same).  A sample whose function
 *       ran at least half of it counts as at most 2 ms, so that a long
 *       closure's waiter spins at most 4 ms of it (20 ms closures: half a
 *       CPU taken from the worker and the rxe device with 10 ms, bench_rdma
 *       var_read, coordinator_cpu_while_waiting 0.48 against 0.08-0.28;
 *       W1's test_w1_long_waits_sleep over rig.sh pair's wire).  Before,
 *       every sample counted as at most 2 ms: at load 15-28 in the rig the
 *       waiter spun 4 ms at most, short closures' round trips took 5-7 ms,
 *       and it parked on every one (2.5-3 context switches each).
 *   D3  A driver leaves the loop as its thread would go to sleep: every
 *       channel armed if closures or PINGs are out, after reaping what
 *       came meanwhile (coord_rdma_chan_arm() drains the old events).
 *   D4  The sleeping thread, woken by completions only while a driver
 *       holds the tok, sleeps again (the CQ fds are edge-triggered): the
 *       driver reaps them.  Woken by anything else (the eventfd, a
 *       connection event, its timeout), it waits for the tok, and the
 *       driver's release wakes it.
 *   D5  A user's schedule() that finds a loop asleep sends the closure
 *       itself (one round, under the tok) instead of waking the loop's
 *       thread, and wakes it only if something is left queued.  Only from
 *       schedule() itself (coord_wake_in_schedule()), never from a wake
 *       inside a round (tl_driving): a round may push (put-backs, B1
 *       dependents), and must not run another loop's round inside it.
 *   D6  Such a schedule() leaves the CQs unarmed (not as D3) and sets the
 *       loop's timer (tfd, in its epoll set) to three times the recent
 *       round trip (TIMER_MIN_NS..TIMER_MAX_NS), past the spin of D2's
 *       waiter, which would otherwise find the loop's thread woken and
 *       waiting for the tok on most slow round trips (the thread then
 *       reaps nothing: the waiter did), unless it is set already: the
 *       fetch that usually follows drives (D2) and reaps the result, and
 *       any driver that leaves stops the timer (after arming the CQs if
 *       closures are still out, D3).  An armed CQ would wake the sleeping
 *       thread on the result only to find the tok held (D4): in the rig,
 *       0.7 context switches per round trip.  If nobody drives in time,
 *       the timer wakes the thread, which takes the tok as for any other
 *       event and reaps.  tpend is the tok holder's; a thread that goes to
 *       sleep arms every CQ and stops the timer.
 *   D7  The loop's thread woken by that timer while a driver holds the
 *       tok (a waiter spinning past three round trips: a slow result, a
 *       loaded host) does not wait for the tok (D4's other events do):
 *       the driver reaps, so the thread sets the timer again, if the
 *       holder still counts on it (tpend, read as a hint), and sleeps
 *       on.  Waiting cost a futex wake at the driver's release, a round
 *       with nothing in it, and a sleep that armed the CQs, so that the
 *       next result woke the thread once more (D4) through the CQ's
 *       event, a tasklet the worker's post ran in ksoftirqd: about three
 *       context switches per closure in a loaded rig.  A holder that
 *       stops the timer between the thread's read of it and its setting
 *       it again leaves it set with tpend false: it fires once more, and
 *       then the thread does not set it again (or takes the tok, as for
 *       any timer); a thread that goes to sleep stops it whatever tpend
 *       says.  So a timer nobody counts on does not keep waking the loop.
 *
 * Synchronization: the loop's shared fields (tok, armed, up, idle,
 * rt_hint) are the engine's (engine.c's table); this backend adds
 * tpend: written only by the tok's holder, read (relaxed) by the loop's
 * thread without the tok in D7, a hint whose staleness costs one timer
 * wake (above).  Its channels, CQs and timer belong to the tok's holder
 * (D1); the timer's fd is also set by D7 (timerfd_settime is atomic).
 */
#include <errno.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/timerfd.h>
#include <unistd.h>

#include "transport/engine/engine.h"
#include "transport/rdma/rdma_chan.h"

#define DRIVE_MAX_NS 10000000ull /* a waiter's spin, at most, while results are due (D2) */
#define TIMER_MIN_NS 100000ull	 /* D6's timer, at least */
#define TIMER_MAX_NS 12000000ull /* and at most: past DRIVE_MAX_NS */
#define DRIVE_ROUND 16		 /* D2: a whole round every 16 polls at least */
#define REQ_MIN_CREDITS 3u	 /* rdma_chan.c C4: one kept for a CANCEL */

struct rdma_conn {
	COORD_CONN_EMBED;
	struct coord_rdma_chan *ch, *admit_ch; /* admit_ch: dialled again */
	size_t ooff;			       /* bytes [ooff, ow.len) of obuf are not posted yet */
	size_t fend; /* the end of a frame too large to post whole (postable()), or 0 */
};

struct rdma_loop {
	struct coord_eloop l;
	int epfd;
	int tfd;	    /* D6: a timerfd in epfd, for what a schedule() sent */
	_Atomic bool tpend; /* D6: tfd is set (written by the tok holder, D1; D7 reads) */
};

_Static_assert(offsetof(struct rdma_conn, conn) == 0, "the engine's casts");
_Static_assert(offsetof(struct rdma_loop, l) == 0, "the engine's casts");

static inline struct rdma_conn *rk(struct coord_conn *k)
{
	return (struct rdma_conn *)k;
}

static inline struct rdma_loop *rl(struct coord_eloop *l)
{
	return (struct rdma_loop *)l;
}

/* ---- moving bytes ---------------------------------------------------------------- */

/* The length of the frame at @p, one of ours (well formed). */
static size_t frame_len(const uint8_t *p, size_t avail, uint8_t *type)
{
	struct coord_wire_hdr h = { 0 };

	(void)coord_wire_parse_hdr(p, avail, COORD_WIRE_MAX_FRAME_LIMIT, &h);
	*type = h.type;
	return COORD_WIRE_HDR + (size_t)h.len;
}

/*
 * How much of @k's output to post within @room bytes: whole frames only,
 * so that what waits for credits starts at a frame (hoist_cancel()); a
 * frame larger than @most, which no room ever holds, as it fits (fend).
 */
static size_t postable(struct rdma_conn *k, size_t room, size_t most)
{
	size_t off = k->ooff;
	uint8_t t;

	if (k->fend)
		return k->fend - off < room ? k->fend - off : room;
	while (off < k->ow.len) {
		size_t f = frame_len(k->obuf + off, k->ow.len - off, &t);

		if (off + f - k->ooff > room) {
			if (off == k->ooff && f > most) {
				k->fend = off + f;
				return room;
			}
			break;
		}
		off += f;
	}
	return off - k->ooff;
}

/*
 * S3: the CANCEL just written at the end of @k's output goes before the REQ
 * frames that wait for credits there (the worker drops those of an older
 * generation all the same: srv_proto.h min_gen), so that it does not wait
 * behind them for the credits a worker whose receives all hold REQ frames
 * it has not started never returns.  They leave two credits for it (C4).
 */
static void hoist_cancel(struct rdma_conn *k)
{
	size_t off = k->ooff, last = off, n = k->ow.len;
	uint8_t tmp[COORD_WIRE_HDR + 8], t = 0;

	while (off < n) {
		last = off;
		off += frame_len(k->obuf + off, n - off, &t);
	}
	if (last == k->ooff || t != COORD_WIRE_CANCEL || n - last > sizeof(tmp))
		return;
	memcpy(tmp, k->obuf + last, n - last);
	memmove(k->obuf + k->ooff + (n - last), k->obuf + k->ooff, last - k->ooff);
	memcpy(k->obuf + k->ooff, tmp, n - last);
}

/* Post @len bytes from k->ooff while credits >= @min (rdma_chan.c C4);
 * false if the channel failed. */
static bool post(struct rdma_conn *k, size_t len, uint32_t min)
{
	size_t sent = 0;

	if (coord_rdma_chan_send_min(k->ch, k->obuf + k->ooff, len, min, &sent) < 0) {
		coord_eng_fail(&k->conn, 0, "the channel closed");
		return false;
	}
	k->ooff += sent;
	if (k->fend && k->ooff >= k->fend)
		k->fend = 0;
	return true;
}

/* ops->send: post what the output holds, as far as credits allow, a
 * CANCEL first (hoist_cancel()). */
static bool rdma_send(struct coord_conn *ck)
{
	struct rdma_conn *k = rk(ck);
	size_t most, room;
	uint8_t t = 0;

	if (k->ow.frame != SIZE_MAX)
		coord_wire_end(&k->ow);
	if (k->urgent && !k->fend)
		hoist_cancel(k);
	if (!k->fend && k->ooff < k->ow.len) {
		size_t f = frame_len(k->obuf + k->ooff, k->ow.len - k->ooff, &t);

		if (t == COORD_WIRE_CANCEL && !post(k, f, 1)) /* rdma_chan.c C4: the credit kept */
			return true;
	}
	room = coord_rdma_chan_room(k->ch, REQ_MIN_CREDITS, &most);
	if (k->ooff < k->ow.len && !post(k, postable(k, room, most), REQ_MIN_CREDITS))
		return true;
	if (k->ooff == k->ow.len) {
		coord_wire_writer_init(&k->ow, k->obuf, k->ocap);
		k->ooff = 0;
	}
	return true;
}

/* Reap @k's completions and every whole frame it holds; true if any came. */
static bool conn_reap(struct rdma_conn *k)
{
	struct coord_wire_hdr h;
	const uint8_t *payload;
	bool got = false;
	int r = 0;

	if (!k->up)
		return false;
	if (coord_rdma_chan_progress_fast(k->ch) < 0 && !coord_rdma_chan_readable(k->ch)) {
		coord_eng_bad(&k->conn, -EPIPE);
		return true;
	}
	/* Bounded: at most one window of frames per round, then the others' turn. */
	for (unsigned i = 0; i <= k->window; i++) {
		r = coord_rdma_chan_read(k->ch, 0, 0, &h, &payload);
		if (r < 0)
			break;
		got = true;
		coord_eng_rx(&k->conn, coord_now_ns());
		if (!coord_eng_frame(&k->conn, &h, payload))
			return true;
	}
	if (r < 0 && r != -ETIMEDOUT) {
		coord_eng_bad(&k->conn, r);
		return true;
	}
	coord_eng_flush(&k->conn); /* credits may have come back */
	return got;
}

static bool rdma_poll(struct coord_eloop *l)
{
	bool got = false;

	for (unsigned i = 0; i < l->place.nconns; i++)
		got |= conn_reap(rk(l->place.conns[i]));
	return got;
}

/* ---- sleeping (D3, D4, D6) --------------------------------------------------------- */

/* D6: @l's timer, relative @ns from now (0: stop it); the tok holder's. */
static void timer_set(struct rdma_loop *l, uint64_t ns)
{
	struct itimerspec its = { .it_value = { .tv_sec = (time_t)(ns / 1000000000u),
						.tv_nsec = (long)(ns % 1000000000u) } };

	if (timerfd_settime(l->tfd, 0, &its, NULL) == 0)
		/* Relaxed: a hint for D7, the only reader without the tok. */
		atomic_store_explicit(&l->tpend, ns != 0, memory_order_relaxed);
}

/* Arm every channel; false if one has work already (do not sleep). */
static bool arm_all(struct coord_eloop *l)
{
	for (unsigned i = 0; i < l->place.nconns; i++) {
		struct rdma_conn *k = rk(l->place.conns[i]);

		if (k->up && coord_rdma_chan_arm(k->ch) != 0)
			return false;
	}
	return true;
}

/* ops->arm: before a sleep; the CQs armed stop D6's timer, whatever
 * tpend says (D7: one may be set that nobody counts on). */
static bool rdma_arm(struct coord_eloop *l)
{
	if (!arm_all(l))
		return false;
	timer_set(rl(l), 0);
	return true;
}

/* One epoll_wait(); *@timer if D6's timer fired; true if something but
 * completions or that timer woke us (or the wait timed out). */
static bool wait_once(struct rdma_loop *l, int ms, bool *timer)
{
	struct epoll_event ev[16];
	int m = epoll_wait(l->epfd, ev, 16, ms);
	bool other = m <= 0;
	uint64_t v;

	for (int i = 0; i < m; i++) {
		if (ev[i].data.ptr == l) {
			(void)!read(l->l.efd, &v, sizeof(v));
			other = true;
		} else if (ev[i].data.ptr == &l->tfd) {
			/* D6: a schedule() sent and nobody reaped in time: ours,
			 * once a driver (if any) lets go (D7). */
			(void)!read(l->tfd, &v, sizeof(v));
			*timer = true;
		} else if ((uintptr_t)ev[i].data.ptr & 1) {
			other = true; /* a connection event */
		}
	}
	return other;
}

/* D7: the timer again, 3 x the recent round trip from now, as D6 sets it. */
static void timer_again(struct rdma_loop *l)
{
	/* Relaxed: a hint (the loop's rt_ns is the tok holder's). */
	uint64_t ns = 3 * atomic_load_explicit(&l->l.e->rt_hint, memory_order_relaxed);
	struct itimerspec its = { { 0, 0 }, { 0, 0 } };

	ns = ns < TIMER_MIN_NS ? TIMER_MIN_NS : ns > TIMER_MAX_NS ? TIMER_MAX_NS : ns;
	its.it_value.tv_sec = (time_t)(ns / 1000000000u);
	its.it_value.tv_nsec = (long)(ns % 1000000000u);
	(void)timerfd_settime(l->tfd, 0, &its, NULL);
}

/* ops->wait: in epoll until an event or @deadline; then the tok (D4, D7). */
static void rdma_wait(struct coord_eloop *el, uint64_t deadline)
{
	struct rdma_loop *l = rl(el);
	bool timer = false;

	for (;;) {
		uint64_t now = coord_now_ns();
		int ms = !deadline	  ? -1
			 : deadline > now ? (int)((deadline - now) / 1000000 + 1)
					  : 0;
		bool other = wait_once(l, ms, &timer);

		if (coord_eng_tok_try(el))
			break;
		if (other) {
			coord_eng_tok_wait(el); /* D4: ours once the driver is done */
			break;
		}
		if (timer) {
			/* D7: a driver holds the tok: it reaps what the timer
			 * was for.  The timer again if the holder counts on it
			 * (it may leave it set, D6), and back to sleep, instead
			 * of waiting for the tok to run an empty round.
			 * Relaxed: a hint (the header, D7). */
			if (atomic_load_explicit(&l->tpend, memory_order_relaxed))
				timer_again(l);
			timer = false;
		}
		/* D4: completions only, and a driver holds the tok: it reaps
		 * them, and arms the CQs again before it leaves (D3).  The CQ
		 * fds are edge-triggered, so this does not spin. */
	}
	if (timer)
		/* Relaxed: read: it fired; the tok is ours now (D7's hint). */
		atomic_store_explicit(&l->tpend, false, memory_order_relaxed);
}

/* ---- driving (D1-D6) -------------------------------------------------------------- */

/*
 * D3: a driver leaves as the loop's thread would go to sleep: the CQs
 * armed while closures (or a PING) are out, so that their completions wake
 * the thread; a completion that is already there is reaped first.  D6: a
 * schedule() that sent (@sent, D5) sets the loop's timer instead, unless
 * it is set already; any other driver stops it.
 */
static void drive_leave(struct coord_eloop *el, bool sent)
{
	struct rdma_loop *l = rl(el);
	struct coord_eng_round ro;
	bool out = el->inflight > 0;

	for (unsigned i = 0; !out && i < el->place.nconns; i++)
		out = el->place.conns[i]->up && el->place.conns[i]->ping_ns;
	if (out && sent) {
		uint64_t ns = 3 * el->rt_ns; /* past the waiter's spin (D2) */

		/* Relaxed: the tok holder's own field (D1). */
		if (!atomic_load_explicit(&l->tpend, memory_order_relaxed))
			timer_set(l, ns < TIMER_MIN_NS	 ? TIMER_MIN_NS
				     : ns > TIMER_MAX_NS ? TIMER_MAX_NS
							 : ns);
		/* Relaxed: as above. */
		if (atomic_load_explicit(&l->tpend, memory_order_relaxed)) {
			coord_eng_tok_release(el);
			return;
		}
	}
	for (unsigned i = 0; out && i < 4 && !arm_all(el); i++)
		coord_eng_round(el, &ro, false);
	/* Relaxed: as above. */
	if (atomic_load_explicit(&l->tpend, memory_order_relaxed))
		timer_set(l, 0);
	coord_eng_tok_release(el);
}

/* The thread runs a round of some loop now (a driver): a wake it causes
 * must not drive another one from inside this one (D5). */
static __thread bool tl_driving;

/* Has a connection of @l something to read (or failed)?  A round's first
 * step, without the rest of the round. */
static bool rdma_ready(struct coord_eloop *l)
{
	for (unsigned i = 0; i < l->place.nconns; i++) {
		struct rdma_conn *k = rk(l->place.conns[i]);

		if (k->up &&
		    (coord_rdma_chan_progress_fast(k->ch) < 0 || coord_rdma_chan_readable(k->ch)))
			return true;
	}
	return false;
}

/* D2: rounds of @l until a closure finishes, nothing of ours is out, or
 * *@until; the tok is ours.  Between rounds only the CQs are polled, a
 * whole round every DRIVE_ROUND polls or when a frame is there: a result
 * is seen within one poll, not one round (the rest of a round, liveness,
 * placement, the queue, costs several times a poll under TCG). */
static void drive_loop(struct coord_eloop *l, uint64_t until)
{
	uint64_t fin = l->finished, now = coord_now_ns();
	struct coord_eng_round ro;
	unsigned spins = 0;

	for (unsigned i = 0; l->finished == fin && now < until; i++) {
		if (i % DRIVE_ROUND && !rdma_ready(l)) {
			coord_spin_pause(++spins);
			now = coord_now_ns();
			continue;
		}
		coord_eng_round(l, &ro, false);
		if (ro.stop || (!l->inflight && l->finished == fin))
			break;
		now = coord_now_ns();
	}
}

static bool rdma_drive(struct coord *c, uint64_t since, uint64_t *until)
{
	struct coord_eng *e = coord_view(c)->tp_state;
	bool drove = false;

	/* Relaxed: a stopping coordinator's loops finish alone. */
	if (!e || tl_driving ||
	    atomic_load_explicit(&coord_view(c)->stopping, memory_order_relaxed))
		return false;
	/* D2, relaxed: hints.  Closures are out while some connection up is
	 * not idle; then spin as long as results have recently taken. */
	if (atomic_load_explicit(&e->idle, memory_order_relaxed) <
	    (int)atomic_load_explicit(&e->up, memory_order_relaxed)) {
		uint64_t rt = atomic_load_explicit(&e->rt_hint, memory_order_relaxed);
		uint64_t ext = 2 * rt > DRIVE_MAX_NS ? DRIVE_MAX_NS : 2 * rt;

		if (since + ext > *until)
			*until = since + ext;
	}
	for (unsigned i = 0; i < e->nloops; i++) {
		struct coord_eloop *l = coord_eng_loop(e, i);

		if (!coord_eng_tok_try(l))
			continue;
		drove = true;
		tl_driving = true;
		drive_loop(l, *until);
		drive_leave(l, false);
		tl_driving = false;
	}
	return drove;
}

/*
 * D5: a user's schedule() found a loop asleep: send what it queued from
 * this thread, one round of a sleeping loop whose tok is free, rather than
 * wake the loop's thread to do it.  True if that took everything queued.
 */
static bool wake_drive(struct coord *c, struct coord_eng *e)
{
	for (unsigned i = 0; i < e->nloops; i++) {
		struct coord_eloop *l = coord_eng_loop(e, i);
		struct coord_eng_round ro;

		/* Relaxed: a hint (asleep in epoll); the tok decides. */
		if (!atomic_load_explicit(&l->armed, memory_order_relaxed) || !coord_eng_tok_try(l))
			continue;
		tl_driving = true;
		coord_eng_round(l, &ro, false);
		drive_leave(l, true);
		tl_driving = false;
		if (ro.took && coord_queue_size(c) == 0)
			return true;
	}
	return false;
}

/* schedule() saw a loop asleep: the engine's wake, unless the scheduling
 * thread sent the work itself (D5). */
static void rdma_wake(struct coord *c)
{
	struct coord_eng *e = coord_view(c)->tp_state;

	/* Relaxed: as in rdma_drive(). */
	if (e && !tl_driving && coord_wake_in_schedule() &&
	    !atomic_load_explicit(&coord_view(c)->stopping, memory_order_relaxed) &&
	    wake_drive(c, e))
		return;
	coord_eng_wake(c);
}

/* ---- connections ----------------------------------------------------------------- */

/* Watch @ch's two fds in @k's loop's epoll set (epoll_ctl is thread-safe):
 * the completion channel edge-triggered (D4: a thread that leaves its
 * events to a driver must not find them again at once), the rdma_cm
 * channel tagged with bit 0 (wait_once()). */
static int chan_watch(struct coord_conn *k, struct coord_rdma_chan *ch)
{
	struct epoll_event ev = { .events = EPOLLIN | EPOLLET, .data.ptr = k };
	struct epoll_event cm = { .events = EPOLLIN, .data.ptr = (char *)k + 1 };
	int epfd = rl(k->loop)->epfd, cq_fd, cm_fd, r;

	coord_rdma_chan_fds(ch, &cq_fd, &cm_fd);
	if (epoll_ctl(epfd, EPOLL_CTL_ADD, cq_fd, &ev) < 0)
		return -errno;
	if (epoll_ctl(epfd, EPOLL_CTL_ADD, cm_fd, &cm) < 0) {
		r = -errno;
		epoll_ctl(epfd, EPOLL_CTL_DEL, cq_fd, NULL);
		return r;
	}
	return 0;
}

/* ops->dial; the new channel's fds go in the loop's epoll set at once
 * (events for one not installed yet only wake the loop). */
static int rdma_dial(struct coord_conn *k, bool again, struct coord_error *err)
{
	const struct coord_view *c = coord_cview(k->loop->e->c);
	struct coord_rdma_opts copts = { .max_frame = c->opts.max_frame };
	struct coord_rdma_chan *ch = NULL;
	struct coord_frame_io io;
	int r = coord_rdma_connect(k->peer, &copts, c->opts.connect_timeout_ms, &ch, err);

	if (r < 0)
		return r;
	coord_rdma_chan_io(&io, ch);
	r = coord_eng_greet(k, &io, err);
	if (r >= 0) {
		r = chan_watch(k, ch);
		if (r < 0)
			coord_seterr(err, r, "%s: epoll_ctl: %s", k->peer, strerror(-r));
	}
	if (r < 0)
		coord_rdma_chan_destroy(ch);
	else if (again)
		rk(k)->admit_ch = ch;
	else
		rk(k)->ch = ch;
	return r;
}

static bool rdma_install(struct coord_conn *ck)
{
	struct rdma_conn *k = rk(ck);

	coord_rdma_chan_destroy(k->ch); /* failed: out of epoll, shut down */
	k->ch = k->admit_ch;
	k->admit_ch = NULL;
	k->ooff = k->fend = 0;
	return true;
}

static void rdma_drop(struct coord_conn *k)
{
	coord_rdma_chan_destroy(rk(k)->admit_ch);
	rk(k)->admit_ch = NULL;
}

/* ops->down: out of the epoll set (a closed channel's fds may stay
 * readable), and disconnect now, so a worker still alive (a missed
 * heartbeat, a closure past its deadline) drops its side. */
static void rdma_down(struct coord_conn *k, int code, const char *why)
{
	struct rdma_conn *r = rk(k);
	int cq_fd, cm_fd;

	(void)code;
	(void)why;
	if (!r->ch)
		return;
	coord_rdma_chan_fds(r->ch, &cq_fd, &cm_fd);
	epoll_ctl(rl(k->loop)->epfd, EPOLL_CTL_DEL, cq_fd, NULL);
	epoll_ctl(rl(k->loop)->epfd, EPOLL_CTL_DEL, cm_fd, NULL);
	coord_rdma_chan_shutdown(r->ch);
}

static void rdma_close(struct coord_conn *k, bool bye)
{
	struct coord_frame_io io;

	if (bye && rk(k)->ch) {
		coord_rdma_chan_io(&io, rk(k)->ch);
		coord_send_error_io(&io, 0, "coordinator shutting down");
	}
	coord_rdma_chan_destroy(rk(k)->ch);
}

/* ---- loops ----------------------------------------------------------------------- */

static int rdma_loop_init(struct coord_eloop *el, unsigned nconns, struct coord_error *err)
{
	struct rdma_loop *l = rl(el);
	struct epoll_event ev = { .events = EPOLLIN, .data.ptr = l };
	struct epoll_event tev = { .events = EPOLLIN, .data.ptr = &l->tfd };

	(void)nconns;
	el->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
	l->epfd = epoll_create1(EPOLL_CLOEXEC);
	l->tfd = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
	if (el->efd < 0 || l->epfd < 0 || l->tfd < 0 ||
	    epoll_ctl(l->epfd, EPOLL_CTL_ADD, el->efd, &ev) < 0 ||
	    epoll_ctl(l->epfd, EPOLL_CTL_ADD, l->tfd, &tev) < 0)
		return coord_seterr(err, COORD_ENOMEM, "no memory for an event loop");
	return 0;
}

static void rdma_loop_fini(struct coord_eloop *el)
{
	if (rl(el)->epfd >= 0)
		close(rl(el)->epfd);
	if (rl(el)->tfd >= 0)
		close(rl(el)->tfd);
}

static const struct coord_eng_ops rdma_ops = {
	.name = "rdma",
	.conn_size = sizeof(struct rdma_conn),
	.loop_size = sizeof(struct rdma_loop),
	.spin = true,
	.available = coord_rdma_available,
	.loop_init = rdma_loop_init,
	.loop_fini = rdma_loop_fini,
	.dial = rdma_dial,
	.install = rdma_install,
	.drop = rdma_drop,
	.down = rdma_down,
	.close = rdma_close,
	.send = rdma_send,
	.poll = rdma_poll,
	.arm = rdma_arm,
	.wait = rdma_wait,
};

static int rdma_start(struct coord *c, struct coord_error *err)
{
	return coord_eng_start(c, &rdma_ops, err);
}

const struct coord_tp_ops coord_tp_rdma = {
	.name = "rdma",
	.caps = COORD_TP_PS_RDMA,
	COORD_ENG_TP_OPS(rdma_start),
	.wake = rdma_wake,
	.drive = rdma_drive,
};
