// SPDX-License-Identifier: MIT
/*
 * runtime/core/ring.c - bounded MPMC pointer ring (see ring.h).
 *
 * Each slot has a sequence number.  Positions are free-running u64s.  A
 * slot's payload is a pointer (16-byte slots) or, in a wide ring, a struct
 * coord_ring_ent (32-byte slots); "val" below is either.
 *
 * Invariants:
 *   I1  slot[p & mask].seq == p      : free, awaiting the push of position p.
 *       slot[p & mask].seq == p + 1  : full, holding the value pushed at p.
 *       After the pop of p it becomes p + cap: free for the push of p + cap.
 *   I2  head and tail only grow; 0 <= head - tail <= cap at every instant
 *       a CAS succeeds (a producer claims p only if the slot is free, I1).
 *   I3  slot.val is written only by the producer that claimed its position
 *       (head CAS) before R1, and read only by the consumer that claimed it
 *       (tail CAS) after A1, before R2.
 *
 * Synchronization:
 *   field      written by (how)                read by (how)               order
 *   head       producers (seq_cst CAS: claims  producers (relaxed hint),   I2; the CAS's seq_cst
 *              a position)                     empty/size checks (relaxed) is E3 in futex.h
 *   tail       consumers (seq_cst CAS)         consumers (relaxed hint),   I2
 *                                              empty/size checks (relaxed)
 *   slot.seq   the claiming producer (release  producers (acquire, A2),    R1 -> A1: val is
 *              R1: full), the claiming         consumers (acquire, A1)     written before; R2 ->
 *              consumer (release R2: free)                                 A2: read before reuse
 *   slot.val   the claiming producer (plain)   the claiming consumer       I3, ordered by R1/A1
 *                                              (plain)                     and R2/A2
 *
 * Why our own ring and not ck_ring_*_mpmc: ck's MPMC enqueue serialises
 * producers on a shared tail they must each wait for in order; here a
 * producer that claimed a slot publishes it alone.  bench/bench_ring.c runs
 * both side by side.
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/core/ring.h"

/* A slot: its seq, then @esz payload bytes (a pointer, or a struct
 * coord_ring_ent); 16 or 32 bytes, so slots never straddle a line. */
#define SLOT_SIZE(esz) ((esz) <= 8 ? 16u : 32u)
#define PTR_ESZ sizeof(void *)
#define ENT_ESZ sizeof(struct coord_ring_ent)

static inline _Atomic uint64_t *slot_seq(const struct coord_ring *r, uint64_t pos, size_t esz)
{
	return (_Atomic uint64_t *)(r->slots + (pos & r->mask) * SLOT_SIZE(esz));
}

static inline void *slot_val(_Atomic uint64_t *seq)
{
	return (char *)seq + sizeof(uint64_t);
}

static int ring_init(struct coord_ring *r, uint32_t cap, size_t esz)
{
	uint64_t n = 2;

	while (n < cap)
		n <<= 1;
	r->slots = aligned_alloc(CACHELINE,
				 (n * SLOT_SIZE(esz) + CACHELINE - 1) & ~(size_t)(CACHELINE - 1));
	if (!r->slots)
		return -ENOMEM;
	r->mask = n - 1;
	memset(r->slots, 0, n * SLOT_SIZE(esz));
	for (uint64_t i = 0; i < n; i++)
		/* Relaxed: the ring is private until create returns. */
		atomic_store_explicit(slot_seq(r, i, esz), i, memory_order_relaxed);
	/* Relaxed: as above. */
	atomic_store_explicit(&r->head, 0, memory_order_relaxed);
	atomic_store_explicit(&r->tail, 0, memory_order_relaxed);
	return 0;
}

int coord_ring_init(struct coord_ring *r, uint32_t cap)
{
	return ring_init(r, cap, PTR_ESZ);
}

int coord_ring_init_wide(struct coord_ring *r, uint32_t cap)
{
	return ring_init(r, cap, ENT_ESZ);
}

void coord_ring_fini(struct coord_ring *r)
{
	free(r->slots);
	r->slots = NULL;
}

/* The push, batched push and pop below are written once for both slot
 * sizes: @esz is a constant in each caller, so they compile to plain moves. */
static __attribute__((always_inline)) inline int ring_push(struct coord_ring *r, const void *v,
							   size_t esz)
{
	/* Relaxed: a hint; the slot's seq (A2) and the CAS decide. */
	uint64_t pos = atomic_load_explicit(&r->head, memory_order_relaxed);
	_Atomic uint64_t *s;

	for (;;) {
		s = slot_seq(r, pos, esz);
		/* A2 (acquire): pairs with R2 in pop: the consumer that freed this
		 * slot has finished reading val before we overwrite it (I3). */
		uint64_t seq = atomic_load_explicit(s, memory_order_acquire);
		int64_t dif = (int64_t)(seq - pos);

		if (dif == 0) {
			/* seq_cst: claims position pos (I2); the slot contents are
			 * published by R1, not by this CAS.  seq_cst (the same
			 * lock cmpxchg as relaxed on x86) lets the coordinator wake
			 * idle dispatchers without a fence (E3 in futex.h): they
			 * see the ring non-empty by this head. */
			if (atomic_compare_exchange_weak_explicit(&r->head, &pos, pos + 1,
								  memory_order_seq_cst,
								  memory_order_relaxed))
				break;
		} else if (dif < 0) {
			return -EAGAIN; /* slot still holds the value of pos - cap: full */
		} else {
			/* Relaxed: another producer took pos; reload the hint. */
			pos = atomic_load_explicit(&r->head, memory_order_relaxed);
		}
	}
	memcpy(slot_val(s), v, esz);
	/* R1 (release): pairs with A1 in pop: publishes val (I1: full). */
	atomic_store_explicit(s, pos + 1, memory_order_release);
	return 0;
}

static __attribute__((always_inline)) inline unsigned ring_push_batch(struct coord_ring *r,
								      const void *v, unsigned n,
								      size_t esz)
{
	/* Relaxed: a hint; the slots' seq (A2) and the CAS decide. */
	uint64_t pos = atomic_load_explicit(&r->head, memory_order_relaxed);
	unsigned k;

	for (;;) {
		/* Count the free slots from pos on, up to n. */
		for (k = 0; k < n; k++) {
			/* A2 (acquire): pairs with R2 in pop: the consumer that
			 * freed this slot has finished reading val (I3). */
			uint64_t seq = atomic_load_explicit(slot_seq(r, pos + k, esz),
							    memory_order_acquire);

			if (seq != pos + k)
				break;
		}
		if (k == 0) {
			/* Relaxed: the first slot is not free at pos: either head
			 * moved (retry there) or the ring is full. */
			uint64_t h = atomic_load_explicit(&r->head, memory_order_relaxed);

			if (h == pos)
				return 0;
			pos = h;
			continue;
		}
		/* seq_cst: claims positions [pos, pos + k) (I2), as the CAS in
		 * ring_push() does, and for the same E3 reason. */
		if (atomic_compare_exchange_weak_explicit(
			    &r->head, &pos, pos + k, memory_order_seq_cst, memory_order_relaxed))
			break;
	}
	for (unsigned i = 0; i < k; i++) {
		_Atomic uint64_t *s = slot_seq(r, pos + i, esz);

		memcpy(slot_val(s), (const char *)v + i * esz, esz);
		/* R1 (release): pairs with A1 in pop: publishes val (I1: full). */
		atomic_store_explicit(s, pos + i + 1, memory_order_release);
	}
	return k;
}

static __attribute__((always_inline)) inline unsigned ring_pop_batch(struct coord_ring *r,
								     void *out, unsigned max,
								     size_t esz)
{
	/* Relaxed: a hint; the slots' seq (A1) and the CAS decide. */
	uint64_t pos = atomic_load_explicit(&r->tail, memory_order_relaxed);
	unsigned n;

	for (;;) {
		/* Count the full slots from pos on, up to max. */
		for (n = 0; n < max; n++) {
			/* A1 (acquire): pairs with R1 in push: val is visible. */
			uint64_t seq = atomic_load_explicit(slot_seq(r, pos + n, esz),
							    memory_order_acquire);

			if (seq != pos + n + 1)
				break;
		}
		if (n == 0) {
			/* Relaxed: recheck whether tail moved under us (then retry)
			 * or the ring is empty at pos. */
			uint64_t t = atomic_load_explicit(&r->tail, memory_order_relaxed);

			if (t == pos)
				return 0;
			pos = t;
			continue;
		}
		/* seq_cst: claims positions [pos, pos + n) (I3); the values were
		 * acquired through A1 above and remain ours once the CAS holds,
		 * since a producer cannot reuse a slot before R2.  seq_cst (the
		 * same lock cmpxchg as relaxed on x86) lets a consumer that made
		 * room wake a producer waiting for it without a fence (E3 in
		 * futex.h), as the push CAS does for the other direction. */
		if (atomic_compare_exchange_weak_explicit(
			    &r->tail, &pos, pos + n, memory_order_seq_cst, memory_order_relaxed))
			break;
	}
	for (unsigned i = 0; i < n; i++) {
		_Atomic uint64_t *s = slot_seq(r, pos + i, esz);

		memcpy((char *)out + i * esz, slot_val(s), esz);
		/* R2 (release): pairs with A2 in push: our read of val is done
		 * before the slot is reused (I1: free for pos + cap). */
		atomic_store_explicit(s, pos + i + r->mask + 1, memory_order_release);
	}
	return n;
}

int coord_ring_push_mp(struct coord_ring *r, void *v)
{
	return ring_push(r, &v, PTR_ESZ);
}

unsigned coord_ring_push_batch_mp(struct coord_ring *r, void *const *v, unsigned n)
{
	return ring_push_batch(r, v, n, PTR_ESZ);
}

unsigned coord_ring_pop_batch_mc(struct coord_ring *r, void **out, unsigned max)
{
	return ring_pop_batch(r, out, max, PTR_ESZ);
}

int coord_ring_push_ent_mp(struct coord_ring *r, const struct coord_ring_ent *e)
{
	return ring_push(r, e, ENT_ESZ);
}

unsigned coord_ring_push_batch_ent_mp(struct coord_ring *r, const struct coord_ring_ent *e,
				      unsigned n)
{
	return ring_push_batch(r, e, n, ENT_ESZ);
}

unsigned coord_ring_pop_batch_ent_mc(struct coord_ring *r, struct coord_ring_ent *out, unsigned max)
{
	return ring_pop_batch(r, out, max, ENT_ESZ);
}

bool coord_ring_ready_ent(struct coord_ring *r, uint64_t k)
{
	/* Relaxed, both: a hint (I1: the seq says full at exactly this
	 * position); the pop that follows re-reads the slot with A1. */
	uint64_t t = atomic_load_explicit(&r->tail, memory_order_relaxed);

	return atomic_load_explicit(slot_seq(r, t + k, ENT_ESZ), memory_order_relaxed) == t + k + 1;
}

bool coord_ring_empty(struct coord_ring *r)
{
	/* Relaxed: a snapshot for idle polling; callers re-check by popping. */
	return atomic_load_explicit(&r->head, memory_order_relaxed) ==
	       atomic_load_explicit(&r->tail, memory_order_relaxed);
}

uint64_t coord_ring_size(struct coord_ring *r)
{
	/* Relaxed: a snapshot for metrics; tail first so the difference is
	 * never negative (both only grow). */
	uint64_t t = atomic_load_explicit(&r->tail, memory_order_relaxed);
	uint64_t h = atomic_load_explicit(&r->head, memory_order_relaxed);

	return h - t;
}
