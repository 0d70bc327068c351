/* SPDX-License-Identifier: MIT */
/*
 * runtime/ps/ps.h - parameter-server variables as the coordinator and the
 * workers see them: a struct coord_ps reaches N ps tasks, either in this
 * process (the inproc transport: one struct coord_varstore per task) or over
 * the network (struct coord_psc, transport/psclient/ps_client.c: one connection per
 * ps task, batched frames).
 *
 * A variable is named; its ps task is coord_var_shard(name, nps) (FNV-1a of
 * the name), so the coordinator and every worker place a name on the same
 * task without asking anyone.  Its handle is (tag << 44) | (task << 32) | id,
 * where id is the variable's id in that task's store and tag that store's
 * run tag (coord_varstore_tag(), 20 bits; task < 4096 takes 12): handles are
 * the same in every process and can be passed in closure arguments.  An op
 * on a variable carries the handle's tag, and a store whose tag differs (the
 * ps task restarted since the handle was made, so the id may name another
 * variable or none) refuses it with COORD_ESTALE, a ps failure (S11).
 *
 * Every operation is a struct coord_ps_op; a batch of them is one frame per
 * ps task over the network.  The fields of each op (the same on the wire,
 * wire.h "var request"):
 *
 *   op           name    id   off    n      data (src)                 result (dst)
 *   CREATE       name    -    -      -      u32 ndim, u32 has_init,     u32 id, u32 ndim,
 *                                           u64 dims[ndim], f32 init[]  u64 dims[ndim],
 *                                                                       u32 tag
 *   LOOKUP       name    -    -      -      -                           as CREATE
 *   READ         -       id   off    n      -                           f32[n]
 *   ASSIGN       -       id   off    n      f32[n]                      -
 *   ASSIGN_ADD   -       id   off    n      f32[n]                      -
 *   SCATTER_ADD  -       id   -      nidx   i64 idx[nidx], f32 rows[]   -
 *   DELETE       -       id   -      -      -                           -
 *   SAVE         dir     -    step   nps    -                           -
 *   RESTORE      dir     -    -      -      -                           u64 step
 *   MAP          -       id   -      -      -                           struct coord_ps_map
 *   PREPARE      dir     nonce step  nps|flags<<32  resplit[] (below)    struct coord_ps_prep
 *   COMMIT       -       nonce -     -      -                           u32 count
 *   ABORT        -       -    -      -      -                           -
 *   GATHER       -       id   -      nidx   i64 idx[nidx]              f32 rows[nidx][row]
 *   ASSIGN_RDV   -       id   off    n      struct coord_ps_rsrc        -
 *   ASSIGN_ADD_RDV -     id   off    n      struct coord_ps_rsrc        -
 *
 * PREPARE's data: the partitioned variables to re-split (struct
 * coord_ckpt_resplit_spec, at most COORD_CKPT_RESPLIT_MAX), each u32
 * num_shards, u32 max_shards, u64 min_shard_bytes, u64 max_shard_bytes,
 * u16 name_len, name (COORD_PS_RESPLIT_FIXED + name_len bytes).
 *
 * GATHER and SCATTER_ADD check every index before touching anything (one
 * out of range fails the op whole); GATHER copies a repeated index twice.
 *
 * READ .. DELETE and MAP take the handle's tag in the op (@tag) and fail
 * with COORD_ESTALE when it is not the store's (coord_ps_handle_check()).
 *
 * At most once (runtime/ps/ps_once.c).  An update a worker function makes
 * (ASSIGN, ASSIGN_ADD, SCATTER_ADD through coord_ctx_var_*() or
 * coord_ctx_pvar_*()) carries its closure's key: the coordinator's session
 * (@sess), the closure's id (@closure, coord_ctx_closure(), the same on
 * every attempt, B8) and its number among the closure's updates (@seq, 1,
 * 2, ...).  A ps task applies each key once; a closure run again (put back
 * after a ps error whose update was applied but whose reply was lost, S11,
 * or after its worker was lost, S2/S10) is answered "done" for the updates
 * its earlier attempt made.  The coordinator's own updates (coord_var_*(),
 * coord_pvar_*() outside a closure, over the network) carry a key too:
 * the coordinator's call session (@call_sess below, not its closures'),
 * the calling thread's number as the slot and its call count as the reuse
 * (coord_ps_call_key(): a thread's calls are serial, as a slot's closures
 * are), and the update's number in the call.  One whose outcome is unknown
 * (sent, then its connection lost or no reply in time) is sent again under
 * its key until the ps answers it or the op timeout has passed
 * (coord_psc_run_sure()); what stays unknown fails with a message saying
 * the update may have been applied.
 *
 * ASSIGN_RDV and ASSIGN_ADD_RDV (rdma only: rendezvous updates): an ASSIGN
 * or ASSIGN_ADD whose 4 n data bytes stay in the sender's memory, which it
 * registered for the ps to RDMA READ (struct coord_ps_rsrc: where, how long,
 * the rkey); the ps READs them (into the variable itself for an assign) and
 * then answers, and the sender lets go of its buffer after the answer
 * (transport/rdma/ps_rdma.c P5, transport/server/rdma_server.c Q6).  The ps
 * runs them as the ASSIGN or ASSIGN_ADD they stand for (at most once
 * included: a key, its fingerprint, are the plain op's); elsewhere they
 * fail with COORD_EINVAL.
 *
 * MAP (rdma only: a ps served over rdma registers the variable's memory for
 * remote reads and answers with its address and keys, COORD_PS_MAP_LEN
 * bytes; elsewhere it fails with COORD_EINVAL).  A worker then reads the
 * variable with RDMA READs, without the ps CPU (runtime/store/varstore.c SNAP1-SNAP3).
 *
 * SAVE and RESTORE on task t use the directory dir/ps-<t> (created by SAVE);
 * SAVE records the layout (task t of nps) in the file.  RESTORE reads only
 * its own task's directory: the coordinator restores with PREPARE (every
 * task reads every old task's file of the step, from a directory all ps
 * tasks share, and stages what places on it now; step UINT64_MAX = the
 * latest; flags: COORD_CKPT_F_FALLBACK), then COMMIT (publish; the nonce
 * must be the PREPARE's) or ABORT on every task.  A stage belongs to the
 * session that prepared it: the connection (dropped when it closes), or
 * the in-process coordinator; a new PREPARE on a store drops the old stage.
 * A coord-ps started with a checkpoint root resolves dir beneath it only.
 * All multi-byte values are little-endian; data and results carry no padding
 * and need not be aligned.
 */
#ifndef COORD_RUNTIME_PS_H
#define COORD_RUNTIME_PS_H

#include <endian.h>
#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include <coord/error.h>

#include "runtime/util/util.h"
#include "runtime/store/varstore.h"

enum coord_ps_opcode {
	COORD_PS_CREATE = 1,
	COORD_PS_LOOKUP = 2,
	COORD_PS_READ = 3,
	COORD_PS_ASSIGN = 4,
	COORD_PS_ASSIGN_ADD = 5,
	COORD_PS_SCATTER_ADD = 6,
	COORD_PS_DELETE = 7,
	COORD_PS_SAVE = 8,
	COORD_PS_RESTORE = 9,
	COORD_PS_MAP = 10,
	COORD_PS_PREPARE = 11,
	COORD_PS_COMMIT = 12,
	COORD_PS_ABORT = 13,
	COORD_PS_GATHER = 14,
	COORD_PS_ASSIGN_RDV = 15,
	COORD_PS_ASSIGN_ADD_RDV = 16,
	COORD_PS_OP_MAX = 16,
};

/*
 * struct coord_ps_rsrc - a rendezvous update's data (ASSIGN_RDV,
 * ASSIGN_ADD_RDV; little-endian on the wire, packed as listed): @len bytes
 * at @addr in the sender's memory, readable with @rkey.
 */
struct coord_ps_rsrc {
	uint64_t addr;
	uint64_t len;
	uint32_t rkey;
	uint32_t reserved; /* 0 */
};
#define COORD_PS_RSRC_LEN 24

static inline void coord_ps_rsrc_put(uint8_t *b, const struct coord_ps_rsrc *d)
{
	uint64_t q[2] = { htole64(d->addr), htole64(d->len) };
	uint32_t w[2] = { htole32(d->rkey), 0 };

	memcpy(b, q, sizeof(q));
	memcpy(b + 16, w, sizeof(w));
}

static inline void coord_ps_rsrc_get(const uint8_t *b, struct coord_ps_rsrc *d)
{
	uint64_t q[2];
	uint32_t w[2];

	memcpy(q, b, sizeof(q));
	memcpy(w, b + 16, sizeof(w));
	d->addr = le64toh(q[0]);
	d->len = le64toh(q[1]);
	d->rkey = le32toh(w[0]);
	d->reserved = le32toh(w[1]);
}

/*
 * struct coord_ps_map - a MAP result (little-endian on the wire, packed as
 * listed): one variable's block (runtime/store/varstore.h: done, the nelem floats
 * at COORD_VAR_DATA_OFF, begun at block_len - 8), readable at block_addr
 * with rkey.
 */
struct coord_ps_map {
	uint64_t block_addr;
	uint64_t block_len;
	uint64_t nelem;
	uint32_t rkey;
	uint32_t reserved;
};
#define COORD_PS_MAP_LEN 32

static inline void coord_ps_map_put(uint8_t *b, const struct coord_ps_map *m)
{
	uint64_t q[3] = { htole64(m->block_addr), htole64(m->block_len), htole64(m->nelem) };
	uint32_t d[2] = { htole32(m->rkey), 0 };

	memcpy(b, q, sizeof(q));
	memcpy(b + 24, d, sizeof(d));
}

static inline void coord_ps_map_get(const uint8_t *b, struct coord_ps_map *m)
{
	uint64_t q[3];
	uint32_t d[2];

	memcpy(q, b, sizeof(q));
	memcpy(d, b + 24, sizeof(d));
	m->block_addr = le64toh(q[0]);
	m->block_len = le64toh(q[1]);
	m->nelem = le64toh(q[2]);
	m->rkey = le32toh(d[0]);
	m->reserved = 0;
}

/*
 * A PREPARE result (little-endian, packed as listed; see struct
 * coord_ckpt_prep_res): u64 step, u64 latest, u32 nstaged, u32 ntotal,
 * u32 old_nps, u32 version, u64 dig_staged, u64 dig_total, then why (no
 * NUL, up to the end).
 */
#define COORD_PS_PREP_FIXED 48
#define COORD_PS_RESPLIT_FIXED 26
#define COORD_PS_PREP_MAX (COORD_PS_PREP_FIXED + 255)

/* Longest checkpoint directory a SAVE or RESTORE names, bytes. */
#define COORD_PS_DIR_MAX 4000
/* CREATE / LOOKUP result: u32 id, u32 ndim, u64 dims[ndim], u32 tag. */
#define COORD_PS_INFO_MAX (12 + 8 * COORD_VAR_MAX_DIMS)
/* Where a handle keeps its task and its tag (see the top of this file). */
#define COORD_PS_HANDLE_TASK_SHIFT 32
#define COORD_PS_HANDLE_TAG_SHIFT 44

/* The store run tag a handle carries (an op's @tag). */
static inline uint32_t coord_ps_handle_tag(uint64_t v)
{
	return (uint32_t)(v >> COORD_PS_HANDLE_TAG_SHIFT);
}

/*
 * struct coord_ps_op - one operation and, after the call, its outcome.
 * @task:     ps task it goes to (< nps).
 * @tag:      an op on a variable: the handle's tag; else 0.
 * @dst/@cap: where the result bytes go (may be NULL when @cap is 0);
 *            @dst_len gets their count.  A result larger than @cap fails the
 *            op with COORD_EPROTO.
 * @code:     0, or the op's error (its message is in the batch's error when
 *            it is the first failure).
 */
struct coord_ps_op {
	uint16_t op;
	unsigned task;
	uint32_t id;
	uint32_t tag;
	const char *name;
	uint16_t name_len;
	uint64_t off;
	uint64_t n;
	const void *src;
	uint32_t src_len;
	/* Sent right after @src (scatter_add's rows), so no copy is needed to
	 * make one buffer; NULL in requests decoded from a frame. */
	const void *src2;
	uint32_t src2_len;
	void *dst;
	size_t cap;
	size_t dst_len;
	int code;
	/* At most once (above): the closure's key; @seq 0: none. */
	uint64_t sess, closure;
	uint32_t seq;
	/* The ps client's: enum coord_ps_fate, what became of the request. */
	uint8_t fate;
	/*
	 * A ps's rendezvous update (ASSIGN_RDV and ASSIGN_ADD_RDV, run as
	 * ASSIGN and ASSIGN_ADD with @src NULL and @src_len the data's bytes):
	 * @fetch(@fetch_arg, @id, dst, len, out, err) RDMA READs the data,
	 * into @dst (inside variable @id, whose stripes the caller holds) or,
	 * @dst NULL, into a buffer of its own it points *@out at (valid until
	 * the next call).  0 or a coord error code with @err.  NULL: none.
	 */
	int (*fetch)(void *arg, uint32_t id, void *dst, size_t len, const void **out,
		     struct coord_error *err);
	void *fetch_arg;
};

/* What became of a request sent by a ps client (coord_psc_run()). */
enum coord_ps_fate {
	COORD_PS_UNSENT,   /* never left: not applied */
	COORD_PS_SENT,	   /* sent, no answer (connection lost, timed out): unknown */
	COORD_PS_ANSWERED, /* the ps answered it (@code is its answer) */
};

struct coord_psc; /* transport/psclient/ps_client.c */

/* A set of ps tasks.  Exactly one of @local and @remote is set (or neither
 * when @nps is 0). */
struct coord_ps_once;

struct coord_ps {
	unsigned nps;
	struct coord_varstore **local;
	/* With @local: each store's at-most-once table (ps_once.c). */
	struct coord_ps_once **once;
	struct coord_psc *remote;
	/* The coordinator's session (at most once, above): random, never 0;
	 * 0 in a worker's client (its closures' session is its env's). */
	uint64_t sess;
	/* The session of the coordinator's own calls (above): random, never
	 * 0, over the network; 0 in-process (nothing is lost there) and in a
	 * worker's client. */
	uint64_t call_sess;
	/* S11: failure reports per ps task (the coordinator's; see
	 * coord_dispatch_ps_retry()). */
	_Atomic uint32_t *failures;
};

/*
 * coord_ps_local_create() - @nps in-process stores.  Any thread.
 * Return: 0; COORD_ENOMEM.
 */
COORD_HIDDEN int coord_ps_local_create(unsigned nps, struct coord_ps **out,
				       struct coord_error *err);
/* coord_ps_destroy() - free (local stores, or the remote client). */
COORD_HIDDEN void coord_ps_destroy(struct coord_ps *ps);

/*
 * coord_ps_run() - run @n ops; each op's @code says how it went.
 * Concurrency: any thread, any number at once.
 * Return: 0 if every op succeeded, else the first failed op's code with
 * its message in @err.
 */
COORD_HIDDEN int coord_ps_run(struct coord_ps *ps, struct coord_ps_op *ops, unsigned n,
			      struct coord_error *err);

/*
 * coord_ps_apply() - run one op on @vs, the store of ps task @task: what a
 * ps server does with a request and what the local backend does.  Request
 * data may be unaligned: @scratch (grown with realloc, freed by the caller)
 * holds aligned copies.  The result is written with @emit(@arg, bytes, len)
 * (once, possibly with len 0) on success; on failure the message is in
 * @err and nothing is emitted.
 * Return: 0 or a coord error code.
 */
typedef int (*coord_ps_emit_t)(void *arg, const void *p, size_t len);
struct coord_ps_scratch {
	void *buf;
	size_t cap;
	/* The session a PREPARE's stage belongs to; NULL: this scratch (a
	 * server's is per connection). */
	const void *owner;
	/* Optional (a server's): where @emit(@arg, p, @len) would put a
	 * result of @len bytes, or NULL.  READ and GATHER write their result
	 * there and emit from there, so it is copied once, from the store into
	 * the reply frame.  Nothing is written between the two calls. */
	void *(*room)(void *arg, size_t len);
	/* Optional (a tcp server's): a READ's result of @len bytes, at least
	 * COORD_PS_STREAM_MIN, is sent from @p, the variable's own memory,
	 * while the READ holds its stripes (coord_vs_read_view()): what the
	 * connection takes within a bounded time goes, the rest is copied.
	 * The result is then emitted (@emit is not called).  0 or
	 * a coord error code with @err. */
	int (*stream)(void *arg, const void *p, size_t len, struct coord_error *err);
};
/* The least result a READ sends through struct coord_ps_scratch @stream. */
#define COORD_PS_STREAM_MIN (256u << 10)
COORD_HIDDEN int coord_ps_apply(struct coord_varstore *vs, unsigned task,
				const struct coord_ps_op *op, struct coord_ps_scratch *scratch,
				coord_ps_emit_t emit, void *arg, struct coord_error *err);

/* --- at most once (runtime/ps/ps_once.c) ---------------------------------------------- */

/* Entries of one ps task's table, at most (32 bytes each). */
#define COORD_PS_ONCE_MAX (1u << 20)

/*
 * coord_ps_once_create() - an empty table of at most @max entries (rounded
 * down to what its buckets hold, at least COORD_PS_ONCE_MIN); memory grows
 * with use.  Any thread.  Return: 0; COORD_ENOMEM.
 */
#define COORD_PS_ONCE_MIN 2048u /* 64 stripes of 2 buckets of 16 */
COORD_HIDDEN int coord_ps_once_create(uint32_t max, struct coord_ps_once **out);
COORD_HIDDEN void coord_ps_once_destroy(struct coord_ps_once *o);

/*
 * coord_ps_apply_once() - coord_ps_apply(), at most once per key: an
 * update with a key (@op->seq) already applied is answered as done
 * without touching @vs; one of a closure that is final (its pool slot ran
 * a later closure since) fails with COORD_ECANCELLED; anything else runs
 * as coord_ps_apply() does, and a keyed update that succeeds is recorded.
 * @o NULL: coord_ps_apply().  Concurrency: any thread, any number at once.
 */
COORD_HIDDEN int coord_ps_apply_once(struct coord_ps_once *o, struct coord_varstore *vs,
				     unsigned task, const struct coord_ps_op *op,
				     struct coord_ps_scratch *scratch, coord_ps_emit_t emit,
				     void *arg, struct coord_error *err);

/* What a table did (summed over its stripes): keyed updates applied,
 * answered as done, refused as final, and keys forgotten while their
 * slot had no later closure (the table was full), and entries held. */
struct coord_ps_once_stats {
	uint64_t applied, dups, finals, evicted, entries;
};
COORD_HIDDEN void coord_ps_once_stats(struct coord_ps_once *o, struct coord_ps_once_stats *st);

/* A new coordinator session: random, never 0. */
COORD_HIDDEN uint64_t coord_ps_session_new(void);

/* Key the updates among @ops (a worker function's, through @ctx): the
 * session of its env, its closure, the next numbers.  Nothing without a
 * session or a closure. */
struct coord_ctx;
COORD_HIDDEN void coord_ps_ctx_key(struct coord_ctx *ctx, struct coord_ps_op *ops, unsigned n);

/* Key the updates among @ops not keyed yet (a coordinator's own call, above):
 * session @sess, the calling thread's slot and its next call count, the
 * numbers 1, 2, ... Any thread. */
COORD_HIDDEN void coord_ps_call_key(uint64_t sess, struct coord_ps_op *ops, unsigned n);

/*
 * coord_ps_handle_check() - may @op (of ps task @task) run on @vs?  An op
 * on a variable (READ .. DELETE, MAP) must carry @vs's tag: another one is a
 * handle from an earlier run of the task, refused before the id is looked
 * at.  coord_ps_apply() checks; a server checks too before what it does
 * with the id itself (MAP, a DELETE's unmap).  Any thread.
 * Return: 0; COORD_ESTALE with a message in @err.
 */
COORD_HIDDEN int coord_ps_handle_check(struct coord_varstore *vs, unsigned task,
				       const struct coord_ps_op *op, struct coord_error *err);

/* --- the remote client (transport/psclient/ps_client.c) ----------------------------- */

struct coord_key;

/*
 * coord_psc_create() - a client of the ps tasks at @addrs[0..@nps).
 * @role: COORD_ROLE_COORDINATOR or COORD_ROLE_WORKER (what we say at HELLO).
 * @key:  copied; NULL or unset = no cluster key.
 * @op_timeout_ms: a request gives up after this (COORD_ETIMEDOUT).
 * @hb_ms/@misses: tcp: a connection silent for @hb_ms x @misses is lost
 *        (its requests fail with COORD_EUNAVAILABLE); <= 0: never.
 * Connections are opened lazily, on first use, and again after a loss.
 * Return: 0; COORD_EINVAL; COORD_ENOMEM.
 */
COORD_HIDDEN int coord_psc_create(const char *const *addrs, unsigned nps, uint8_t role,
				  const struct coord_key *key, uint32_t max_frame,
				  int connect_timeout_ms, int op_timeout_ms, int hb_ms, int misses,
				  struct coord_ps **out, struct coord_error *err);
COORD_HIDDEN void coord_psc_destroy(struct coord_psc *p);
COORD_HIDDEN int coord_psc_run(struct coord_psc *p, struct coord_ps_op *ops, unsigned n,
			       struct coord_error *err);
/*
 * coord_psc_run_sure() - coord_psc_run() for the coordinator's own calls
 * (their updates keyed, coord_ps_call_key()): a keyed update whose outcome
 * is unknown (COORD_PS_SENT) is sent again under its key, a ping interval
 * apart, until the ps answers it or the op timeout since the call has
 * passed (one re-send at least).  Return: as coord_psc_run(); an update
 * still unknown keeps its COORD_EUNAVAILABLE or COORD_ETIMEDOUT, and @err
 * says it may have been applied.
 */
COORD_HIDDEN int coord_psc_run_sure(struct coord_psc *p, struct coord_ps_op *ops, unsigned n,
				    struct coord_error *err);
/*
 * The coordinator's ps tasks (struct coord_ps_ops, runtime/core/internal.h):
 * coord_ps_local_ops, local stores for the inproc transport (the spec's
 * "ps" job size, else opts.inproc_ps); coord_ps_remote_ops
 * (transport/psclient/ps_client.c), a client of the spec's "ps" job (none
 * without one).
 */
struct coord_ps_ops;
extern const struct coord_ps_ops coord_ps_local_ops;
extern const struct coord_ps_ops coord_ps_remote_ops;
/* coord_ps_ntasks() - the spec's "ps" job size, else @def: 0 or COORD_EINVAL. */
struct coord_spec;
COORD_HIDDEN int coord_ps_ntasks(const struct coord_spec *spec, unsigned def, unsigned *nps,
				 struct coord_error *err);
/* coord_ps_failure() - struct coord_ps_ops.failure: S11's count for @task. */
COORD_HIDDEN uint32_t coord_ps_failure(struct coord_ps *ps, unsigned task);
/* coord_psc_use_rdma() - @ps (from coord_psc_create(), before its first
 * use) reaches its tasks over rdma: frame channels, and one-sided READs
 * (transport/psclient/ps_client.c, ps_rdma.h). */
COORD_HIDDEN void coord_psc_use_rdma(struct coord_ps *ps);
/*
 * coord_psc_put_table() - what a coordinator tells a worker of its ps
 * tasks: a PS_OPTS frame (its ps timeout and heartbeat) and a PS_TABLE
 * frame, appended to @w, which has coord_psc_table_len() bytes of room.
 * Nothing (0 bytes) unless @ps is remote with tasks.
 */
struct coord_wire_writer;
COORD_HIDDEN size_t coord_psc_table_len(const struct coord_ps *ps);
COORD_HIDDEN void coord_psc_put_table(struct coord_wire_writer *w, const struct coord_ps *ps);

#endif /* COORD_RUNTIME_PS_H */
