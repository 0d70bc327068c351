/* SPDX-License-Identifier: MIT */
/*
 * runtime/core/pool.h - type-stable object pools and pooled byte buffers.
 *
 * struct coord_pool hands out fixed-size objects by 32-bit index from slabs
 * that are never freed before coord_pool_destroy(), so an index (or a stale
 * pointer) always names valid memory; the freelist is a Treiber stack whose
 * head carries a tag against ABA.  Growth (a new slab) is the only slow path
 * and the only place with a mutex.
 *
 * struct coord_bufs gives byte buffers: up to an inline size the caller's own
 * storage, then power-of-two size classes from pools, then malloc (slow path,
 * over COORD_BUF_MAX_POOLED).
 *
 * Synchronization: coord_pool_get()/coord_pool_put() may run concurrently from
 * any threads; coord_pool_destroy() with none.
 */
#ifndef COORD_RUNTIME_POOL_H
#define COORD_RUNTIME_POOL_H

#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "runtime/core/ring.h"
#include "runtime/util/util.h"

#define COORD_POOL_MAX_SLABS 65536u

struct coord_pool {
	/* Free-list head: tag << 32 | (index + 1); index + 1 == 0 means empty.
	 * Alone on its line: every coord_pool_obj() reads the fields below,
	 * and a CAS here would take them from every other cache. */
	_Atomic uint64_t head __cacheline_aligned;
	size_t objsize __cacheline_aligned;
	uint32_t slab_shift; /* objects per slab = 1 << slab_shift */
	_Atomic uint32_t nslabs;
	/* Slab s holds objects [s << shift, (s + 1) << shift) and then their
	 * free-list links, one _Atomic uint32_t each. */
	_Atomic(char *) slabs[COORD_POOL_MAX_SLABS];
	void (*init)(void *obj, uint32_t idx, void *arg);
	void *init_arg;
	pthread_mutex_t grow_lock;
	/* Optional recycle ring in front of the free list (P4): index + 1 of
	 * free objects, FIFO, claimed and returned in batches. */
	struct coord_ring *cache;
	/* Optional second ring (P5), between the cache and the list: what a
	 * full cache cannot take goes here first. */
	struct coord_ring *spill;
};

/*
 * coord_pool_create() - a pool of @objsize-byte objects, 1 << @slab_shift per
 * slab; @prealloc objects are made now.  @init, if set, runs once per object
 * when its slab is made (to store its index, say).
 */
COORD_HIDDEN int coord_pool_create(size_t objsize, uint32_t slab_shift, uint32_t prealloc,
				   void (*init)(void *obj, uint32_t idx, void *arg), void *init_arg,
				   struct coord_pool **out);
COORD_HIDDEN void coord_pool_destroy(struct coord_pool *p);

/* coord_pool_get() - an object, or NULL when memory is exhausted. */
COORD_HIDDEN void *coord_pool_get(struct coord_pool *p);
/* coord_pool_get_many() - up to @n objects with one claim of the free list
 * (fewer when it runs short; the caller asks again); 0 when memory is
 * exhausted. */
COORD_HIDDEN unsigned coord_pool_get_many(struct coord_pool *p, void **out, unsigned n);
/*
 * coord_pool_cache_init() - put a ring of @cap free objects in front of the
 * free list: coord_pool_get_many() and coord_pool_put_many() then move a
 * batch with one claim and no walk of links, whose misses would be paid one
 * after another.  Call before any concurrent use.
 */
COORD_HIDDEN int coord_pool_cache_init(struct coord_pool *p, uint32_t cap);
/*
 * coord_pool_spill_init() - a second ring of @cap free objects behind the
 * cache (after coord_pool_cache_init(), before concurrent use): objects
 * returned while the cache is full wait there instead of on the list, so a
 * batch taken back costs one claim and independent loads, not a walk of
 * links whose misses come one after another (each link names the next).
 */
COORD_HIDDEN int coord_pool_spill_init(struct coord_pool *p, uint32_t cap);
/* coord_pool_put_many() - return the @n objects @idx[] (the caller owns them). */
COORD_HIDDEN void coord_pool_put_many(struct coord_pool *p, const uint32_t *idx, unsigned n);
/* coord_pool_put() - return object @idx (its contents are not touched). */
COORD_HIDDEN void coord_pool_put(struct coord_pool *p, uint32_t idx);
/*
 * Returning many at once: link each object the caller owns to the next with
 * coord_pool_link(p, prev, next), then coord_pool_put_chain(p, first, last)
 * pushes them all with one CAS.
 */
COORD_HIDDEN void coord_pool_link(struct coord_pool *p, uint32_t idx, uint32_t next);
COORD_HIDDEN void coord_pool_put_chain(struct coord_pool *p, uint32_t first, uint32_t last);

static inline void *coord_pool_obj(struct coord_pool *p, uint32_t idx)
{
	/* Acquire: pairs with the release store of the slab pointer in
	 * pool_grow(); an index is only handed out after its slab is published. */
	char *slab = atomic_load_explicit(&p->slabs[idx >> p->slab_shift], memory_order_acquire);

	return slab + (size_t)(idx & ((1u << p->slab_shift) - 1)) * p->objsize;
}

/* --- byte buffers ---------------------------------------------------------- */

#define COORD_BUF_MIN_SHIFT 7  /* 128 B */
#define COORD_BUF_MAX_SHIFT 20 /* 1 MiB */
#define COORD_BUF_MAX_POOLED (1u << COORD_BUF_MAX_SHIFT)
#define COORD_BUF_CLASSES (COORD_BUF_MAX_SHIFT - COORD_BUF_MIN_SHIFT + 1)
#define COORD_BUF_INLINE 0xffu /* buffer is the caller's inline storage */
#define COORD_BUF_MALLOC 0xfeu /* buffer came from malloc */

struct coord_bufs {
	struct coord_pool *cls[COORD_BUF_CLASSES];
};

COORD_HIDDEN int coord_bufs_init(struct coord_bufs *b);
COORD_HIDDEN void coord_bufs_fini(struct coord_bufs *b);

/*
 * coord_buf_get() - @len bytes: @inl itself if @len <= @inl_cap, else pooled
 * or malloc'd.  *@cls records which, for coord_buf_put().  NULL on ENOMEM.
 */
COORD_HIDDEN void *coord_buf_get(struct coord_bufs *b, size_t len, void *inl, size_t inl_cap,
				 uint8_t *cls);
COORD_HIDDEN void coord_buf_put(struct coord_bufs *b, void *buf, uint8_t cls);

#endif /* COORD_RUNTIME_POOL_H */
