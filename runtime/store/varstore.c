// SPDX-License-Identifier: MIT
/*
 * runtime/store/varstore.c - the parameter-server variable store (see varstore.h).
 *
 * Overview
 *   A ps task applies updates from every worker to the same few variables;
 *   the test it must pass is 4 workers x 10,000 assign_add on one variable
 *   with an exact sum.  This is the ps's apply path, not the coordinator's
 *   schedule fast path, so blocking locks are allowed here (design.md §5
 *   forbids locks only on the schedule/fetch path).
 *
 * Locking: row stripes.
 *   Each variable has nstripes = min(32, rows) mutexes, stripe s covering
 *   rows [s * rows_per_stripe, (s + 1) * rows_per_stripe).  An op locks the
 *   stripes its rows fall in, in ascending order, does its whole copy or
 *   add, and unlocks.  So every op is atomic with respect to every other op
 *   on overlapping rows (no lost update, no torn read), while scatter_adds
 *   to distinct rows of an embedding table proceed in parallel.  Why not a
 *   seqlock for reads: a reader copying plain floats while a writer stores
 *   them is a data race in C11 (and a TSan report); making every element a
 *   relaxed atomic would slow the adds that dominate a ps.  Why mutexes and
 *   not spinlocks: a whole-variable op on a 2^28-element variable holds its
 *   locks for a long time, and with more threads than CPUs a preempted
 *   spinlock holder stalls every spinner; glibc's mutex spins briefly first.
 *   Why 32 stripes: a whole-variable op holds all of them, plus save_lock or
 *   names_lock in a checkpoint; TSan's deadlock detector tracks at most 64
 *   mutexes held by one thread, and 32 rows ranges already let scatter_adds
 *   to different parts of a table run in parallel.
 *
 * Name resolution: once, then ids.
 *   create and lookup take names_lock (a chained hash table of names).  Data
 *   ops take an id and never touch names_lock: the id indexes a two-level
 *   table (1024 chunks of 1024 pointers) that only grows: a chunk, once
 *   allocated, and a slot, once written, never change until the store is
 *   destroyed.  One atomic counter, nvars, publishes them (R1/A1 below).
 *   RCU was not needed: nothing reachable from an id is ever freed except a
 *   deleted variable's data, which is freed under all its stripe locks, and
 *   every op checks `deleted` under its stripe lock before touching data.
 *
 * Invariants
 *   V1  slot id of chunks[] is written once, before the R1 store that makes
 *       nvars > id; ids are never reused.
 *   V2  v->deleted and v->data change only with every stripe of v and
 *       names_lock held; so holding any one stripe, or names_lock, reads
 *       them race-free.
 *   V3  Locks are taken in the order names_lock, then stripes ascending;
 *       save_lock before names_lock.  No op holds two variables' stripes.
 *   V4  A live variable is in exactly one bucket chain; a deleted one in
 *       none.  Chains are walked and changed only under names_lock.
 *   V5  Every argument is checked before the first lock is taken, so a
 *       failing call changes nothing (scatter_add checks every index first).
 *
 * Readers without locks: one-sided RDMA READs (transport/psclient/ps_client.c's
 * rdma path; the ps CPU takes no part).  A variable's memory is one block,
 * [done | data | begun] (varstore.h), and a remote reader reads done
 * first, then the data it wants, then begun: one RDMA READ of the whole
 * block when it is small, else a chain of three READs.
 *   SNAP1 Every write brackets its stores: begun += 1 before the first (a
 *         release fence after it orders the count before the data stores),
 *         done += 1 after the last (release).  Writers of different stripes
 *         may overlap: the counts say how many started and finished, not who.
 *   SNAP2 A snapshot is valid iff the done it read first equals the begun it
 *         read last: done(t1) <= begun(t1) <= begun(t3), so equality means
 *         every write that started before t3 had finished before t1, and no
 *         write overlapped the data read in between.  Else it is retried, a
 *         few times, then read two-sided (under the stripes).
 *   SNAP3 What a reader may see: exactly the variable's value between two
 *         writes, never a torn mix (across stripes too), or a retry.  It
 *         relies on the order of the reads: the responder executes the READs
 *         of a chain in order (RC), and the bytes of one READ in increasing
 *         address order (rxe does, as the usual NICs; the IB spec does not
 *         promise it), and reads each aligned 8-byte count in one access.  A delete frees the
 *         block after the ps deregistered it (rdma_server.c Q4): a reader
 *         still holding the old rkey gets a failed READ, never freed memory.
 *   Locked readers (coord_vs_read()) do not look at the counts: stripes
 *   already order them with the writes.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <coord/var.h>

#include "runtime/store/varstore.h"

#define INITIAL_BUCKETS 64u

void coord_varstore_opts_init(struct coord_varstore_opts *opts)
{
	if (!opts)
		return;
	memset(opts, 0, sizeof(*opts));
	opts->keep_checkpoints = 5;
}

/* A new store's tag: the wall clock in ms, folded into 1..2^20-1. */
static uint32_t store_tag(void)
{
	struct timespec ts;
	uint64_t ms;

	clock_gettime(CLOCK_REALTIME, &ts);
	ms = (uint64_t)ts.tv_sec * 1000 + (uint64_t)ts.tv_nsec / 1000000;
	return (uint32_t)(ms % ((1u << COORD_VS_TAG_BITS) - 1)) + 1;
}

uint32_t coord_varstore_tag(const struct coord_varstore *vs)
{
	return vs->tag;
}

int coord_varstore_create(const struct coord_varstore_opts *opts, struct coord_varstore **out,
			  struct coord_error *err)
{
	struct coord_varstore *vs;

	if (!out)
		return coord_seterr(err, -EINVAL, "varstore: NULL out-parameter");
	*out = NULL;
	vs = calloc(1, sizeof(*vs));
	if (!vs)
		return coord_seterr(err, -ENOMEM, "varstore: out of memory");
	vs->buckets = calloc(INITIAL_BUCKETS, sizeof(*vs->buckets));
	if (!vs->buckets) {
		free(vs);
		return coord_seterr(err, -ENOMEM, "varstore: out of memory");
	}
	vs->nbuckets = INITIAL_BUCKETS;
	vs->tag = store_tag();
	if (opts)
		vs->opts = *opts;
	else
		coord_varstore_opts_init(&vs->opts);
	if (coord_vs_adders_create(&vs->adders) < 0) {
		free(vs->buckets);
		free(vs);
		return coord_seterr(err, -ENOMEM, "varstore: out of memory");
	}
	pthread_mutex_init(&vs->names_lock, NULL);
	pthread_mutex_init(&vs->save_lock, NULL);
	/* Relaxed: the store is private until create returns. */
	atomic_store_explicit(&vs->nvars, 0, memory_order_relaxed);
	/* Relaxed: as above. */
	atomic_store_explicit(&vs->nlive, 0, memory_order_relaxed);
	*out = vs;
	return 0;
}

void coord_vs_var_free(struct coord_var *v)
{
	if (!v)
		return;
	for (unsigned s = 0; s < v->nstripes; s++)
		pthread_mutex_destroy(&v->stripes[s].lock);
	free(v->stripes);
	free(v->block);
	free(v);
}

void coord_vs_write_begin(struct coord_var *v)
{
	/* SNAP1, relaxed RMW: writers of other stripes may count at once; only
	 * the sum matters.  The fence below orders it before our stores. */
	atomic_fetch_add_explicit(v->begun, 1, memory_order_relaxed);
	/* SNAP1 (release fence): the begun count is visible before any data store
	 * that follows, to a remote reader's DMA (SNAP2) too.  A fence, not an
	 * ordering on the counter: the stores it orders are plain floats. */
	atomic_thread_fence(memory_order_release);
}

void coord_vs_write_end(struct coord_var *v)
{
	/* SNAP1 (release): every data store above is visible before done counts
	 * this write (SNAP2's second read of begun pairs with it). */
	atomic_fetch_add_explicit(v->done, 1, memory_order_release);
}

void coord_varstore_destroy(struct coord_varstore *vs)
{
	uint32_t n;

	if (!vs)
		return;
	/* Relaxed: no other call may run (contract); nothing to order. */
	n = atomic_load_explicit(&vs->nvars, memory_order_relaxed);
	for (uint32_t id = 0; id < n; id++)
		coord_vs_var_free(
			vs->chunks[id >> COORD_VS_CHUNK_SHIFT][id & (COORD_VS_CHUNK - 1)]);
	for (unsigned c = 0; c < COORD_VS_NCHUNKS; c++)
		free(vs->chunks[c]);
	free(vs->buckets);
	coord_ckpt_fini(vs);
	coord_vs_adders_destroy(vs->adders);
	pthread_mutex_destroy(&vs->names_lock);
	pthread_mutex_destroy(&vs->save_lock);
	free(vs);
}

/* --- names and shapes ------------------------------------------------------ */

uint64_t coord_var_fnv1a64(const void *p, size_t len)
{
	const unsigned char *b = p;
	uint64_t h = 0xcbf29ce484222325ull;

	for (size_t i = 0; i < len; i++) {
		h ^= b[i];
		h *= 0x100000001b3ull;
	}
	return h;
}

static bool name_char_ok(unsigned char c)
{
	return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
	       c == '_' || c == '.' || c == '/' || c == '-';
}

int coord_vs_check_name(const char *name, size_t len, struct coord_error *err)
{
	if (!name)
		return coord_seterr(err, -EINVAL, "variable name is NULL");
	if (len == 0)
		return coord_seterr(err, -EINVAL, "variable name is empty");
	if (len > COORD_VAR_NAME_MAX)
		return coord_seterr(err, -EINVAL,
				    "variable name '%.20s...' is longer than %d bytes", name,
				    COORD_VAR_NAME_MAX);
	for (size_t i = 0; i < len; i++)
		if (!name_char_ok((unsigned char)name[i]))
			return coord_seterr(err, -EINVAL,
					    "variable name '%.*s': byte %zu (0x%02x) is not one "
					    "of [A-Za-z0-9_./-]",
					    (int)len, name, i, (unsigned char)name[i]);
	return 0;
}

/* strnlen bounded one past the maximum, so an unterminated long name is caught. */
static int check_cname(const char *name, struct coord_error *err)
{
	return coord_vs_check_name(name, name ? strnlen(name, COORD_VAR_NAME_MAX + 1) : 0, err);
}

void coord_vs_fmt_shape(char *buf, size_t len, unsigned ndim, const uint64_t *dims)
{
	size_t o = 0;
	int r;

	if (!len)
		return;
	buf[0] = '\0';
	r = snprintf(buf, len, "[");
	o = r > 0 ? (size_t)r : 0;
	for (unsigned d = 0; d < ndim && d < COORD_VAR_MAX_DIMS && o < len; d++) {
		r = snprintf(buf + o, len - o, "%s%" PRIu64, d ? "," : "", dims[d]);
		if (r < 0)
			return;
		o += (size_t)r;
	}
	if (o < len)
		snprintf(buf + o, len - o, "]");
}

int coord_vs_check_shape(const char *name, unsigned ndim, const uint64_t *dims,
			 struct coord_error *err)
{
	uint64_t n = 1;

	if (ndim > COORD_VAR_MAX_DIMS)
		return coord_seterr(err, -EINVAL, "variable '%s': %u dimensions, at most %d", name,
				    ndim, COORD_VAR_MAX_DIMS);
	if (ndim && !dims)
		return coord_seterr(err, -EINVAL, "variable '%s': dims is NULL", name);
	for (unsigned d = 0; d < ndim; d++) {
		if (dims[d] == 0)
			return coord_seterr(err, -EINVAL, "variable '%s': dimension %u is 0", name,
					    d);
		/* n <= 2^28 here, so n * dims[d] cannot overflow when
		 * dims[d] <= 2^28; larger dims fail either way. */
		if (dims[d] > COORD_VAR_MAX_ELEMS || n * dims[d] > COORD_VAR_MAX_ELEMS)
			return coord_seterr(err, -EINVAL,
					    "variable '%s': shape has more than 2^28 elements "
					    "(dimension %u is %" PRIu64 ")",
					    name, d, dims[d]);
		n *= dims[d];
	}
	return 0;
}

/* --- the id table ---------------------------------------------------------- */

struct coord_var *coord_vs_get(struct coord_varstore *vs, uint32_t id)
{
	/* A1 (acquire), pairs with R1 in coord_vs_publish_locked(): the chunk
	 * pointer and the slot for every id < n, and the variable they point
	 * to, were written before R1 (V1). */
	uint32_t n = atomic_load_explicit(&vs->nvars, memory_order_acquire);

	if (id >= n)
		return NULL;
	return vs->chunks[id >> COORD_VS_CHUNK_SHIFT][id & (COORD_VS_CHUNK - 1)];
}

struct coord_var *coord_vs_find_locked(struct coord_varstore *vs, const char *name)
{
	uint64_t h = coord_var_fnv1a64(name, strlen(name));
	uint32_t i = vs->buckets[h & (vs->nbuckets - 1)];

	/* Bounded: a chain holds at most every id once (V4). */
	for (uint32_t steps = 0; i && steps < COORD_VAR_MAX_VARS; steps++) {
		struct coord_var *v =
			vs->chunks[(i - 1) >> COORD_VS_CHUNK_SHIFT][(i - 1) & (COORD_VS_CHUNK - 1)];

		if (strcmp(v->name, name) == 0)
			return v;
		i = v->hnext;
	}
	return NULL;
}

static void bucket_insert_locked(struct coord_varstore *vs, struct coord_var *v)
{
	uint32_t b = coord_var_fnv1a64(v->name, strlen(v->name)) & (vs->nbuckets - 1);

	v->hnext = vs->buckets[b];
	vs->buckets[b] = v->id + 1;
}

/* Double the buckets when the live count passes them; on ENOMEM keep the
 * old table (longer chains, still correct). */
static void maybe_grow_buckets_locked(struct coord_varstore *vs, uint32_t nlive)
{
	uint32_t nb = vs->nbuckets * 2, *old = vs->buckets, oldn = vs->nbuckets;
	uint32_t *nbk;

	if (nlive < vs->nbuckets || vs->nbuckets >= COORD_VAR_MAX_VARS)
		return;
	nbk = calloc(nb, sizeof(*nbk));
	if (!nbk)
		return;
	vs->buckets = nbk;
	vs->nbuckets = nb;
	for (uint32_t b = 0; b < oldn; b++) {
		uint32_t i = old[b];

		for (uint32_t steps = 0; i && steps < COORD_VAR_MAX_VARS; steps++) {
			struct coord_var *v = vs->chunks[(i - 1) >> COORD_VS_CHUNK_SHIFT]
							[(i - 1) & (COORD_VS_CHUNK - 1)];

			i = v->hnext;
			bucket_insert_locked(vs, v);
		}
	}
	free(old);
}

int coord_vs_publish_locked(struct coord_varstore *vs, struct coord_var *v, struct coord_error *err)
{
	/* Relaxed: names_lock is held and nvars is stored only under it. */
	uint32_t id = atomic_load_explicit(&vs->nvars, memory_order_relaxed);
	/* Relaxed: names_lock is held; nlive is stored only under it. */
	uint32_t nlive = atomic_load_explicit(&vs->nlive, memory_order_relaxed);
	unsigned c = id >> COORD_VS_CHUNK_SHIFT;

	if (id >= COORD_VAR_MAX_VARS)
		return coord_seterr(err, -ENOSPC, "variable '%s': the store has made %u variables",
				    v->name, COORD_VAR_MAX_VARS);
	if (!vs->chunks[c]) {
		vs->chunks[c] = calloc(COORD_VS_CHUNK, sizeof(*vs->chunks[c]));
		if (!vs->chunks[c])
			return coord_seterr(err, -ENOMEM, "variable '%s': out of memory", v->name);
	}
	v->id = id;
	vs->chunks[c][id & (COORD_VS_CHUNK - 1)] = v;
	bucket_insert_locked(vs, v);
	/* R1 (release), pairs with A1 in coord_vs_get(): the chunk pointer, the
	 * slot and everything in *v (shape, zeroed or initial data) happen-before
	 * any thread that sees nvars > id uses the id (V1). */
	atomic_store_explicit(&vs->nvars, id + 1, memory_order_release);
	/* Relaxed: a statistic for coord_varstore_count(); orders nothing. */
	atomic_store_explicit(&vs->nlive, nlive + 1, memory_order_relaxed);
	maybe_grow_buckets_locked(vs, nlive + 1);
	return 0;
}

/* --- variables ------------------------------------------------------------- */

int coord_vs_var_alloc(const char *name, unsigned ndim, const uint64_t *dims,
		       struct coord_var **out, struct coord_error *err)
{
	struct coord_var *v;
	int ret;

	*out = NULL;
	ret = check_cname(name, err);
	if (ret)
		return ret;
	ret = coord_vs_check_shape(name, ndim, dims, err);
	if (ret)
		return ret;
	v = calloc(1, sizeof(*v));
	if (!v)
		return coord_seterr(err, -ENOMEM, "variable '%s': out of memory", name);
	strcpy(v->name, name); /* length checked above */
	v->ndim = ndim;
	v->nelem = 1;
	for (unsigned d = 0; d < COORD_VAR_MAX_DIMS; d++) {
		v->dims[d] = d < ndim ? dims[d] : 1;
		v->nelem *= (size_t)v->dims[d];
	}
	v->rows = ndim ? (size_t)dims[0] : 1;
	v->rowlen = v->nelem / v->rows;
	v->nstripes = v->rows < COORD_VAR_STRIPES ? (unsigned)v->rows : COORD_VAR_STRIPES;
	v->rows_per_stripe = (v->rows + v->nstripes - 1) / v->nstripes;
	/* With rounding up, fewer stripes may be enough to cover every row. */
	v->nstripes = (unsigned)((v->rows + v->rows_per_stripe - 1) / v->rows_per_stripe);
	/* SNAP1-SNAP3: [done | data | begun], the data cache-line aligned */
	v->block_len = COORD_VAR_DATA_OFF + ((v->nelem * sizeof(float) + 7) & ~(size_t)7) + 8;
	v->block = aligned_alloc(CACHELINE,
				 (v->block_len + CACHELINE - 1) & ~(size_t)(CACHELINE - 1));
	v->stripes = aligned_alloc(CACHELINE, v->nstripes * sizeof(*v->stripes));
	if (!v->block || !v->stripes) {
		size_t nelem = v->nelem;

		free(v->block);
		free(v->stripes);
		free(v);
		return coord_seterr(err, -ENOMEM, "variable '%s': out of memory for %zu elements",
				    name, nelem);
	}
	memset(v->block, 0, v->block_len);
	v->data = (float *)(v->block + COORD_VAR_DATA_OFF);
	v->done = (_Atomic uint64_t *)v->block;
	v->begun = (_Atomic uint64_t *)(v->block + v->block_len - 8);
	for (unsigned s = 0; s < v->nstripes; s++)
		pthread_mutex_init(&v->stripes[s].lock, NULL);
	*out = v;
	return 0;
}

bool coord_vs_same_shape(const struct coord_var *v, unsigned ndim, const uint64_t *dims)
{
	if (v->ndim != ndim)
		return false;
	for (unsigned d = 0; d < ndim; d++)
		if (v->dims[d] != dims[d])
			return false;
	return true;
}

int coord_varstore_var_create(struct coord_varstore *vs, const char *name, unsigned ndim,
			      const uint64_t *dims, const float *init, uint32_t *id,
			      struct coord_error *err)
{
	struct coord_var *v, *old;
	int ret;

	if (!vs)
		return coord_seterr(err, -EINVAL, "varstore: NULL store");
	ret = check_cname(name, err);
	if (ret)
		return ret;
	ret = coord_vs_check_shape(name, ndim, dims, err);
	if (ret)
		return ret;

	/* Fast refusal / reuse without allocating. */
	pthread_mutex_lock(&vs->names_lock);
	old = coord_vs_find_locked(vs, name);
	pthread_mutex_unlock(&vs->names_lock);
	if (!old) {
		ret = coord_vs_var_alloc(name, ndim, dims, &v, err);
		if (ret)
			return ret;
		if (init)
			memcpy(v->data, init, v->nelem * sizeof(float));
	} else {
		v = NULL;
	}

	pthread_mutex_lock(&vs->names_lock);
	old = coord_vs_find_locked(vs, name); /* again: it may have changed */
	if (old) {
		char have[96], want[96];

		pthread_mutex_unlock(&vs->names_lock);
		coord_vs_var_free(v);
		if (!coord_vs_same_shape(old, ndim, dims)) {
			coord_vs_fmt_shape(have, sizeof(have), old->ndim, old->dims);
			coord_vs_fmt_shape(want, sizeof(want), ndim, dims);
			return coord_seterr(err, -EEXIST,
					    "variable '%s' exists with shape %s, asked for %s",
					    name, have, want);
		}
		if (id)
			*id = old->id;
		return 0;
	}
	if (!v) {
		/* Deleted between the two looks (rare): allocate under the lock. */
		ret = coord_vs_var_alloc(name, ndim, dims, &v, err);
		if (ret) {
			pthread_mutex_unlock(&vs->names_lock);
			return ret;
		}
		if (init)
			memcpy(v->data, init, v->nelem * sizeof(float));
	}
	ret = coord_ckpt_create_check_locked(vs, name, ndim, dims, err);
	if (!ret)
		ret = coord_vs_publish_locked(vs, v, err);
	pthread_mutex_unlock(&vs->names_lock);
	if (ret) {
		coord_vs_var_free(v);
		return ret;
	}
	if (id)
		*id = v->id;
	return 0;
}

int coord_varstore_lookup(struct coord_varstore *vs, const char *name, uint32_t *id,
			  struct coord_error *err)
{
	struct coord_var *v;
	int ret;

	if (!vs || !id)
		return coord_seterr(err, -EINVAL, "varstore lookup: NULL argument");
	ret = check_cname(name, err);
	if (ret)
		return ret;
	pthread_mutex_lock(&vs->names_lock);
	v = coord_vs_find_locked(vs, name);
	if (v)
		*id = v->id;
	pthread_mutex_unlock(&vs->names_lock);
	if (!v)
		return coord_seterr(err, -ENOENT, "no variable '%s'", name);
	return 0;
}

uint32_t coord_varstore_count(struct coord_varstore *vs)
{
	/* Relaxed: a statistic; the caller gets no ordering from it. */
	return vs ? atomic_load_explicit(&vs->nlive, memory_order_relaxed) : 0;
}

void coord_vs_lock(struct coord_var *v, unsigned lo, unsigned hi)
{
	for (unsigned s = lo; s <= hi && s < v->nstripes; s++)
		pthread_mutex_lock(&v->stripes[s].lock);
}

void coord_vs_unlock(struct coord_var *v, unsigned lo, unsigned hi)
{
	for (unsigned s = lo; s <= hi && s < v->nstripes; s++)
		pthread_mutex_unlock(&v->stripes[s].lock);
}

/* The published variable @id or NULL with -ENOENT in @err.  Its deleted
 * flag must still be checked under a lock. */
static struct coord_var *get_or_err(struct coord_varstore *vs, uint32_t id, const char *op,
				    int *ret, struct coord_error *err)
{
	struct coord_var *v = vs ? coord_vs_get(vs, id) : NULL;

	if (!vs)
		*ret = coord_seterr(err, -EINVAL, "%s: NULL store", op);
	else if (!v)
		*ret = coord_seterr(err, -ENOENT, "%s: no variable with id %" PRIu32, op, id);
	else
		*ret = 0;
	return v;
}

static int deleted_err(struct coord_var *v, const char *op, struct coord_error *err)
{
	return coord_seterr(err, -ENOENT, "%s: variable '%s' (id %" PRIu32 ") was deleted", op,
			    v->name, v->id);
}

int coord_vs_info(struct coord_varstore *vs, uint32_t id, struct coord_var_info *info,
		  struct coord_error *err)
{
	struct coord_var *v;
	bool deleted;
	int ret;

	v = get_or_err(vs, id, "info", &ret, err);
	if (!v)
		return ret;
	if (!info)
		return coord_seterr(err, -EINVAL, "info: NULL out-parameter");
	coord_vs_lock(v, 0, 0);
	deleted = v->deleted; /* V2: one stripe suffices */
	coord_vs_unlock(v, 0, 0);
	if (deleted)
		return deleted_err(v, "info", err);
	memset(info, 0, sizeof(*info)); /* padding too: callers may compare */
	memcpy(info->name, v->name, sizeof(info->name));
	info->ndim = v->ndim;
	memcpy(info->dims, v->dims, sizeof(info->dims));
	info->nelem = v->nelem;
	return 0;
}

enum range_op { OP_READ, OP_ASSIGN, OP_ADD, OP_FILL, OP_VIEW };

/* How OP_FILL writes the range (coord_vs_assign_fill()'s @fill), or OP_VIEW
 * reads it (coord_vs_read_view()'s @view). */
struct range_fill {
	int (*fill)(void *arg, float *dst, size_t bytes, struct coord_error *err);
	int (*view)(void *arg, const void *src, size_t bytes, struct coord_error *err);
	void *arg;
};

static int range_op(struct coord_varstore *vs, uint32_t id, size_t off, size_t n, float *out,
		    const float *in, enum range_op op, const struct range_fill *f,
		    struct coord_error *err)
{
	static const char *const names[] = { "read", "assign", "assign_add", "assign", "read" };
	const char *opn = names[op];
	struct coord_var *v;
	unsigned lo, hi;
	float *d;
	int ret;

	v = get_or_err(vs, id, opn, &ret, err);
	if (!v)
		return ret;
	if (off > v->nelem || n > v->nelem - off)
		return coord_seterr(err, -EINVAL,
				    "%s: variable '%s': range [%zu, +%zu) is outside its %zu "
				    "elements",
				    opn, v->name, off, n, v->nelem);
	if (n == 0)
		return 0;
	if (op == OP_READ ? !out : op >= OP_FILL ? !f : !in)
		return coord_seterr(err, -EINVAL, "%s: variable '%s': NULL buffer", opn, v->name);
	lo = (unsigned)(off / v->rowlen / v->rows_per_stripe);
	hi = (unsigned)((off + n - 1) / v->rowlen / v->rows_per_stripe);
	coord_vs_lock(v, lo, hi);
	if (v->deleted) { /* V2 */
		coord_vs_unlock(v, lo, hi);
		return deleted_err(v, opn, err);
	}
	d = v->data + off;
	switch (op) {
	case OP_READ:
		memcpy(out, d, n * sizeof(float));
		break;
	case OP_ASSIGN:
		coord_vs_write_begin(v); /* SNAP1 */
		memcpy(d, in, n * sizeof(float));
		coord_vs_write_end(v);
		break;
	case OP_ADD:
		coord_vs_write_begin(v);	    /* SNAP1 */
		coord_vs_add(vs->adders, d, in, n); /* vs_add.c */
		coord_vs_write_end(v);
		break;
	case OP_FILL:
		coord_vs_write_begin(v); /* SNAP1: the fill's stores (a DMA) inside */
		ret = f->fill(f->arg, d, n * sizeof(float), err);
		coord_vs_write_end(v);
		break;
	case OP_VIEW: /* a locked reader: no SNAP1 counts */
		ret = f->view(f->arg, d, n * sizeof(float), err);
		break;
	}
	coord_vs_unlock(v, lo, hi);
	return ret;
}

int coord_vs_read(struct coord_varstore *vs, uint32_t id, size_t off, size_t n, float *out,
		  struct coord_error *err)
{
	return range_op(vs, id, off, n, out, NULL, OP_READ, NULL, err);
}

int coord_vs_assign(struct coord_varstore *vs, uint32_t id, size_t off, size_t n, const float *src,
		    struct coord_error *err)
{
	return range_op(vs, id, off, n, NULL, src, OP_ASSIGN, NULL, err);
}

int coord_vs_assign_add(struct coord_varstore *vs, uint32_t id, size_t off, size_t n,
			const float *delta, struct coord_error *err)
{
	return range_op(vs, id, off, n, NULL, delta, OP_ADD, NULL, err);
}

int coord_vs_assign_fill(struct coord_varstore *vs, uint32_t id, size_t off, size_t n,
			 int (*fill)(void *arg, float *dst, size_t bytes, struct coord_error *err),
			 void *arg, struct coord_error *err)
{
	struct range_fill f = { .fill = fill, .arg = arg };

	return range_op(vs, id, off, n, NULL, NULL, OP_FILL, fill ? &f : NULL, err);
}

int coord_vs_read_view(struct coord_varstore *vs, uint32_t id, size_t off, size_t n,
		       int (*view)(void *arg, const void *src, size_t bytes,
				   struct coord_error *err),
		       void *arg, struct coord_error *err)
{
	struct range_fill f = { .view = view, .arg = arg };

	return range_op(vs, id, off, n, NULL, NULL, OP_VIEW, view ? &f : NULL, err);
}

/* scatter_add (@in, @add) or gather (@out): rows @indices[0..@nidx) of @id. */
static int rows_op(struct coord_varstore *vs, uint32_t id, const int64_t *indices, size_t nidx,
		   float *out, const float *in, bool add, struct coord_error *err)
{
	const char *opn = add ? "scatter_add" : "gather";
	struct coord_var *v;
	uint64_t mask = 0;
	int ret;

	v = get_or_err(vs, id, opn, &ret, err);
	if (!v)
		return ret;
	if (v->ndim == 0)
		return coord_seterr(err, -EINVAL, "%s: variable '%s' is a scalar", opn, v->name);
	if (nidx == 0)
		return 0;
	if (!indices || (add ? !in : !out))
		return coord_seterr(err, -EINVAL, "%s: variable '%s': NULL buffer", opn, v->name);
	if (nidx > SIZE_MAX / sizeof(float) / v->rowlen)
		return coord_seterr(err, -EINVAL, "%s: variable '%s': %zu indices overflow", opn,
				    v->name, nidx);
	/* V5: every index before any lock or write. */
	for (size_t k = 0; k < nidx; k++) {
		if (indices[k] < 0 || (uint64_t)indices[k] >= v->rows)
			return coord_seterr(err, -ERANGE,
					    "%s: variable '%s': index %" PRId64
					    " at position %zu is outside [0, %zu)",
					    opn, v->name, indices[k], k, v->rows);
		mask |= 1ull << ((uint64_t)indices[k] / v->rows_per_stripe);
	}
	/* Ascending stripe order (V3). */
	for (unsigned s = 0; s < v->nstripes; s++)
		if (mask & (1ull << s))
			pthread_mutex_lock(&v->stripes[s].lock);
	if (v->deleted) {
		ret = deleted_err(v, opn, err);
	} else if (!add) {
		for (size_t k = 0; k < nidx; k++)
			memcpy(out + k * v->rowlen, v->data + (size_t)indices[k] * v->rowlen,
			       v->rowlen * sizeof(float));
	} else {
		coord_vs_write_begin(v); /* SNAP1 */
		for (size_t k = 0; k < nidx; k++)
			coord_vs_add_floats(v->data + (size_t)indices[k] * v->rowlen,
					    in + k * v->rowlen, v->rowlen);
		coord_vs_write_end(v);
	}
	for (unsigned s = 0; s < v->nstripes; s++)
		if (mask & (1ull << s))
			pthread_mutex_unlock(&v->stripes[s].lock);
	return ret;
}

int coord_vs_scatter_add(struct coord_varstore *vs, uint32_t id, const int64_t *indices,
			 size_t nidx, const float *updates, struct coord_error *err)
{
	return rows_op(vs, id, indices, nidx, NULL, updates, true, err);
}

int coord_vs_gather(struct coord_varstore *vs, uint32_t id, const int64_t *indices, size_t nidx,
		    float *out, struct coord_error *err)
{
	return rows_op(vs, id, indices, nidx, out, NULL, false, err);
}

int coord_vs_delete(struct coord_varstore *vs, uint32_t id, struct coord_error *err)
{
	struct coord_var *v, *p;
	uint32_t b, *link;
	uint8_t *block;
	int ret;

	v = get_or_err(vs, id, "delete", &ret, err);
	if (!v)
		return ret;
	pthread_mutex_lock(&vs->names_lock);
	if (v->deleted) { /* V2: names_lock suffices to read */
		pthread_mutex_unlock(&vs->names_lock);
		return deleted_err(v, "delete", err);
	}
	/* Unlink from its chain (V4). */
	b = coord_var_fnv1a64(v->name, strlen(v->name)) & (vs->nbuckets - 1);
	link = &vs->buckets[b];
	for (uint32_t steps = 0; *link && steps < COORD_VAR_MAX_VARS; steps++) {
		if (*link == v->id + 1) {
			*link = v->hnext;
			break;
		}
		p = vs->chunks[(*link - 1) >> COORD_VS_CHUNK_SHIFT]
			      [(*link - 1) & (COORD_VS_CHUNK - 1)];
		link = &p->hnext;
	}
	coord_vs_lock(v, 0, v->nstripes - 1);
	coord_vs_write_begin(v); /* SNAP3: never ended: no snapshot validates again */
	v->deleted = true;
	block = v->block;
	v->data = NULL;
	v->block = NULL;
	coord_vs_unlock(v, 0, v->nstripes - 1);
	/* Relaxed: a statistic for coord_varstore_count(); orders nothing. */
	atomic_fetch_sub_explicit(&vs->nlive, 1, memory_order_relaxed);
	pthread_mutex_unlock(&vs->names_lock);
	free(block);
	return 0;
}

int coord_vs_map(struct coord_varstore *vs, uint32_t id, struct coord_var_map *out,
		 struct coord_error *err)
{
	struct coord_var *v;
	int ret;

	v = get_or_err(vs, id, "map", &ret, err);
	if (!v)
		return ret;
	coord_vs_lock(v, 0, 0);
	if (v->deleted) { /* V2 */
		coord_vs_unlock(v, 0, 0);
		return deleted_err(v, "map", err);
	}
	out->block = v->block;
	out->block_len = v->block_len;
	out->nelem = v->nelem;
	coord_vs_unlock(v, 0, 0);
	return 0;
}
