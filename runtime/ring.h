/* SPDX-License-Identifier: MIT */
/*
 * runtime/ring.h - bounded lock-free MPMC ring of pointers, sequence-numbered
 * slots (after D. Vyukov's bounded MPMC queue), with a batched pop.
 *
 * Synchronization table ("-" = may run concurrently without exclusion):
 *
 *                         push_mp   pop_mc   pop_batch_mc   size
 *   coord_ring_push_mp       -        -          -           -
 *   coord_ring_push_batch_mp -        -          -           -
 *   coord_ring_pop_mc        -        -          -           -
 *   coord_ring_pop_batch_mc  -        -          -           -
 *   coord_ring_size          -        -          -           - (a snapshot)
 *
 * create/destroy need no concurrent user.
 */
#ifndef COORD_RUNTIME_RING_H
#define COORD_RUNTIME_RING_H

#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#include "runtime/util.h"

struct coord_ring_slot {
	_Atomic uint64_t seq;
	void *val;
};

struct coord_ring {
	_Atomic uint64_t head __cacheline_aligned; /* next push position */
	_Atomic uint64_t tail __cacheline_aligned; /* next pop position */
	uint64_t mask __cacheline_aligned;
	struct coord_ring_slot *slots;
};

/* coord_ring_init() - @cap slots, rounded up to a power of two (>= 2). */
COORD_HIDDEN int coord_ring_init(struct coord_ring *r, uint32_t cap);
COORD_HIDDEN void coord_ring_fini(struct coord_ring *r);

static inline uint64_t coord_ring_capacity(const struct coord_ring *r)
{
	return r->mask + 1;
}

/* coord_ring_push_mp() - 0, or -EAGAIN when full.  @v must not be NULL. */
COORD_HIDDEN int coord_ring_push_mp(struct coord_ring *r, void *v);
/* coord_ring_push_batch_mp() - push up to @n values of @v, in order, into
 * consecutive positions with one claim; returns how many (0 when full). */
COORD_HIDDEN unsigned coord_ring_push_batch_mp(struct coord_ring *r, void *const *v, unsigned n);
/* coord_ring_pop_batch_mc() - pop up to @max values into @out; returns how many. */
COORD_HIDDEN unsigned coord_ring_pop_batch_mc(struct coord_ring *r, void **out, unsigned max);
/* coord_ring_empty() - a snapshot; may be stale by the time it returns. */
COORD_HIDDEN bool coord_ring_empty(struct coord_ring *r);
/* coord_ring_size() - a snapshot of the number of values. */
COORD_HIDDEN uint64_t coord_ring_size(struct coord_ring *r);

#endif /* COORD_RUNTIME_RING_H */
