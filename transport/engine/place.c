// SPDX-License-Identifier: MIT
/*
 * transport/place.c - the placement policy of the network transports' event
 * loops (see place.h for the rules PL1-PL7).
 *
 * Synchronization: a struct coord_place belongs to its loop (place.h);
 * idle_all, shared by the loops, is a relaxed count (a hint for takes).
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>

#include "transport/engine/place.h"

/* PL2: expected run time a closure may wait behind, at least (about one
 * loopback round trip: what a frame of its own would cost it under load);
 * more on a slower link (PL5). */
#define PACK_WAIT_NS COORD_RUN_SHORT_NS
/* PL3: no result for this long, at least: stop packing onto a busy
 * connection (PL5: more on a slower link). */
#define PACK_STALL_NS 1000000u
/* PL2, PL6: run[slot] flag: the closure's run time is unknown or long
 * (its function's gate, runest.h). */
#define RUN_LONG 0x80000000u

/* PL5: round-trip samples per window of the minimum. */
#define RTT_WINDOW 64u

/* PL2, PL5: the run time a closure may wait behind: one round trip of the
 * link, and never less than PACK_WAIT_NS. */
static inline uint64_t pack_wait(const struct coord_place *p)
{
	return p->rtt_ns > PACK_WAIT_NS ? p->rtt_ns : PACK_WAIT_NS;
}

/* PL3, PL5: silence after which a busy connection is no longer packed. */
static inline uint64_t pack_stall(const struct coord_place *p)
{
	return 4 * p->rtt_ns > PACK_STALL_NS ? 4 * p->rtt_ns : PACK_STALL_NS;
}

int coord_place_init(struct coord_place *p, unsigned nconns, uint32_t nfn, _Atomic int *idle_all)
{
	p->conns = calloc(nconns ? nconns : 1, sizeof(*p->conns));
	p->run = malloc((nfn ? nfn : 1) * sizeof(*p->run));
	if (!p->conns || !p->run)
		return -ENOMEM;
	p->nconns = nconns;
	p->nfn = nfn;
	for (uint32_t f = 0; f < nfn; f++)
		coord_runest_init(&p->run[f]);
	p->idle_all = idle_all;
	p->rtt_win = UINT64_MAX;
	p->last_long = true; /* PL6: nothing known yet */
	return 0;
}

void coord_place_fini(struct coord_place *p)
{
	free(p->conns);
	free(p->run);
	p->conns = NULL;
	p->run = NULL;
}

void coord_place_start(struct coord_place *p)
{
	for (unsigned i = 0; i < p->nconns; i++) {
		struct coord_conn *k = p->conns[i];

		if (k->up)
			p->free_short += k->nlong ? 0 : k->nfree;
		else
			p->ndown++;
		p->nidle += k->idle;
		if (k->w->start_at_ns > p->start_end)
			p->start_end = k->w->start_at_ns;
	}
}

void coord_place_idle_update(struct coord_place *p, struct coord_conn *k)
{
	bool idle = k->up && k->nfree == k->window;

	if (idle != k->idle) {
		k->idle = idle;
		p->nidle += idle ? 1 : -1;
		/* Relaxed: a placement hint for the other loops. */
		atomic_fetch_add_explicit(p->idle_all, idle ? 1 : -1, memory_order_relaxed);
	}
}

void coord_place_sent(struct coord_place *p, struct coord_conn *k, const struct coord_closure *cl,
		      uint32_t slot, uint64_t now)
{
	/* PL2: what this closure adds to the work queued on @k (its
	 * function's estimate, at most the budget: one expected to take that
	 * long fills it).  PL6: one of unknown or long run time (the gate)
	 * keeps anything from being placed behind it. */
	const struct coord_runest *e = cl->fn < p->nfn ? &p->run[cl->fn] : NULL;
	uint32_t run = e ? e->est : COORD_RUN_UNKNOWN;
	uint64_t w = pack_wait(p);
	bool lng = !e || !coord_runest_short(e, w);

	if (run >= w)
		run = (uint32_t)(w < RUN_LONG ? w : RUN_LONG - 1);
	k->run[slot] = run | (lng ? RUN_LONG : 0);
	/* PL6: @k's free slots count as placeable while nothing long is on
	 * it (the slot just taken was counted, nfree + 1 before). */
	if (!k->nlong)
		p->free_short -= lng ? k->nfree + 1 : 1;
	k->nlong += lng;
	p->last_long = lng;
	if (k->nfree == k->window - 1)
		k->busy_ns = now;
	k->backlog_ns += run;
	coord_place_idle_update(p, k);
	/* PL2: the connection last sent to is the one being packed, also
	 * when a take aimed the closure at it (B4): credit counts its room. */
	p->pack = k;
}

/*
 * PL5: a round-trip sample from a result that arrived at @rx for a request
 * sent at @sent, whose function reported @run_ns: what is left after the
 * run is the link, the two sides' loops and the wait behind other closures;
 * the minimum over a window of samples is the link and the loops.
 */
static void rtt_note(struct coord_place *p, uint64_t sent, uint64_t rx, uint32_t run_ns)
{
	uint64_t s;

	if (rx <= sent)
		return;
	s = rx - sent;
	if (run_ns != COORD_RUN_UNKNOWN)
		s = s > run_ns ? s - run_ns : 0;
	if (s < p->rtt_win)
		p->rtt_win = s;
	if (++p->rtt_n == RTT_WINDOW) {
		p->rtt_ns = p->rtt_win;
		p->rtt_win = UINT64_MAX;
		p->rtt_n = 0;
	}
}

void coord_place_result(struct coord_place *p, struct coord_conn *k, uint32_t fn, uint32_t slot,
			uint32_t run_ns, bool returned)
{
	bool lng = (k->run[slot] & RUN_LONG) != 0;
	/* PL6: @k's share of free_short before (the slot not yet free). */
	uint64_t before = k->nlong ? 0 : k->nfree - 1;

	k->backlog_ns -= k->run[slot] & ~RUN_LONG;
	k->nlong -= lng;
	/* PL7: a connection that returned work holds a long one until it
	 * answers anything else. */
	if (returned != k->gave_back) {
		k->gave_back = returned;
		k->nlong += returned ? 1 : -1;
	}
	/* PL6: the slot freed (nfree counts it), and all of them once the
	 * last long one left. */
	p->free_short += (k->nlong ? 0 : k->nfree) - before;
	coord_place_idle_update(p, k);
	if (returned)
		return; /* it never ran: no sample */
	rtt_note(p, k->sent_ns[slot], k->last_rx_ns, run_ns);
	if (fn < p->nfn)
		coord_runest_note(&p->run[fn], run_ns);
}

void coord_place_down(struct coord_place *p, struct coord_conn *k)
{
	if (!k->nlong)
		p->free_short -= k->nfree;
	p->ndown++;
	k->backlog_ns = 0;
	k->nlong = 0;
	k->gave_back = false;
	if (p->pack == k)
		p->pack = NULL;
	coord_place_idle_update(p, k); /* k->up is false: not idle */
}

void coord_place_up(struct coord_place *p, struct coord_conn *k)
{
	p->free_short += k->nfree; /* nlong is 0 since coord_place_down() */
	p->ndown--;
	coord_place_idle_update(p, k);
}

bool coord_place_packable(const struct coord_place *p, const struct coord_conn *k, uint64_t now)
{
	uint64_t seen = k->last_rx_ns > k->busy_ns ? k->last_rx_ns : k->busy_ns;

	if (!k->up || !k->nfree || k->nfree == k->window || now - seen >= pack_stall(p))
		return false;
	/* PL6: never behind one of unknown or long run time.  PL2: within the
	 * budget; or past it while no worker of the transport is idle (nobody
	 * else could start it sooner, and the window keeps this one busy). */
	return k->nlong == 0 && (k->backlog_ns < pack_wait(p) ||
				 (p->nidle == 0 && coord_place_idle_elsewhere(p) <= 0));
}

/* Is @k up, started and with nothing in flight? */
static bool idle_conn(const struct coord_conn *k, uint64_t now)
{
	return k->up && k->nfree == k->window && k->w->start_at_ns <= now;
}

struct coord_conn *coord_place_pick(struct coord_place *p, uint64_t now)
{
	struct coord_conn *idle = NULL, *pack = NULL, *any = NULL;
	unsigned idlei = 0, anyi = 0;

	/* The connection being packed, also once it is idle again (an idle
	 * one is as good as any other), so that one connection carries the
	 * stream and its worker serves it as one. */
	if (p->pack && (coord_place_packable(p, p->pack, now) || idle_conn(p->pack, now)))
		return p->pack;
	for (unsigned i = 0; i < p->nconns; i++) {
		unsigned j = (p->rr + i) % p->nconns;
		struct coord_conn *k = p->conns[j];

		if (!k->up || !k->nfree || k->w->start_at_ns > now)
			continue;
		if (coord_place_packable(p, k, now) && (!pack || k->nfree < pack->nfree))
			pack = k;
		if (k->nfree == k->window && !idle) {
			idle = k;
			idlei = j;
		}
		/* PL6: never behind one of unknown or long run time. */
		if (!k->nlong && (!any || k->nfree > any->nfree)) {
			any = k;
			anyi = j;
		}
	}
	if (pack) {
		p->pack = pack;
		return pack;
	}
	if (!idle) { /* within a batch that credit() counted (PL4, PL6) */
		idle = any;
		idlei = anyi;
	}
	if (idle)
		p->rr = (idlei + 1) % p->nconns;
	p->pack = idle;
	return idle;
}

unsigned coord_place_credit(struct coord_place *p, uint64_t now, uint64_t *next_start,
			    bool *has_idle, bool *has_down)
{
	unsigned n = 0;

	*next_start = 0;
	/* Every worker of this loop started and none idle on another loop
	 * (one not yet started counts as idle there): the counts (PL1, PL4).
	 * Otherwise only what can start now, so a loop does not fill its
	 * workers' windows with closures another loop's idle or starting
	 * worker could run (S13). */
	if (now >= p->start_end && coord_place_idle_elsewhere(p) <= 0) {
		/* PL6: after a long one, one per idle connection, or one to
		 * learn whether the stream turned short (it may go behind
		 * short ones), not a batch to give back. */
		uint64_t f = !p->last_long ? p->free_short
			     : p->nidle	   ? p->nidle
					   : p->free_short > 0;

		*has_idle = p->nidle > 0;
		*has_down = p->ndown > 0;
		return f < UINT_MAX ? (unsigned)f : UINT_MAX;
	}
	*has_idle = false;
	*has_down = false;
	for (unsigned i = 0; i < p->nconns; i++) {
		struct coord_conn *k = p->conns[i];

		if (!k->up) {
			*has_down = true;
			continue;
		}
		if (k->w->start_at_ns > now) {
			if (!*next_start || k->w->start_at_ns < *next_start)
				*next_start = k->w->start_at_ns;
			continue;
		}
		if (k->nfree == k->window) {
			n++;
			*has_idle = true;
		} else if (k == p->pack && coord_place_packable(p, k, now)) {
			n += k->nfree;
		}
	}
	return n;
}

int coord_place_room(const struct coord_place *p, const struct coord_conn *k, uint64_t now)
{
	if (k->nfree == k->window)
		return 1;
	return coord_place_packable(p, k, now) ? (int)k->nfree : 0;
}

int coord_place_idle_elsewhere(const struct coord_place *p)
{
	/* Relaxed: a hint (place.h). */
	return atomic_load_explicit(p->idle_all, memory_order_relaxed) - (int)p->nidle;
}
