// SPDX-License-Identifier: MIT
/*
 * runtime/ps/ps_part.c - partitioned variables (coord/var.h "partitioned
 * variables"): one logical variable split by rows into shards "NAME/part_J",
 * each an ordinary variable on the task coord_var_shard() gives it, and the
 * row and range operations across them (gather, scatter_add, read,
 * assign_add), for the coordinator and for worker functions alike.
 *
 * What it keeps true:
 *   P1  a handle is checked whole before it is used (shard count, shape,
 *       rows >= shards): a handle from closure arguments is not trusted;
 *   P2  every row id is checked against the whole variable before any
 *       request is sent, so an id out of range changes nothing anywhere
 *       (all or nothing across shards; each ps checks its own rows again);
 *   P3  one coord_ps_run() per call: one request per shard, batched into
 *       one frame per ps task, all sent before any reply is awaited; a
 *       call over several variables (gather_multi, scatter_add_multi)
 *       plans (checks) every one of them first, then runs all their
 *       requests in that one coord_ps_run(), so P2 holds across them;
 *   P4  gather reads each distinct id once and returns rows in the
 *       caller's order; scatter_add adds a repeated id twice (tf);
 *   P5  shard J holds rows coord_var_partition_rows(rows, nparts, J).
 * A call that needs room (gather; scatter_add over more than one shard)
 * takes it with malloc (ids and indices; rows only when they must be
 * regrouped), freed before it returns.
 */
#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <coord/var.h>

#include "runtime/core/internal.h"
#include "runtime/ps/ps.h"
#include "runtime/ps/ps_pvt.h"

_Static_assert(COORD_VAR_MAX_PARTS <= 100, "shard names are NAME/part_J, J < 100");

/* An op @opc on shard @j: the task, id and store tag its handle names. */
static struct coord_ps_op shard_op(const struct coord_pvar *pv, unsigned j, uint16_t opc)
{
	coord_var_t v = pv->part[j];

	return (struct coord_ps_op){ .op = opc,
				     .task = coord_var_task(v),
				     .id = (uint32_t)v,
				     .tag = coord_ps_handle_tag(v) };
}

/* Run @ops (P3); a worker function's (@ctx) updates keyed (ps.h "At most once"). */
static int run_ops(struct coord_ps *ps, struct coord_ctx *ctx, struct coord_ps_op *ops, unsigned n,
		   struct coord_error *err)
{
	if (ctx)
		coord_ps_ctx_key(ctx, ops, n);
	return coord_ps_run(ps, ops, n, err);
}

/* P1 */
static int pv_check(const struct coord_pvar *pv, struct coord_error *err)
{
	uint64_t rl = 1;

	if (!pv)
		return coord_seterr(err, COORD_EINVAL, "NULL partitioned variable");
	if (!memchr(pv->name, 0, sizeof(pv->name)))
		return coord_seterr(err, COORD_EINVAL, "partitioned variable: unterminated name");
	if (pv->nparts == 0 || pv->nparts > COORD_VAR_MAX_PARTS || pv->ndim == 0 ||
	    pv->ndim > COORD_VAR_DIMS || pv->rows != pv->dims[0] || pv->rows < pv->nparts)
		return coord_seterr(err, COORD_EINVAL,
				    "not a partitioned variable handle (%u shards, %u dims)",
				    pv->nparts, pv->ndim);
	for (unsigned i = 1; i < pv->ndim; i++) {
		if (pv->dims[i] == 0 || pv->dims[i] > COORD_VAR_MAX_ELEMS)
			return coord_seterr(err, COORD_EINVAL, "partitioned variable: bad shape");
		rl *= pv->dims[i];
		if (rl > COORD_VAR_MAX_ELEMS)
			return coord_seterr(err, COORD_EINVAL, "partitioned variable: bad shape");
	}
	if (rl != pv->row_len || pv->rows > COORD_VAR_MAX_ELEMS * (uint64_t)pv->nparts)
		return coord_seterr(err, COORD_EINVAL, "partitioned variable: bad row length");
	return 0;
}

/* The shard of @row (P5), and its first row. */
static unsigned pv_shard(const struct coord_pvar *pv, uint64_t row, uint64_t *first)
{
	uint64_t base = pv->rows / pv->nparts, extra = pv->rows % pv->nparts, big = base + 1;
	uint64_t j;

	if (row < extra * big) {
		j = row / big;
		*first = j * big;
	} else {
		j = extra + (row - extra * big) / base;
		*first = extra * big + (j - extra) * base;
	}
	return (unsigned)j;
}

/* cnt[j] += how many of the @n ids are on shard j. */
static void count_by_shard(const struct coord_pvar *pv, const int64_t *ids, size_t n, size_t *cnt)
{
	for (size_t k = 0; k < n; k++) {
		uint64_t first;

		cnt[pv_shard(pv, (uint64_t)ids[k], &first)]++;
	}
}

/* P2: every id in [0, rows). */
static int ids_check(const struct coord_pvar *pv, const char *what, const int64_t *ids, size_t n,
		     const void *buf, struct coord_error *err)
{
	if (n && (!ids || !buf))
		return coord_seterr(err, COORD_EINVAL, "%s on '%s': NULL ids or rows", what,
				    pv->name);
	if (n > COORD_VAR_MAX_ELEMS / pv->row_len)
		return coord_seterr(err, COORD_EINVAL,
				    "%s on '%s': %zu rows is too many for one call", what, pv->name,
				    n);
	for (size_t k = 0; k < n; k++)
		if (ids[k] < 0 || (uint64_t)ids[k] >= pv->rows)
			return coord_seterr(err, -ERANGE,
					    "%s on '%s': id %" PRId64
					    " at position %zu is outside [0, %" PRIu64
					    "); nothing was applied",
					    what, pv->name, ids[k], k, pv->rows);
	return 0;
}

/* P5: shard @j's rows (j < k <= rows: always defined). */
static void shard_rows(uint64_t rows, unsigned k, unsigned j, uint64_t *first, uint64_t *cnt)
{
	if (coord_var_partition_rows(rows, k, j, first, cnt) < 0)
		*first = *cnt = 0;
}

static void part_name(char *b, size_t cap, const char *name, unsigned j)
{
	snprintf(b, cap, "%s/part_%u", name, j);
}

/* ---- the operations, on a struct coord_ps ---------------------------------------- */

/* Are @ids[0..@n) grouped by shard, in shard order (then each shard's rows
 * are one contiguous slice of the caller's buffer)? */
static bool in_shard_order(const struct coord_pvar *pv, const int64_t *ids, size_t n)
{
	unsigned last = 0;

	if (pv->nparts == 1)
		return true;
	for (size_t k = 0; k < n; k++) {
		uint64_t first;
		unsigned j = pv_shard(pv, (uint64_t)ids[k], &first);

		if (j < last)
			return false;
		last = j;
	}
	return true;
}

/* One variable's part of a gather or scatter_add: what its ops point
 * into, freed by pv_done() once they are answered. */
struct pv_plan {
	const struct coord_pvar *pv;
	size_t n;
	float *out;	    /* gather: the caller's rows */
	uint8_t *mem;	    /* gather: ids and indices; scatter_add: local ids (+ rows) */
	float *rbuf;	    /* gather: rows by shard, when not straight into @out */
	uint32_t *upos;	    /* gather: caller position -> distinct id */
	uint32_t *slot;	    /* gather: distinct id -> row in @rbuf */
	unsigned op0, nops; /* its ops: ops[op0 .. op0 + nops) */
	bool gather;
};

/*
 * gather: distinct ids (open addressing on the id), grouped by shard with a
 * counting sort into one local-index array and one row buffer; one GATHER
 * per shard, appended to @ops at *@nops; pv_done() then copies each caller
 * position's row.  When the ids are distinct and in shard order, the rows
 * go straight into @out instead.
 */
static int pv_gather_plan(const struct coord_pvar *pv, const int64_t *ids, size_t n, float *out,
			  struct coord_ps_op *ops, unsigned *nops, struct pv_plan *pl,
			  struct coord_error *err)
{
	size_t hsize = 16, rowb, nu = 0, cnt[COORD_VAR_MAX_PARTS] = { 0 }, at[COORD_VAR_MAX_PARTS];
	uint32_t *ht;
	int64_t *uid, *local;
	unsigned bits = 4;
	bool direct;
	int r;

	*pl = (struct pv_plan){ .pv = pv, .n = n, .out = out, .op0 = *nops, .gather = true };
	r = pv_check(pv, err);
	if (r == 0)
		r = ids_check(pv, "gather", ids, n, out, err);
	if (r < 0 || n == 0)
		return r;
	if (n > UINT32_MAX / 2)
		return coord_seterr(err, COORD_EINVAL, "gather: too many ids");
	while (hsize < 2 * n) {
		hsize *= 2;
		bits++;
	}
	rowb = 4 * pv->row_len;
	/* ht[hsize] u32, upos[n] u32 (position -> distinct), slot[n] u32
	 * (distinct -> grouped), uid[n] i64, local[n] i64. */
	pl->mem = malloc(4 * hsize + 4 * n + 4 * n + 8 + 8 * n + 8 * n);
	if (!pl->mem)
		return coord_seterr(err, COORD_ENOMEM, "gather: no memory for %zu rows", n);
	ht = (uint32_t *)pl->mem;
	pl->upos = ht + hsize;
	pl->slot = pl->upos + n;
	uid = (int64_t *)(((uintptr_t)(pl->slot + n) + 7) & ~(uintptr_t)7);
	local = uid + n;
	memset(ht, 0xff, 4 * hsize);
	for (size_t k = 0; k < n; k++) {
		size_t h = (size_t)(((uint64_t)ids[k] * 0x9e3779b97f4a7c15ull) >> (64 - bits));

		while (ht[h] != UINT32_MAX && uid[ht[h]] != ids[k])
			h = (h + 1) & (hsize - 1);
		if (ht[h] == UINT32_MAX) {
			ht[h] = (uint32_t)nu;
			uid[nu++] = ids[k];
		}
		pl->upos[k] = ht[h];
	}
	/* Distinct ids are uid[] in the caller's order: in place if grouped. */
	direct = nu == n && in_shard_order(pv, uid, nu);
	if (!direct && !(pl->rbuf = malloc(nu * rowb)))
		return coord_seterr(err, COORD_ENOMEM, "gather: no memory for %zu rows", n);
	count_by_shard(pv, uid, nu, cnt);
	for (unsigned j = 0, s = 0; j < pv->nparts; j++) {
		at[j] = s;
		s += cnt[j];
		if (!cnt[j])
			continue;
		ops[*nops] = shard_op(pv, j, COORD_PS_GATHER);
		ops[*nops].n = cnt[j];
		ops[*nops].src = local + at[j];
		ops[*nops].src_len = (uint32_t)(8 * cnt[j]);
		ops[*nops].dst = (uint8_t *)(direct ? out : pl->rbuf) + at[j] * rowb;
		ops[*nops].cap = cnt[j] * rowb;
		(*nops)++;
		pl->nops++;
	}
	for (size_t u = 0; u < nu; u++) {
		uint64_t first;
		unsigned j = pv_shard(pv, (uint64_t)uid[u], &first);

		pl->slot[u] = (uint32_t)at[j];
		local[at[j]++] = uid[u] - (int64_t)first;
	}
	return 0;
}

/* scatter_add: rows grouped by shard (a copy), unless they are already;
 * one SCATTER_ADD per shard, appended to @ops at *@nops. */
static int pv_scatter_plan(const struct coord_pvar *pv, const int64_t *ids, size_t n,
			   const float *upd, struct coord_ps_op *ops, unsigned *nops,
			   struct pv_plan *pl, struct coord_error *err)
{
	size_t rowb, cnt[COORD_VAR_MAX_PARTS] = { 0 }, at[COORD_VAR_MAX_PARTS];
	int64_t *local;
	uint8_t *rows;
	bool direct;
	int r;

	*pl = (struct pv_plan){ .pv = pv, .n = n, .op0 = *nops };
	r = pv_check(pv, err);
	if (r == 0)
		r = ids_check(pv, "scatter_add", ids, n, upd, err);
	if (r < 0 || n == 0)
		return r;
	rowb = 4 * pv->row_len;
	if (n * rowb + 8 * n > COORD_MAX_FRAME_LIMIT)
		return coord_seterr(err, COORD_EINVAL, "scatter_add on '%s': %zu rows is too many",
				    pv->name, n);
	if (pv->nparts == 1) { /* the caller's buffers, as they are */
		ops[*nops] = shard_op(pv, 0, COORD_PS_SCATTER_ADD);
		ops[*nops].n = n;
		ops[*nops].src = ids;
		ops[*nops].src_len = (uint32_t)(8 * n);
		ops[*nops].src2 = upd;
		ops[*nops].src2_len = (uint32_t)(n * rowb);
		(*nops)++;
		pl->nops = 1;
		return 0;
	}
	direct = in_shard_order(pv, ids, n); /* then the rows are sent from @upd */
	pl->mem = malloc(8 * n + (direct ? 0 : n * rowb));
	if (!pl->mem)
		return coord_seterr(err, COORD_ENOMEM, "scatter_add: no memory for %zu rows", n);
	local = (int64_t *)pl->mem;
	rows = direct ? (uint8_t *)upd : (uint8_t *)(local + n);
	count_by_shard(pv, ids, n, cnt);
	for (unsigned j = 0, s = 0; j < pv->nparts; j++) {
		at[j] = s;
		s += cnt[j];
		if (!cnt[j])
			continue;
		ops[*nops] = shard_op(pv, j, COORD_PS_SCATTER_ADD);
		ops[*nops].n = cnt[j];
		ops[*nops].src = local + at[j];
		ops[*nops].src_len = (uint32_t)(8 * cnt[j]);
		ops[*nops].src2 = rows + at[j] * rowb;
		ops[*nops].src2_len = (uint32_t)(cnt[j] * rowb);
		(*nops)++;
		pl->nops++;
	}
	for (size_t k = 0; k < n; k++) {
		uint64_t first;
		unsigned j = pv_shard(pv, (uint64_t)ids[k], &first);

		local[at[j]] = ids[k] - (int64_t)first;
		if (!direct)
			memcpy(rows + at[j] * rowb, upd + k * pv->row_len, rowb);
		at[j]++;
	}
	return 0;
}

/* After the run (@r its result): a gather's rows checked and put in the
 * caller's order; the plan's memory freed. */
static int pv_done(struct pv_plan *pl, const struct coord_ps_op *ops, int r,
		   struct coord_error *err)
{
	for (unsigned i = pl->op0; pl->gather && r == 0 && i < pl->op0 + pl->nops; i++)
		if (ops[i].dst_len != ops[i].cap)
			r = coord_seterr(err, -EPROTO, "gather on '%s': ps task %u sent %zu bytes",
					 pl->pv->name, ops[i].task, ops[i].dst_len);
	for (size_t k = 0; r == 0 && pl->rbuf && k < pl->n; k++) /* rbuf: pv was checked */
		memcpy(pl->out + k * pl->pv->row_len,
		       pl->rbuf + (size_t)pl->slot[pl->upos[k]] * pl->pv->row_len,
		       4 * pl->pv->row_len);
	free(pl->rbuf);
	free(pl->mem);
	pl->rbuf = NULL;
	pl->mem = NULL;
	return r;
}

/*
 * gather (@gather) or scatter_add of @nv variables: every one planned
 * (checked whole) before one coord_ps_run() of all their ops (P2, P3).
 * @ops has room for each variable's shard count (at most COORD_VAR_MAX_PARTS:
 * a handle with more fails its check before it adds an op); @pl for @nv.
 */
static int pv_rows(struct coord_ps *ps, struct coord_ctx *ctx, bool gather,
		   const struct coord_pvar_rows *v, unsigned nv, struct coord_ps_op *ops,
		   unsigned *nops, struct pv_plan *pl, struct coord_error *err)
{
	unsigned i;
	int r = 0;

	*nops = 0;
	if (nv && !v)
		return coord_seterr(err, COORD_EINVAL, "NULL variables");
	for (i = 0; r == 0 && i < nv; i++)
		r = gather ? pv_gather_plan(v[i].pv, v[i].ids, v[i].n, v[i].out, ops, nops, &pl[i],
					    err)
			   : pv_scatter_plan(v[i].pv, v[i].ids, v[i].n, v[i].updates, ops, nops,
					     &pl[i], err);
	if (r == 0 && *nops)
		r = run_ops(ps, ctx, ops, *nops, err);
	for (unsigned k = 0; k < i; k++) {
		int d = pv_done(&pl[k], ops, r, err);

		if (r == 0)
			r = d;
	}
	return r;
}

/* read / assign_add of a flat range: one op per shard it covers, in place. */
static int pv_range(struct coord_ps *ps, struct coord_ctx *ctx, const struct coord_pvar *pv,
		    uint16_t opc, uint64_t off, uint64_t n, float *out, const float *in,
		    struct coord_ps_op *ops, unsigned *nops, struct coord_error *err)
{
	uint64_t total, end;
	int r;

	*nops = 0;
	r = pv_check(pv, err);
	if (r < 0)
		return r;
	total = pv->rows * pv->row_len;
	if (off > total || n > total - off)
		return coord_seterr(err, COORD_EINVAL,
				    "'%s': range [%" PRIu64 ", +%" PRIu64
				    ") is outside its %" PRIu64 " elements",
				    pv->name, off, n, total);
	if (n == 0)
		return 0;
	if (opc == COORD_PS_READ ? !out : !in)
		return coord_seterr(err, COORD_EINVAL, "'%s': NULL buffer", pv->name);
	if (n > COORD_MAX_FRAME_LIMIT / 4)
		return coord_seterr(err, COORD_EINVAL, "'%s': %" PRIu64 " elements in one call",
				    pv->name, n);
	end = off + n;
	for (unsigned j = 0; j < pv->nparts; j++) {
		uint64_t first, cnt, lo, hi;

		shard_rows(pv->rows, pv->nparts, j, &first, &cnt);
		lo = first * pv->row_len;
		hi = (first + cnt) * pv->row_len;
		if (hi <= off || lo >= end)
			continue;
		lo = lo > off ? lo : off;
		hi = hi < end ? hi : end;
		ops[*nops] = shard_op(pv, j, opc);
		ops[*nops].off = lo - first * pv->row_len;
		ops[*nops].n = hi - lo;
		if (opc == COORD_PS_READ) {
			ops[*nops].dst = out + (lo - off);
			ops[*nops].cap = 4 * (hi - lo);
		} else {
			ops[*nops].src = in + (lo - off);
			ops[*nops].src_len = (uint32_t)(4 * (hi - lo));
		}
		(*nops)++;
	}
	return run_ops(ps, ctx, ops, *nops, err);
}

static int name_check(const char *name, struct coord_error *err)
{
	size_t len = name ? strlen(name) : 0;

	if (len == 0 || len > COORD_PVAR_NAME_LEN)
		return coord_seterr(err, COORD_EINVAL,
				    "a partitioned variable's name is 1..%d bytes",
				    COORD_PVAR_NAME_LEN);
	return 0;
}

/*
 * lookup: one batch of LOOKUPs, NAME/part_0 .. part_63 and NAME itself; the
 * shards found must be 0..k-1 and make the whole variable (P5).
 */
struct pv_look { /* calloc'ed by the caller: 13 KiB */
	char names[COORD_VAR_MAX_PARTS + 1][COORD_VAR_NAME_LEN + 1];
	uint8_t res[COORD_VAR_MAX_PARTS + 1][COORD_PS_INFO_MAX];
	struct coord_ps_op ops[COORD_VAR_MAX_PARTS + 1];
};

static int pv_lookup(struct coord_ps *ps, const char *name, struct coord_pvar *pv,
		     struct pv_look *l, struct coord_error *err)
{
	struct coord_var_shape sh[COORD_VAR_MAX_PARTS + 1];
	const unsigned n = COORD_VAR_MAX_PARTS + 1;
	coord_var_t v[COORD_VAR_MAX_PARTS + 1];
	unsigned k = 0, nps = ps ? ps->nps : 0;
	int r;

	r = name_check(name, err);
	if (r == 0 && !pv)
		r = coord_seterr(err, COORD_EINVAL, "NULL handle");
	if (r < 0)
		return r;
	if (nps == 0)
		return coord_seterr(err, COORD_EINVAL,
				    "no parameter servers: the cluster has no \"ps\" job");
	for (unsigned j = 0; j < n; j++) {
		if (j < COORD_VAR_MAX_PARTS)
			part_name(l->names[j], sizeof(l->names[j]), name, j);
		else
			snprintf(l->names[j], sizeof(l->names[j]), "%s", name);
		l->ops[j] = (struct coord_ps_op){ .op = COORD_PS_LOOKUP,
						  .task = coord_var_shard(l->names[j], nps),
						  .name = l->names[j],
						  .name_len = (uint16_t)strlen(l->names[j]),
						  .dst = l->res[j],
						  .cap = sizeof(l->res[j]) };
	}
	r = coord_ps_run(ps, l->ops, n, err);
	if (r < 0) { /* a missing shard is the end; anything else fails */
		r = 0;
		for (unsigned j = 0; j < n && r == 0; j++)
			if (l->ops[j].code < 0 && l->ops[j].code != -ENOENT)
				r = coord_seterr(err, l->ops[j].code, "lookup of '%s' failed: %s",
						 l->names[j], coord_strerror(l->ops[j].code));
	}
	for (unsigned j = 0; j < n && r == 0; j++)
		if (l->ops[j].code == 0)
			r = coord_ps_info_out(&l->ops[j], &v[j], &sh[j], err);
	while (r == 0 && k < COORD_VAR_MAX_PARTS && l->ops[k].code == 0)
		k++;
	for (unsigned j = k; r == 0 && j < COORD_VAR_MAX_PARTS; j++)
		if (l->ops[j].code == 0)
			r = coord_seterr(err, -EBADMSG,
					 "'%s': shard %u exists but shard %u does not", name, j, k);
	if (r == 0 && k == 0) {
		if (l->ops[COORD_VAR_MAX_PARTS].code < 0)
			r = coord_seterr(err, -ENOENT, "no variable '%s' (partitioned or not)",
					 name);
		else if (sh[COORD_VAR_MAX_PARTS].ndim == 0)
			r = coord_seterr(err, COORD_EINVAL, "'%s' is a scalar", name);
		else {
			sh[0] = sh[COORD_VAR_MAX_PARTS];
			v[0] = v[COORD_VAR_MAX_PARTS];
			k = 1;
		}
	}
	if (r == 0) {
		memset(pv, 0, sizeof(*pv));
		snprintf(pv->name, sizeof(pv->name), "%s", name);
		pv->nparts = k;
		pv->ndim = sh[0].ndim;
		pv->row_len = sh[0].nelem / sh[0].dims[0];
		for (unsigned j = 0; j < k; j++) {
			pv->rows += sh[j].dims[0];
			pv->part[j] = v[j];
			if (sh[j].ndim != sh[0].ndim ||
			    memcmp(&sh[j].dims[1], &sh[0].dims[1], 8 * (COORD_VAR_DIMS - 1)))
				r = coord_seterr(
					err, -EBADMSG,
					"'%s': shard %u has another row shape than shard 0", name,
					j);
		}
		memcpy(pv->dims, sh[0].dims, sizeof(pv->dims));
		pv->dims[0] = pv->rows;
		for (unsigned j = pv->ndim; j < COORD_VAR_DIMS; j++)
			pv->dims[j] = 0;
		for (unsigned j = 0; j < k && r == 0; j++) {
			uint64_t first, cnt;

			shard_rows(pv->rows, k, j, &first, &cnt);
			if (cnt != sh[j].dims[0])
				r = coord_seterr(err, -EBADMSG,
						 "'%s': shard %u has %" PRIu64 " rows, %" PRIu64
						 " expected",
						 name, j, sh[j].dims[0], cnt);
		}
	}
	if (r < 0)
		memset(pv, 0, sizeof(*pv));
	return r;
}

/* ---- the coordinator's calls ---------------------------------------------------------- */

int coord_pvar_create(struct coord *c, const char *name, unsigned ndim, const uint64_t *dims,
		      const float *init, const struct coord_partitioner *p, struct coord_pvar *pv,
		      struct coord_error *err)
{
	char pn[COORD_VAR_NAME_LEN + 1];
	uint64_t rl = 1, sd[COORD_VAR_DIMS];
	struct coord_error e = { 0 };
	coord_var_t extra;
	unsigned k = 1;
	int r;

	if (!c || !pv || ndim == 0 || ndim > COORD_VAR_DIMS || !dims)
		return coord_seterr(err, COORD_EINVAL, "coord_pvar_create: bad arguments");
	r = name_check(name, err);
	if (r < 0)
		return r;
	for (unsigned i = 0; i < ndim; i++)
		if (dims[i] == 0 || dims[i] > COORD_VAR_MAX_ELEMS * (i ? 1 : COORD_VAR_MAX_PARTS) ||
		    (i && (rl *= dims[i]) > COORD_VAR_MAX_ELEMS))
			return coord_seterr(err, COORD_EINVAL, "'%s': bad shape", name);
	r = coord_var_partition_count(p, coord_num_ps(c), dims[0], 4 * rl, &k, err);
	if (r < 0)
		return r;
	memset(pv, 0, sizeof(*pv));
	snprintf(pv->name, sizeof(pv->name), "%s", name);
	pv->nparts = k;
	pv->ndim = ndim;
	memcpy(pv->dims, dims, 8 * ndim);
	pv->rows = dims[0];
	pv->row_len = rl;
	memcpy(sd, dims, 8 * ndim);
	for (unsigned j = 0; j < k; j++) {
		uint64_t first, cnt;

		shard_rows(dims[0], k, j, &first, &cnt);
		if (cnt * rl > COORD_VAR_MAX_ELEMS)
			return coord_seterr(
				err, COORD_EINVAL,
				"'%s': %u shards of up to %" PRIu64 " elements; each may hold %llu",
				name, k, cnt * rl, (unsigned long long)COORD_VAR_MAX_ELEMS);
	}
	for (unsigned j = 0; j < k; j++) {
		uint64_t first, cnt;

		shard_rows(dims[0], k, j, &first, &cnt);
		sd[0] = cnt;
		part_name(pn, sizeof(pn), name, j);
		r = coord_var_create(c, pn, ndim, sd, init ? init + first * rl : NULL, &pv->part[j],
				     err);
		if (r == -EEXIST)
			return coord_seterr(err, -EEXIST,
					    "'%s' exists partitioned otherwise: shard %u is not "
					    "%" PRIu64 " rows (of %u shards)",
					    name, j, cnt, k);
		if (r < 0)
			return r;
	}
	if (k < COORD_VAR_MAX_PARTS) {
		part_name(pn, sizeof(pn), name, k);
		r = coord_var_lookup(c, pn, &extra, NULL, &e);
		if (r == 0)
			return coord_seterr(
				err, -EEXIST,
				"'%s' exists partitioned otherwise: more than %u shards", name, k);
		if (r != -ENOENT)
			return coord_seterr(err, r, "%s", e.msg);
	}
	return 0;
}

int coord_pvar_lookup(struct coord *c, const char *name, struct coord_pvar *pv,
		      struct coord_error *err)
{
	struct pv_look *l;
	int r;

	if (!c)
		return coord_seterr(err, COORD_EINVAL, "NULL coordinator");
	l = calloc(1, sizeof(*l));
	if (!l)
		return coord_seterr(err, COORD_ENOMEM, "no memory");
	r = pv_lookup(c->ps, name, pv, l, err);
	free(l);
	return r;
}

/* Room for the ops of one call: one per shard. */
#define PV_OPS COORD_VAR_MAX_PARTS

/* A single variable's gather or scatter_add: its plan and ops on the stack. */
static int pv_rows1(struct coord_ps *ps, struct coord_ctx *ctx, bool gather,
		    const struct coord_pvar *pv, const int64_t *ids, size_t n, float *out,
		    const float *upd, struct coord_ps_op *ops, unsigned *nops,
		    struct coord_error *err)
{
	struct coord_pvar_rows v = { .pv = pv, .ids = ids, .n = n, .out = out, .updates = upd };
	struct pv_plan pl;

	return pv_rows(ps, ctx, gather, &v, 1, ops, nops, &pl, err);
}

/* Room for the ops and plans of a call over @nv variables, in one block
 * at *@ops (the caller frees it). */
static int pv_multi_room(const struct coord_pvar_rows *v, unsigned nv, struct coord_ps_op **ops,
			 struct pv_plan **pl, struct coord_error *err)
{
	size_t nops = 0;

	*ops = NULL;
	if (nv && !v)
		return coord_seterr(err, COORD_EINVAL, "NULL variables");
	if (nv > COORD_PVAR_MULTI_MAX)
		return coord_seterr(err, COORD_EINVAL, "%u variables in one call (at most %u)", nv,
				    COORD_PVAR_MULTI_MAX);
	for (unsigned i = 0; i < nv; i++)
		nops += v[i].pv && v[i].pv->nparts <= COORD_VAR_MAX_PARTS ? v[i].pv->nparts
									  : COORD_VAR_MAX_PARTS;
	*ops = malloc((nops ? nops : 1) * sizeof(**ops) + (nv ? nv : 1) * sizeof(**pl));
	if (!*ops)
		return coord_seterr(err, COORD_ENOMEM, "no memory for %u variables", nv);
	*pl = (struct pv_plan *)(*ops + (nops ? nops : 1));
	return 0;
}

int coord_pvar_gather(struct coord *c, const struct coord_pvar *pv, const int64_t *ids, size_t n,
		      float *out, struct coord_error *err)
{
	struct coord_ps_op ops[PV_OPS];
	unsigned nops;

	if (!c)
		return coord_seterr(err, COORD_EINVAL, "NULL coordinator");
	return pv_rows1(c->ps, NULL, true, pv, ids, n, out, NULL, ops, &nops, err);
}

int coord_pvar_scatter_add(struct coord *c, const struct coord_pvar *pv, const int64_t *ids,
			   size_t n, const float *updates, struct coord_error *err)
{
	struct coord_ps_op ops[PV_OPS];
	unsigned nops;

	if (!c)
		return coord_seterr(err, COORD_EINVAL, "NULL coordinator");
	return pv_rows1(c->ps, NULL, false, pv, ids, n, NULL, updates, ops, &nops, err);
}

static int pvar_multi(struct coord *c, bool gather, const struct coord_pvar_rows *v, unsigned nv,
		      struct coord_error *err)
{
	struct coord_ps_op *ops;
	struct pv_plan *pl;
	unsigned nops;
	int r;

	if (!c)
		return coord_seterr(err, COORD_EINVAL, "NULL coordinator");
	r = pv_multi_room(v, nv, &ops, &pl, err);
	if (r == 0)
		r = pv_rows(c->ps, NULL, gather, v, nv, ops, &nops, pl, err);
	free(ops);
	return r;
}

int coord_pvar_gather_multi(struct coord *c, const struct coord_pvar_rows *v, unsigned nv,
			    struct coord_error *err)
{
	return pvar_multi(c, true, v, nv, err);
}

int coord_pvar_scatter_add_multi(struct coord *c, const struct coord_pvar_rows *v, unsigned nv,
				 struct coord_error *err)
{
	return pvar_multi(c, false, v, nv, err);
}

int coord_pvar_read(struct coord *c, const struct coord_pvar *pv, uint64_t off, uint64_t n,
		    float *out, struct coord_error *err)
{
	struct coord_ps_op ops[PV_OPS];
	unsigned nops;

	if (!c)
		return coord_seterr(err, COORD_EINVAL, "NULL coordinator");
	return pv_range(c->ps, NULL, pv, COORD_PS_READ, off, n, out, NULL, ops, &nops, err);
}

int coord_pvar_assign_add(struct coord *c, const struct coord_pvar *pv, uint64_t off, uint64_t n,
			  const float *delta, struct coord_error *err)
{
	struct coord_ps_op ops[PV_OPS];
	unsigned nops;

	if (!c)
		return coord_seterr(err, COORD_EINVAL, "NULL coordinator");
	return pv_range(c->ps, NULL, pv, COORD_PS_ASSIGN_ADD, off, n, NULL, delta, ops, &nops, err);
}

/* ---- from worker functions -------------------------------------------------------------- */

int coord_ctx_pvar_lookup(struct coord_ctx *ctx, const char *name, struct coord_pvar *pv)
{
	struct coord_error e = { 0 };
	struct pv_look *l = calloc(1, sizeof(*l));
	int r;

	if (!l)
		return coord_ctx_fail(ctx, COORD_ENOMEM, "no memory");
	r = pv_lookup(ctx->env->ps, name, pv, l, &e);
	r = coord_ps_ctx_end(ctx, l->ops, COORD_VAR_MAX_PARTS + 1, r, &e);
	free(l);
	return r;
}

int coord_ctx_pvar_gather(struct coord_ctx *ctx, const struct coord_pvar *pv, const int64_t *ids,
			  size_t n, float *out)
{
	struct coord_error e = { 0 };
	struct coord_ps_op ops[PV_OPS];
	unsigned nops;
	int r = pv_rows1(ctx->env->ps, ctx, true, pv, ids, n, out, NULL, ops, &nops, &e);

	return coord_ps_ctx_end(ctx, ops, nops, r, &e);
}

int coord_ctx_pvar_scatter_add(struct coord_ctx *ctx, const struct coord_pvar *pv,
			       const int64_t *ids, size_t n, const float *updates)
{
	struct coord_error e = { 0 };
	struct coord_ps_op ops[PV_OPS];
	unsigned nops;
	int r = pv_rows1(ctx->env->ps, ctx, false, pv, ids, n, NULL, updates, ops, &nops, &e);

	return coord_ps_ctx_end(ctx, ops, nops, r, &e);
}

static int ctx_pvar_multi(struct coord_ctx *ctx, bool gather, const struct coord_pvar_rows *v,
			  unsigned nv)
{
	struct coord_error e = { 0 };
	struct coord_ps_op *ops;
	struct pv_plan *pl;
	unsigned nops = 0;
	int r;

	r = pv_multi_room(v, nv, &ops, &pl, &e);
	if (r == 0)
		r = pv_rows(ctx->env->ps, ctx, gather, v, nv, ops, &nops, pl, &e);
	r = coord_ps_ctx_end(ctx, ops, nops, r, &e);
	free(ops);
	return r;
}

int coord_ctx_pvar_gather_multi(struct coord_ctx *ctx, const struct coord_pvar_rows *v, unsigned nv)
{
	return ctx_pvar_multi(ctx, true, v, nv);
}

int coord_ctx_pvar_scatter_add_multi(struct coord_ctx *ctx, const struct coord_pvar_rows *v,
				     unsigned nv)
{
	return ctx_pvar_multi(ctx, false, v, nv);
}

int coord_ctx_pvar_read(struct coord_ctx *ctx, const struct coord_pvar *pv, uint64_t off,
			uint64_t n, float *out)
{
	struct coord_error e = { 0 };
	struct coord_ps_op ops[PV_OPS];
	unsigned nops;
	int r = pv_range(ctx->env->ps, ctx, pv, COORD_PS_READ, off, n, out, NULL, ops, &nops, &e);

	return coord_ps_ctx_end(ctx, ops, nops, r, &e);
}

int coord_ctx_pvar_assign_add(struct coord_ctx *ctx, const struct coord_pvar *pv, uint64_t off,
			      uint64_t n, const float *delta)
{
	struct coord_error e = { 0 };
	struct coord_ps_op ops[PV_OPS];
	unsigned nops;
	int r = pv_range(ctx->env->ps, ctx, pv, COORD_PS_ASSIGN_ADD, off, n, NULL, delta, ops,
			 &nops, &e);

	return coord_ps_ctx_end(ctx, ops, nops, r, &e);
}
