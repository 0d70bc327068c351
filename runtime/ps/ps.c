// SPDX-License-Identifier: MIT
/*
 * runtime/ps/ps.c - parameter-server variables: the op executor shared by the
 * in-process backend and coord-ps (coord_ps_apply()), and the public
 * coord_var_*() / coord_ctx_var_*() calls, which turn into batches of struct
 * coord_ps_op (runtime/ps/ps.h has the op table).  coord_checkpoint_*():
 * ps_ckpt.c.
 *
 * Synchronization: the ps failure counts (failures[task], S11) are
 * relaxed RMWs: each report gets its own count, nothing is published with
 * it; a variable's storage is varstore.h's, the client's ps_client.c's.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <sys/stat.h>
#include <unistd.h>

#include <coord/var.h>

#include "runtime/core/internal.h"
#include "runtime/ps/ps.h"
#include "runtime/ps/ps_pvt.h"

/* coord.h and varstore.h must agree on the limits. */
_Static_assert(COORD_VAR_NAME_LEN == COORD_VAR_NAME_MAX, "name limits differ");
_Static_assert(COORD_VAR_DIMS == COORD_VAR_MAX_DIMS, "dims limits differ");

/* ---- executing one op on a store ---------------------------------------------- */

static bool scratch_reserve(struct coord_ps_scratch *s, size_t len)
{
	void *b;

	if (len <= s->cap)
		return true;
	b = realloc(s->buf, len);
	if (!b)
		return false;
	s->buf = b;
	s->cap = len;
	return true;
}

/*
 * @p itself when its address is a multiple of @align (a power of two: 4
 * for floats, 8 for int64), else a copy of its @len bytes at byte @off of
 * the scratch buffer.  A copy may move the buffer: reserve the whole size
 * first when keeping an earlier copy.
 */
static const void *aligned(struct coord_ps_scratch *s, const void *p, size_t len, size_t off,
			   size_t align)
{
	if (((uintptr_t)p & (align - 1)) == 0)
		return p;
	if (!scratch_reserve(s, off + len))
		return NULL;
	memcpy((uint8_t *)s->buf + off, p, len);
	return (uint8_t *)s->buf + off;
}

static int emit_info(struct coord_varstore *vs, uint32_t id, coord_ps_emit_t emit, void *arg,
		     struct coord_error *err)
{
	struct coord_var_info info;
	uint8_t b[COORD_PS_INFO_MAX];
	int r = coord_vs_info(vs, id, &info, err);

	if (r < 0)
		return r;
	st32(b, id);
	st32(b + 4, info.ndim);
	for (unsigned i = 0; i < info.ndim; i++)
		st64(b + 8 + 8 * i, info.dims[i]);
	st32(b + 8 + 8 * info.ndim, coord_varstore_tag(vs));
	return emit(arg, b, 12 + 8 * (size_t)info.ndim);
}

static int op_create(struct coord_varstore *vs, const struct coord_ps_op *op,
		     struct coord_ps_scratch *s, coord_ps_emit_t emit, void *arg,
		     struct coord_error *err)
{
	const uint8_t *d = op->src;
	char name[COORD_VAR_NAME_MAX + 1];
	uint64_t dims[COORD_VAR_MAX_DIMS], nelem = 1;
	const float *init = NULL;
	uint32_t ndim, has_init, id;
	size_t need;
	int r;

	if (op->name_len == 0 || op->name_len > COORD_VAR_NAME_MAX || op->src_len < 8)
		return coord_seterr(err, COORD_EINVAL, "create: bad name length or no shape");
	memcpy(name, op->name, op->name_len);
	name[op->name_len] = 0;
	ndim = ld32(d);
	has_init = ld32(d + 4);
	if (ndim > COORD_VAR_MAX_DIMS || has_init > 1 || op->src_len < 8 + 8 * (size_t)ndim)
		return coord_seterr(err, COORD_EINVAL, "create '%s': bad shape record", name);
	for (uint32_t i = 0; i < ndim; i++) {
		dims[i] = ld64(d + 8 + 8 * i);
		if (dims[i] == 0 || dims[i] > COORD_VAR_MAX_ELEMS)
			return coord_seterr(err, COORD_EINVAL, "create '%s': dimension %u is %llu",
					    name, i, (unsigned long long)dims[i]);
		nelem *= dims[i];
		if (nelem > COORD_VAR_MAX_ELEMS)
			return coord_seterr(err, COORD_EINVAL, "create '%s': too many elements",
					    name);
	}
	need = 8 + 8 * (size_t)ndim + (has_init ? 4 * nelem : 0);
	if (op->src_len != need)
		return coord_seterr(err, COORD_EINVAL,
				    "create '%s': %u data bytes, the shape needs %zu", name,
				    op->src_len, need);
	if (has_init) {
		init = aligned(s, d + 8 + 8 * ndim, 4 * nelem, 0, 4);
		if (!init)
			return coord_seterr(err, COORD_ENOMEM, "no memory");
	}
	r = coord_varstore_var_create(vs, name, ndim, dims, init, &id, err);
	if (r < 0)
		return r;
	return emit_info(vs, id, emit, arg, err);
}

static int op_scatter(struct coord_varstore *vs, const struct coord_ps_op *op,
		      struct coord_ps_scratch *s, struct coord_error *err)
{
	struct coord_var_info info;
	const void *ip = op->src, *rp;
	const int64_t *idx;
	const float *rows;
	uint64_t rowlen, total = (uint64_t)op->src_len + op->src2_len;
	size_t ib, rb;
	int r = coord_vs_info(vs, op->id, &info, err);

	if (r < 0)
		return r;
	if (info.ndim == 0)
		return coord_seterr(err, COORD_EINVAL, "scatter_add on scalar '%s'", info.name);
	rowlen = info.nelem / info.dims[0];
	if (op->n > UINT32_MAX / 8 || op->n * (8 + 4 * rowlen) != total)
		return coord_seterr(
			err, COORD_EINVAL,
			"scatter_add on '%s' (rows of %llu): %llu indices need %llu "
			"data bytes, got %llu",
			info.name, (unsigned long long)rowlen, (unsigned long long)op->n,
			(unsigned long long)(op->n * (8 + 4 * rowlen)), (unsigned long long)total);
	ib = 8 * (size_t)op->n;
	rb = (size_t)(total - ib);
	/* Local calls pass indices and rows apart; a frame has them together. */
	rp = op->src2 ? op->src2 : (const uint8_t *)op->src + ib;
	if (op->src2 && op->src_len != ib)
		return coord_seterr(err, COORD_EINVAL, "scatter_add: index bytes mismatch");
	if (op->n == 0)
		return 0;
	/* Copies only of what is misaligned, at most one reservation. */
	if (!scratch_reserve(s, (((uintptr_t)ip & 7) ? (ib + 7) & ~(size_t)7 : 0) +
					(((uintptr_t)rp & 3) ? rb : 0)))
		return coord_seterr(err, COORD_ENOMEM, "no memory");
	idx = aligned(s, ip, ib, 0, 8);
	rows = aligned(s, rp, rb, idx == ip ? 0 : (ib + 7) & ~(size_t)7, 4);
	if (!idx || !rows)
		return coord_seterr(err, COORD_ENOMEM, "no memory");
	/* Little-endian hosts only (as everything else on the wire). */
	return coord_vs_scatter_add(vs, op->id, idx, op->n, rows, err);
}

/* GATHER (ps.h): the rows go straight into the scratch buffer, emitted from there. */
static int op_gather(struct coord_varstore *vs, const struct coord_ps_op *op,
		     struct coord_ps_scratch *s, coord_ps_emit_t emit, void *arg,
		     struct coord_error *err)
{
	struct coord_var_info info;
	const int64_t *idx;
	size_t ib, rb, ioff;
	uint64_t rowlen;
	float *out;
	int r = coord_vs_info(vs, op->id, &info, err);

	if (r < 0)
		return r;
	if (info.ndim == 0)
		return coord_seterr(err, COORD_EINVAL, "gather on scalar '%s'", info.name);
	rowlen = info.nelem / info.dims[0];
	if (op->n > UINT32_MAX / 8 || op->src_len != 8 * op->n ||
	    op->n * rowlen > COORD_VAR_MAX_ELEMS)
		return coord_seterr(err, COORD_EINVAL,
				    "gather on '%s': %llu indices in %u bytes (rows of %llu)",
				    info.name, (unsigned long long)op->n, op->src_len,
				    (unsigned long long)rowlen);
	ib = 8 * (size_t)op->n;
	rb = 4 * (size_t)(op->n * rowlen);
	if (op->n == 0)
		return emit(arg, NULL, 0);
	/* In place: in-process, the caller's buffer; a server's frame. */
	out = op->dst && op->cap >= rb ? op->dst : s->room ? s->room(arg, rb) : NULL;
	ioff = out ? 0 : (rb + 7) & ~(size_t)7;
	if (!scratch_reserve(s, ioff + (((uintptr_t)op->src & 7) ? ib : 0)))
		return coord_seterr(err, COORD_ENOMEM, "no memory");
	/* The copy never moves the buffer: reserved above. */
	idx = aligned(s, op->src, ib, ioff, 8);
	if (!out)
		out = s->buf;
	r = coord_vs_gather(vs, op->id, idx, op->n, out, err);
	return r < 0 ? r : emit(arg, out, rb);
}

/* The checkpoint directory an op names, NUL-terminated into @path. */
static int ps_dir(const struct coord_ps_op *op, char *path, size_t cap, struct coord_error *err)
{
	if (op->name_len == 0 || op->name_len > COORD_PS_DIR_MAX || op->name_len >= cap ||
	    memchr(op->name, 0, op->name_len))
		return coord_seterr(err, COORD_EINVAL, "checkpoint: bad directory name");
	memcpy(path, op->name, op->name_len);
	path[op->name_len] = 0;
	return 0;
}

/* PREPARE's data (ps.h): the variables to re-split, into *@out (malloc'd;
 * NULL when there are none). */
static int resplit_get(const struct coord_ps_op *op, struct coord_ckpt_resplit_spec **out,
		       unsigned *n, struct coord_error *err)
{
	const uint8_t *p = op->src, *end = p + op->src_len;
	struct coord_ckpt_resplit_spec *v;
	unsigned k = 0;

	*out = NULL;
	*n = 0;
	if (!op->src_len)
		return 0;
	v = calloc(COORD_CKPT_RESPLIT_MAX, sizeof(*v));
	if (!v)
		return coord_seterr(err, COORD_ENOMEM, "no memory");
	while (p < end) {
		uint16_t len;

		if (k == COORD_CKPT_RESPLIT_MAX || end - p < COORD_PS_RESPLIT_FIXED)
			break;
		len = (uint16_t)(p[24] | p[25] << 8);
		if (len == 0 || len > COORD_PVAR_NAME_LEN ||
		    end - p - COORD_PS_RESPLIT_FIXED < len ||
		    memchr(p + COORD_PS_RESPLIT_FIXED, 0, len))
			break;
		v[k].part.num_shards = ld32(p);
		v[k].part.max_shards = ld32(p + 4);
		v[k].part.min_shard_bytes = ld64(p + 8);
		v[k].part.max_shard_bytes = ld64(p + 16);
		memcpy(v[k].name, p + COORD_PS_RESPLIT_FIXED, len);
		k++;
		p += COORD_PS_RESPLIT_FIXED + len;
	}
	if (p != end) {
		free(v);
		return coord_seterr(err, COORD_EINVAL,
				    "checkpoint restore: malformed re-split list");
	}
	*out = v;
	*n = k;
	return 0;
}

/* PREPARE (ps.h): stage our part of a checkpoint; reply what was staged. */
static int op_prepare(struct coord_varstore *vs, unsigned task, const struct coord_ps_op *op,
		      const void *owner, coord_ps_emit_t emit, void *arg, struct coord_error *err)
{
	struct coord_ckpt_resplit_spec *rs = NULL;
	char path[COORD_PS_DIR_MAX + 1];
	struct coord_ckpt_prep q = { .dir = path,
				     .step = op->off,
				     .flags = (unsigned)(op->n >> 32),
				     .task = task,
				     .nps = (unsigned)(uint32_t)op->n,
				     .owner = owner,
				     .nonce = op->id };
	struct coord_ckpt_prep_res res;
	uint8_t b[COORD_PS_PREP_MAX];
	size_t wl;
	int r = ps_dir(op, path, sizeof(path), err);

	if (r == 0)
		r = resplit_get(op, &rs, &q.nresplit, err);
	q.resplit = rs;
	if (r == 0)
		r = coord_varstore_prepare(vs, &q, &res, err);
	free(rs);
	if (r < 0)
		return r;
	st64(b, res.step);
	st64(b + 8, res.latest);
	st32(b + 16, res.nstaged);
	st32(b + 20, res.ntotal);
	st32(b + 24, res.old_nps);
	st32(b + 28, res.version);
	st64(b + 32, res.dig_staged);
	st64(b + 40, res.dig_total);
	wl = strnlen(res.why, COORD_PS_PREP_MAX - COORD_PS_PREP_FIXED);
	memcpy(b + COORD_PS_PREP_FIXED, res.why, wl);
	return emit(arg, b, COORD_PS_PREP_FIXED + wl);
}

int coord_ps_handle_check(struct coord_varstore *vs, unsigned task, const struct coord_ps_op *op,
			  struct coord_error *err)
{
	uint32_t tag = coord_varstore_tag(vs);

	if (op->op < COORD_PS_READ || (op->op > COORD_PS_DELETE && op->op != COORD_PS_MAP) ||
	    op->tag == tag)
		return 0;
	return coord_seterr(err, COORD_ESTALE,
			    "variable id %u: its handle is from another run of ps task %u (tag "
			    "%u, the task's is %u: it restarted since); look the name up again",
			    op->id, task, op->tag, tag);
}

/* coord_vs_assign_fill()'s fill of a rendezvous assign: the op's fetch. */
static int fill_fetch(void *arg, float *dst, size_t bytes, struct coord_error *err)
{
	const struct coord_ps_op *op = arg;

	return op->fetch(op->fetch_arg, op->id, dst, bytes, NULL, err);
}

/* ASSIGN / ASSIGN_ADD: from the frame, or fetched (rendezvous: an assign
 * straight into the variable, an assign_add into the transport's buffer). */
static int op_assign(struct coord_varstore *vs, const struct coord_ps_op *op,
		     struct coord_ps_scratch *s, coord_ps_emit_t emit, void *arg,
		     struct coord_error *err)
{
	const float *src;
	int r;

	if (op->n > COORD_VAR_MAX_ELEMS || op->src_len != 4 * op->n)
		return coord_seterr(err, COORD_EINVAL, "%s: %llu elements but %u bytes",
				    op->op == COORD_PS_ASSIGN ? "assign" : "assign_add",
				    (unsigned long long)op->n, op->src_len);
	if (op->fetch && op->op == COORD_PS_ASSIGN) { /* rendezvous: into the variable */
		r = coord_vs_assign_fill(vs, op->id, op->off, op->n, fill_fetch, (void *)op, err);
		return r < 0 ? r : emit(arg, NULL, 0);
	}
	if (op->fetch) { /* rendezvous: into the transport's buffer, then added */
		const void *p = NULL;

		r = op->n ? op->fetch(op->fetch_arg, op->id, NULL, op->src_len, &p, err) : 0;
		if (r < 0)
			return r;
		src = aligned(s, p, op->src_len, 0, 4);
	} else {
		src = aligned(s, op->src, op->src_len, 0, 4);
	}
	if (!src && op->n)
		return coord_seterr(err, COORD_ENOMEM, "no memory");
	r = op->op == COORD_PS_ASSIGN ? coord_vs_assign(vs, op->id, op->off, op->n, src, err)
				      : coord_vs_assign_add(vs, op->id, op->off, op->n, src, err);
	return r < 0 ? r : emit(arg, NULL, 0);
}

int coord_ps_apply(struct coord_varstore *vs, unsigned task, const struct coord_ps_op *op,
		   struct coord_ps_scratch *s, coord_ps_emit_t emit, void *arg,
		   struct coord_error *err)
{
	char path[COORD_PS_DIR_MAX + 1];
	uint64_t step;
	uint8_t b[8];
	uint32_t id;
	int r = coord_ps_handle_check(vs, task, op, err);

	if (r < 0)
		return r;
	switch (op->op) {
	case COORD_PS_CREATE:
		return op_create(vs, op, s, emit, arg, err);
	case COORD_PS_LOOKUP: {
		char name[COORD_VAR_NAME_MAX + 1];

		if (op->name_len == 0 || op->name_len > COORD_VAR_NAME_MAX)
			return coord_seterr(err, COORD_EINVAL, "lookup: bad name length");
		memcpy(name, op->name, op->name_len);
		name[op->name_len] = 0;
		r = coord_varstore_lookup(vs, name, &id, err);
		return r < 0 ? r : emit_info(vs, id, emit, arg, err);
	}
	case COORD_PS_READ: {
		float *out;

		if (op->n > COORD_VAR_MAX_ELEMS)
			return coord_seterr(err, COORD_EINVAL, "read: %llu elements",
					    (unsigned long long)op->n);
		/* In place: the caller's buffer; the variable (a tcp ps); a frame. */
		out = op->dst && op->cap >= 4 * op->n ? op->dst : NULL;
		if (!out && s->stream && 4 * op->n >= COORD_PS_STREAM_MIN)
			return coord_vs_read_view(vs, op->id, op->off, op->n, s->stream, arg, err);
		if (!out && s->room && op->n)
			out = s->room(arg, 4 * op->n);
		if (!out) {
			if (!scratch_reserve(s, 4 * op->n))
				return coord_seterr(err, COORD_ENOMEM, "no memory");
			out = s->buf;
		}
		r = coord_vs_read(vs, op->id, op->off, op->n, out, err);
		return r < 0 ? r : emit(arg, out, 4 * op->n);
	}
	case COORD_PS_ASSIGN:
	case COORD_PS_ASSIGN_ADD:
		return op_assign(vs, op, s, emit, arg, err);
	case COORD_PS_SCATTER_ADD:
		r = op_scatter(vs, op, s, err);
		return r < 0 ? r : emit(arg, NULL, 0);
	case COORD_PS_GATHER:
		return op_gather(vs, op, s, emit, arg, err);
	case COORD_PS_DELETE:
		r = coord_vs_delete(vs, op->id, err);
		return r < 0 ? r : emit(arg, NULL, 0);
	case COORD_PS_SAVE:
		if (op->n <= task || op->n > UINT32_MAX)
			return coord_seterr(err, COORD_EINVAL,
					    "checkpoint save: task %u of %llu ps tasks", task,
					    (unsigned long long)op->n);
		r = ps_dir(op, path, sizeof(path), err);
		if (r == 0)
			r = coord_varstore_save_task(vs, path, task, (unsigned)op->n, op->off, err);
		return r < 0 ? r : emit(arg, NULL, 0);
	case COORD_PS_RESTORE:
		r = ps_dir(op, path, sizeof(path), err);
		if (r == 0)
			r = coord_varstore_restore_task(vs, path, task, &step, err);
		if (r < 0)
			return r;
		st64(b, step);
		return emit(arg, b, 8);
	case COORD_PS_PREPARE:
		return op_prepare(vs, task, op, s->owner ? s->owner : s, emit, arg, err);
	case COORD_PS_COMMIT:
		r = coord_varstore_commit(vs, s->owner ? s->owner : s, op->id, &id, err);
		if (r < 0)
			return r;
		st32(b, id);
		return emit(arg, b, 4);
	case COORD_PS_ABORT:
		coord_varstore_abort(vs, s->owner ? s->owner : s);
		return emit(arg, NULL, 0);
	default:
		return coord_seterr(err, COORD_EINVAL, "unknown variable operation %u", op->op);
	}
}

/* ---- the in-process backend ------------------------------------------------------ */

int coord_ps_local_create(unsigned nps, struct coord_ps **out, struct coord_error *err)
{
	struct coord_ps *ps = calloc(1, sizeof(*ps));
	int r;

	if (!ps || !(ps->local = calloc(nps ? nps : 1, sizeof(*ps->local)))) {
		free(ps);
		return coord_seterr(err, COORD_ENOMEM, "no memory for the ps stores");
	}
	ps->nps = nps;
	if (!(ps->once = calloc(nps ? nps : 1, sizeof(*ps->once)))) {
		coord_ps_destroy(ps);
		return coord_seterr(err, COORD_ENOMEM, "no memory for the ps stores");
	}
	for (unsigned i = 0; i < nps; i++) {
		r = coord_varstore_create(NULL, &ps->local[i], err);
		if (r == 0 && coord_ps_once_create(COORD_PS_ONCE_MAX, &ps->once[i]) < 0)
			r = coord_seterr(err, COORD_ENOMEM, "no memory for the ps stores");
		if (r < 0) {
			coord_ps_destroy(ps);
			return r;
		}
	}
	*out = ps;
	return 0;
}

void coord_ps_destroy(struct coord_ps *ps)
{
	if (!ps)
		return;
	for (unsigned i = 0; ps->local && i < ps->nps; i++) {
		coord_varstore_destroy(ps->local[i]);
		if (ps->once)
			coord_ps_once_destroy(ps->once[i]);
	}
	free(ps->local);
	free(ps->once);
	coord_psc_destroy(ps->remote);
	free((void *)ps->failures);
	free(ps);
}

uint32_t coord_ps_failure(struct coord_ps *ps, unsigned task)
{
	if (!ps->failures || task >= ps->nps)
		return 0;
	/* Relaxed: a counter; each report takes one number (S11). */
	return atomic_fetch_add_explicit(&ps->failures[task], 1, memory_order_relaxed) + 1;
}

/* The inproc transport's ps tasks: in-process stores, as many as the
 * spec's "ps" job has, else opts.inproc_ps. */
static int ps_local_setup(struct coord *c, const struct coord_spec *spec, struct coord_error *err)
{
	unsigned nps;
	int r = coord_ps_ntasks(spec, c->opts.inproc_ps, &nps, err);

	c->ps = NULL;
	if (r < 0)
		return r;
	r = coord_ps_local_create(nps, &c->ps, err);
	if (r == 0)
		c->ps->sess = coord_ps_session_new(); /* at most once (ps.h) */
	return r;
}

int coord_ps_ntasks(const struct coord_spec *spec, unsigned def, unsigned *nps,
		    struct coord_error *err)
{
	*nps = spec && coord_spec_has_job(spec, "ps") ? (unsigned)coord_spec_num_tasks(spec, "ps")
						      : def;
	if (*nps > 4096)
		return coord_seterr(err, COORD_EINVAL, "at most 4096 ps tasks (got %u)", *nps);
	return 0;
}

const struct coord_ps_ops coord_ps_local_ops = {
	.setup = ps_local_setup,
	.destroy = coord_ps_destroy,
	.failure = coord_ps_failure,
};

static int local_emit(void *arg, const void *p, size_t len)
{
	struct coord_ps_op *op = arg;

	if (len > op->cap)
		return COORD_EINVAL;
	if (len && p != op->dst) /* READ and GATHER wrote in place */
		memcpy(op->dst, p, len);
	op->dst_len = len;
	return 0;
}

int coord_ps_run(struct coord_ps *ps, struct coord_ps_op *ops, unsigned n, struct coord_error *err)
{
	/* The in-process coordinator is one session for its stages. */
	struct coord_ps_scratch s = { .owner = ps };
	struct coord_error e;
	int first = 0;

	if (!ps || ps->nps == 0)
		return coord_seterr(err, COORD_EINVAL,
				    "no parameter servers: the cluster has no \"ps\" job");
	for (unsigned i = 0; i < n; i++)
		if (ops[i].task >= ps->nps)
			return coord_seterr(err, COORD_EINVAL,
					    "variable on ps task %u, but there are %u", ops[i].task,
					    ps->nps);
	if (ps->remote && ps->call_sess) { /* the coordinator's own call (ps.h) */
		coord_ps_call_key(ps->call_sess, ops, n);
		return coord_psc_run_sure(ps->remote, ops, n, err);
	}
	if (ps->remote)
		return coord_psc_run(ps->remote, ops, n, err);
	for (unsigned i = 0; i < n; i++) {
		ops[i].dst_len = 0;
		ops[i].code = coord_ps_apply_once(ps->once[ops[i].task], ps->local[ops[i].task],
						  ops[i].task, &ops[i], &s, local_emit, &ops[i],
						  first ? &e : err);
		if (ops[i].code < 0 && !first)
			first = ops[i].code;
	}
	free(s.buf);
	return first;
}

/* ---- the public calls -------------------------------------------------------------- */

/* A handle's parts (ps.h): tag, task (coord_var_task(), var.h), id.  Tasks
 * are < 4096 (coord_ps_ntasks()), the 12 bits between id and tag. */
_Static_assert(COORD_PS_HANDLE_TAG_SHIFT - COORD_PS_HANDLE_TASK_SHIFT == 12, "task bits");
_Static_assert(COORD_PS_HANDLE_TAG_SHIFT + COORD_VS_TAG_BITS <= 64, "tag bits");

static coord_var_t var_make(unsigned task, uint32_t id, uint32_t tag)
{
	return ((uint64_t)tag << COORD_PS_HANDLE_TAG_SHIFT) |
	       ((uint64_t)task << COORD_PS_HANDLE_TASK_SHIFT) | id;
}

static int name_op(struct coord_ps *ps, uint16_t opc, const char *name, struct coord_ps_op *op,
		   struct coord_error *err)
{
	size_t len = name ? strlen(name) : 0;

	if (len == 0 || len > COORD_VAR_NAME_MAX)
		return coord_seterr(err, COORD_EINVAL, "a variable name is 1..%d bytes",
				    COORD_VAR_NAME_MAX);
	memset(op, 0, sizeof(*op));
	op->op = opc;
	op->name = name;
	op->name_len = (uint16_t)len;
	op->task = coord_var_shard(name, ps ? ps->nps : 1);
	return 0;
}

int coord_ps_info_out(const struct coord_ps_op *op, coord_var_t *var, struct coord_var_shape *shape,
		      struct coord_error *err)
{
	const uint8_t *b = op->dst;
	unsigned ndim;
	uint32_t tag;

	if (op->dst_len < 12 || (ndim = ld32(b + 4)) > COORD_VAR_MAX_DIMS ||
	    op->dst_len != 12 + 8 * (size_t)ndim || (tag = ld32(b + 8 + 8 * ndim)) == 0 ||
	    tag >= 1u << COORD_VS_TAG_BITS)
		return coord_seterr(err, -EPROTO, "ps task %u sent a malformed variable record",
				    op->task);
	if (var)
		*var = var_make(op->task, ld32(b), tag);
	if (shape) {
		shape->ndim = ndim;
		shape->nelem = 1;
		for (unsigned i = 0; i < COORD_VAR_MAX_DIMS; i++) {
			shape->dims[i] = i < ndim ? ld64(b + 8 + 8 * i) : 1;
			shape->nelem *= shape->dims[i];
		}
	}
	return 0;
}

static int var_lookup(struct coord_ps *ps, const char *name, coord_var_t *var,
		      struct coord_var_shape *shape, struct coord_error *err)
{
	uint8_t res[COORD_PS_INFO_MAX];
	struct coord_ps_op op;
	int r = name_op(ps, COORD_PS_LOOKUP, name, &op, err);

	if (r < 0)
		return r;
	op.dst = res;
	op.cap = sizeof(res);
	r = coord_ps_run(ps, &op, 1, err);
	return r < 0 ? r : coord_ps_info_out(&op, var, shape, err);
}

/* Public data ops -> ps ops (same opcodes). */
static int to_ps_op(const struct coord_var_op *v, unsigned i, struct coord_ps_op *o,
		    struct coord_error *err)
{
	memset(o, 0, sizeof(*o));
	o->op = (uint16_t)v->op;
	o->task = coord_var_task(v->var);
	o->id = (uint32_t)v->var;
	o->tag = coord_ps_handle_tag(v->var);
	o->off = v->off;
	o->n = v->n;
	if (v->n > COORD_VAR_MAX_ELEMS)
		return coord_seterr(err, COORD_EINVAL, "operation %u: %llu elements", i,
				    (unsigned long long)v->n);
	switch (v->op) {
	case COORD_VAR_READ:
		if (!v->dst && v->n)
			return coord_seterr(err, COORD_EINVAL, "operation %u: read into NULL", i);
		o->dst = v->dst;
		o->cap = 4 * v->n;
		return 0;
	case COORD_VAR_ASSIGN:
	case COORD_VAR_ASSIGN_ADD:
		if (!v->src && v->n)
			return coord_seterr(err, COORD_EINVAL, "operation %u: NULL values", i);
		o->src = v->src;
		o->src_len = (uint32_t)(4 * v->n);
		return 0;
	case COORD_VAR_SCATTER_ADD:
		if ((!v->src || !v->indices) && v->n)
			return coord_seterr(err, COORD_EINVAL,
					    "operation %u: NULL indices or updates", i);
		if (v->row_len > COORD_VAR_MAX_ELEMS ||
		    v->n * (8 + 4 * v->row_len) > COORD_MAX_FRAME_LIMIT)
			return coord_seterr(err, COORD_EINVAL,
					    "operation %u: scatter_add of %llu rows of %llu is too "
					    "large for one call",
					    i, (unsigned long long)v->n,
					    (unsigned long long)v->row_len);
		o->src = v->indices;
		o->src_len = (uint32_t)(8 * v->n);
		o->src2 = v->src;
		o->src2_len = (uint32_t)(4 * v->n * v->row_len);
		return 0;
	default:
		return coord_seterr(err, COORD_EINVAL, "operation %u: unknown opcode %u", i, v->op);
	}
}

/* @ctx: a worker function's batch (its updates are keyed), or NULL. */
static int var_batch(struct coord_ps *ps, struct coord_ctx *ctx, struct coord_var_op *ops,
		     unsigned n, struct coord_error *err)
{
	struct coord_ps_op small[8], *pops = small;
	int r = 0;

	if (n == 0)
		return 0;
	if (!ops)
		return coord_seterr(err, COORD_EINVAL, "NULL operations");
	if (n > 8) {
		pops = calloc(n, sizeof(*pops));
		if (!pops)
			return coord_seterr(err, COORD_ENOMEM, "no memory");
	}
	for (unsigned i = 0; i < n && r == 0; i++)
		r = to_ps_op(&ops[i], i, &pops[i], err);
	if (r == 0 && ctx)
		coord_ps_ctx_key(ctx, pops, n);
	if (r == 0)
		r = coord_ps_run(ps, pops, n, err);
	for (unsigned i = 0; i < n; i++)
		ops[i].code = r == 0 ? 0 : pops[i].code ? pops[i].code : r;
	if (pops != small)
		free(pops);
	return r;
}

unsigned coord_num_ps(const struct coord *c)
{
	return c && c->ps ? c->ps->nps : 0;
}

int coord_var_create(struct coord *c, const char *name, unsigned ndim, const uint64_t *dims,
		     const float *init, coord_var_t *var, struct coord_error *err)
{
	uint8_t res[COORD_PS_INFO_MAX], hdr[8 + 8 * COORD_VAR_MAX_DIMS];
	uint64_t nelem = 1;
	struct coord_ps_op op;
	uint8_t *data = hdr;
	size_t len;
	int r;

	if (!c || !var || ndim > COORD_VAR_MAX_DIMS || (ndim && !dims))
		return coord_seterr(err, COORD_EINVAL, "coord_var_create: bad arguments");
	r = name_op(c->ps, COORD_PS_CREATE, name, &op, err);
	if (r < 0)
		return r;
	for (unsigned i = 0; i < ndim; i++) {
		if (dims[i] == 0 || dims[i] > COORD_VAR_MAX_ELEMS ||
		    (nelem *= dims[i]) > COORD_VAR_MAX_ELEMS)
			return coord_seterr(err, COORD_EINVAL,
					    "variable '%s': dimension %u is 0 or the shape has "
					    "more than %llu elements",
					    name, i, (unsigned long long)COORD_VAR_MAX_ELEMS);
	}
	len = 8 + 8 * (size_t)ndim + (init ? 4 * nelem : 0);
	if (len > sizeof(hdr)) {
		data = malloc(len);
		if (!data)
			return coord_seterr(err, COORD_ENOMEM, "no memory");
	}
	st32(data, ndim);
	st32(data + 4, init ? 1 : 0);
	for (unsigned i = 0; i < ndim; i++)
		st64(data + 8 + 8 * i, dims[i]);
	if (init)
		memcpy(data + 8 + 8 * ndim, init, 4 * nelem);
	op.src = data;
	op.src_len = (uint32_t)len;
	op.dst = res;
	op.cap = sizeof(res);
	r = coord_ps_run(c->ps, &op, 1, err);
	if (data != hdr)
		free(data);
	return r < 0 ? r : coord_ps_info_out(&op, var, NULL, err);
}

int coord_var_lookup(struct coord *c, const char *name, coord_var_t *var,
		     struct coord_var_shape *shape, struct coord_error *err)
{
	if (!c)
		return coord_seterr(err, COORD_EINVAL, "NULL coordinator");
	return var_lookup(c->ps, name, var, shape, err);
}

int coord_var_batch(struct coord *c, struct coord_var_op *ops, unsigned n, struct coord_error *err)
{
	if (!c)
		return coord_seterr(err, COORD_EINVAL, "NULL coordinator");
	return var_batch(c->ps, NULL, ops, n, err);
}

int coord_var_read(struct coord *c, coord_var_t var, uint64_t off, uint64_t n, float *out,
		   struct coord_error *err)
{
	struct coord_var_op op = {
		.op = COORD_VAR_READ, .var = var, .off = off, .n = n, .dst = out
	};

	return coord_var_batch(c, &op, 1, err);
}

int coord_var_assign(struct coord *c, coord_var_t var, uint64_t off, uint64_t n, const float *src,
		     struct coord_error *err)
{
	struct coord_var_op op = {
		.op = COORD_VAR_ASSIGN, .var = var, .off = off, .n = n, .src = src
	};

	return coord_var_batch(c, &op, 1, err);
}

/* ---- from worker functions ----------------------------------------------------------- */

/* A ctx call's failure: the message becomes the closure's if it returns it. */
static int ctx_err(struct coord_ctx *ctx, int r, const struct coord_error *e)
{
	return r < 0 ? coord_ctx_fail(ctx, r, "%s", e->msg[0] ? e->msg : coord_strerror(r)) : r;
}

/* Could the ps not be reached, or did it restart since the handle was made
 * (a ps failure, not the function's error)? */
static bool unreachable(const struct coord_ps *ps, int code)
{
	return ps && ps->remote &&
	       (code == COORD_EUNAVAILABLE || code == COORD_ETIMEDOUT || code == COORD_ESTALE);
}

int coord_ps_ctx_end(struct coord_ctx *ctx, const struct coord_ps_op *ops, unsigned n, int r,
		     const struct coord_error *e)
{
	for (unsigned i = 0; r < 0 && i < n && !ctx->ps_failed; i++)
		if (unreachable(ctx->env->ps, ops[i].code))
			ctx->ps_failed = COORD_CAUSE_PS(ops[i].task);
	return ctx_err(ctx, r, e);
}

int coord_ctx_var_lookup(struct coord_ctx *ctx, const char *name, coord_var_t *var,
			 struct coord_var_shape *shape)
{
	struct coord_error e = { 0 };
	struct coord_ps *ps = ctx->env->ps;
	int r = var_lookup(ps, name, var, shape, &e);

	if (unreachable(ps, r) && !ctx->ps_failed)
		ctx->ps_failed = COORD_CAUSE_PS(coord_var_shard(name, ps->nps));
	return ctx_err(ctx, r, &e);
}

int coord_ctx_var_batch(struct coord_ctx *ctx, struct coord_var_op *ops, unsigned n)
{
	struct coord_error e = { 0 };
	struct coord_ps *ps = ctx->env->ps;
	int r = var_batch(ps, ctx, ops, n, &e);

	for (unsigned i = 0; r < 0 && i < n && !ctx->ps_failed; i++)
		if (unreachable(ps, ops[i].code))
			ctx->ps_failed = COORD_CAUSE_PS(coord_var_task(ops[i].var));
	return ctx_err(ctx, r, &e);
}

int coord_ctx_var_read(struct coord_ctx *ctx, coord_var_t var, uint64_t off, uint64_t n, float *out)
{
	struct coord_var_op op = {
		.op = COORD_VAR_READ, .var = var, .off = off, .n = n, .dst = out
	};

	return coord_ctx_var_batch(ctx, &op, 1);
}

int coord_ctx_var_assign(struct coord_ctx *ctx, coord_var_t var, uint64_t off, uint64_t n,
			 const float *src)
{
	struct coord_var_op op = {
		.op = COORD_VAR_ASSIGN, .var = var, .off = off, .n = n, .src = src
	};

	return coord_ctx_var_batch(ctx, &op, 1);
}

int coord_ctx_var_assign_add(struct coord_ctx *ctx, coord_var_t var, uint64_t off, uint64_t n,
			     const float *delta)
{
	struct coord_var_op op = {
		.op = COORD_VAR_ASSIGN_ADD, .var = var, .off = off, .n = n, .src = delta
	};

	return coord_ctx_var_batch(ctx, &op, 1);
}

int coord_ctx_var_scatter_add(struct coord_ctx *ctx, coord_var_t var, const int64_t *indices,
			      size_t nidx, size_t row_len, const float *updates)
{
	struct coord_var_op op = { .op = COORD_VAR_SCATTER_ADD,
				   .var = var,
				   .n = nidx,
				   .row_len = row_len,
				   .indices = indices,
				   .src = updates };

	return coord_ctx_var_batch(ctx, &op, 1);
}
