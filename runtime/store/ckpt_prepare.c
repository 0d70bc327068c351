// SPDX-License-Identifier: MIT
/*
 * runtime/store/ckpt_prepare.c - restoring a checkpoint across a change of
 * layout: prepare (stage this task's share of every file of the step),
 * then commit or abort; and re-splitting partitioned variables onto another
 * shard count.  The stage and the file readers are ckpt_restore.c's.
 *
 * Restore across layouts (coord_varstore_prepare/commit/abort, the ps ops
 * PREPARE/COMMIT/ABORT): the coordinator's ps tasks share DIR (as TF
 * assumes for checkpoints).  Each task reads every file of the step, from
 * DIR/ps-<t> for every task t of the layout that wrote it (the header's
 * count; for version 1 the ps-<t> that hold the step, which must be
 * 0..n-1), checks that they agree (version, step, task, count) and that no
 * name is in two files, and stages the variables whose name places on it
 * now.  The stage is invisible until its owner commits it; one per store
 * (a new PREPARE drops the old: memory is one checkpoint's share plus one
 * file); its owner's connection closing drops it; while it is held a create
 * cannot give one of its names another shape (so a commit cannot fail).
 *
 * Re-splitting (struct coord_ckpt_resplit_spec): a partitioned variable
 * restored with another shard count.  A first pass over the step's files
 * learns its old shards (which must be NAME/part_0..K-1, split as
 * coord_var_partition_rows() splits) and stages, zeroed, the new shards
 * that place here; the second pass fills them from each old shard as its
 * file is read (memory: still one file plus this task's share).  The task
 * holding new shard 0 counts the old shards as staged, so the digests
 * still prove every variable of the checkpoint was taken exactly once.
 *
 * Synchronization: as checkpoint.c; one build at a time under save_lock,
 * the stage installed, committed and dropped under names_lock.
 */
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/store/ckpt_pvt.h"

/* --- restore across a layout change: prepare, then commit or abort -------------- */

/* A name's term in the digests (order-independent sums). */
static uint64_t name_mix(const char *name)
{
	uint64_t z = coord_var_fnv1a64(name, strlen(name)) + 0x9e3779b97f4a7c15ull;

	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
	z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
	return z ^ (z >> 31);
}

/* Which ps-<t> of @dfd hold @step (version 1 files): they must be 0..n-1. */
static int count_v1(struct coord_varstore *vs, int dfd, const char *dir, uint64_t step,
		    uint32_t *np, struct coord_error *err)
{
	unsigned char *have = calloc(MAX_PS_TASKS, 1);
	char name[48];
	uint32_t n = 0, top = 0;
	struct dirent *de;
	DIR *d = coord_ckpt_list_dir(dfd);

	if (!have || !d) {
		if (d)
			closedir(d);
		free(have);
		return coord_seterr(err, -EIO, "checkpoint dir '%s': cannot list", dir);
	}
	coord_ckpt_name(name, sizeof(name), step);
	for (unsigned i = 0; i < DIR_MAX_ENTRIES && (de = readdir(d)); i++) {
		const char *s = de->d_name;
		struct stat st;
		unsigned long t;
		int pfd;

		if (strncmp(s, "ps-", 3) || !coord_ckpt_all_digits(s + 3, strlen(s + 3)) ||
		    (t = strtoul(s + 3, NULL, 10)) >= MAX_PS_TASKS)
			continue;
		pfd = coord_ckpt_open_sub(dfd, s, O_RDONLY | O_DIRECTORY, vs->ckpt_root != NULL);
		if (pfd < 0)
			continue;
		if (!fstatat(pfd, name, &st, AT_SYMLINK_NOFOLLOW) && !have[t]) {
			have[t] = 1;
			n++;
			top = (uint32_t)t + 1 > top ? (uint32_t)t + 1 : top;
		}
		close(pfd);
	}
	closedir(d);
	free(have);
	if (n != top)
		return coord_seterr(err, -EBADMSG,
				    "checkpoint '%s' step %" PRIu64 " (format version 1): %" PRIu32
				    " ps-<t> directories hold it but ps-%" PRIu32
				    " is among them: a task's file is missing",
				    dir, step, n, top - 1);
	*np = n;
	return 0;
}

struct name_set {
	char (*nm)[COORD_VAR_NAME_MAX + 1];
	size_t n, cap;
};

static int cmp_name(const void *a, const void *b)
{
	return strcmp(a, b);
}

/* One file of a step being prepared: ps-<@t>'s, read whole and parsed. */
struct step_file {
	char path[4200];
	unsigned char *buf;
	struct ent *ents;
	uint32_t n;
};

static void step_file_free(struct step_file *f)
{
	free(f->ents);
	free(f->buf);
	f->ents = NULL;
	f->buf = NULL;
	f->n = 0;
}

/*
 * Read and verify ps-<@t>'s file of @step in @dfd into @f (freed by
 * step_file_free() even on failure), checked against ps-0's: for @t 0,
 * *@m0 and *@ntasks (the layout that wrote the step) are set from it.
 */
static int step_file_read(struct coord_varstore *vs, const struct coord_ckpt_prep *q, int dfd,
			  uint64_t step, uint32_t t, struct ckpt_meta *m0, uint32_t *ntasks,
			  struct step_file *f, struct coord_error *err)
{
	bool nofollow = vs->ckpt_root != NULL;
	struct ckpt_meta m;
	char name[48];
	uint64_t size;
	int pfd, ret;

	coord_ckpt_name(name, sizeof(name), step);
	snprintf(f->path, sizeof(f->path), "%s/ps-%" PRIu32 "/%s", q->dir, t, name);
	ret = coord_ckpt_open_task_dir(vs, dfd, t, false, &pfd, err, q->dir);
	if (!ret) {
		ret = coord_ckpt_read_file(vs, pfd, name, f->path, nofollow, &f->buf, &size, err);
		close(pfd);
	}
	if (ret == -ENOENT) { /* an incomplete checkpoint, not none */
		char why[COORD_ERRMSG_LEN];

		snprintf(why, sizeof(why), "%s", err ? err->msg : "a file is missing");
		ret = BAD("checkpoint '%s' step %" PRIu64 " is incomplete: %s", q->dir, step, why);
	}
	if (!ret)
		ret = coord_ckpt_parse(f->buf, size, step, f->path, &f->ents, &f->n, &m, err);
	if (!ret && t == 0) {
		*m0 = m;
		if (m.version == 1)
			ret = count_v1(vs, dfd, q->dir, step, ntasks, err);
		else if (m.nps > MAX_PS_TASKS)
			ret = BAD("checkpoint '%s': header says %" PRIu32 " ps tasks", f->path,
				  m.nps);
		else
			*ntasks = m.nps;
	} else if (!ret && m.version != m0->version) {
		ret = BAD("checkpoint '%s': format version %" PRIu32 ", but ps-0's file of "
			  "that step is version %" PRIu32 ": the files disagree",
			  f->path, m.version, m0->version);
	}
	if (!ret && m.version != 1 && (m.task != t || m.nps != *ntasks))
		ret = BAD("checkpoint '%s': header says task %" PRIu32 " of %" PRIu32
			  ", expected task %" PRIu32 " of %" PRIu32 " (ps-0's file): the files "
			  "disagree",
			  f->path, m.task, m.nps, t, *ntasks);
	return ret;
}

/* --- re-splitting partitioned variables (struct coord_ckpt_resplit_spec) ------- */

/*
 * One partitioned variable restored with another shard count: what the
 * checkpoint holds of it (its old shards, found by a first pass over the
 * step's files) and its new shards staged on this task, filled by the
 * second pass from every old shard that holds some of their rows.
 */
struct resplit {
	const struct coord_ckpt_resplit_spec *spec;
	uint64_t seen;				/* old shards found (bit J) */
	uint64_t old_rows[COORD_VAR_MAX_PARTS]; /* their rows */
	unsigned ndim;
	uint64_t dims[COORD_VAR_MAX_DIMS]; /* old shard 0's: dims[1..] are a row */
	uint64_t rows, row_len;
	unsigned oldk, newk;
	struct coord_var *nv[COORD_VAR_MAX_PARTS]; /* new shard J here, or NULL */
	bool credit; /* this task counts the old shards as staged (new shard 0's) */
};

/* The re-split variable of @nm ("BASE/part_J", J -> *@j), or NULL. */
static struct resplit *resplit_of(struct resplit *rs, unsigned nrs, const char *nm, unsigned *j)
{
	size_t blen;
	long part;

	if (!nrs || (part = coord_var_part_of(nm, &blen)) < 0)
		return NULL;
	for (unsigned i = 0; i < nrs; i++)
		if (strlen(rs[i].spec->name) == blen && !memcmp(rs[i].spec->name, nm, blen)) {
			*j = (unsigned)part;
			return &rs[i];
		}
	return NULL;
}

/* First pass: note @e, an old shard of @r (its shape against the others'). */
static int resplit_note(struct resplit *r, const struct ent *e, unsigned j, const char *path,
			struct coord_error *err)
{
	if (j >= COORD_VAR_MAX_PARTS || (r->seen >> j & 1) || e->ndim == 0)
		return BAD("checkpoint '%s': '%s' is not a shard of a partitioned variable "
			   "this restore can re-split",
			   path, e->nm);
	if (r->seen && (e->ndim != r->ndim ||
			memcmp(e->dims + 1, r->dims + 1, (e->ndim - 1) * sizeof(*e->dims))))
		return BAD("checkpoint '%s': shard '%s' has another row shape than the "
			   "other shards of '%s'",
			   path, e->nm, r->spec->name);
	if (!r->seen) {
		r->ndim = e->ndim;
		memcpy(r->dims, e->dims, sizeof(r->dims));
	}
	r->seen |= 1ull << j;
	r->old_rows[j] = e->dims[0];
	return 0;
}

/* After the first pass: the old layout checked whole (shards 0..K-1, split
 * as coord_var_partition_rows() splits), the new count, and the new shards
 * that place on this task staged (zero; filled by the second pass). */
static int resplit_plan(struct coord_varstore *vs, const struct coord_ckpt_prep *q,
			struct resplit *r, struct coord_ckpt_stage *st, struct coord_error *err)
{
	char nm[COORD_VAR_NAME_MAX + 1];
	uint64_t first, cnt, dims[COORD_VAR_MAX_DIMS];
	int ret;

	if (!r->seen)
		return coord_seterr(err, -EINVAL,
				    "checkpoint '%s': no partitioned variable '%s' to re-split",
				    q->dir, r->spec->name);
	r->oldk = (unsigned)__builtin_popcountll(r->seen);
	if (r->seen != (r->oldk == 64 ? ~0ull : (1ull << r->oldk) - 1))
		return BAD("checkpoint '%s': partitioned variable '%s' lacks shard %u of its %u",
			   q->dir, r->spec->name, (unsigned)__builtin_ctzll(~r->seen),
			   64 - __builtin_clzll(r->seen));
	r->rows = 0;
	r->row_len = 1;
	for (unsigned j = 0; j < r->oldk; j++)
		r->rows += r->old_rows[j];
	for (unsigned d = 1; d < r->ndim; d++)
		r->row_len *= r->dims[d];
	for (unsigned j = 0; j < r->oldk; j++)
		if (coord_var_partition_rows(r->rows, r->oldk, j, &first, &cnt) || cnt == 0 ||
		    cnt != r->old_rows[j])
			return BAD("checkpoint '%s': the %u shards of '%s' do not split its "
				   "%" PRIu64 " rows as a partitioned variable's",
				   q->dir, r->oldk, r->spec->name, r->rows);
	ret = coord_var_partition_count(&r->spec->part, q->nps, r->rows, 4 * r->row_len, &r->newk,
					err);
	if (ret)
		return ret;
	memcpy(dims, r->dims, sizeof(dims));
	for (unsigned j = 0; j < COORD_VAR_MAX_PARTS; j++) {
		snprintf(nm, sizeof(nm), "%s/part_%u", r->spec->name, j);
		if (j >= r->newk) {
			/* A live shard beyond the new count would make the
			 * variable another one's (pv_lookup() refuses it). */
			pthread_mutex_lock(&vs->names_lock);
			ret = coord_vs_find_locked(vs, nm) ? -EEXIST : 0;
			pthread_mutex_unlock(&vs->names_lock);
			if (ret)
				return coord_seterr(
					err, ret,
					"checkpoint restore: '%s' exists, beyond the %u "
					"shards '%s' is re-split into: delete it first",
					nm, r->newk, r->spec->name);
			continue;
		}
		if (j == 0)
			r->credit = coord_var_shard(nm, q->nps) == q->task;
		if (coord_var_shard(nm, q->nps) != q->task)
			continue;
		if (coord_var_partition_rows(r->rows, r->newk, j, &first, &dims[0]))
			return BAD("checkpoint restore: '%s': bad layout", nm);
		ret = coord_ckpt_stage_new(st, nm, r->ndim, dims, q->dir, &r->nv[j], err);
		if (ret)
			return ret;
	}
	return 0;
}

/* Second pass: the rows of old shard @j (@e) into the new shards here. */
static void resplit_copy(const struct resplit *r, const struct ent *e, unsigned j)
{
	uint64_t of, oc, nf, nc;

	if (coord_var_partition_rows(r->rows, r->oldk, j, &of, &oc))
		return; /* checked by resplit_plan() */
	for (unsigned k = 0; k < r->newk; k++) {
		uint64_t lo, hi;

		if (!r->nv[k] || coord_var_partition_rows(r->rows, r->newk, k, &nf, &nc))
			continue;
		lo = of > nf ? of : nf;
		hi = of + oc < nf + nc ? of + oc : nf + nc;
		if (lo >= hi)
			continue;
		floats_from_le(r->nv[k]->data + (lo - nf) * r->row_len,
			       e->data + (lo - of) * r->row_len * 4, (hi - lo) * r->row_len);
	}
}

/* First pass over @step's files: every re-split variable's old shards. */
static int resplit_scan(struct coord_varstore *vs, const struct coord_ckpt_prep *q, int dfd,
			uint64_t step, struct resplit *rs, struct coord_ckpt_stage *st,
			struct coord_error *err)
{
	struct ckpt_meta m0 = { 0 };
	uint32_t ntasks = 1;
	int ret = 0;

	for (uint32_t t = 0; t < ntasks && !ret; t++) {
		struct step_file f = { 0 };

		ret = step_file_read(vs, q, dfd, step, t, &m0, &ntasks, &f, err);
		for (uint32_t i = 0; i < f.n && !ret; i++) {
			unsigned j;
			struct resplit *r = resplit_of(rs, q->nresplit, f.ents[i].nm, &j);

			if (r)
				ret = resplit_note(r, &f.ents[i], j, f.path, err);
		}
		step_file_free(&f);
	}
	for (unsigned i = 0; i < q->nresplit && !ret; i++)
		ret = resplit_plan(vs, q, &rs[i], st, err);
	return ret;
}

/*
 * Read and verify every file of @step in @dfd (@dir), stage into @st the
 * variables that place on task q->task of q->nps; a re-split variable's
 * new shards that place here instead of its old ones (resplit_scan() first,
 * then their rows from each old shard as its file is read).  Nothing in
 * @vs changes.
 */
static int prepare_step(struct coord_varstore *vs, const struct coord_ckpt_prep *q, int dfd,
			uint64_t step, struct coord_ckpt_stage *st, struct coord_ckpt_prep_res *res,
			struct coord_error *err)
{
	struct name_set ns = { 0 };
	struct ckpt_meta m0 = { 0 };
	struct resplit *rs = NULL;
	uint32_t ntasks = 1;
	int ret = 0;

	res->nstaged = res->ntotal = 0;
	res->dig_staged = res->dig_total = 0;
	if (q->nresplit) {
		rs = calloc(q->nresplit, sizeof(*rs));
		if (!rs)
			return coord_seterr(err, -ENOMEM, "checkpoint restore: out of memory");
		for (unsigned i = 0; i < q->nresplit; i++)
			rs[i].spec = &q->resplit[i];
		ret = resplit_scan(vs, q, dfd, step, rs, st, err);
	}
	for (uint32_t t = 0; t < ntasks && !ret; t++) {
		struct step_file f = { 0 };

		ret = step_file_read(vs, q, dfd, step, t, &m0, &ntasks, &f, err);
		if (!ret && f.n > SIZE_MAX / 2 - ns.n)
			ret = BAD("checkpoint '%s': too many variables", f.path);
		if (!ret && ns.n + f.n > ns.cap) {
			size_t cap = (ns.n + f.n) * 2;
			void *p = realloc(ns.nm, (cap ? cap : 1) * sizeof(*ns.nm));

			if (!p)
				ret = coord_seterr(err, -ENOMEM,
						   "checkpoint restore: out of memory");
			else
				ns.nm = p, ns.cap = cap;
		}
		for (uint32_t i = 0; i < f.n && !ret; i++) {
			const struct ent *e = &f.ents[i];
			uint64_t h = name_mix(e->nm);
			struct resplit *r;
			unsigned j;

			memcpy(ns.nm[ns.n++], e->nm, sizeof(e->nm));
			res->ntotal++;
			res->dig_total += h;
			r = resplit_of(rs, q->nresplit, e->nm, &j);
			if (r)
				resplit_copy(r, e, j);
			if (r ? !r->credit : coord_var_shard(e->nm, q->nps) != q->task)
				continue;
			if (!r)
				ret = coord_ckpt_stage_add(st, e, f.path, err);
			res->nstaged++;
			res->dig_staged += h;
		}
		step_file_free(&f);
	}
	if (!ret && ns.n > 1) {
		qsort(ns.nm, ns.n, sizeof(*ns.nm), cmp_name);
		for (size_t i = 1; i < ns.n && !ret; i++)
			if (!strcmp(ns.nm[i - 1], ns.nm[i]))
				ret = BAD("checkpoint '%s' step %" PRIu64 ": variable '%s' is in "
					  "two of the ps tasks' files",
					  q->dir, step, ns.nm[i]);
	}
	free(ns.nm);
	free(rs);
	res->old_nps = ntasks;
	res->version = m0.version;
	return ret;
}

/* Drop the stage of @owner (any stage when @owner is NULL). */
static void drop_stage(struct coord_varstore *vs, const void *owner)
{
	struct coord_ckpt_stage *st = NULL;

	pthread_mutex_lock(&vs->names_lock);
	if (vs->stage && (!owner || vs->stage->owner == owner)) {
		st = vs->stage;
		vs->stage = NULL;
	}
	pthread_mutex_unlock(&vs->names_lock);
	coord_ckpt_stage_free(st);
}

/*
 * Complete the prepared stage *@stp (its spares, its order), check it against
 * the store and make it the store's stage, owned by @q's owner: *@stp is NULL
 * then.  0, or < 0 with @err set (*@stp left to the caller).
 */
static int stage_install(struct coord_varstore *vs, struct coord_ckpt_stage **stp,
			 const struct coord_ckpt_prep *q, struct coord_error *err)
{
	struct coord_ckpt_stage *st = *stp;
	int ret = coord_ckpt_stage_spares(st, err);

	if (ret)
		return ret;
	if (st->n) /* an empty checkpoint: no array (qsort wants one) */
		qsort(st->vars, st->n, sizeof(*st->vars), coord_ckpt_cmp_var);
	pthread_mutex_lock(&vs->names_lock);
	ret = coord_ckpt_stage_check_locked(vs, st, q->dir, err);
	if (!ret) {
		st->owner = q->owner;
		st->nonce = q->nonce;
		vs->stage = st;
		*stp = NULL;
	}
	pthread_mutex_unlock(&vs->names_lock);
	return ret;
}

int coord_varstore_prepare(struct coord_varstore *vs, const struct coord_ckpt_prep *q,
			   struct coord_ckpt_prep_res *res, struct coord_error *err)
{
	struct coord_ckpt_stage *st = NULL;
	struct coord_error e1 = { 0 };
	uint64_t *steps = NULL, latest = 0;
	long nsteps = 0;
	bool fallback = q->flags & COORD_CKPT_F_FALLBACK, have_latest = false;
	int dfd, pfd, ret;

	memset(res, 0, sizeof(*res));
	if (!vs || q->nps == 0 || q->task >= q->nps || q->nps > MAX_PS_TASKS)
		return coord_seterr(err, -EINVAL, "checkpoint restore: task %u of %u ps tasks",
				    q->task, q->nps);
	pthread_mutex_lock(&vs->save_lock); /* one build at a time: bounded memory */
	drop_stage(vs, NULL);		    /* a new PREPARE drops any stage */
	ret = coord_ckpt_open_beneath(vs, q->dir, &dfd, err);
	if (ret)
		goto out_unlock;
	/* The candidates: the step asked for, or ps-0's latest, then (with
	 * FALLBACK) every older step in ps-0, newest first. */
	if (q->step != COORD_CKPT_STEP_LATEST) {
		latest = q->step;
		have_latest = true;
		fallback = false;
	} else {
		ret = coord_ckpt_open_task_dir(vs, dfd, 0, false, &pfd, err, q->dir);
		if (ret == -ENOENT)
			coord_seterr(err, ret, "no checkpoint in '%s' (no ps-0 directory)", q->dir);
		if (ret)
			goto out;
		ret = coord_ckpt_read_latest(pfd, q->dir, vs->ckpt_root != NULL, &latest, &e1);
		have_latest = ret == 0;
		if (ret && (!fallback || (ret != -EBADMSG && ret != -ENOENT))) {
			if (err)
				*err = e1;
			close(pfd);
			goto out;
		}
		if (fallback) {
			nsteps = coord_ckpt_list_steps(pfd, q->dir, &steps);
			if (nsteps < 0)
				nsteps = 0;
		}
		close(pfd);
		if (!have_latest)
			snprintf(res->why, sizeof(res->why), "%s", e1.msg);
	}
	res->latest = have_latest ? latest : COORD_CKPT_STEP_LATEST;
	ret = -ENOENT;
	coord_seterr(err, ret, "no intact checkpoint in '%s'%s%s", q->dir, res->why[0] ? ": " : "",
		     res->why);
	/* Bounded: one pass per candidate (the latest, then nsteps). */
	for (long i = have_latest ? -1 : 0; i < nsteps; i++) {
		uint64_t s = i < 0 ? latest : steps[i];
		struct coord_error e = { 0 };

		if (i >= 0 && have_latest && s >= latest)
			continue;
		coord_ckpt_stage_free(st);
		st = calloc(1, sizeof(*st));
		if (!st) {
			ret = coord_seterr(err, -ENOMEM, "checkpoint restore: out of memory");
			break;
		}
		ret = prepare_step(vs, q, dfd, s, st, res, &e);
		if (ret == 0) {
			res->step = s;
			break;
		}
		if (err)
			*err = e;
		if (!res->why[0])
			snprintf(res->why, sizeof(res->why), "step %" PRIu64 ": %.200s", s, e.msg);
		if (!fallback || (ret != -EBADMSG && ret != -ENOENT))
			break;
	}
	if (ret && fallback && (ret == -EBADMSG || ret == -ENOENT))
		coord_seterr(err, ret, "no intact checkpoint in '%s' (%ld older tried); newest: %s",
			     q->dir, nsteps, res->why);
	if (!ret)
		ret = stage_install(vs, &st, q, err);
out:
	close(dfd);
out_unlock:
	pthread_mutex_unlock(&vs->save_lock);
	coord_ckpt_stage_free(st);
	free(steps);
	return ret;
}

int coord_varstore_commit(struct coord_varstore *vs, const void *owner, uint32_t nonce,
			  uint32_t *count, struct coord_error *err)
{
	struct coord_ckpt_stage *st;

	pthread_mutex_lock(&vs->names_lock);
	st = vs->stage;
	if (!st || st->owner != owner || st->nonce != nonce) {
		pthread_mutex_unlock(&vs->names_lock);
		return coord_seterr(err, -ESTALE,
				    "checkpoint restore: nothing prepared by this session to "
				    "commit (its connection was lost, or a newer restore replaced "
				    "it)");
	}
	if (count)
		*count = st->n;
	coord_ckpt_stage_commit_locked(vs, st);
	vs->stage = NULL;
	pthread_mutex_unlock(&vs->names_lock);
	coord_ckpt_stage_free(st);
	return 0;
}

void coord_varstore_abort(struct coord_varstore *vs, const void *owner)
{
	if (vs)
		drop_stage(vs, owner);
}
