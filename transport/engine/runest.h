/* SPDX-License-Identifier: MIT */
/*
 * transport/engine/runest.h - what a dispatcher expects of a function's run time,
 * from the run times it saw: the estimate the network engine packs by
 * (transport/engine/place.h PL2) and the verdict both the engine and the
 * in-process workers place by (S2: a closure does not wait behind one of
 * unknown or long run time while another worker could start it).
 *
 * Per function two figures, both COORD_RUN_UNKNOWN until a sample came:
 *   @est   rises at once to a longer sample and falls by half the
 *          difference per shorter one: what to budget for (PL2), so a
 *          function that turned long stops being packed at its first long
 *          result, and a single slow run is forgotten within a few;
 *   @gate  the shorter of the last two samples: long only when two runs
 *          in a row were (or the only one was), so one slow run of a short
 *          function (a worker thread preempted mid-call, frequent when 2
 *          CPUs serve hundreds of connections) does not stop placement
 *          behind it; a function never seen to finish counts as long.
 * Synchronization: none; one dispatcher's own table.
 */
#ifndef COORD_TRANSPORT_RUNEST_H
#define COORD_TRANSPORT_RUNEST_H

#include <stdbool.h>
#include <stdint.h>

#define COORD_RUN_UNKNOWN UINT32_MAX

/* A run time below which a closure is short: about one loopback round
 * trip, what a frame of its own would cost it under load.  S2 lets
 * closures wait behind short ones (the network engine: at least this,
 * more on a slower link, place.h PL5). */
#define COORD_RUN_SHORT_NS 50000u

struct coord_runest {
	uint32_t est, gate, last;
};

static inline void coord_runest_init(struct coord_runest *r)
{
	r->est = r->gate = r->last = COORD_RUN_UNKNOWN;
}

/* One sample of @ns (COORD_RUN_UNKNOWN: none, ignored). */
static inline void coord_runest_note(struct coord_runest *r, uint32_t ns)
{
	if (ns == COORD_RUN_UNKNOWN)
		return; /* not reported (an error, or an older worker) */
	if (r->est == COORD_RUN_UNKNOWN || ns >= r->est)
		r->est = ns;
	else
		r->est -= (r->est - ns) / 2;
	r->gate = r->last == COORD_RUN_UNKNOWN || ns < r->last ? ns : r->last;
	r->last = ns;
}

/* S2: may closures wait behind one of this function (its gate is known and
 * under @short_ns)? */
static inline bool coord_runest_short(const struct coord_runest *r, uint64_t short_ns)
{
	return r->gate != COORD_RUN_UNKNOWN && r->gate < short_ns;
}

#endif /* COORD_TRANSPORT_RUNEST_H */
