/* SPDX-License-Identifier: MIT */
/*
 * coord/var.h - parameter-server variables: named dense float32 tensors
 * kept by the "ps" tasks, created by the coordinator and read and updated
 * by worker functions through their ctx.
 *
 * Placement: a variable lives on ps task coord_var_shard(name) = FNV-1a-64
 * of its name modulo the number of ps tasks, so every process places a name
 * on the same task; a name "BASE/part_J" (a shard of a partitioned
 * variable, below) goes J tasks after BASE's.  Where the ps tasks are:
 *   - inproc transport: in the coordinator's process, one store per task
 *     (the spec's "ps" job size, else opts.inproc_ps, default 1);
 *   - tcp transport: coord-ps processes (or coord_ps_serve()) at the
 *     addresses of the spec's "ps" job.  The coordinator sends the list to
 *     its workers, which connect to the ps tasks themselves on first use.
 *
 * A coord_var_t handle is the same in every process (ps task, id there, the
 * task's run): pass it to closures in their arguments.  Over the network every call is a round
 * trip to the ps; coord_ctx_var_batch() sends many operations in one frame
 * per ps task, and concurrent callers in one worker process share frames.
 *
 * Updates are atomic per call and never lost (concurrent assign_add from all
 * workers sum exactly); reads see each update whole.  As with TF's
 * asynchronous parameter servers, there is no ordering between different
 * workers' updates.
 *
 * Checkpoints: coord_checkpoint_save() makes every ps task write its
 * variables to DIR/ps-<task>/ crash-safe (temp file, fsync, rename, CRC-32C);
 * coord_checkpoint_restore() loads the newest.  Save after coord_join() for
 * an exact snapshot.
 */
#ifndef COORD_VAR_H
#define COORD_VAR_H

#include <stddef.h>
#include <stdint.h>

#include <coord/coord.h>

#ifdef __cplusplus
extern "C" {
#endif

/**
 * A variable: (tag << 44) | (ps task << 32) | id on that task, where tag
 * names the ps task's run: a handle made before its ps task restarted fails
 * with COORD_ESTALE (look the name up again).  coord_var_task() reads the
 * task.
 */
typedef uint64_t coord_var_t;

/**
 * coord_var_task() - the ps task a handle's variable lives on.
 * @var: a handle from coord_var_create() or coord_var_lookup().
 *
 * Concurrency: any thread.
 */
static inline unsigned coord_var_task(coord_var_t var)
{
	return (unsigned)(var >> 32) & 0xfffu;
}

/* Longest variable name (bytes, NUL excluded); names are [A-Za-z0-9_./-]+. */
#define COORD_VAR_NAME_LEN 63
/* Most dimensions of a variable (0 = a scalar). */
#define COORD_VAR_DIMS 4

/** struct coord_var_shape - a variable's shape; @nelem is the product. */
struct coord_var_shape {
	unsigned ndim;
	uint64_t dims[COORD_VAR_DIMS];
	uint64_t nelem;
};

/** The data operations of coord_var_batch() / coord_ctx_var_batch(). */
enum coord_var_opcode {
	COORD_VAR_READ = 3,	   /* @dst[0..n) = var[off..off+n) */
	COORD_VAR_ASSIGN = 4,	   /* var[off..off+n) = @src[0..n) */
	COORD_VAR_ASSIGN_ADD = 5,  /* var[off..off+n) += @src[0..n) */
	COORD_VAR_SCATTER_ADD = 6, /* row @indices[k] += row k of @src, k < n */
};

/**
 * struct coord_var_op - one operation of a batch.
 * @op:      enum coord_var_opcode.
 * @var:     the variable.
 * @off:     first element (row-major flat index); unused by SCATTER_ADD.
 * @n:       element count; for SCATTER_ADD the number of indices.
 * @src:     ASSIGN, ASSIGN_ADD: @n floats; SCATTER_ADD: @n rows of
 *           (nelem / dims[0]) floats.  Borrowed for the call.
 * @dst:     READ: room for @n floats.
 * @indices: SCATTER_ADD: @n row indices; duplicates add twice.  All are
 *           checked first: one out of range fails the op, nothing applied.
 * @row_len: SCATTER_ADD: elements per row (nelem / dims[0]; the ps checks).
 * @code:    out: 0 or this op's error.
 */
struct coord_var_op {
	unsigned op;
	coord_var_t var;
	uint64_t off;
	uint64_t n;
	const float *src;
	float *dst;
	const int64_t *indices;
	uint64_t row_len;
	int code;
};

/** coord_num_ps() - the number of ps tasks (0: no variables). */
COORD_API unsigned coord_num_ps(const struct coord *c);

/**
 * coord_var_create() - create a variable on its ps task, or find it.
 * @name: 1..63 bytes of [A-Za-z0-9_./-].
 * @ndim: 0..4; @dims: @ndim sizes >= 1 (NULL when @ndim is 0).
 * @init: NULL for zeros, else nelem initial values.
 * @var:  on success the handle.
 *
 * Idempotent: an existing variable of the same name and shape is returned
 * unchanged (@init ignored), as after coord_checkpoint_restore().
 *
 * Concurrency: any thread.
 * Return: 0; COORD_EINVAL (bad name or shape, no ps tasks); -EEXIST the name
 * exists with another shape; COORD_EUNAVAILABLE the ps cannot be reached;
 * another error from the ps, with its message in @err.
 */
COORD_API COORD_NODISCARD int coord_var_create(struct coord *c, const char *name, unsigned ndim,
					       const uint64_t *dims, const float *init,
					       coord_var_t *var, struct coord_error *err);

/**
 * coord_var_lookup() - the handle (and optionally shape) of @name.
 * Return: 0; -ENOENT no such variable; as coord_var_create().
 */
COORD_API COORD_NODISCARD int coord_var_lookup(struct coord *c, const char *name, coord_var_t *var,
					       struct coord_var_shape *shape,
					       struct coord_error *err);

/**
 * coord_var_batch() - run @n data operations from the coordinator, one
 * frame per ps task.  Each op's @code tells how it went.
 * Updates are applied once each: one whose reply was lost with its
 * connection is sent again (under a key the ps remembers) until the ps
 * answers, opts.ps_timeout_ms has passed or the ps is gone (a dial refused).
 * Return: 0 if all succeeded, else the first failure's code (message in
 * @err): COORD_EINVAL a bad op; -ENOENT no such variable; COORD_ESTALE a
 * handle made before its ps task restarted; COORD_EUNAVAILABLE the ps cannot
 * be reached; COORD_EUNAVAILABLE or COORD_ETIMEDOUT with a message saying
 * so: an update sent whose outcome stayed unknown (it may have been
 * applied: read it back before repeating it).
 */
COORD_API COORD_NODISCARD int coord_var_batch(struct coord *c, struct coord_var_op *ops, unsigned n,
					      struct coord_error *err);

/** coord_var_read() - read elements [@off, @off + @n) into @out. */
COORD_API COORD_NODISCARD int coord_var_read(struct coord *c, coord_var_t var, uint64_t off,
					     uint64_t n, float *out, struct coord_error *err);

/** coord_var_assign() - set elements [@off, @off + @n) from @src. */
COORD_API COORD_NODISCARD int coord_var_assign(struct coord *c, coord_var_t var, uint64_t off,
					       uint64_t n, const float *src,
					       struct coord_error *err);

/**
 * coord_checkpoint_save() - every ps task saves its variables under
 * @dir/ps-<task>/ as checkpoint @step (crash-safe; older ones beyond 5 are
 * deleted; temp files of interrupted saves there are removed), recording
 * the layout (its task and the ps task count).  @dir must exist and be
 * reachable by every ps process at the same path: one file system shared
 * by all ps tasks (as TensorFlow assumes), or a local one on a single host.
 * A coord-ps writes only under its checkpoint root (--ckpt-root, default
 * its working directory): @dir relative to it, or absolute beneath it.
 * Return: 0; an error naming the ps task and file that failed; -EACCES
 * @dir escapes a ps task's root.
 */
COORD_API COORD_NODISCARD int coord_checkpoint_save(struct coord *c, const char *dir, uint64_t step,
						    struct coord_error *err);

/**
 * coord_checkpoint_restore() - restore the newest checkpoint in @dir, whole
 * or not at all, onto however many ps tasks now run.
 * @step: optional; the step restored.
 *
 * The step is the one @dir/ps-0/latest names.  Every ps task reads every
 * file of that step (@dir/ps-<t>/ for each task t that saved it: the ps
 * tasks must share @dir), verifies it (lengths, CRC-32C, format version,
 * the step and the layout each file records), keeps the variables whose
 * name now places on it (coord_var_shard() with the current ps count) and
 * stages them unpublished after checking them against its store (absent,
 * or the same shape).  Only when every task staged and together they hold
 * every variable of the checkpoint exactly once is the restore committed
 * on all of them; otherwise it is aborted on all and no variable anywhere
 * changed.  Variables not in the checkpoint are left as they are.  Call it
 * before workers update variables (an update racing the commit may land
 * before or after the restored value).  Files of version 1 (no recorded
 * layout) are read too: their task count is the number of ps-<t> holding
 * the step.
 * Return: 0; -ENOENT no checkpoint, or a task's file of the step is missing
 * (a save that did not finish everywhere); -EBADMSG a corrupt or
 * inconsistent file (named in @err); -EEXIST a variable exists with another
 * shape; -EACCES @dir escapes a ps task's root; COORD_EINVAL the tasks read
 * different steps (the directory changed, or is not shared); a ps failure.
 * The one error that leaves a model partly restored is a ps task lost
 * between the two phases: @err says so, and restoring again repairs it.
 * On success @err->msg is empty or a note, as coord_checkpoint_restore_ex().
 */
COORD_API COORD_NODISCARD int coord_checkpoint_restore(struct coord *c, const char *dir,
						       uint64_t *step, struct coord_error *err);

/* coord_checkpoint_restore_ex() flags. */
#define COORD_CKPT_FALLBACK 1u

/**
 * coord_checkpoint_restore_ex() - coord_checkpoint_restore() with @flags.
 * @flags: 0, or COORD_CKPT_FALLBACK: when the newest checkpoint cannot be
 *         restored whole because a file of it is missing or corrupt (or
 *         latest is unreadable), restore the newest older step that can be,
 *         whole.  A shape conflict or a ps failure does not fall back.
 * @step:  optional; the step restored.
 *
 * It says which step it used: in *@step, and when it fell back, in a
 * warning log line and in @err->msg ("fell back to step S, the newest
 * intact checkpoint in DIR (step L: why)") while returning 0 with
 * @err->code 0.  On success @err->msg is otherwise empty, or, when the
 * checkpoint was saved by another number of ps tasks, says so ("restored
 * step S whole: V variables saved by 2 ps tasks, re-placed onto 3").
 * Return: as coord_checkpoint_restore(); COORD_EINVAL unknown flags.
 */
COORD_API COORD_NODISCARD int coord_checkpoint_restore_ex(struct coord *c, const char *dir,
							  unsigned flags, uint64_t *step,
							  struct coord_error *err);

/* --- from worker functions ------------------------------------------------- */

/*
 * The ctx calls return 0 or a negative code with the ctx's message set, so
 * a function can `return r;` and its closure fails with that message.  A
 * call whose ps task cannot be reached (COORD_EUNAVAILABLE, COORD_ETIMEDOUT)
 * or restarted since the handle was made (COORD_ESTALE) makes a failing
 * closure a ps failure (S11), whatever code the function returns.
 */

/** coord_ctx_var_lookup() - the handle (and shape, if non-NULL) of @name. */
COORD_API COORD_NODISCARD int coord_ctx_var_lookup(struct coord_ctx *ctx, const char *name,
						   coord_var_t *var, struct coord_var_shape *shape);

/** coord_ctx_var_batch() - as coord_var_batch(), from a worker. */
COORD_API COORD_NODISCARD int coord_ctx_var_batch(struct coord_ctx *ctx, struct coord_var_op *ops,
						  unsigned n);

/** coord_ctx_var_read() - read elements [@off, @off + @n) into @out. */
COORD_API COORD_NODISCARD int coord_ctx_var_read(struct coord_ctx *ctx, coord_var_t var,
						 uint64_t off, uint64_t n, float *out);

/** coord_ctx_var_assign() - set elements [@off, @off + @n) from @src. */
COORD_API COORD_NODISCARD int coord_ctx_var_assign(struct coord_ctx *ctx, coord_var_t var,
						   uint64_t off, uint64_t n, const float *src);

/** coord_ctx_var_assign_add() - add @delta to elements [@off, @off + @n). */
COORD_API COORD_NODISCARD int coord_ctx_var_assign_add(struct coord_ctx *ctx, coord_var_t var,
						       uint64_t off, uint64_t n,
						       const float *delta);

/**
 * coord_ctx_var_scatter_add() - add row k of @updates to row @indices[k],
 * k < @nidx; @row_len elements per row (the variable's, checked by the ps).
 */
COORD_API COORD_NODISCARD int coord_ctx_var_scatter_add(struct coord_ctx *ctx, coord_var_t var,
							const int64_t *indices, size_t nidx,
							size_t row_len, const float *updates);

/* --- partitioned variables ---------------------------------------------------- */

/*
 * A partitioned variable (TF's variable_partitioner, ShardedVariable): one
 * logical variable of shape [rows, ...] split by rows into nparts shards,
 * contiguous and in order, the first rows % nparts shards one row longer.
 * Shard J is a variable of its own named "NAME/part_J" (so NAME is at most
 * COORD_PVAR_NAME_LEN bytes), placed J ps tasks after the task NAME hashes
 * to (coord/var.h's placement, so the shards spread over the ps tasks).
 * Checkpoints save and restore the shards with every other variable, whole
 * or not at all; a restore onto another number of ps tasks places every
 * shard where it now belongs (the shard count stays the checkpoint's).
 *
 * struct coord_pvar is the handle: a plain struct, the same in every process
 * (pass it in closure arguments).  Rows are addressed by their row id in the
 * whole variable (0..rows-1); elements by their flat row-major index.
 */
#define COORD_VAR_MAX_PARTS 64
#define COORD_PVAR_NAME_LEN (COORD_VAR_NAME_LEN - 8)

/**
 * struct coord_partitioner - how many shards (all zero: the defaults).
 * @num_shards:      fixed_size_partitioner: exactly this many (capped at
 *                   rows); the fields below must then be 0.
 * @max_shard_bytes: variable_axis_size_partitioner: as many shards as it
 *                   takes for each to be at most this (capped at
 *                   @max_shards when set).
 * @min_shard_bytes: min_max_variable_partitioner (when @max_shard_bytes is
 *                   0): as many shards as keep each at least this (default
 *                   256 KiB), at most @max_shards (default: the number of
 *                   ps tasks).
 * @max_shards:      see above.
 * Always at least 1 shard, at most rows and COORD_VAR_MAX_PARTS.
 */
struct coord_partitioner {
	unsigned num_shards;
	unsigned max_shards;
	uint64_t min_shard_bytes;
	uint64_t max_shard_bytes;
};

/**
 * struct coord_pvar - a partitioned variable's handle.
 * @name:    the logical name.
 * @nparts:  its shard count, 1..COORD_VAR_MAX_PARTS.
 * @ndim, @dims: the logical shape (@ndim >= 1); @rows = dims[0].
 * @row_len: elements per row (product of dims[1..]).
 * @part:    the shards' handles, in row order.
 */
struct coord_pvar {
	char name[COORD_VAR_NAME_LEN + 1];
	uint32_t nparts;
	uint32_t ndim;
	uint64_t dims[COORD_VAR_DIMS];
	uint64_t rows;
	uint64_t row_len;
	coord_var_t part[COORD_VAR_MAX_PARTS];
};

/**
 * coord_pvar_create() - create the partitioned variable @name (its shards),
 * or find it.
 * @name:  1..COORD_PVAR_NAME_LEN bytes of [A-Za-z0-9_./-].
 * @ndim:  1..4; @dims: the whole shape.
 * @init:  NULL for zeros, else nelem initial values of the whole variable.
 * @p:     NULL for the defaults.
 * @pv:    on success the handle.
 *
 * Idempotent as coord_var_create(): shards that exist with the same shape
 * (e.g. after coord_checkpoint_restore()) are kept unchanged.
 * Return: 0; COORD_EINVAL bad arguments; -EEXIST a shard exists with
 * another shape, or more shards exist (partitioned otherwise before); as
 * coord_var_create().
 */
COORD_API COORD_NODISCARD int coord_pvar_create(struct coord *c, const char *name, unsigned ndim,
						const uint64_t *dims, const float *init,
						const struct coord_partitioner *p,
						struct coord_pvar *pv, struct coord_error *err);

/**
 * coord_pvar_lookup() - the handle of partitioned variable @name: its
 * shards "NAME/part_J", or else a plain variable NAME of at least one
 * dimension (a handle of 1 part: gather and scatter_add work on it too).
 * Return: 0; -ENOENT neither exists; -EBADMSG the shards found do not make
 * one variable; as coord_var_lookup().
 */
COORD_API COORD_NODISCARD int coord_pvar_lookup(struct coord *c, const char *name,
						struct coord_pvar *pv, struct coord_error *err);

/**
 * coord_pvar_gather() - rows @ids[0..@n) of @pv into @out (@n rows of
 * row_len floats, in the order of @ids).  Repeated ids are read once;
 * one request per ps task holding a wanted row (one frame each, unless it
 * exceeds max_frame), all sent before any reply is awaited.
 * Return: 0; COORD_EINVAL bad handle or arguments; -ERANGE an id outside
 * [0, rows) (its value and position in @err; nothing was sent); a ps error.
 */
COORD_API COORD_NODISCARD int coord_pvar_gather(struct coord *c, const struct coord_pvar *pv,
						const int64_t *ids, size_t n, float *out,
						struct coord_error *err);

/**
 * coord_pvar_scatter_add() - add row k of @updates to row @ids[k] of @pv,
 * k < @n (a repeated id adds twice), one request per ps task.  Every id is
 * checked before anything is sent: one outside [0, rows) fails the call
 * with -ERANGE and changes nothing on any shard.
 * Return: as coord_pvar_gather().
 */
COORD_API COORD_NODISCARD int coord_pvar_scatter_add(struct coord *c, const struct coord_pvar *pv,
						     const int64_t *ids, size_t n,
						     const float *updates, struct coord_error *err);

/**
 * coord_pvar_read() - elements [@off, @off + @n) of the whole variable
 * (flat, row-major) into @out, one READ per shard the range covers, in one
 * batch, each straight into its part of @out.
 * Return: 0; COORD_EINVAL bad handle or range; a ps error.
 */
COORD_API COORD_NODISCARD int coord_pvar_read(struct coord *c, const struct coord_pvar *pv,
					      uint64_t off, uint64_t n, float *out,
					      struct coord_error *err);

/**
 * coord_pvar_assign_add() - add @delta to elements [@off, @off + @n) of the
 * whole variable, as coord_pvar_read() splits the range (atomic per shard).
 * Return: as coord_pvar_read().
 */
COORD_API COORD_NODISCARD int coord_pvar_assign_add(struct coord *c, const struct coord_pvar *pv,
						    uint64_t off, uint64_t n, const float *delta,
						    struct coord_error *err);

/* The most variables in one coord_pvar_gather_multi() or _scatter_add_multi(). */
#define COORD_PVAR_MULTI_MAX 1024

/**
 * struct coord_pvar_rows - the rows of one partitioned variable in a
 * multi-variable gather or scatter_add (coord_pvar_gather_multi()).
 * @pv:      the variable.
 * @ids:     @n row ids, each in [0, rows); repeats allowed.
 * @n:       how many (0: nothing for this variable).
 * @out:     gather: @n rows of row_len floats, in the order of @ids.
 * @updates: scatter_add: @n rows of row_len floats, row k added to @ids[k].
 */
struct coord_pvar_rows {
	const struct coord_pvar *pv;
	const int64_t *ids;
	size_t n;
	float *out;
	const float *updates;
};

/**
 * coord_pvar_gather_multi() - coord_pvar_gather() of @nv variables in one
 * call: @v[i].n rows of @v[i].pv into @v[i].out for every i < @nv.  The
 * requests of all of them are batched: one request per ps task holding a
 * wanted row (one frame each, unless it exceeds max_frame), all sent before
 * any reply is awaited, so a step reading many tables pays one round trip.
 * Every handle and every id is checked before anything is sent.
 * At most COORD_PVAR_MULTI_MAX variables; @nv 0 does nothing.
 * Return: 0; COORD_EINVAL a bad handle or arguments (which one in @err);
 * -ERANGE an id outside its variable's [0, rows) (nothing was sent); a ps
 * error (the rows of every variable are then undefined).
 */
COORD_API COORD_NODISCARD int coord_pvar_gather_multi(struct coord *c,
						      const struct coord_pvar_rows *v, unsigned nv,
						      struct coord_error *err);

/**
 * coord_pvar_scatter_add_multi() - coord_pvar_scatter_add() of @nv
 * variables in one call: row k of @v[i].updates added to row @v[i].ids[k]
 * of @v[i].pv, batched as coord_pvar_gather_multi() batches.  Every handle
 * and id of every variable is checked before anything is sent: one id
 * out of range fails the call with -ERANGE and changes nothing anywhere.
 * Return: as coord_pvar_gather_multi().
 */
COORD_API COORD_NODISCARD int coord_pvar_scatter_add_multi(struct coord *c,
							   const struct coord_pvar_rows *v,
							   unsigned nv, struct coord_error *err);

/**
 * struct coord_ckpt_resplit - a partitioned variable to restore with the
 * shard count a partitioner gives now (coord_checkpoint_restore_resplit()).
 * @name: its name (1..COORD_PVAR_NAME_LEN bytes; the checkpoint holds its
 *        shards NAME/part_J).
 * @part: the partitioner, as given to coord_pvar_create() (over the ps
 *        tasks that run now); all zero: the defaults.
 */
struct coord_ckpt_resplit {
	const char *name;
	struct coord_partitioner part;
};

/**
 * coord_checkpoint_restore_resplit() - coord_checkpoint_restore_ex(), and
 * the @n partitioned variables of @rs re-split on the way: each restored as
 * the shard count its partitioner gives now (which may differ from the
 * checkpoint's, e.g. saved with 4 shards, restored as 3), every new shard's
 * rows read from the checkpoint's shards that hold them, bit for bit.
 * @flags: as coord_checkpoint_restore_ex().
 * @rs:    at most 256 variables; each must be in the checkpoint.
 * @step:  optional; the step restored.
 *
 * Whole or not at all, as coord_checkpoint_restore(): it is refused before
 * any change when a variable of @rs is not a partitioned variable of the
 * checkpoint, its shards are missing or do not split its rows as
 * partitioned variables do, or a live shard NAME/part_J is beyond the new
 * count (delete the old variable first).  Each ps task reads the step's
 * files twice (once to learn the old layouts) and holds only its share.
 * coord_pvar_create() with the same partitioner then finds it as restored.
 * Return: as coord_checkpoint_restore_ex(); COORD_EINVAL a bad @rs, or a
 * variable of @rs not in the checkpoint.
 */
COORD_API COORD_NODISCARD int coord_checkpoint_restore_resplit(struct coord *c, const char *dir,
							       unsigned flags,
							       const struct coord_ckpt_resplit *rs,
							       unsigned n, uint64_t *step,
							       struct coord_error *err);

/** coord_ctx_pvar_lookup() - as coord_pvar_lookup(), from a worker. */
COORD_API COORD_NODISCARD int coord_ctx_pvar_lookup(struct coord_ctx *ctx, const char *name,
						    struct coord_pvar *pv);

/** coord_ctx_pvar_gather() - as coord_pvar_gather(), from a worker. */
COORD_API COORD_NODISCARD int coord_ctx_pvar_gather(struct coord_ctx *ctx,
						    const struct coord_pvar *pv, const int64_t *ids,
						    size_t n, float *out);

/** coord_ctx_pvar_scatter_add() - as coord_pvar_scatter_add(), from a worker. */
COORD_API COORD_NODISCARD int coord_ctx_pvar_scatter_add(struct coord_ctx *ctx,
							 const struct coord_pvar *pv,
							 const int64_t *ids, size_t n,
							 const float *updates);

/** coord_ctx_pvar_gather_multi() - as coord_pvar_gather_multi(), from a worker. */
COORD_API COORD_NODISCARD int coord_ctx_pvar_gather_multi(struct coord_ctx *ctx,
							  const struct coord_pvar_rows *v,
							  unsigned nv);

/** coord_ctx_pvar_scatter_add_multi() - as coord_pvar_scatter_add_multi(), from a worker. */
COORD_API COORD_NODISCARD int coord_ctx_pvar_scatter_add_multi(struct coord_ctx *ctx,
							       const struct coord_pvar_rows *v,
							       unsigned nv);

/** coord_ctx_pvar_read() - as coord_pvar_read(), from a worker. */
COORD_API COORD_NODISCARD int coord_ctx_pvar_read(struct coord_ctx *ctx,
						  const struct coord_pvar *pv, uint64_t off,
						  uint64_t n, float *out);

/** coord_ctx_pvar_assign_add() - as coord_pvar_assign_add(), from a worker. */
COORD_API COORD_NODISCARD int coord_ctx_pvar_assign_add(struct coord_ctx *ctx,
							const struct coord_pvar *pv, uint64_t off,
							uint64_t n, const float *delta);

/* --- serving variables -------------------------------------------------------- */

/**
 * coord_ps_serve() - serve a variable store (one ps task) to coordinators
 * and workers.  @o->registry is not used (may be NULL); @o->task is this ps
 * task's index (its checkpoint directory is DIR/ps-<task>): a peer that
 * names another task at connect is refused.  Checkpoints are read and
 * written only beneath @o->ckpt_root (NULL: the working directory), opened
 * once at start; when @o->ckpt_root is given, temp files of interrupted
 * saves in ps-<task> directories under it are removed (a bounded walk).  A DIR that escapes the root
 * (.., a symbolic link, an absolute path elsewhere) is refused and logged.  Other options, threading and
 * hostile-input handling as coord_worker_serve().  The store lives as long
 * as the server.
 */
COORD_API COORD_NODISCARD int coord_ps_serve(const struct coord_server_opts *o,
					     struct coord_error *err);

#ifdef __cplusplus
}
#endif
#endif /* COORD_VAR_H */
