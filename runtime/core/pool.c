// SPDX-License-Identifier: MIT
/*
 * runtime/core/pool.c - type-stable object pools (see pool.h).
 *
 * Invariants:
 *   P1  A slab, once published in slabs[], stays mapped until
 *       coord_pool_destroy(); so does its link array.
 *   P2  An index is on the free list at most once: only its owner puts it.
 *   P4  With a cache ring, a free index is either in the ring (as index + 1)
 *       or on the list, never both; the ring's R1/A1 order the previous
 *       owner's writes before the next owner's use, as R1/A1 here do.
 *   P5  With a spill ring as well, a free index is in exactly one of the
 *       cache, the spill ring and the list.  Returns fill the cache, then
 *       the spill ring, then the list; takes empty them in the same order,
 *       so objects recycle through the small cache (warm lines) while it
 *       has any, and the spill ring holds the excess of a burst.
 *   P3  Every successful CAS on head changes the tag, so a popper that read
 *       head, then stalled while the same index was popped and pushed back,
 *       fails its CAS (ABA).  The tag is 32 bits: a stall across 2^32 CASes
 *       on one pool is assumed impossible.
 *
 * A popper reads the link of an index it does not own yet; by P1 the read
 * is of valid memory, and by P3 a stale link is never installed.
 *
 * Synchronization:
 *   field        written by (how)                read by (how)              order
 *   head         returns (release CAS, R1),      takes (acquire, A1)        R1 -> A1: the last
 *   (tag|idx)    takes (acquire CAS)                                        owner's writes and
 *                                                                           the links; P3
 *   link[idx]    the index's owner, before its   takes (relaxed, under      R1 -> A1 (P1: always
 *                return (relaxed)                the acquire of head)       mapped)
 *   slabs[s]     the grower, under grow_lock     coord_pool_obj(),          R2 -> acquire: the
 *                (release, R2)                   link_of() (acquire)        slab's contents
 *   nslabs       the grower, under grow_lock     growers (under the lock),  grow_lock
 *                (relaxed)                       destroy
 *   cache/spill  returns and takes, through      the same                   the rings' R1/A1
 *   rings        their rings (ring.c)                                       (ring.c), P4, P5
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/core/pool.h"

#define HEAD_IDX(h) ((uint32_t)(h))
#define HEAD_TAG(h) ((uint32_t)((h) >> 32))
#define MK_HEAD(tag, idx1) (((uint64_t)(tag) << 32) | (uint64_t)(idx1))

static _Atomic uint32_t *link_of(struct coord_pool *p, uint32_t idx)
{
	/* Acquire: as in coord_pool_obj(), pairs with the slab publication. */
	char *slab = atomic_load_explicit(&p->slabs[idx >> p->slab_shift], memory_order_acquire);
	size_t per = (size_t)1 << p->slab_shift;

	return (_Atomic uint32_t *)(slab + per * p->objsize) + (idx & (per - 1));
}

/* Push the chain first..last (already linked through link_of) onto head. */
static void push_chain(struct coord_pool *p, uint32_t first, uint32_t last)
{
	/* Relaxed: the CAS below re-validates; its failure reloads head. */
	uint64_t h = atomic_load_explicit(&p->head, memory_order_relaxed);

	for (;;) {
		/* Relaxed: the link is published by the release CAS below (R1). */
		atomic_store_explicit(link_of(p, last), HEAD_IDX(h), memory_order_relaxed);
		/* R1 (release): pairs with A1 in coord_pool_get(): the link and
		 * everything the previous owner wrote to the objects happen-before
		 * the next owner's use (P3: new tag). */
		if (atomic_compare_exchange_weak_explicit(
			    &p->head, &h, MK_HEAD(HEAD_TAG(h) + 1, first + 1), memory_order_release,
			    memory_order_relaxed))
			return;
	}
}

/* Make one slab and push its objects.  Caller holds grow_lock. */
static int add_slab_locked(struct coord_pool *p)
{
	size_t per = (size_t)1 << p->slab_shift, bytes;
	uint32_t s, base;
	char *slab;

	/* Relaxed: nslabs is only written under grow_lock. */
	s = atomic_load_explicit(&p->nslabs, memory_order_relaxed);
	if (s >= COORD_POOL_MAX_SLABS)
		return -ENOMEM;
	/* Cache-line aligned (calloc gives 16 bytes): objects are whole lines,
	 * so neighbours used by different threads share none. */
	bytes = (per * p->objsize + per * sizeof(_Atomic uint32_t) + CACHELINE - 1) &
		~(size_t)(CACHELINE - 1);
	slab = aligned_alloc(CACHELINE, bytes);
	if (!slab)
		return -ENOMEM;
	memset(slab, 0, bytes);
	base = s << p->slab_shift;
	for (size_t i = 0; i < per; i++) {
		if (p->init)
			p->init(slab + i * p->objsize, base + (uint32_t)i, p->init_arg);
		/* Relaxed: the slab is private until the release store below. */
		atomic_store_explicit((_Atomic uint32_t *)(slab + per * p->objsize) + i,
				      i + 1 < per ? base + (uint32_t)i + 2 : 0,
				      memory_order_relaxed);
	}
	/* R2 (release): pairs with the acquire in coord_pool_obj()/link_of():
	 * the slab's contents are visible before any of its indices is. */
	atomic_store_explicit(&p->slabs[s], slab, memory_order_release);
	/* Relaxed: written under grow_lock, read only by destroy. */
	atomic_store_explicit(&p->nslabs, s + 1, memory_order_relaxed);
	push_chain(p, base, base + (uint32_t)per - 1);
	return 0;
}

/* Slow path of coord_pool_get(): add a slab unless another thread just did. */
static int pool_grow(struct coord_pool *p)
{
	int ret = 0;

	pthread_mutex_lock(&p->grow_lock);
	/* Acquire: another grower may have just pushed a slab; if the list is
	 * no longer empty, there is nothing to do. */
	if (HEAD_IDX(atomic_load_explicit(&p->head, memory_order_acquire)) == 0)
		ret = add_slab_locked(p);
	pthread_mutex_unlock(&p->grow_lock);
	return ret;
}

int coord_pool_create(size_t objsize, uint32_t slab_shift, uint32_t prealloc,
		      void (*init)(void *, uint32_t, void *), void *init_arg,
		      struct coord_pool **out)
{
	struct coord_pool *p = calloc(1, sizeof(*p));

	if (!p)
		return -ENOMEM;
	/* Keep objects cache-line aligned so neighbours do not share lines. */
	p->objsize = (objsize + CACHELINE - 1) & ~(size_t)(CACHELINE - 1);
	p->slab_shift = slab_shift;
	p->init = init;
	p->init_arg = init_arg;
	pthread_mutex_init(&p->grow_lock, NULL);
	for (uint32_t n = 0; n < prealloc; n += 1u << slab_shift) {
		int r;

		pthread_mutex_lock(&p->grow_lock);
		r = add_slab_locked(p);
		pthread_mutex_unlock(&p->grow_lock);
		if (r < 0) {
			coord_pool_destroy(p);
			return r;
		}
	}
	*out = p;
	return 0;
}

static int ring_make(uint32_t cap, struct coord_ring **out)
{
	struct coord_ring *r = malloc(sizeof(*r));

	if (!r)
		return -ENOMEM;
	if (coord_ring_init(r, cap) < 0) {
		free(r);
		return -ENOMEM;
	}
	*out = r;
	return 0;
}

static void ring_free(struct coord_ring *r)
{
	if (r) {
		coord_ring_fini(r);
		free(r);
	}
}

int coord_pool_cache_init(struct coord_pool *p, uint32_t cap)
{
	return ring_make(cap, &p->cache);
}

int coord_pool_spill_init(struct coord_pool *p, uint32_t cap)
{
	return p->cache ? ring_make(cap, &p->spill) : -EINVAL;
}

void coord_pool_destroy(struct coord_pool *p)
{
	if (!p)
		return;
	ring_free(p->cache);
	ring_free(p->spill);
	/* Relaxed: no concurrent user (documented precondition). */
	for (uint32_t s = 0; s < atomic_load_explicit(&p->nslabs, memory_order_relaxed); s++)
		free(atomic_load_explicit(&p->slabs[s], memory_order_relaxed));
	pthread_mutex_destroy(&p->grow_lock);
	free(p);
}

/* Take up to @n objects from ring @r (P4, P5); how many. */
static unsigned ring_get(struct coord_pool *p, struct coord_ring *r, void **out, unsigned n)
{
	unsigned k;

	if (!r)
		return 0;
	k = coord_ring_pop_batch_mc(r, out, n);
	for (unsigned i = 0; i < k; i++)
		out[i] = coord_pool_obj(p, (uint32_t)((uintptr_t)out[i] - 1));
	return k;
}

/* Take up to @n objects from the cache ring, else the spill ring (P5). */
static unsigned cache_get(struct coord_pool *p, void **out, unsigned n)
{
	unsigned k = ring_get(p, p->cache, out, n);

	return k ? k : ring_get(p, p->spill, out, n);
}

/* Pop one object from the free list. */
static void *list_get(struct coord_pool *p)
{
	/* A1 (acquire): pairs with R1 in push_chain(). */
	uint64_t h = atomic_load_explicit(&p->head, memory_order_acquire);

	for (;;) {
		uint32_t idx1 = HEAD_IDX(h), next;

		if (unlikely(idx1 == 0)) {
			if (pool_grow(p) < 0)
				return NULL;
			/* A1 again after growth. */
			h = atomic_load_explicit(&p->head, memory_order_acquire);
			continue;
		}
		/* Relaxed: possibly stale; the tagged CAS rejects it (P3). */
		next = atomic_load_explicit(link_of(p, idx1 - 1), memory_order_relaxed);
		/* A1 (acquire on success): the object's previous owner's writes
		 * (released by R1) happen-before ours. */
		if (atomic_compare_exchange_weak_explicit(
			    &p->head, &h, MK_HEAD(HEAD_TAG(h) + 1, next), memory_order_acquire,
			    memory_order_acquire))
			return coord_pool_obj(p, idx1 - 1);
	}
}

void *coord_pool_get(struct coord_pool *p)
{
	void *o;

	return cache_get(p, &o, 1) ? o : list_get(p);
}

/* Pop up to @n objects from the free list with one CAS. */
static unsigned list_get_many(struct coord_pool *p, void **out, unsigned n)
{
	/* A1 (acquire): pairs with R1 in push_chain(), as in coord_pool_get(). */
	uint64_t h = atomic_load_explicit(&p->head, memory_order_acquire);
	uint32_t next;
	unsigned k;

	for (;;) {
		next = HEAD_IDX(h);
		if (unlikely(next == 0)) {
			if (pool_grow(p) < 0)
				return 0;
			/* A1 again after growth. */
			h = atomic_load_explicit(&p->head, memory_order_acquire);
			continue;
		}
		/* Walk up to n links.  The links of indices we do not own yet may
		 * be stale (P1 keeps them readable); if any changed, so did the
		 * head's tag, and the CAS below fails (P3). */
		for (k = 0; k < n && next != 0; k++) {
			out[k] = (void *)(uintptr_t)(next - 1);
			/* Relaxed: possibly stale; the tagged CAS rejects it (P3). */
			next = atomic_load_explicit(link_of(p, next - 1), memory_order_relaxed);
		}
		/* A1 (acquire on success): the previous owners' writes to all k
		 * objects (released by R1 before the head we replace) happen-before
		 * ours: every change of head is a CAS, so this acquire reads the
		 * end of a release sequence that contains them. */
		if (atomic_compare_exchange_weak_explicit(
			    &p->head, &h, MK_HEAD(HEAD_TAG(h) + 1, next), memory_order_acquire,
			    memory_order_acquire))
			break;
	}
	for (unsigned i = 0; i < k; i++)
		out[i] = coord_pool_obj(p, (uint32_t)(uintptr_t)out[i]);
	return k;
}

unsigned coord_pool_get_many(struct coord_pool *p, void **out, unsigned n)
{
	unsigned got = cache_get(p, out, n);

	return got ? got : list_get_many(p, out, n);
}

void coord_pool_put(struct coord_pool *p, uint32_t idx)
{
	coord_pool_put_many(p, &idx, 1);
}

/* Return up to @n of @idx to ring @r (P4, P5); how many it took. */
static unsigned ring_put(struct coord_ring *r, const uint32_t *idx, unsigned n)
{
	void *v[64];
	unsigned done = 0;

	while (r && done < n) {
		unsigned k = n - done < 64 ? n - done : 64, pushed;

		for (unsigned i = 0; i < k; i++)
			v[i] = (void *)(uintptr_t)(idx[done + i] + 1);
		pushed = coord_ring_push_batch_mp(r, v, k);
		done += pushed;
		if (pushed < k)
			break; /* the ring is full */
	}
	return done;
}

void coord_pool_put_many(struct coord_pool *p, const uint32_t *idx, unsigned n)
{
	unsigned done = ring_put(p->cache, idx, n);

	if (done < n)
		done += ring_put(p->spill, idx + done, n - done); /* P5 */
	if (done == n)
		return;
	for (unsigned i = done; i + 1 < n; i++)
		coord_pool_link(p, idx[i], idx[i + 1]);
	push_chain(p, idx[done], idx[n - 1]);
}

void coord_pool_link(struct coord_pool *p, uint32_t idx, uint32_t next)
{
	/* Relaxed: the caller owns both objects; R1 in push_chain() publishes
	 * the links with the chain. */
	atomic_store_explicit(link_of(p, idx), next + 1, memory_order_relaxed);
}

void coord_pool_put_chain(struct coord_pool *p, uint32_t first, uint32_t last)
{
	push_chain(p, first, last);
}

/* --- byte buffers ---------------------------------------------------------- */

/* Each pooled buffer starts with this header; the payload follows. */
struct buf_hdr {
	uint32_t idx;
	uint32_t pad[3];
};

static void buf_init(void *obj, uint32_t idx, void *arg)
{
	((struct buf_hdr *)obj)->idx = idx;
}

int coord_bufs_init(struct coord_bufs *b)
{
	memset(b, 0, sizeof(*b));
	for (unsigned c = 0; c < COORD_BUF_CLASSES; c++) {
		size_t sz = (size_t)1 << (c + COORD_BUF_MIN_SHIFT);
		/* Fewer, larger-object slabs for big classes: ~256 KiB-4 MiB each. */
		uint32_t shift = c < 6 ? 8 : c < 10 ? 4 : 2;
		int r = coord_pool_create(sizeof(struct buf_hdr) + sz, shift, 0, buf_init, NULL,
					  &b->cls[c]);

		if (r < 0) {
			coord_bufs_fini(b);
			return r;
		}
	}
	return 0;
}

void coord_bufs_fini(struct coord_bufs *b)
{
	for (unsigned c = 0; c < COORD_BUF_CLASSES; c++) {
		coord_pool_destroy(b->cls[c]);
		b->cls[c] = NULL;
	}
}

void *coord_buf_get(struct coord_bufs *b, size_t len, void *inl, size_t inl_cap, uint8_t *cls)
{
	unsigned c;
	struct buf_hdr *h;

	if (len <= inl_cap) {
		*cls = COORD_BUF_INLINE;
		return inl;
	}
	if (len > COORD_BUF_MAX_POOLED) {
		*cls = COORD_BUF_MALLOC;
		return malloc(len);
	}
	c = len <= (1u << COORD_BUF_MIN_SHIFT)
		    ? 0
		    : (unsigned)(64 - __builtin_clzll((uint64_t)len - 1)) - COORD_BUF_MIN_SHIFT;
	h = coord_pool_get(b->cls[c]);
	if (!h)
		return NULL;
	*cls = (uint8_t)c;
	return h + 1;
}

void coord_buf_put(struct coord_bufs *b, void *buf, uint8_t cls)
{
	if (cls == COORD_BUF_INLINE || !buf)
		return;
	if (cls == COORD_BUF_MALLOC) {
		free(buf);
		return;
	}
	coord_pool_put(b->cls[cls], ((struct buf_hdr *)buf - 1)->idx);
}
