// SPDX-License-Identifier: MIT
/*
 * runtime/ps/ps_ckpt.c - coord_checkpoint_save() and coord_checkpoint_restore*()
 * across the ps tasks: a save is one SAVE op on every task; a restore is a
 * two-phase commit (PREPARE everywhere, check that the tasks staged every
 * variable of the checkpoint exactly once, then COMMIT or ABORT everywhere).
 * Each task's side is runtime/store/ckpt_prepare.c.
 *
 * Synchronization: none of its own beyond a relaxed counter that keeps
 * nonces distinct; each ps task's stage is varstore.h's.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdatomic.h>
#include <unistd.h>

#include <coord/var.h>

#include "runtime/core/internal.h"
#include "runtime/ps/ps.h"
#include "runtime/ps/ps_pvt.h"

/* One op of @opc to every ps task, with data @src of @src_len bytes (the
 * same for all); @res[i] (COORD_PS_PREP_MAX bytes) each. */
static int all_tasks_data(struct coord_ps *ps, struct coord_ps_op *ops, uint16_t opc,
			  const char *dir, uint64_t off, uint64_t n, uint32_t nonce,
			  const void *src, uint32_t src_len, uint8_t (*res)[COORD_PS_PREP_MAX],
			  struct coord_error *err)
{
	for (unsigned i = 0; i < ps->nps; i++) {
		memset(&ops[i], 0, sizeof(ops[i]));
		ops[i].src = src;
		ops[i].src_len = src_len;
		ops[i].op = opc;
		ops[i].task = i;
		ops[i].id = nonce;
		ops[i].name = dir;
		ops[i].name_len = dir ? (uint16_t)strlen(dir) : 0;
		ops[i].off = off;
		ops[i].n = n;
		ops[i].dst = res[i];
		ops[i].cap = COORD_PS_PREP_MAX;
	}
	return coord_ps_run(ps, ops, ps->nps, err);
}

static int all_tasks(struct coord_ps *ps, struct coord_ps_op *ops, uint16_t opc, const char *dir,
		     uint64_t off, uint64_t n, uint32_t nonce, uint8_t (*res)[COORD_PS_PREP_MAX],
		     struct coord_error *err)
{
	return all_tasks_data(ps, ops, opc, dir, off, n, nonce, NULL, 0, res, err);
}

/* PREPARE's data (ps.h): the @n variables of @rs to re-split, into *@out
 * (malloc'd; NULL when @n is 0) of *@len bytes. */
static int resplit_put(const struct coord_ckpt_resplit *rs, unsigned n, uint8_t **out,
		       uint32_t *len, struct coord_error *err)
{
	size_t total = 0;
	uint8_t *b;

	*out = NULL;
	*len = 0;
	if (n && !rs)
		return coord_seterr(err, COORD_EINVAL, "checkpoint restore: NULL re-split list");
	if (n > COORD_CKPT_RESPLIT_MAX)
		return coord_seterr(err, COORD_EINVAL,
				    "checkpoint restore: %u variables to re-split (at most %d)", n,
				    COORD_CKPT_RESPLIT_MAX);
	for (unsigned i = 0; i < n; i++) {
		size_t l = rs[i].name ? strlen(rs[i].name) : 0;

		if (l == 0 || l > COORD_PVAR_NAME_LEN)
			return coord_seterr(err, COORD_EINVAL,
					    "checkpoint restore: re-split %u: a partitioned "
					    "variable's name is 1..%d bytes",
					    i, COORD_PVAR_NAME_LEN);
		total += COORD_PS_RESPLIT_FIXED + l;
	}
	if (!n)
		return 0;
	b = malloc(total);
	if (!b)
		return coord_seterr(err, COORD_ENOMEM, "no memory");
	*out = b;
	*len = (uint32_t)total;
	for (unsigned i = 0; i < n; i++) {
		size_t l = strlen(rs[i].name);

		st32(b, rs[i].part.num_shards);
		st32(b + 4, rs[i].part.max_shards);
		st64(b + 8, rs[i].part.min_shard_bytes);
		st64(b + 16, rs[i].part.max_shard_bytes);
		b[24] = (uint8_t)l;
		b[25] = (uint8_t)(l >> 8);
		memcpy(b + COORD_PS_RESPLIT_FIXED, rs[i].name, l);
		b += COORD_PS_RESPLIT_FIXED + l;
	}
	return 0;
}

/* Check a checkpoint call's arguments; room for one op and result per task. */
static int ckpt_begin(struct coord_ps *ps, const char *dir, struct coord_ps_op **ops,
		      uint8_t (**res)[COORD_PS_PREP_MAX], struct coord_error *err)
{
	size_t len = dir ? strlen(dir) : 0;
	unsigned n = ps ? ps->nps : 0;

	if (len == 0 || len > COORD_PS_DIR_MAX)
		return coord_seterr(err, COORD_EINVAL, "checkpoint: a directory of 1..%d bytes",
				    COORD_PS_DIR_MAX);
	if (n == 0)
		return coord_seterr(err, COORD_EINVAL,
				    "no parameter servers: the cluster has no \"ps\" job");
	*res = calloc(n, sizeof(**res));
	*ops = calloc(n, sizeof(**ops));
	if (!*res || !*ops) {
		free(*res);
		free(*ops);
		return coord_seterr(err, COORD_ENOMEM, "no memory");
	}
	return 0;
}

/* SAVE on every task, recording the layout (task i of nps). */
static int save(struct coord_ps *ps, const char *dir, uint64_t step, struct coord_error *err)
{
	uint8_t(*res)[COORD_PS_PREP_MAX] = NULL;
	struct coord_ps_op *ops = NULL;
	int r = ckpt_begin(ps, dir, &ops, &res, err);

	if (r < 0)
		return r;
	r = all_tasks(ps, ops, COORD_PS_SAVE, dir, step, ps->nps, 0, res, err);
	free(res);
	free(ops);
	return r;
}

/*
 * Check the @n tasks' PREPARE replies (@ops, @res): all read the same step
 * of the same checkpoint as task 0 (its variables, old task count and
 * digest), and between them they staged each of its variables once.  Task
 * 0's step, newest step, variable count and old task count go to *@stepp,
 * *@latestp, *@totalp and *@oldnp.
 */
static int check_prepared(const struct coord_ps_op *ops, uint8_t (*res)[COORD_PS_PREP_MAX],
			  unsigned n, const char *dir, uint64_t *stepp, uint64_t *latestp,
			  uint32_t *totalp, uint32_t *oldnp, struct coord_error *err)
{
	uint64_t step = 0, latest = 0, dig = 0, dig0 = 0;
	uint32_t staged = 0, total = 0, oldn = 0;
	int r = 0;

	for (unsigned i = 0; r == 0 && i < n; i++) {
		const uint8_t *b = res[i];

		if (ops[i].dst_len < COORD_PS_PREP_FIXED) {
			r = coord_seterr(err, -EPROTO, "ps task %u: malformed restore reply", i);
			break;
		}
		if (i == 0) {
			step = ld64(b);
			latest = ld64(b + 8);
			total = ld32(b + 20);
			oldn = ld32(b + 24);
			dig0 = ld64(b + 40);
		} else if (ld64(b) != step || ld32(b + 20) != total || ld32(b + 24) != oldn ||
			   ld64(b + 40) != dig0) {
			r = coord_seterr(
				err, COORD_EINVAL,
				"checkpoint %s: ps task 0 read step %llu (%u variables, %u "
				"tasks) but task %u step %llu (%u variables, %u tasks): "
				"the directory changed during the restore, or the tasks do "
				"not share it",
				dir, (unsigned long long)step, total, oldn, i,
				(unsigned long long)ld64(b), ld32(b + 20), ld32(b + 24));
			break;
		}
		staged += ld32(b + 16);
		dig += ld64(b + 32);
	}
	if (r == 0 && (staged != total || dig != dig0))
		r = coord_seterr(err, COORD_EINVAL,
				 "checkpoint %s step %llu: the %u ps tasks staged %u variables of "
				 "the checkpoint's %u (or not each once): refused",
				 dir, (unsigned long long)step, n, staged, total);
	*stepp = step;
	*latestp = latest;
	*totalp = total;
	*oldnp = oldn;
	return r;
}

/*
 * Restore as a two-phase commit: PREPARE on every task (each stages what
 * places on it now), check that the tasks staged every variable of the
 * checkpoint exactly once, then COMMIT everywhere (or ABORT everywhere).
 */
static int restore(struct coord_ps *ps, const char *dir, unsigned flags,
		   const struct coord_ckpt_resplit *rs, unsigned nrs, uint64_t *stepp,
		   struct coord_error *err)
{
	uint8_t *rsb = NULL;
	uint32_t rsl = 0;
	static _Atomic uint32_t seq;
	uint8_t(*res)[COORD_PS_PREP_MAX] = NULL;
	struct coord_ps_op *ops = NULL;
	unsigned n = ps ? ps->nps : 0;
	uint64_t step = 0, latest = 0;
	uint32_t nonce, total = 0, oldn = 0;
	char why[COORD_PS_PREP_MAX - COORD_PS_PREP_FIXED + 1];
	struct coord_error e2;
	int r;

	if (flags & ~COORD_CKPT_FALLBACK)
		return coord_seterr(err, COORD_EINVAL, "checkpoint restore: unknown flags 0x%x",
				    flags);
	r = resplit_put(rs, nrs, &rsb, &rsl, err);
	if (r == 0)
		r = ckpt_begin(ps, dir, &ops, &res, err);
	if (r < 0) {
		free(rsb);
		return r;
	}
	/* Relaxed: a counter that only has to differ between restores. */
	nonce = (uint32_t)coord_now_ns() ^ ((uint32_t)getpid() << 16) ^
		atomic_fetch_add_explicit(&seq, 1, memory_order_relaxed);
	r = all_tasks_data(
		ps, ops, COORD_PS_PREPARE, dir, COORD_CKPT_STEP_LATEST,
		n | ((uint64_t)(flags & COORD_CKPT_FALLBACK ? COORD_CKPT_F_FALLBACK : 0) << 32),
		nonce, rsb, rsl, res, err);
	if (r == 0)
		r = check_prepared(ops, res, n, dir, &step, &latest, &total, &oldn, err);
	if (r == 0) { /* task 0's reason for a fallback (res is reused below) */
		size_t wl = ops[0].dst_len - COORD_PS_PREP_FIXED;

		memcpy(why, res[0] + COORD_PS_PREP_FIXED, wl);
		why[wl] = 0;
	}
	if (r == 0 && err) { /* an earlier step's failure, or nothing */
		err->code = 0;
		err->msg[0] = 0;
	}
	if (r < 0) {
		/* Best effort: a task that cannot be told drops its stage when
		 * its connection goes, or at the next PREPARE. */
		(void)all_tasks(ps, ops, COORD_PS_ABORT, dir, 0, 0, nonce, res, &e2);
		goto out;
	}
	r = all_tasks(ps, ops, COORD_PS_COMMIT, dir, 0, 0, nonce, res, &e2);
	if (r < 0) {
		unsigned done = 0;

		for (unsigned i = 0; i < n; i++)
			done += ops[i].code == 0;
		coord_seterr(
			err, r,
			"checkpoint %s step %llu: committed on %u of %u ps tasks, then: %s; the "
			"model is partly restored: restore again",
			dir, (unsigned long long)step, done, n, e2.msg);
		goto out;
	}
	if (stepp)
		*stepp = step;
	if (step != latest) {
		coord_log(COORD_LOG_WARN,
			  "checkpoint %s: fell back to step %llu, the newest intact one (%s)", dir,
			  (unsigned long long)step, why);
		coord_seterr(err, 0,
			     "fell back to step %llu, the newest intact checkpoint in %s (%s)",
			     (unsigned long long)step, dir, why);
	} else if (oldn != n) {
		coord_log(COORD_LOG_INFO,
			  "checkpoint %s: restored step %llu, saved by %u ps tasks, onto %u", dir,
			  (unsigned long long)step, oldn, n);
		coord_seterr(
			err, 0,
			"restored step %llu whole: %u variables saved by %u ps tasks, re-placed "
			"onto %u",
			(unsigned long long)step, total, oldn, n);
	} else if (nrs) {
		coord_log(COORD_LOG_INFO,
			  "checkpoint %s: restored step %llu, %u variables re-split", dir,
			  (unsigned long long)step, nrs);
		coord_seterr(err, 0, "restored step %llu whole: %u partitioned variables re-split",
			     (unsigned long long)step, nrs);
	}
out:
	free(rsb);
	free(res);
	free(ops);
	return r;
}
int coord_checkpoint_save(struct coord *c, const char *dir, uint64_t step, struct coord_error *err)
{
	if (!c)
		return coord_seterr(err, COORD_EINVAL, "NULL coordinator");
	return save(c->ps, dir, step, err);
}

int coord_checkpoint_restore(struct coord *c, const char *dir, uint64_t *step,
			     struct coord_error *err)
{
	return coord_checkpoint_restore_ex(c, dir, 0, step, err);
}

int coord_checkpoint_restore_ex(struct coord *c, const char *dir, unsigned flags, uint64_t *step,
				struct coord_error *err)
{
	if (!c)
		return coord_seterr(err, COORD_EINVAL, "NULL coordinator");
	if (err)
		err->msg[0] = 0;
	return restore(c->ps, dir, flags, NULL, 0, step, err);
}

int coord_checkpoint_restore_resplit(struct coord *c, const char *dir, unsigned flags,
				     const struct coord_ckpt_resplit *rs, unsigned n,
				     uint64_t *step, struct coord_error *err)
{
	if (!c)
		return coord_seterr(err, COORD_EINVAL, "NULL coordinator");
	if (err)
		err->msg[0] = 0;
	return restore(c->ps, dir, flags, rs, n, step, err);
}
