/* SPDX-License-Identifier: MIT */
/*
 * runtime/store/varstore.h - the parameter-server variable store.
 *
 * A struct coord_varstore holds named dense float32 tensors: what one ps task
 * (a coord-ps process, or an in-process ps thread) serves to the workers.
 * Names are resolved to a 32-bit id once (coord_varstore_create() or
 * coord_varstore_lookup(), which take a store-wide mutex); every data
 * operation then takes the id and touches only that variable's own locks.
 * Placement of variables over ps tasks (coord_var_shard*(),
 * coord_var_partition_rows()) is decided by the coordinator with the pure
 * functions at the end of this header.
 *
 * Checkpoints (coord_varstore_save() / coord_varstore_restore()) write every
 * live variable to DIR/ckpt-<step>.coord and point DIR/latest at it, each
 * through a temp file, fsync and rename; a load verifies the whole file
 * (lengths, CRC-32C) before the store is changed.  The format is described
 * at the top of runtime/store/checkpoint.c.  A ps task's checkpoints live in
 * DIR/ps-<task>; a restore across layouts is prepared (staged, invisible),
 * then committed or aborted (coord_varstore_prepare() and after).
 *
 * Synchronization table ("X": may run concurrently on one store, "-": the
 * caller must keep them apart):
 *
 *                     lookup  create  data ops  delete  save  restore
 *   lookup/info         X       X        X        X      X      X
 *   create              X       X        X        X      X      X
 *   data ops (1)        X       X        X        X      X      -(2)
 *   delete              X       X        X        X      X      X
 *   save                X       X        X        X(3)   X      X
 *   restore             X       X        -(2)     X      X      X
 *   store destroy       -       -        -        -      -      -
 *
 *   (1) read, assign, assign_add, scatter_add; any mix on one variable.
 *   (2) not a race, but an update running during a restore may land before
 *       or after the restored value; restore before serving.
 *   (3) a save fails with -EAGAIN if a variable it is writing is deleted.
 */
#ifndef COORD_RUNTIME_VARSTORE_H
#define COORD_RUNTIME_VARSTORE_H

#include <stddef.h>
#include <stdint.h>

#include <coord/error.h>
#include <coord/var.h>

#include "runtime/util/util.h"

/* Longest name, terminating NUL excluded; names are [A-Za-z0-9_./-]+. */
#define COORD_VAR_NAME_MAX 63
/* Most dimensions of a variable; 0 dimensions is a scalar. */
#define COORD_VAR_MAX_DIMS 4
/* Most elements of one variable (1 GiB of float32). */
#define COORD_VAR_MAX_ELEMS (1ull << 28)
/* Most variables one store ever creates (deleted ones keep their id). */
#define COORD_VAR_MAX_VARS (1u << 20)

/**
 * struct coord_varstore_opts - store options; zero-initialise, then set.
 * @keep_checkpoints: after a save, keep this many newest ckpt-*.coord files
 *                    in the directory and delete older ones; 0 keeps all.
 *                    coord_varstore_opts_init() sets 5 (TF's max_to_keep).
 * @max_ckpt_bytes:   a checkpoint file larger than this is refused on load
 *                    (-EFBIG) before it is read; 0 means no limit beyond
 *                    what malloc gives.  Default 0.
 */
struct coord_varstore_opts {
	unsigned keep_checkpoints;
	uint64_t max_ckpt_bytes;
};

/**
 * struct coord_var_info - what coord_vs_info() reports about a variable.
 * @name:  NUL-terminated name.
 * @ndim:  number of dimensions, 0..COORD_VAR_MAX_DIMS.
 * @dims:  the first @ndim entries are the shape; the rest are 1.
 * @nelem: product of the dims (1 for a scalar).
 */
struct coord_var_info {
	char name[COORD_VAR_NAME_MAX + 1];
	unsigned ndim;
	uint64_t dims[COORD_VAR_MAX_DIMS];
	uint64_t nelem;
};

struct coord_varstore;

/**
 * coord_varstore_opts_init() - fill @opts with the defaults.
 * @opts: caller-owned.
 *
 * Concurrency: any thread.
 */
COORD_HIDDEN void coord_varstore_opts_init(struct coord_varstore_opts *opts);

/**
 * coord_varstore_create() - an empty store.
 * @opts: NULL for defaults; copied before return.
 * @out:  on success the store, owned by the caller until
 *        coord_varstore_destroy().
 * @err:  optional detail on failure.
 *
 * Concurrency: any thread.
 * Return: 0; -EINVAL @out is NULL; -ENOMEM.
 */
COORD_HIDDEN COORD_NODISCARD int coord_varstore_create(const struct coord_varstore_opts *opts,
						       struct coord_varstore **out,
						       struct coord_error *err);

/**
 * coord_varstore_destroy() - free the store and every variable in it.
 * @vs: a store, or NULL (no-op).
 *
 * Concurrency: no other call on @vs may run or follow.
 */
COORD_HIDDEN void coord_varstore_destroy(struct coord_varstore *vs);

/**
 * coord_varstore_var_create() - create a variable, or find the same one.
 * @vs:   store.
 * @name: 1..63 bytes of [A-Za-z0-9_./-]; copied.
 * @ndim: 0..4 (0: a scalar of one element).
 * @dims: @ndim sizes, each >= 1, product <= COORD_VAR_MAX_ELEMS; copied.
 *        May be NULL when @ndim is 0.
 * @init: NULL for zeros, else the product-of-@dims initial values; copied.
 * @id:   optional; on success the variable's id.
 * @err:  optional detail on failure.
 *
 * If a live variable of that name exists with the same shape, nothing is
 * changed (@init is ignored) and its id is returned: create is idempotent
 * for TF's get_variable-style reuse.
 *
 * Concurrency: any thread; takes the store's name mutex.
 * Return: 0; -EINVAL bad name or shape; -EEXIST the name exists with another
 * shape; -ENOSPC COORD_VAR_MAX_VARS reached; -ENOMEM.
 */
COORD_HIDDEN COORD_NODISCARD int coord_varstore_var_create(struct coord_varstore *vs,
							   const char *name, unsigned ndim,
							   const uint64_t *dims, const float *init,
							   uint32_t *id, struct coord_error *err);

/**
 * coord_varstore_lookup() - resolve @name to an id (once; then use the id).
 * @vs:   store.
 * @name: borrowed for the call.
 * @id:   on success the id.
 * @err:  optional detail on failure.
 *
 * Concurrency: any thread; takes the store's name mutex.
 * Return: 0; -EINVAL bad arguments; -ENOENT no live variable of that name.
 */
COORD_HIDDEN COORD_NODISCARD int coord_varstore_lookup(struct coord_varstore *vs, const char *name,
						       uint32_t *id, struct coord_error *err);

/* Bits of a store's tag (coord_varstore_tag()). */
#define COORD_VS_TAG_BITS 20

/**
 * coord_varstore_tag() - the store's run tag: 1..2^20-1, fixed for the
 * store's life and taken from the clock (ms) when it was made, so a store
 * made again (a restarted ps task) has another tag unless 2^20 - 1 ms (about
 * 17 minutes) or a multiple of it passed to the millisecond.  Variable
 * handles carry it (runtime/ps/ps.h): an op with another tag is stale.
 * @vs: store.
 *
 * Concurrency: any thread.
 */
COORD_HIDDEN uint32_t coord_varstore_tag(const struct coord_varstore *vs);

/**
 * coord_varstore_count() - number of live variables.
 * @vs: store.
 *
 * Concurrency: any thread; a snapshot that may be stale on return.
 */
COORD_HIDDEN uint32_t coord_varstore_count(struct coord_varstore *vs);

/**
 * coord_vs_info() - name and shape of variable @id.
 * @vs:   store.
 * @id:   variable id.
 * @info: caller-owned; filled on success.
 * @err:  optional detail on failure.
 *
 * Concurrency: any thread; no lock (name and shape never change).
 * Return: 0; -EINVAL NULL argument; -ENOENT unknown or deleted id.
 */
COORD_HIDDEN COORD_NODISCARD int coord_vs_info(struct coord_varstore *vs, uint32_t id,
					       struct coord_var_info *info,
					       struct coord_error *err);

/**
 * coord_vs_read() - copy elements [@off, @off + @n) of @id into @out.
 * @vs:  store.
 * @id:  variable id.
 * @off: first element (row-major flat index).
 * @n:   element count; 0 is a no-op; (0, nelem) reads everything.
 * @out: caller-owned, room for @n floats.
 * @err: optional detail on failure.
 *
 * The copy is atomic with respect to every other data op: it holds the
 * variable's stripe locks covering the range for its whole length.
 *
 * Concurrency: any thread.
 * Return: 0; -EINVAL NULL buffer or range outside the variable; -ENOENT.
 */
COORD_HIDDEN COORD_NODISCARD int coord_vs_read(struct coord_varstore *vs, uint32_t id, size_t off,
					       size_t n, float *out, struct coord_error *err);

/**
 * coord_vs_assign() - set elements [@off, @off + @n) of @id to @src.
 * @src: borrowed for the call, @n floats.
 * Other parameters, atomicity and return as coord_vs_read().
 */
COORD_HIDDEN COORD_NODISCARD int coord_vs_assign(struct coord_varstore *vs, uint32_t id, size_t off,
						 size_t n, const float *src,
						 struct coord_error *err);

/**
 * coord_vs_assign_add() - add @delta elementwise to elements
 * [@off, @off + @n) of @id.
 * @delta: borrowed for the call, @n floats.
 * Other parameters, atomicity and return as coord_vs_read().  Concurrent
 * adds are never lost.
 */
COORD_HIDDEN COORD_NODISCARD int coord_vs_assign_add(struct coord_varstore *vs, uint32_t id,
						     size_t off, size_t n, const float *delta,
						     struct coord_error *err);

/**
 * coord_vs_assign_fill() - coord_vs_assign() whose data @fill writes in
 *                          place: @fill(@arg, dst, bytes, @err) stores the
 *                          @n floats at @dst (the variable's own memory,
 *                          @bytes = 4 @n) and returns 0 or an error code.
 * @vs/@id/@off/@n/@err: as coord_vs_assign().
 *
 * For a ps over rdma, whose @fill RDMA READs the floats from the sender's
 * memory straight into the variable (a rendezvous update, ps.h): no copy.
 * The range is checked first (V5); @fill runs under the stripes of the
 * range and inside the write's SNAP1 counts, so locked readers wait for it
 * and one-sided readers see the value before or after it, or retry.  If
 * @fill fails, the range may hold part of the new data (what the DMA wrote
 * before the failure); the error is returned.
 *
 * Concurrency: any thread; holds the range's stripes while @fill runs.
 * Return: 0; what coord_vs_assign() returns; @fill's error.
 */
COORD_HIDDEN COORD_NODISCARD int coord_vs_assign_fill(
	struct coord_varstore *vs, uint32_t id, size_t off, size_t n,
	int (*fill)(void *arg, float *dst, size_t bytes, struct coord_error *err), void *arg,
	struct coord_error *err);

/**
 * coord_vs_read_view() - coord_vs_read() whose copy @view makes:
 *                        @view(@arg, src, bytes, @err) is given the
 *                        variable's own memory for the range (@bytes = 4 @n)
 *                        and returns 0 or an error code.
 * @vs/@id/@off/@n/@err: as coord_vs_read().
 *
 * For a ps over tcp, whose @view sends the floats from the variable
 * (transport/server/srv_var.c): no copy but the kernel's.  @view runs under
 * the stripes of the range, so it sees the variable between two writes;
 * it must not wait for anything that may wait for them, nor for long (a
 * peer: it copies what it could not send in a bounded time), and must not
 * write through @src.
 *
 * Concurrency: any thread; holds the range's stripes while @view runs.
 * Return: 0; what coord_vs_read() returns; @view's error.
 */
COORD_HIDDEN COORD_NODISCARD int coord_vs_read_view(
	struct coord_varstore *vs, uint32_t id, size_t off, size_t n,
	int (*view)(void *arg, const void *src, size_t bytes, struct coord_error *err), void *arg,
	struct coord_error *err);

/**
 * coord_vs_scatter_add() - add row @updates[k] to row @indices[k] of @id.
 * @vs:      store.
 * @id:      variable id; must have at least one dimension.
 * @indices: @nidx indices into the first dimension; borrowed.  Duplicates
 *           add twice (tf.scatter_add).
 * @nidx:    number of indices; 0 is a no-op.
 * @updates: @nidx rows of (nelem / dims[0]) floats; borrowed.
 * @err:     optional detail on failure.
 *
 * Every index is checked before anything is applied: one bad index fails
 * the whole call and leaves the variable unchanged.  The call is atomic with
 * respect to other data ops on the rows it touches.
 *
 * Concurrency: any thread.
 * Return: 0; -EINVAL NULL buffer, scalar variable, @nidx too large;
 * -ERANGE an index outside [0, dims[0]) (named in @err); -ENOENT.
 */
COORD_HIDDEN COORD_NODISCARD int coord_vs_scatter_add(struct coord_varstore *vs, uint32_t id,
						      const int64_t *indices, size_t nidx,
						      const float *updates,
						      struct coord_error *err);

/**
 * coord_vs_gather() - copy row @indices[k] of @id to row k of @out.
 * @out: room for @nidx rows of (nelem / dims[0]) floats.
 * Other parameters, checks, atomicity and return as coord_vs_scatter_add()
 * (duplicates are copied twice; one bad index fails the call, @out unset).
 */
COORD_HIDDEN COORD_NODISCARD int coord_vs_gather(struct coord_varstore *vs, uint32_t id,
						 const int64_t *indices, size_t nidx, float *out,
						 struct coord_error *err);

/**
 * coord_vs_delete() - delete variable @id and free its data.
 * @vs:  store.
 * @id:  variable id; the id is never reused, later ops on it get -ENOENT.
 * @err: optional detail on failure.
 *
 * The name becomes free for a new variable (with a new id).  The small
 * per-variable record stays allocated until coord_varstore_destroy(), so a
 * racing op on @id is safe and fails with -ENOENT.
 *
 * Concurrency: any thread.
 * Return: 0; -ENOENT unknown or already deleted.
 */
COORD_HIDDEN COORD_NODISCARD int coord_vs_delete(struct coord_varstore *vs, uint32_t id,
						 struct coord_error *err);

/**
 * coord_varstore_save() - write every live variable to @dir/ckpt-<@step>.coord
 * and point @dir/latest at it, crash-safe.
 * @vs:   store.
 * @dir:  an existing directory; borrowed for the call.
 * @step: the training step; an existing checkpoint of that step is replaced.
 * @err:  optional detail on failure (names the file and the failing call).
 *
 * Each file is written as a temp file in @dir, fsync'd, renamed over the
 * final name, and then @dir is fsync'd: after a crash either the old or the
 * new file is there, whole.  Then older checkpoints beyond
 * opts.keep_checkpoints are deleted.  Each variable is copied in chunks,
 * each under the stripe locks that cover it; an update running during the
 * save may be in some chunks and not others (quiesce with join() first for
 * an exact snapshot, as TF's async ps checkpoints).
 *
 * Concurrency: any thread; saves on one store are serialised by a mutex.
 * One store per directory (temp names carry the pid, not a lock).
 * Return: 0; -EINVAL bad arguments; -EAGAIN a variable was deleted during
 * the save; a negative errno from the file system.
 */
COORD_HIDDEN COORD_NODISCARD int coord_varstore_save(struct coord_varstore *vs, const char *dir,
						     uint64_t step, struct coord_error *err);

/**
 * coord_varstore_restore() - load the checkpoint @dir/latest points at.
 * @vs:   store.
 * @dir:  borrowed for the call.
 * @step: optional; on success the step restored.
 * @err:  optional detail on failure (names the file and what is wrong).
 *
 * The whole file is read and verified first: magic, version, header step
 * against the file name, every length against the file size, names and
 * shapes, the CRC-32C, and that each variable either does not exist in @vs
 * or has the same shape.  Only then are variables created and their values
 * set.  On any failure the store is unchanged.  Variables of @vs not in the
 * checkpoint are left as they are.  Stray temp files in @dir are ignored.
 *
 * Concurrency: any thread; holds the name mutex for its whole length.
 * Return: 0; -ENOENT no checkpoint (no @dir/latest) or the file is missing;
 * -EBADMSG corrupt, truncated, wrong magic or version, bad latest pointer;
 * -EFBIG over opts.max_ckpt_bytes; -EEXIST a variable exists with another
 * shape; -ENOSPC, -ENOMEM; a negative errno from the file system.
 */
COORD_HIDDEN COORD_NODISCARD int coord_varstore_restore(struct coord_varstore *vs, const char *dir,
							uint64_t *step, struct coord_error *err);

/**
 * coord_varstore_restore_step() - load @dir/ckpt-<@step>.coord.
 * As coord_varstore_restore() but a given step rather than the latest.
 */
COORD_HIDDEN COORD_NODISCARD int coord_varstore_restore_step(struct coord_varstore *vs,
							     const char *dir, uint64_t step,
							     struct coord_error *err);

/* --- checkpoints of ps tasks: DIR/ps-<task>, restores across layouts ------- */

/**
 * coord_varstore_set_ckpt_root() - confine the store's task checkpoints
 * (the calls below) to @root: opened once; every DIR is resolved beneath it
 * (openat2 RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS, or a realpath prefix
 * check on Linux < 5.6); a DIR that escapes fails with -EACCES, logged.
 * Then, if @task >= 0, removes the temp files of interrupted saves from
 * every ps-<@task> directory under @root (a bounded walk, no symlinks).
 * Without a root, DIR is the caller's path as given.
 * Concurrency: before serving.  Return: 0 or -errno.
 */
COORD_HIDDEN int coord_varstore_set_ckpt_root(struct coord_varstore *vs, const char *root, int task,
					      struct coord_error *err);

/**
 * coord_varstore_save_task() - as coord_varstore_save() into DIR/ps-<@task>
 * (created), recording the layout: task @task of @nps.
 */
COORD_HIDDEN COORD_NODISCARD int coord_varstore_save_task(struct coord_varstore *vs,
							  const char *dir, unsigned task,
							  unsigned nps, uint64_t step,
							  struct coord_error *err);

/**
 * coord_varstore_restore_task() - as coord_varstore_restore() from
 * DIR/ps-<@task> alone (the RESTORE op, which knows nothing of the layout).
 */
COORD_HIDDEN COORD_NODISCARD int coord_varstore_restore_task(struct coord_varstore *vs,
							     const char *dir, unsigned task,
							     uint64_t *step,
							     struct coord_error *err);

#define COORD_CKPT_STEP_LATEST UINT64_MAX
#define COORD_CKPT_F_FALLBACK 1u

/**
 * struct coord_ckpt_prep - a PREPARE: stage the part of a checkpoint that
 * belongs on task @task of @nps.
 * @dir:   the checkpoint directory (holds ps-<t> for every old task t).
 * @step:  the step, or COORD_CKPT_STEP_LATEST (what DIR/ps-0/latest names).
 * @flags: COORD_CKPT_F_FALLBACK: with STEP_LATEST, when a step cannot be
 *         read whole (a file missing or corrupt), try the next older one.
 * @owner: the session (a connection); @nonce: the coordinator's, for COMMIT.
 */
struct coord_ckpt_prep {
	const char *dir;
	uint64_t step;
	unsigned flags;
	unsigned task, nps;
	const void *owner;
	uint32_t nonce;
	const struct coord_ckpt_resplit_spec *resplit; /* @nresplit of them */
	unsigned nresplit;
};

/*
 * struct coord_ckpt_resplit_spec - a partitioned variable a PREPARE stages
 * with the shard count @part gives now (over the PREPARE's nps), each new
 * shard's rows read from the checkpoint's shards that hold them, whatever
 * their count.  @name: the variable's (base) name, NUL-terminated.
 */
struct coord_ckpt_resplit_spec {
	char name[COORD_PVAR_NAME_LEN + 1];
	struct coord_partitioner part;
};
#define COORD_CKPT_RESPLIT_MAX 256

/**
 * struct coord_ckpt_prep_res - what a PREPARE staged and what it read.
 * @step:   the step staged; @latest: the newest (STEP_LATEST when unknown).
 * @nstaged/@dig_staged: variables staged here, and the sum of a hash of
 *          their names; @ntotal/@dig_total: the same over the whole
 *          checkpoint (every task's files); @old_nps: its ps task count;
 *          @version: its format version.
 * @why:    empty, or why @latest could not be used (fallback).
 */
struct coord_ckpt_prep_res {
	uint64_t step, latest;
	uint32_t nstaged, ntotal, old_nps, version;
	uint64_t dig_staged, dig_total;
	char why[COORD_ERRMSG_LEN];
};

/**
 * coord_varstore_prepare() - read and verify every file of the chosen step
 * (CRC, lengths, version, step, each file's task and count), keep the
 * variables whose name places on @q->task of @q->nps (coord_var_shard()),
 * check them against the store (absent or same shape) and stage them
 * unpublished, owned by @q->owner.  Any stage the store held is dropped
 * first.  Nothing visible changes.  Memory: the staged variables plus one
 * file at a time.
 * Concurrency: any thread; builds are serialised with saves.
 * Return: 0; -ENOENT nothing (whole) to restore; -EBADMSG a corrupt or
 * inconsistent file; -EEXIST a shape conflict; -EACCES outside the root;
 * -EFBIG, -ENOMEM, -ENOSPC, -errno.
 */
COORD_HIDDEN COORD_NODISCARD int coord_varstore_prepare(struct coord_varstore *vs,
							const struct coord_ckpt_prep *q,
							struct coord_ckpt_prep_res *res,
							struct coord_error *err);
/**
 * coord_varstore_commit() - publish the stage @owner prepared with @nonce:
 * overwrite or create each variable.  Cannot fail once prepared.
 * Return: 0 (@count: variables set); -ESTALE no such stage (dropped).
 */
COORD_HIDDEN COORD_NODISCARD int coord_varstore_commit(struct coord_varstore *vs, const void *owner,
						       uint32_t nonce, uint32_t *count,
						       struct coord_error *err);
/* coord_varstore_abort() - drop @owner's stage, if it holds one. */
COORD_HIDDEN void coord_varstore_abort(struct coord_varstore *vs, const void *owner);

/* --- placement over ps tasks (pure functions) ------------------------------ */

/**
 * coord_var_fnv1a64() - 64-bit FNV-1a of @len bytes at @p.
 * Concurrency: any thread.  Return: the hash (stable across builds, hosts).
 */
COORD_HIDDEN uint64_t coord_var_fnv1a64(const void *p, size_t len);

/**
 * coord_var_shard() - the ps task (0..@nps-1) for variable @name, by hash.
 * @name: borrowed; NULL hashes as "".
 * @nps:  number of ps tasks; 0 is treated as 1.
 *
 * FNV-1a 64 of the name, reduced modulo @nps: stable across runs and hosts,
 * independent of creation order, so every coordinator and every restart
 * places a variable on the same task.  Use it when variables are created in
 * varying order; use coord_var_shard_rr() for TF's default round-robin.
 * A partition's shard "BASE/part_J" (coord_var_part_of()) goes J tasks
 * after the task of BASE, modulo @nps: the shards of one partitioned
 * variable spread over the ps tasks, whatever their count.
 *
 * Concurrency: any thread.
 */
COORD_HIDDEN unsigned coord_var_shard(const char *name, unsigned nps);

/**
 * coord_var_part_of() - is @name "BASE/part_J" (J decimal without a leading
 * zero, < 2^20; BASE not empty), the shard J of partitioned variable BASE?
 * @base_len: on success strlen(BASE).
 * Concurrency: any thread.  Return: J, or -1.
 */
COORD_HIDDEN long coord_var_part_of(const char *name, size_t *base_len);

/**
 * coord_var_shard_rr() - the ps task for the @seq'th variable created
 * (0-based), round-robin as TF's ParameterServerStrategy places variables
 * when no partitioner is given: @seq mod @nps.  Exactly balanced; depends on
 * creation order, so a restarted coordinator must create in the same order.
 * @nps: 0 is treated as 1.
 *
 * Concurrency: any thread.
 */
COORD_HIDDEN unsigned coord_var_shard_rr(uint64_t seq, unsigned nps);

/**
 * coord_var_partition_rows() - rows of shard @i when @rows rows are split
 * over @nps ps tasks (ShardedVariable, fixed_size_partitioner): the first
 * @rows mod @nps shards get one row more; shards are contiguous, in order.
 * @first: on success the first row of shard @i.
 * @count: on success its row count (0 when @rows < @nps and @i is late).
 *
 * Concurrency: any thread.
 * Return: 0; -EINVAL @nps is 0, @i >= @nps or a NULL out-parameter.
 */
COORD_HIDDEN COORD_NODISCARD int coord_var_partition_rows(uint64_t rows, unsigned nps, unsigned i,
							  uint64_t *first, uint64_t *count);

/**
 * coord_var_partition_count() - the shard count partitioner @p (NULL: the
 * defaults; coord/var.h struct coord_partitioner) gives a variable of @rows
 * rows of @rowb bytes over @nps ps tasks: 1..min(@rows, COORD_VAR_MAX_PARTS).
 * Concurrency: any thread.
 * Return: 0; COORD_EINVAL a bad partitioner (@err says why).
 */
COORD_HIDDEN COORD_NODISCARD int coord_var_partition_count(const struct coord_partitioner *p,
							   unsigned nps, uint64_t rows,
							   uint64_t rowb, unsigned *k,
							   struct coord_error *err);

/**
 * coord_crc32c() - extend CRC-32C (Castagnoli) @crc over @len bytes at @p.
 * Start with 0; coord_crc32c(0, "123456789", 9) == 0xe3069283.  Uses the
 * SSE4.2 instruction when the CPU has it.
 *
 * Concurrency: any thread.
 */
COORD_HIDDEN uint32_t coord_crc32c(uint32_t crc, const void *p, size_t len);
/* coord_crc32c_sw() - the same, table-driven on every CPU (tests compare). */
COORD_HIDDEN uint32_t coord_crc32c_sw(uint32_t crc, const void *p, size_t len);

/* --- internal: shared by varstore.c and the checkpoint files only ------------------- */

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

/* Row stripes per variable: at most this many locks, one per row range
 * (at most 64: scatter_add keeps a 64-bit mask of them). */
#define COORD_VAR_STRIPES 32
#define COORD_VS_CHUNK_SHIFT 10
#define COORD_VS_CHUNK (1u << COORD_VS_CHUNK_SHIFT)
#define COORD_VS_NCHUNKS (COORD_VAR_MAX_VARS >> COORD_VS_CHUNK_SHIFT)

struct coord_var_stripe {
	pthread_mutex_t lock;
} __cacheline_aligned;

/*
 * A variable's memory is one block (varstore.c SNAP1-SNAP3), so that a remote
 * reader can take a snapshot with one RDMA READ:
 *   [0, 8)                          done: writes finished (u64)
 *   [COORD_VAR_DATA_OFF, +4 nelem)  the data (float32)
 *   [block_len - 8, block_len)      begun: writes started (u64)
 * Every write of the data (assign, assign_add, scatter_add, a checkpoint
 * restore) adds one to begun before its first store and one to done after
 * its last.  A reader that reads done first and begun last, with the data
 * between, saw no write iff the two are equal.
 */
#define COORD_VAR_DATA_OFF 64

/*
 * struct coord_var_map - what a one-sided reader needs of a variable
 * (coord_vs_map()): its block (above), fixed while the variable lives.
 */
struct coord_var_map {
	void *block;
	size_t block_len;
	size_t nelem;
};

/*
 * struct coord_var - one variable.  name..nstripes are immutable once the
 * variable is published; deleted and data are written with every stripe
 * lock and vs->names_lock held, and read with any one stripe lock or
 * vs->names_lock held; hnext only under vs->names_lock.
 */
struct coord_var {
	char name[COORD_VAR_NAME_MAX + 1];
	unsigned ndim;
	uint64_t dims[COORD_VAR_MAX_DIMS];
	size_t nelem;
	size_t rows;		/* dims[0]; 1 for a scalar */
	size_t rowlen;		/* nelem / rows */
	size_t rows_per_stripe; /* stripe of row r = r / rows_per_stripe */
	unsigned nstripes;
	uint32_t id;
	uint32_t hnext; /* next id + 1 in the name bucket, 0 ends */
	bool deleted;
	float *data; /* block + COORD_VAR_DATA_OFF; NULL once deleted */
	struct coord_var_stripe *stripes;
	/* The block (varstore.c SNAP1-SNAP3): done at its start, begun at its end. */
	uint8_t *block;
	size_t block_len;
	_Atomic uint64_t *done, *begun;
};

struct coord_varstore {
	/* Ids [0, nvars) are published in chunks[]; see varstore.c R1/A1. */
	_Atomic uint32_t nvars;
	/* Live variables, for coord_varstore_count(). */
	_Atomic uint32_t nlive;
	uint32_t tag; /* coord_varstore_tag(); set before the store is shared */
	struct coord_var **chunks[COORD_VS_NCHUNKS];
	/* Guards the name table, creation and deletion; see varstore.c. */
	pthread_mutex_t names_lock;
	uint32_t *buckets; /* id + 1 of a chain head, 0 empty */
	uint32_t nbuckets; /* power of two */
	/* Serialises coord_varstore_save() calls (and restore builds). */
	pthread_mutex_t save_lock;
	uint64_t tmp_seq; /* under save_lock */
	struct coord_varstore_opts opts;
	/* A prepared restore (ckpt_pvt.h, ckpt_prepare.c), under names_lock. */
	struct coord_ckpt_stage *stage;
	/* The checkpoint root (its real path; NULL = none) and its fd. */
	char *ckpt_root;
	int ckpt_root_fd;
	/* Helpers of large adds (vs_add.c). */
	struct coord_vs_adders *adders;
};

/* vs_add.c: @d[i] += @s[i], i < @n: here; or, @n large, split over the
 * helpers of @a (NULL: none) with this thread, which holds the stripes. */
struct coord_vs_adders;
COORD_HIDDEN void coord_vs_add_floats(float *d, const float *s, size_t n);
COORD_HIDDEN void coord_vs_add(struct coord_vs_adders *a, float *d, const float *s, size_t n);
COORD_HIDDEN int coord_vs_adders_create(struct coord_vs_adders **out);
COORD_HIDDEN void coord_vs_adders_destroy(struct coord_vs_adders *a);

/* A create of @name may not change what a prepared restore relies on
 * (ckpt_restore.c).  Caller holds names_lock.  0, -EEXIST or -ENOSPC. */
COORD_HIDDEN int coord_ckpt_create_check_locked(struct coord_varstore *vs, const char *name,
						unsigned ndim, const uint64_t *dims,
						struct coord_error *err);
/* Free the checkpoint state (stage, root) at store destroy. */
COORD_HIDDEN void coord_ckpt_fini(struct coord_varstore *vs);
/* The variable of @id if published (deleted or not), else NULL.  Any thread. */
COORD_HIDDEN struct coord_var *coord_vs_get(struct coord_varstore *vs, uint32_t id);
/* Is @v of shape @ndim x @dims? */
COORD_HIDDEN bool coord_vs_same_shape(const struct coord_var *v, unsigned ndim,
				      const uint64_t *dims);
/* The live variable named @name, or NULL.  Caller holds vs->names_lock. */
COORD_HIDDEN struct coord_var *coord_vs_find_locked(struct coord_varstore *vs, const char *name);
/* Check a name / a shape; 0 or -EINVAL with a message in @err. */
COORD_HIDDEN int coord_vs_check_name(const char *name, size_t len, struct coord_error *err);
COORD_HIDDEN int coord_vs_check_shape(const char *name, unsigned ndim, const uint64_t *dims,
				      struct coord_error *err);
/* Print @ndim/@dims as "[a,b]" into @buf. */
COORD_HIDDEN void coord_vs_fmt_shape(char *buf, size_t len, unsigned ndim, const uint64_t *dims);
/*
 * A new unpublished variable (checked name and shape), zero data.  Free it
 * with coord_vs_var_free() unless it is published.
 */
COORD_HIDDEN int coord_vs_var_alloc(const char *name, unsigned ndim, const uint64_t *dims,
				    struct coord_var **out, struct coord_error *err);
COORD_HIDDEN void coord_vs_var_free(struct coord_var *v);
/* Give @v the next id and publish it.  Caller holds vs->names_lock and has
 * checked that an id is free (vs->nvars < COORD_VAR_MAX_VARS). */
COORD_HIDDEN int coord_vs_publish_locked(struct coord_varstore *vs, struct coord_var *v,
					 struct coord_error *err);
/* Lock / unlock the stripes [@lo, @hi] of @v in ascending order. */
COORD_HIDDEN void coord_vs_lock(struct coord_var *v, unsigned lo, unsigned hi);
COORD_HIDDEN void coord_vs_unlock(struct coord_var *v, unsigned lo, unsigned hi);

/**
 * coord_vs_map() - where a live variable's block is (data and write
 *                  counts), for a reader that does not take its locks
 *                  (one-sided RDMA READ; varstore.c SNAP1-SNAP3).
 * @vs/@id: store and variable.  @out: filled in.
 *
 * Concurrency: any thread.  Return: 0; -ENOENT no such id; -ENOENT deleted.
 */
COORD_PROV COORD_NODISCARD int coord_vs_map(struct coord_varstore *vs, uint32_t id,
					    struct coord_var_map *out, struct coord_error *err);
/* coord_vs_write_begin()/_end() - bracket every store to @v's data
 * (varstore.c SNAP1); the caller holds the stripes it writes. */
COORD_HIDDEN void coord_vs_write_begin(struct coord_var *v);
COORD_HIDDEN void coord_vs_write_end(struct coord_var *v);

#endif /* COORD_RUNTIME_VARSTORE_H */
