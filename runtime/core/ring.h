/* SPDX-License-Identifier: MIT */
/*
 * runtime/core/ring.h - bounded lock-free MPMC ring of pointers, sequence-numbered
 * slots (after D. Vyukov's bounded MPMC queue), with a batched pop.  A wide
 * ring (coord_ring_init_wide()) holds entries of three words instead: the
 * coordinator's queue, whose entries carry small closures inline.
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

#include "runtime/util/util.h"

/* A slot is its sequence number, then the payload: one pointer (16-byte
 * slots), or a struct coord_ring_ent (32-byte slots, two per line). */
struct coord_ring {
	_Atomic uint64_t head __cacheline_aligned; /* next push position */
	_Atomic uint64_t tail __cacheline_aligned; /* next pop position */
	uint64_t mask __cacheline_aligned;
	char *slots;
};

/* An entry of a wide ring: three words, whose meaning is the user's. */
struct coord_ring_ent {
	uint64_t w[3];
};

/* coord_ring_init() - @cap slots, rounded up to a power of two (>= 2). */
COORD_HIDDEN int coord_ring_init(struct coord_ring *r, uint32_t cap);
/* coord_ring_init_wide() - the same, of struct coord_ring_ent entries: use
 * only the _ent functions on it (and empty, size, capacity). */
COORD_HIDDEN int coord_ring_init_wide(struct coord_ring *r, uint32_t cap);
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
/* The same for a wide ring: entries are copied in and out. */
COORD_HIDDEN int coord_ring_push_ent_mp(struct coord_ring *r, const struct coord_ring_ent *e);
COORD_HIDDEN unsigned coord_ring_push_batch_ent_mp(struct coord_ring *r,
						   const struct coord_ring_ent *e, unsigned n);
COORD_HIDDEN unsigned coord_ring_pop_batch_ent_mc(struct coord_ring *r, struct coord_ring_ent *out,
						  unsigned max);
/* coord_ring_ready_ent() - a hint for a consumer's polls: is the entry
 * @k (< capacity) positions past the tail published?  Reads the tail and
 * that slot's seq, not the head, whose line every push claims with a CAS. */
COORD_HIDDEN bool coord_ring_ready_ent(struct coord_ring *r, uint64_t k);
/* coord_ring_empty() - a snapshot; may be stale by the time it returns. */
COORD_HIDDEN bool coord_ring_empty(struct coord_ring *r);
/* coord_ring_size() - a snapshot of the number of values. */
COORD_HIDDEN uint64_t coord_ring_size(struct coord_ring *r);

#endif /* COORD_RUNTIME_RING_H */
