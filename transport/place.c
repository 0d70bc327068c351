// SPDX-License-Identifier: MIT
/*
 * transport/place.c - the placement policy of the network transports' event
 * loops (see place.h for the rules PL1-PL4).
 */
#include <errno.h>
#include <limits.h>
#include <stdlib.h>

#include "transport/place.h"

/* PL2: expected run time a closure may wait behind (about one loopback
 * round trip: what a frame of its own would cost it under load). */
#define PACK_WAIT_NS 50000u
/* PL3: no result for this long: stop packing onto a busy connection. */
#define PACK_STALL_NS 1000000u

int coord_place_init(struct coord_place *p, unsigned nconns, uint32_t nfn, _Atomic int *idle_all)
{
	p->conns = calloc(nconns ? nconns : 1, sizeof(*p->conns));
	p->run_ns = malloc((nfn ? nfn : 1) * sizeof(*p->run_ns));
	if (!p->conns || !p->run_ns)
		return -ENOMEM;
	p->nconns = nconns;
	p->nfn = nfn;
	for (uint32_t f = 0; f < nfn; f++)
		p->run_ns[f] = COORD_RUN_UNKNOWN;
	p->idle_all = idle_all;
	return 0;
}

void coord_place_fini(struct coord_place *p)
{
	free(p->conns);
	free(p->run_ns);
	p->conns = NULL;
	p->run_ns = NULL;
}

void coord_place_start(struct coord_place *p)
{
	for (unsigned i = 0; i < p->nconns; i++) {
		struct coord_conn *k = p->conns[i];

		if (k->up)
			p->free_up += k->nfree;
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
	/* PL2: what this closure adds to the work queued on @k; one of
	 * unknown or long run time fills the budget, so nothing is packed
	 * behind it. */
	uint32_t run = cl->fn < p->nfn ? p->run_ns[cl->fn] : COORD_RUN_UNKNOWN;

	k->run[slot] = run < PACK_WAIT_NS ? run : PACK_WAIT_NS;
	if (k->nfree == k->window - 1)
		k->busy_ns = now;
	k->backlog_ns += k->run[slot];
	p->free_up--;
	coord_place_idle_update(p, k);
}

/*
 * PL2: a function's expected run time from one reported sample @ns: up at
 * once to a longer sample, down by half the difference per shorter one, so
 * a function that turned long stops being packed at its first long result,
 * and a single slow run (a worker thread preempted mid-call, frequent when
 * 2 CPUs serve hundreds of connections) is forgotten within a few results.
 */
static void run_note(uint32_t *est, uint32_t ns)
{
	if (ns == COORD_RUN_UNKNOWN)
		return; /* not reported (an error, or an older worker) */
	if (*est == COORD_RUN_UNKNOWN || ns >= *est)
		*est = ns;
	else
		*est -= (*est - ns) / 2;
}

void coord_place_result(struct coord_place *p, struct coord_conn *k, uint32_t fn, uint32_t slot,
			uint32_t run_ns)
{
	p->free_up++;
	k->backlog_ns -= k->run[slot];
	coord_place_idle_update(p, k);
	if (fn < p->nfn)
		run_note(&p->run_ns[fn], run_ns);
}

void coord_place_down(struct coord_place *p, struct coord_conn *k)
{
	p->free_up -= k->nfree;
	p->ndown++;
	k->backlog_ns = 0;
	if (p->pack == k)
		p->pack = NULL;
	coord_place_idle_update(p, k); /* k->up is false: not idle */
}

void coord_place_up(struct coord_place *p, struct coord_conn *k)
{
	p->free_up += k->nfree;
	p->ndown--;
	coord_place_idle_update(p, k);
}

bool coord_place_packable(const struct coord_conn *k, uint64_t now)
{
	uint64_t seen = k->last_rx_ns > k->busy_ns ? k->last_rx_ns : k->busy_ns;

	return k->up && k->nfree && k->nfree < k->window && k->backlog_ns < PACK_WAIT_NS &&
	       now - seen < PACK_STALL_NS;
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
	if (p->pack && (coord_place_packable(p->pack, now) || idle_conn(p->pack, now)))
		return p->pack;
	for (unsigned i = 0; i < p->nconns; i++) {
		unsigned j = (p->rr + i) % p->nconns;
		struct coord_conn *k = p->conns[j];

		if (!k->up || !k->nfree || k->w->start_at_ns > now)
			continue;
		if (coord_place_packable(k, now) && (!pack || k->nfree < pack->nfree))
			pack = k;
		if (k->nfree == k->window && !idle) {
			idle = k;
			idlei = j;
		}
		if (!any || k->nfree > any->nfree) {
			any = k;
			anyi = j;
		}
	}
	if (pack) {
		p->pack = pack;
		return pack;
	}
	if (!idle) { /* only within a batch that credit() overcounted */
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
	if (now >= p->start_end) { /* every worker started: the counts (PL4) */
		*has_idle = p->nidle > 0;
		*has_down = p->ndown > 0;
		n = p->nidle;
		if (p->pack && !p->pack->idle && coord_place_packable(p->pack, now))
			n += p->pack->nfree;
		return n;
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
		} else if (k == p->pack && coord_place_packable(k, now)) {
			n += k->nfree;
		}
	}
	return n;
}

int coord_place_room(const struct coord_conn *k, uint64_t now)
{
	if (k->nfree == k->window)
		return 1;
	return coord_place_packable(k, now) ? (int)k->nfree : 0;
}

int coord_place_idle_elsewhere(const struct coord_place *p)
{
	/* Relaxed: a hint (place.h). */
	return atomic_load_explicit(p->idle_all, memory_order_relaxed) - (int)p->nidle;
}
