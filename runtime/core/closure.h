/* SPDX-License-Identifier: MIT */
/*
 * runtime/core/closure.h - the closure: one scheduled call with its
 * RemoteValue inline, the function registry, per-worker resources.
 *
 * A closure is one scheduled call; its RemoteValue lives inline in it, so a
 * `struct coord_rv *` handed to the user is a `struct coord_closure *`.
 *
 * Lifetime of a closure (references in @refs):
 *   schedule:  taken from the pool, refs = 1 (runtime) + 1 if the caller wants
 *              the RemoteValue.  Queued on the ring (or the overflow FIFO).
 *   dispatch:  a dispatcher pops it (counted in its inflight), runs
 *              or sends it, and completes it: result, one state exchange,
 *              FUTEX_WAKE only if a fetcher parked.  Then the runtime ref goes
 *              (in process right after the exchange: RL1 in dispatch.c).
 *   cancel:    a queued closure of an old generation is made CANCELLED by
 *              whoever pops it (canceller or dispatcher); its runtime ref is
 *              dropped through call_rcu (epoch reclamation).
 *   free:      refs == 0: buffers back to their size classes, the closure
 *              back to the pool (a user's last put: to its thread's producer
 *              stash, C10 in coord_pvt.h, while it has room).  Pool memory is type-stable: a stale pointer
 *              reads a recycled closure, never unmapped memory, and the
 *              closure id (index, reuse count) tells the two apart.
 *
 * What the epoch deferral protects, and what it does not (yet).  In-process,
 * only the thread that popped a closure ever touches it until it is final,
 * so no reader can race a recycle.  The networked transports resolve result
 * frames by closure id (pool index + reuse count): a late frame for a closure
 * that was cancelled, or put back and finished elsewhere, must not complete
 * the object's next life.  The rule they follow: look up and complete inside
 * urcu_bp_read_lock(), check the id and attempt, and complete with a CAS
 * from NOT_READY; every path that drops the runtime reference of a closure
 * that a transport may still resolve (cancel today; put-back and late-result
 * paths with the tcp transport) goes through call_rcu, so the object cannot
 * be recycled under such a reader.  coord_destroy() runs urcu_bp_barrier()
 * before it frees the pools.  A closure scheduled without a handle is not
 * made final at all when it succeeds (V4 in rv.c): no reader of its state
 * exists, and the transports complete only what they find in a slot they
 * own (transport/engine/conn.c), so a late frame cannot complete it twice.
 */
#ifndef COORD_RUNTIME_CORE_CLOSURE_H
#define COORD_RUNTIME_CORE_CLOSURE_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include <urcu-bp.h>

#include <coord/coord.h>

#include "runtime/util/futex.h"
#include "runtime/core/pool.h"
#include "runtime/core/ring.h"
#include "runtime/util/util.h"

/* Free closures recycled through the pool's ring (pool.h) before its list:
 * enough for a few batches in flight, small enough to stay in cache. */
#define COORD_CLOSURE_CACHE 4096
#define CL_INLINE_ARGS 64
#define CL_INLINE_RES 64

/* RemoteValue state word: low bits one of enum coord_rv_state, plus
 * READY_ERR (READY with an error) and the parked-waiter bit. */
#define RV_STATE_MASK 0x7u
#define RV_READY_ERR 0x4u
#define RV_WAITER 0x8u
/* Dataflow (B1, dataflow.c DF1-DF3): a consumer may have registered on
 * this closure's dependents list (set with a CAS while NOT_READY; the final
 * CAS reads it for free, so a closure without consumers pays nothing). */
#define RV_DEPS 0x10u
/* This closure has inputs whose references it drops when it is final. */
#define RV_HASIN 0x20u
/* RL1 (dispatch.c): set by an in-process completer's final CAS, lives while
 * final: the runtime's reference went with that CAS (it is still counted in
 * refs, so a holder that sees this bit counts one reference fewer). */
#define RV_RTREL 0x40u
/* While NOT_READY: the holders have all dropped theirs, only the runtime's
 * reference is left (rv.c, holder_unref()), so the final CAS must not set
 * RV_RTREL: the runtime frees the closure itself. */
#define RV_ORPHAN 0x80u
/* A final word's copy of a small result's length (V5 in rv.c): bits 8-11,
 * set by the final CAS, so a reader takes it with the state it acquired. */
#define RV_SMALL_SHIFT 8
#define RV_SMALL_MASK 0xf00u

/* res_dirty bits (drop_contents resets what they name). */
#define CL_DIRTY_RES 0x1u  /* res, res_len or err_code written */
#define CL_DIRTY_DEPS 0x2u /* deps sealed: reset to NULL before reuse */
#define CL_HAS_IN 0x4u	   /* nin inputs in @in (read by the executor) */
#define CL_HINT 0x8u	   /* priority or affinity (B4): the hint fields are set */
/* The length (1..8) of a small result, in res_small (res_cls is
 * CL_RES_SMALL): the high nibble of res_dirty while its owner writes it;
 * readers take the final state word's copy (RV_SMALL_MASK). */
#define CL_SMALL_SHIFT 4
#define CL_SMALL_MASK 0xf0u

/* res_cls of a closure whose result is its res_small (V5 in rv.c), beside
 * the buffer classes of pool.h (COORD_BUF_INLINE, COORD_BUF_MALLOC, 0..). */
#define CL_RES_SMALL 0xfdu

/* The dependents list's sealed marker (never a valid edge address). */
#define COORD_DEPS_SEALED ((struct coord_dep *)(uintptr_t)1)

struct coord_pw;
struct coord;
struct coord_closure;

/*
 * One input edge of a consumer (B1): consumer->in[i] names input i; while
 * the input is NOT_READY the edge is linked on the input's dependents list
 * (@next), and the input's completer follows it to @consumer.
 */
struct coord_dep {
	struct coord_dep *next;
	struct coord_closure *consumer;
	struct coord_closure *input;
};

/*
 * Layout: the first cache line holds everything schedule() writes, the
 * worker reads and writes, and a fetch reads for a closure with up to 8
 * argument bytes, no per-worker arguments and a result of at most 8 bytes
 * (inline_args begins in it, res_small is in it: V5 in rv.c), so such a
 * closure moves between the producer's and the worker's caches as one line,
 * and a fetched result costs no other.  The other result fields are left
 * clean by the previous life (see coord_closure_drop_contents()) instead of
 * being rewritten by schedule(); so is @args, on the second line: it is
 * inline_args whenever args_cls is COORD_BUF_INLINE (whoever returns an
 * argument buffer resets both), and schedule() writes it only for a buffer.
 */
struct coord_closure {
	/* RemoteValue (S7): the state word and the references. */
	_Atomic uint32_t state;
	_Atomic uint32_t refs;
	/* Written by schedule before the push (published by the ring's R1). */
	uint32_t fn;
	uint32_t args_len;
	uint32_t attempt; /* 1 + put-backs (B8); owner of the closure writes */
	uint32_t reuse;	  /* times this object was handed out */
	uint8_t args_cls;
	uint8_t res_cls;
	uint8_t npw;
	uint8_t res_dirty; /* CL_DIRTY_* / CL_HAS_IN: drop_contents cleans */
	uint32_t idx;	   /* pool index, fixed for the object's life */
	uint64_t gen;	   /* cancellation generation, taken when queued (S3) */
	uint64_t id;	   /* reuse << 32 | pool index: coord_rv_id() */
	/* A result of 1..8 bytes (V5 in rv.c): written by the completer before
	 * its release CAS of @state, read after an acquire load. */
	uint64_t res_small;
	char inline_args[CL_INLINE_ARGS];
	void *args; /* inline_args, or a buffer (args_cls) */

	/* Result fields, written by the completer before its release CAS of
	 * @state and read after an acquire load. */
	uint32_t res_len;
	int err_code;
	void *res; /* the value, or the error message (NUL-terminated) */
	int err_cause;
	int err_worker;

	/* Fixed for the object's life, or off the fast path. */
	uint64_t t_sched, t_take; /* sampled closures only (coord_sampled()) */
	struct coord *c;
	struct coord_pw *pw[COORD_MAX_PW];
	struct coord_closure *next; /* overflow FIFO link */
	struct rcu_head rcu;

	/* Dataflow (B1; dataflow.c DF1-DF3), off the fast path. */
	_Atomic(struct coord_dep *) deps; /* dependents; NULL when handed out */
	_Atomic uint32_t pending;	  /* inputs not final yet, + 1 while registering */
	uint32_t nin;			  /* inputs (CL_HAS_IN) */
	struct coord_dep *in;		  /* nin edges, from c->bufs (in_cls) */
	uint8_t in_cls;

	/* Hints (B4, runtime/core/sched.c), meaningful when CL_HINT is set; the
	 * hint queue links closures through @next. */
	uint8_t lvl;	/* priority + 1: 0..3 */
	bool pref;	/* affinity preferred, not strict */
	uint32_t aff;	/* affinity set: 0 any, 1..N one worker, then named */
	int32_t target; /* the worker a take chose for it, or -1: any */
	uint64_t t_q;	/* when it was queued (aging, fallback) */

	char inline_res[CL_INLINE_RES];
};

/* The worker a take chose for @cl (B4), or -1: the transport places it. */
static inline int coord_closure_target(const struct coord_closure *cl)
{
	return unlikely(cl->res_dirty & CL_HINT) ? cl->target : -1;
}

_Static_assert(offsetof(struct coord_closure, res_small) + sizeof(uint64_t) <= CACHELINE &&
		       offsetof(struct coord_closure, inline_args) + sizeof(uint64_t) <= CACHELINE,
	       "state, a small result and 8 argument bytes share the first line");

/*
 * coord_closure_value() - the value (or the error message) of final @cl:
 * res_small when it is small (V5 in rv.c), its length from the final state
 * word, else res.  Read after the acquire of a final state (V2); the word
 * does not change while final.
 */
static inline const void *coord_closure_value(const struct coord_closure *cl, uint32_t *len)
{
	if (cl->res_cls == CL_RES_SMALL) {
		/* Relaxed: the caller acquired this final word already. */
		uint32_t w = atomic_load_explicit(&cl->state, memory_order_relaxed);

		*len = (w & RV_SMALL_MASK) >> RV_SMALL_SHIFT;
		return &cl->res_small;
	}
	*len = cl->res_len;
	return cl->res;
}

/* A registered function or resource creator. */
struct coord_fn_entry {
	char name[COORD_FN_NAME_MAX];
	coord_fn_t fn;
	coord_res_create_t create;
	coord_res_destroy_t destroy;
};

struct coord_registry {
	struct coord_fn_entry *fns;
	uint32_t n, cap;
};

/* One dispatcher's link of a released per-worker resource (runtime/core/pw.c). */
struct coord_pw_node {
	struct coord_pw_node *next;
	struct coord_pw *pw;
};

/* A per-worker resource handle (S9).  Immutable after creation but refs. */
struct coord_pw {
	struct coord *c;
	uint64_t uid;	  /* unique for the coordinator's life */
	uint32_t creator; /* registry index of the creator */
	uint32_t len;
	void *args;
	_Atomic uint32_t refs;
	/* S7 for resources: made[w] = worker w's losses + 1 when a closure
	 * using it last ran there, so a loss makes it ABORTED until it is made
	 * again (coord_per_worker_state()).  Written by dispatchers. */
	unsigned nworkers;
	_Atomic uint64_t *made;
	/* Release (runtime/core/pw.c P1-P4): when @refs reaches 0, node[i] goes
	 * on dispatcher i's pw_dead list; @pending counts the dispatchers that
	 * have not taken theirs yet, and the last one frees @pw. */
	struct coord_pw_node *node;
	_Atomic uint32_t pending;
};

/* Worker states: enum coord_worker_state in coord.h; transitions are in
 * runtime/core/recovery.c (R1). */

/* Metrics sampling (B7): one closure in 64 is timed (by pool index and
 * use count, so fresh pools and reused objects are both sampled). */
#define COORD_SAMPLE_MASK 63u
static inline bool coord_sampled(const struct coord_closure *cl)
{
	return ((cl->idx + cl->reuse) & COORD_SAMPLE_MASK) == 0;
}

static inline struct coord_closure *rv_cl(const struct coord_rv *rv)
{
	return (struct coord_closure *)rv;
}

/* runtime/core/rv.c: make @cl final with state @st (a RemoteValue state, or
 * READY|RV_READY_ERR); false if it already was (late result: dropped).
 * Then, if the old word says so, drops @cl's inputs and hands its
 * dependents on (coord_deps_final()). */
COORD_HIDDEN bool coord_rv_set_final(struct coord_closure *cl, uint32_t st);
/* The same for RL1 (dispatch.c): 1 if the final CAS also released the
 * runtime's reference (RV_RTREL: the caller must not touch @cl again), 0 if
 * it was made final but the runtime still holds it, -1 if already final. */
COORD_HIDDEN int coord_rv_set_final_rel(struct coord_closure *cl, uint32_t st);
/* runtime/core/dataflow.c: the dataflow half of a final transition (B1):
 * @old is the state word the final CAS replaced (RV_DEPS / RV_HASIN). */
COORD_HIDDEN void coord_deps_final(struct coord_closure *cl, uint32_t old);
/* Drop the runtime's reference; the last one recycles the closure. */
COORD_HIDDEN void coord_closure_put(struct coord_closure *cl);
/* Drop a holder's reference (a handle, or a consumer's on its input:
 * RV_RTREL-aware); the last one recycles the closure. */
COORD_HIDDEN void coord_closure_put_held(struct coord_closure *cl);
/* The two halves of coord_closure_put() (the runtime's), for batched returns: unref says
 * whether that was the last reference; drop_contents releases the buffers
 * and per-worker handles before the caller returns the object to the pool. */
COORD_HIDDEN bool coord_closure_unref(struct coord_closure *cl);
/* The last put of a closure outliving its coordinator (c->dead). */
COORD_HIDDEN void coord_closure_release_dead(struct coord_closure *cl);
COORD_HIDDEN void coord_closure_drop_contents(struct coord_closure *cl);

/* coord_closure_result_buf() - room for @len result bytes in @cl. */
COORD_HIDDEN void *coord_closure_result_buf(struct coord_closure *cl, size_t len);

#endif /* COORD_RUNTIME_CORE_CLOSURE_H */
