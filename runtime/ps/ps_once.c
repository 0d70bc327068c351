// SPDX-License-Identifier: MIT
/*
 * runtime/ps/ps_once.c - at most once: a ps task applies each update of a
 * closure once, however often the closure runs (runtime/ps/ps.h "At most
 * once"), with a table of bounded size per ps task.
 *
 * The case it is for.  A worker's update reaches the ps and is applied; the
 * link fails before the reply is back; the worker's client gives up on the
 * request (ps_conn.c "Give-up": it waited the window, so the ps has it or
 * never will), the closure fails with a ps error and the coordinator puts
 * it back (S11) or loses the worker (S2/S10), and the closure runs again.
 * Give-up keeps a request that arrives after its sender gave up from being
 * applied, but it cannot tell a reply lost after the update was made.  So
 * an update carries its closure's key: K = (session, closure, seq), the
 * coordinator's session (PS_OPTS, random per coord_create()), the closure's
 * id (coord_ctx_closure(): pool index in the low 32 bits, "slot", the
 * object's reuse count in the high 32, "reuse"; the same on every attempt,
 * B8), and the update's number within the closure's run (1, 2, ... over
 * the updates it makes: a run that repeats the first attempt's calls
 * repeats its numbers).  The ps remembers the keys it applied.
 *
 * The table.  Entries are (session, slot, seq) -> (reuse, fingerprint,
 * stamp), 32 bytes, in ONCE_STRIPES stripes, each a mutex and a hash of
 * ONCE_WAYS-entry buckets that doubles (rehashing) when an insert finds its
 * bucket full, up to its share of the table's maximum; the stripe and the
 * bucket come from one hash of the key.  For an update with key K:
 *   O1  an entry for (session, slot, seq) with K's reuse and fingerprint:
 *       it was applied; answer "done", change nothing;
 *   O2  an entry with a later reuse (serial order): the slot has run a
 *       later closure since, so K's closure is final (below): its update
 *       is refused (COORD_ECANCELLED), never applied: the late attempt of a
 *       closure the coordinator already finished (a watchdog's re-run that
 *       overtook it, B6) changes nothing;
 *   O3  otherwise (no entry, an earlier reuse: an earlier closure of the
 *       slot, final; or another fingerprint: the re-run's seq-th update is
 *       not the first attempt's, op, variable, range and length compared,
 *       not the data): apply it, and if it succeeded record K (in place of
 *       the entry it matched).
 * The check and the apply run under the stripe's mutex, so two attempts'
 * copies of one update (a re-run overtaking a stuck attempt) apply once.
 * The reply is emitted after the mutex is released (a server's emit may
 * send).  Lock order: a stripe, then the store's own locks (varstore.c
 * V3); nothing takes a stripe while holding a store lock.
 *
 * Why an entry may go, and when (the bound).  An entry is needed only while
 * its closure may still run again: until the coordinator has made it final
 * (its RemoteValue READY, failed or cancelled) and no attempt of it is
 * left running.  The coordinator says so without a message: a pool slot is
 * handed to a new closure (reuse + 1, runtime/core/coord_pvt.h) only after
 * the closure it held was final and its last reference dropped, so a key
 * of (session, slot) with a later reuse proves every earlier closure of
 * that slot final (O2, O3).  An entry is therefore
 *   - replaced when a later closure of its slot makes its seq-th update
 *     here (safe: its closure is final);
 *   - evicted, oldest stamp of its bucket first, when the stripe is at its
 *     share of the maximum and the bucket is full (counted in evicted,
 *     logged).  This is the one eviction the coordinator did not license:
 *     if the closure is not final, a later attempt applies again.
 * Memory: a session's live keys are at most (its pool's slots that made
 * updates here) x (updates per closure run), because a slot holds one
 * closure's keys (O3 replaces).  The pool holds the closures scheduled and
 * not yet final, and those whose handles the program keeps; with the
 * default ring (262,144) and one update per closure and ps task that is a
 * quarter of COORD_PS_ONCE_MAX, where a 16-way bucket overflows with
 * probability 1e-6 (Poisson(4) above 16: 0.07 buckets of 65,536 expected);
 * at half of it, 0.4% of the buckets do (each then forgets its oldest key,
 * usually a final closure's).  So only a program that keeps hundreds of
 * thousands of closures unfinished that each update one ps task several
 * times, or many sessions (coordinators) that left keys behind (they are
 * the oldest, and go first), reaches the bound.  The table holds at most
 * COORD_PS_ONCE_MAX entries (32 MiB), allocated as used.
 *
 * The coordinator's own calls (ps.h) are keyed the same way under a
 * session of their own (its closures' slots are pool indices, these are
 * thread numbers): slot = the calling thread's number, reuse = its call
 * count, seq = the update's number in the call (coord_ps_call_key()).  A
 * thread's calls are serial, so a later reuse of its slot proves the
 * earlier call final, as for a pool slot (O2, O3); the client re-sends an
 * update whose outcome is unknown within the call (coord_psc_run_sure()).
 * Their live keys are at most (threads alive at once that made calls) x
 * (updates per call): an exited thread's slot goes to the next new one.
 *
 * Not covered: a closure whose run takes another path (a different number
 * of updates before this one) is keyed differently, and only op, variable
 * and range are compared (O3); a ps task that restarts forgets its table
 * (its variables' handles are stale then anyway: COORD_ESTALE); a restore
 * of a checkpoint does not clear it; an inline call (runtime/core/inline.c
 * Q2, inproc only) put back becomes a pool closure with another id.
 *
 * Synchronization: each stripe's fields (its buckets, clock and counts)
 * are read and written under its mutex only; the table's eviction count
 * for the log is a relaxed counter (see log_eviction()).
 */
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "runtime/core/exec.h"
#include "runtime/ps/ps.h"

#define ONCE_STRIPES 64u
#define ONCE_WAYS 16u
#define ONCE_MIN_BUCKETS 2u

_Static_assert(COORD_PS_ONCE_MIN >= ONCE_STRIPES * ONCE_WAYS * ONCE_MIN_BUCKETS, "min table");

struct once_ent {
	uint64_t sess; /* 0: a free entry */
	uint32_t slot, reuse;
	uint32_t seq, fp;
	uint64_t stamp; /* the stripe's clock when written: older goes first */
};

struct once_stripe {
	pthread_mutex_t lock;
	struct once_ent *ent; /* nb buckets of ONCE_WAYS; NULL until used */
	uint32_t nb, max_nb;  /* powers of two */
	uint64_t clock;
	uint64_t applied, dups, finals, evicted, entries;
} __attribute__((aligned(64)));

struct coord_ps_once {
	struct once_stripe st[ONCE_STRIPES];
	_Atomic uint64_t evicted; /* for the log only */
	uint32_t max;
};

/* splitmix64's finaliser. */
static uint64_t mix64(uint64_t x)
{
	x ^= x >> 30;
	x *= 0xbf58476d1ce4e5b9ull;
	x ^= x >> 27;
	x *= 0x94d049bb133111ebull;
	return x ^ (x >> 31);
}

static uint64_t key_hash(uint64_t sess, uint32_t slot, uint32_t seq)
{
	return mix64(sess ^ mix64(((uint64_t)slot << 32) | seq));
}

/* O3: what the re-run's update is compared by (not its data). */
static uint32_t op_fp(const struct coord_ps_op *op)
{
	uint64_t h = mix64(((uint64_t)op->op << 48) ^ ((uint64_t)op->tag << 32) ^ op->id);

	h = mix64(h ^ op->off);
	h = mix64(h ^ op->n);
	h = mix64(h ^ ((uint64_t)op->src_len + op->src2_len));
	return (uint32_t)(h ^ (h >> 32));
}

/* The ops a key is for: the updates. */
static bool is_update(uint16_t op)
{
	return op == COORD_PS_ASSIGN || op == COORD_PS_ASSIGN_ADD || op == COORD_PS_SCATTER_ADD;
}

static bool keyed(const struct coord_ps_op *op)
{
	return op->seq && op->sess && is_update(op->op);
}

int coord_ps_once_create(uint32_t max, struct coord_ps_once **out)
{
	struct coord_ps_once *o;
	uint32_t per;

	if (posix_memalign((void **)&o, 64, sizeof(*o)))
		return COORD_ENOMEM;
	memset(o, 0, sizeof(*o));
	if (max < COORD_PS_ONCE_MIN)
		max = COORD_PS_ONCE_MIN;
	per = max / (ONCE_STRIPES * ONCE_WAYS);
	while (per & (per - 1))
		per &= per - 1; /* a power of two, at most the share */
	for (unsigned i = 0; i < ONCE_STRIPES; i++) {
		pthread_mutex_init(&o->st[i].lock, NULL);
		o->st[i].max_nb = per;
	}
	o->max = per * ONCE_STRIPES * ONCE_WAYS;
	/* Relaxed: nobody else sees @o yet. */
	atomic_store_explicit(&o->evicted, 0, memory_order_relaxed);
	*out = o;
	return 0;
}

void coord_ps_once_destroy(struct coord_ps_once *o)
{
	if (!o)
		return;
	for (unsigned i = 0; i < ONCE_STRIPES; i++) {
		pthread_mutex_destroy(&o->st[i].lock);
		free(o->st[i].ent);
	}
	free(o);
}

void coord_ps_once_stats(struct coord_ps_once *o, struct coord_ps_once_stats *out)
{
	memset(out, 0, sizeof(*out));
	for (unsigned i = 0; o && i < ONCE_STRIPES; i++) {
		struct once_stripe *st = &o->st[i];

		pthread_mutex_lock(&st->lock);
		out->applied += st->applied;
		out->dups += st->dups;
		out->finals += st->finals;
		out->evicted += st->evicted;
		out->entries += st->entries;
		pthread_mutex_unlock(&st->lock);
	}
}

/* The bucket of hash @h in @st (st->nb > 0). */
static struct once_ent *bucket(struct once_stripe *st, uint64_t h)
{
	return st->ent + ((h / ONCE_STRIPES) & (st->nb - 1)) * ONCE_WAYS;
}

/* The entry of (@sess, @slot, @seq), or NULL.  Under st->lock. */
static struct once_ent *find(struct once_stripe *st, uint64_t h, uint64_t sess, uint32_t slot,
			     uint32_t seq)
{
	struct once_ent *b;

	if (!st->nb)
		return NULL;
	b = bucket(st, h);
	for (unsigned w = 0; w < ONCE_WAYS; w++)
		if (b[w].sess == sess && b[w].slot == slot && b[w].seq == seq)
			return &b[w];
	return NULL;
}

/* A place for a new key in bucket @b: a free entry, else the oldest one
 * (evicted: counted).  Under st->lock. */
static struct once_ent *place(struct once_stripe *st, struct once_ent *b, bool *evicted)
{
	struct once_ent *old = &b[0];

	for (unsigned w = 0; w < ONCE_WAYS; w++) {
		if (!b[w].sess) {
			st->entries++;
			return &b[w];
		}
		if (b[w].stamp < old->stamp)
			old = &b[w];
	}
	st->evicted++;
	*evicted = true;
	return old;
}

/* Double @st's buckets (or make its first ones), rehashing; false when
 * there is no room for more (at its share, or no memory).  Under st->lock. */
static bool grow(struct once_stripe *st, bool *evicted)
{
	uint32_t nb = st->nb ? 2 * st->nb : ONCE_MIN_BUCKETS, onb = st->nb;
	struct once_ent *old = st->ent, *e;

	if (nb > st->max_nb)
		return false;
	e = calloc((size_t)nb * ONCE_WAYS, sizeof(*e));
	if (!e)
		return false;
	st->ent = e;
	st->nb = nb;
	st->entries = 0;
	for (size_t i = 0; i < (size_t)onb * ONCE_WAYS; i++) {
		struct once_ent *to;

		if (!old[i].sess)
			continue;
		to = place(st, bucket(st, key_hash(old[i].sess, old[i].slot, old[i].seq)), evicted);
		*to = old[i];
	}
	free(old);
	return true;
}

/* Record @op's key (reuse @reuse, fingerprint @fp) over @e (its entry, or
 * NULL: a new one).  Under st->lock. */
static void record(struct once_stripe *st, struct once_ent *e, uint64_t h,
		   const struct coord_ps_op *op, uint32_t reuse, uint32_t fp, bool *evicted)
{
	uint32_t slot = (uint32_t)op->closure;

	if (!e) {
		struct once_ent *b = st->nb ? bucket(st, h) : NULL;
		unsigned w = 0;

		while (b && w < ONCE_WAYS && b[w].sess)
			w++;
		if ((!b || w == ONCE_WAYS) && grow(st, evicted))
			b = bucket(st, h); /* more room, perhaps in this bucket */
		if (!b)
			return; /* no memory for a first bucket: not remembered */
		e = place(st, b, evicted);
	}
	e->sess = op->sess;
	e->slot = slot;
	e->seq = op->seq;
	e->reuse = reuse;
	e->fp = fp;
	e->stamp = ++st->clock;
}

/* The table had to forget a key whose closure may not be final: say so,
 * the first time and then at every power of two. */
static void log_eviction(struct coord_ps_once *o, unsigned task)
{
	/* Relaxed: a count for the log; nothing is ordered by it. */
	uint64_t n = atomic_fetch_add_explicit(&o->evicted, 1, memory_order_relaxed) + 1;

	if (n & (n - 1))
		return;
	coord_log(COORD_LOG_WARN,
		  "ps task %u: at-most-once table full (%u entries; %llu keys forgotten so far): a "
		  "closure still unfinished that made one of them may apply it again if it is "
		  "run again",
		  task, o->max, (unsigned long long)n);
}

static int emit_none(void *arg, const void *p, size_t len)
{
	(void)arg;
	(void)p;
	return len ? COORD_EINVAL : 0; /* an update's result is empty */
}

int coord_ps_apply_once(struct coord_ps_once *o, struct coord_varstore *vs, unsigned task,
			const struct coord_ps_op *op, struct coord_ps_scratch *s,
			coord_ps_emit_t emit, void *arg, struct coord_error *err)
{
	uint32_t slot, reuse, fp;
	struct once_stripe *st;
	struct once_ent *e;
	bool evicted = false;
	uint64_t h;
	int r;

	if (!o || !keyed(op))
		return coord_ps_apply(vs, task, op, s, emit, arg, err);
	slot = (uint32_t)op->closure;
	reuse = (uint32_t)(op->closure >> 32);
	fp = op_fp(op);
	h = key_hash(op->sess, slot, op->seq);
	st = &o->st[h % ONCE_STRIPES];
	pthread_mutex_lock(&st->lock);
	e = find(st, h, op->sess, slot, op->seq);
	if (e && e->reuse == reuse && e->fp == fp) { /* O1 */
		st->dups++;
		pthread_mutex_unlock(&st->lock);
		return emit(arg, NULL, 0);
	}
	if (e && (int32_t)(e->reuse - reuse) > 0) { /* O2 */
		st->finals++;
		pthread_mutex_unlock(&st->lock);
		return coord_seterr(err, COORD_ECANCELLED,
				    "not applied: closure %#llx is final (a later closure has run "
				    "in its place since); this is a late attempt's update",
				    (unsigned long long)op->closure);
	}
	r = coord_ps_apply(vs, task, op, s, emit_none, NULL, err); /* O3 */
	if (r == 0) {
		st->applied++;
		record(st, e, h, op, reuse, fp, &evicted);
	}
	pthread_mutex_unlock(&st->lock);
	if (evicted)
		log_eviction(o, task);
	return r < 0 ? r : emit(arg, NULL, 0);
}

uint64_t coord_ps_session_new(void)
{
	uint64_t v = 0;

	while (v == 0)
		if (getrandom(&v, sizeof(v), 0) != (ssize_t)sizeof(v))
			v = mix64((uint64_t)coord_now_ns() ^ (uint64_t)getpid() << 32);
	return v;
}

void coord_ps_ctx_key(struct coord_ctx *ctx, struct coord_ps_op *ops, unsigned n)
{
	uint64_t id = coord_ctx_closure(ctx), sess = ctx->env->sess;

	if (!sess || id == COORD_NO_CLOSURE)
		return;
	for (unsigned i = 0; i < n; i++) {
		if (!is_update(ops[i].op))
			continue;
		if (++ctx->ps_seq == 0)
			ctx->ps_seq = 1; /* never 0 (no key) */
		ops[i].sess = sess;
		ops[i].closure = id;
		ops[i].seq = ctx->ps_seq;
	}
}

/*
 * The coordinator's call keys (coord_ps_call_key()): a thread's slot and
 * its call count, held while the thread lives; when it exits, the pair
 * goes to a free list and the next new thread continues it (a later reuse
 * of the slot: the exited thread's calls had returned, final), so the
 * slots in use are at most the threads alive at once, and a program that
 * makes a thread per call does not fill the table with dead threads' keys.
 */
struct call_id {
	uint32_t slot, count;
	struct call_id *next; /* on the free list */
};

static pthread_once_t call_once = PTHREAD_ONCE_INIT;
static pthread_key_t call_key;
static bool call_key_ok;
static pthread_mutex_t call_lock = PTHREAD_MUTEX_INITIALIZER;
static struct call_id *call_free; /* under call_lock */
static uint32_t call_slots;	  /* under call_lock */

/* A thread's exit: its pair to the free list. */
static void call_id_put(void *arg)
{
	struct call_id *id = arg;

	pthread_mutex_lock(&call_lock);
	id->next = call_free;
	call_free = id;
	pthread_mutex_unlock(&call_lock);
}

static void call_key_make(void)
{
	call_key_ok = pthread_key_create(&call_key, call_id_put) == 0;
}

/* The calling thread's pair, or NULL (no memory: its calls go unkeyed). */
static struct call_id *call_id_get(void)
{
	struct call_id *id;

	pthread_once(&call_once, call_key_make);
	if (!call_key_ok)
		return NULL;
	id = pthread_getspecific(call_key);
	if (id)
		return id;
	pthread_mutex_lock(&call_lock);
	id = call_free;
	if (id)
		call_free = id->next;
	else if ((id = calloc(1, sizeof(*id))))
		id->slot = ++call_slots;
	pthread_mutex_unlock(&call_lock);
	if (id && pthread_setspecific(call_key, id) != 0) {
		call_id_put(id);
		id = NULL;
	}
	return id;
}

void coord_ps_call_key(uint64_t sess, struct coord_ps_op *ops, unsigned n)
{
	struct call_id *id = sess ? call_id_get() : NULL;
	uint32_t seq = 0;

	if (!id)
		return;
	id->count++; /* a thread's calls are serial: a later reuse of its slot */
	for (unsigned i = 0; i < n; i++) {
		if (!is_update(ops[i].op) || ops[i].seq)
			continue;
		ops[i].sess = sess;
		ops[i].closure = (uint64_t)id->count << 32 | id->slot;
		ops[i].seq = ++seq; /* n < 2^32: never 0 (no key) */
	}
}
