// SPDX-License-Identifier: MIT
/*
 * runtime/store/ckpt_restore.c - restoring a variable store from checkpoint
 * files: read them (checkpoint.c parses them), stage their variables, commit
 * the stage whole.
 *
 * A file is read whole and parsed (verified) before the store is touched.
 * Its variables are then built as new unpublished variables (a stage),
 * checked against the store (same shape or absent), and committed under the
 * name lock: live ones overwritten, the others published, with nothing left
 * to fail.
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

/* --- staging: a restore built unpublished, then committed whole --------------- */

/*
 * A restore being built or prepared: every variable it will set, as new
 * unpublished variables holding the checkpoint's values (sorted by name
 * once installed), and the chunk arrays their ids may need, so that
 * committing allocates nothing and cannot fail.  A store holds at most one
 * prepared stage (vs->stage, under names_lock), owned by the session that
 * prepared it (a connection, or the in-process coordinator).
 */
struct coord_ckpt_stage {
	const void *owner;
	uint32_t nonce;
	uint32_t n, cap;
	struct coord_var **vars;
	unsigned nspare;
	struct coord_var ***spare;
};

void coord_ckpt_stage_free(struct coord_ckpt_stage *st)
{
	if (!st)
		return;
	for (uint32_t i = 0; i < st->n; i++)
		coord_vs_var_free(st->vars[i]);
	free(st->vars);
	for (unsigned i = 0; i < st->nspare; i++)
		free(st->spare[i]);
	free(st->spare);
	free(st);
}

static int cmp_var(const void *a, const void *b)
{
	return strcmp((*(struct coord_var *const *)a)->name, (*(struct coord_var *const *)b)->name);
}

/* Add a new variable @name of shape @ndim, @dims to @st (*@vp; its values
 * are the caller's to fill). */
static int stage_new(struct coord_ckpt_stage *st, const char *name, unsigned ndim,
		     const uint64_t *dims, const char *path, struct coord_var **vp,
		     struct coord_error *err)
{
	int ret;

	if (st->n == st->cap) {
		uint32_t cap = st->cap ? st->cap * 2 : 16;
		struct coord_var **nv = realloc(st->vars, cap * sizeof(*nv));

		if (!nv)
			return coord_seterr(err, -ENOMEM, "checkpoint '%s': out of memory", path);
		st->vars = nv;
		st->cap = cap;
	}
	ret = coord_vs_var_alloc(name, ndim, dims, vp, err);
	if (ret)
		return ret;
	st->vars[st->n++] = *vp;
	return 0;
}

/* Add a copy of @e (verified) to @st. */
static int stage_add(struct coord_ckpt_stage *st, const struct ent *e, const char *path,
		     struct coord_error *err)
{
	struct coord_var *v;
	int ret = stage_new(st, e->nm, e->ndim, e->dims, path, &v, err);

	if (!ret)
		floats_from_le(v->data, e->data, e->nelem);
	return ret;
}

/* The chunk arrays @st's ids may need: n ids span at most n / CHUNK + 2. */
static int stage_spares(struct coord_ckpt_stage *st, struct coord_error *err)
{
	unsigned need = st->n ? st->n / COORD_VS_CHUNK + 2 : 0;

	st->spare = calloc(need ? need : 1, sizeof(*st->spare));
	if (!st->spare)
		return coord_seterr(err, -ENOMEM, "checkpoint restore: out of memory");
	for (; st->nspare < need; st->nspare++) {
		st->spare[st->nspare] = calloc(COORD_VS_CHUNK, sizeof(**st->spare));
		if (!st->spare[st->nspare])
			return coord_seterr(err, -ENOMEM, "checkpoint restore: out of memory");
	}
	return 0;
}

/*
 * Can @st be committed to @vs: each variable absent or of the same shape,
 * room for all of them as new ids?  Caller holds names_lock.
 */
static int stage_check_locked(struct coord_varstore *vs, const struct coord_ckpt_stage *st,
			      const char *what, struct coord_error *err)
{
	/* Relaxed: names_lock is held and nvars is stored only under it. */
	uint32_t nvars = atomic_load_explicit(&vs->nvars, memory_order_relaxed);

	for (uint32_t i = 0; i < st->n; i++) {
		struct coord_var *v = st->vars[i], *old = coord_vs_find_locked(vs, v->name);

		if (old && !coord_vs_same_shape(old, v->ndim, v->dims)) {
			char have[96], want[96];

			coord_vs_fmt_shape(have, sizeof(have), old->ndim, old->dims);
			coord_vs_fmt_shape(want, sizeof(want), v->ndim, v->dims);
			return coord_seterr(err, -EEXIST,
					    "checkpoint '%s': variable '%s' has shape %s in the "
					    "checkpoint, %s in the store",
					    what, v->name, want, have);
		}
	}
	/* All of them, not only the absent ones: one may be deleted before
	 * the commit and need a new id then. */
	if (st->n > COORD_VAR_MAX_VARS - nvars)
		return coord_seterr(err, -ENOSPC,
				    "checkpoint '%s': %" PRIu32
				    " variables do not fit in the store",
				    what, st->n);
	return 0;
}

/*
 * Set every variable of @st in @vs: overwrite a live one of the same name
 * (same shape: stage_check_locked(), and coord_ckpt_create_check_locked()
 * keeps a create from changing that), publish the staged one otherwise.
 * Cannot fail.  Caller holds names_lock; @st is emptied (not freed).
 */
static void stage_commit_locked(struct coord_varstore *vs, struct coord_ckpt_stage *st)
{
	for (uint32_t i = 0; i < st->n; i++) {
		struct coord_var *v = st->vars[i], *old = coord_vs_find_locked(vs, v->name);

		if (old) {
			if (!coord_vs_same_shape(old, v->ndim, v->dims))
				coord_die("checkpoint restore: a shape changed after its checks",
					  EEXIST);
			coord_vs_lock(old, 0, old->nstripes - 1);
			coord_vs_write_begin(old); /* varstore.c SNAP1 */
			memcpy(old->data, v->data, v->nelem * sizeof(float));
			coord_vs_write_end(old);
			coord_vs_unlock(old, 0, old->nstripes - 1);
			coord_vs_var_free(v);
		} else {
			/* Relaxed: names_lock is held; nvars is stored only under it. */
			uint32_t id = atomic_load_explicit(&vs->nvars, memory_order_relaxed);
			unsigned c = id >> COORD_VS_CHUNK_SHIFT;

			if (!vs->chunks[c] && st->nspare)
				vs->chunks[c] = st->spare[--st->nspare];
			if (coord_vs_publish_locked(vs, v, NULL))
				coord_die("checkpoint restore: publish failed after its checks",
					  EIO);
		}
		st->vars[i] = NULL;
	}
	st->n = 0;
}

int coord_ckpt_create_check_locked(struct coord_varstore *vs, const char *name, unsigned ndim,
				   const uint64_t *dims, struct coord_error *err)
{
	struct coord_ckpt_stage *st = vs->stage;
	struct coord_var key, *kp = &key, **hit;
	/* Relaxed: names_lock is held and nvars is stored only under it. */
	uint32_t nvars = atomic_load_explicit(&vs->nvars, memory_order_relaxed);

	if (!st)
		return 0;
	if (st->n >= COORD_VAR_MAX_VARS - nvars)
		return coord_seterr(err, -ENOSPC,
				    "variable '%s': the store's last ids are held for a checkpoint "
				    "restore being prepared",
				    name);
	snprintf(key.name, sizeof(key.name), "%s", name);
	hit = bsearch(&kp, st->vars, st->n, sizeof(*st->vars), cmp_var);
	if (hit && !coord_vs_same_shape(*hit, ndim, dims)) {
		char have[96], want[96];

		coord_vs_fmt_shape(have, sizeof(have), (*hit)->ndim, (*hit)->dims);
		coord_vs_fmt_shape(want, sizeof(want), ndim, dims);
		return coord_seterr(err, -EEXIST,
				    "variable '%s': a checkpoint restore being prepared holds it "
				    "with shape %s, asked for %s",
				    name, have, want);
	}
	return 0;
}

/* --- reading files ------------------------------------------------------------ */

static int read_all(int fd, void *p, size_t len)
{
	char *b = p;
	unsigned eintr = 0;

	while (len) {
		ssize_t r = read(fd, b, len);

		if (r < 0) {
			if (errno == EINTR && ++eintr < IO_MAX_EINTR)
				continue;
			return -errno;
		}
		if (r == 0)
			return -ENODATA; /* shorter than expected */
		b += r;
		len -= (size_t)r;
	}
	return 0;
}

/* Read @dfd/@name (@path in messages) whole into *@bufp (caller frees). */
static int read_file(struct coord_varstore *vs, int dfd, const char *name, const char *path,
		     bool nofollow, unsigned char **bufp, uint64_t *sizep, struct coord_error *err)
{
	unsigned char *buf = NULL;
	struct stat st;
	uint64_t limit;
	int fd, ret;

	fd = coord_ckpt_open_sub(dfd, name, O_RDONLY, nofollow);
	if (fd < 0) {
		ret = -errno;
		return coord_seterr(
			err, ret == -ELOOP ? -EBADMSG : ret, "checkpoint '%s': open: %s", path,
			ret == -ELOOP ? "a symbolic link (refused)" : coord_strerror(ret));
	}
	if (fstat(fd, &st)) {
		ret = -errno;
		coord_seterr(err, ret, "checkpoint '%s': stat: %s", path, coord_strerror(ret));
		goto out;
	}
	if (!S_ISREG(st.st_mode)) {
		ret = coord_seterr(err, -EBADMSG, "checkpoint '%s': not a regular file", path);
		goto out;
	}
	limit = vs->opts.max_ckpt_bytes ? vs->opts.max_ckpt_bytes : SIZE_MAX / 2;
	if ((uint64_t)st.st_size > limit) {
		ret = coord_seterr(err, -EFBIG,
				   "checkpoint '%s': %lld bytes, over the limit of %" PRIu64, path,
				   (long long)st.st_size, limit);
		goto out;
	}
	buf = malloc(st.st_size ? (size_t)st.st_size : 1);
	if (!buf) {
		ret = coord_seterr(err, -ENOMEM, "checkpoint '%s': no memory for %lld bytes", path,
				   (long long)st.st_size);
		goto out;
	}
	ret = read_all(fd, buf, (size_t)st.st_size);
	if (ret == -ENODATA)
		ret = coord_seterr(err, -EBADMSG, "checkpoint '%s': shrank while being read", path);
	else if (ret)
		coord_seterr(err, ret, "checkpoint '%s': read: %s", path, coord_strerror(ret));
out:
	close(fd);
	if (ret) {
		free(buf);
		return ret;
	}
	*bufp = buf;
	*sizep = (uint64_t)st.st_size;
	return 0;
}

/* The step @dfd/latest names. */
static int read_latest(int dfd, const char *dir, bool nofollow, uint64_t *stepp,
		       struct coord_error *err)
{
	char line[64];
	ssize_t r = -1;
	size_t len;
	int fd, ret;

	fd = coord_ckpt_open_sub(dfd, "latest", O_RDONLY, nofollow);
	if (fd < 0) {
		ret = -errno;
		if (ret == -ENOENT)
			return coord_seterr(err, ret, "no checkpoint in '%s' (no 'latest' file)",
					    dir);
		return coord_seterr(err, ret, "checkpoint '%s/latest': open: %s", dir,
				    coord_strerror(ret));
	}
	/* The file is small and was written whole (rename): one read, retried
	 * only on EINTR, a bounded number of times. */
	for (unsigned i = 0; i < IO_MAX_EINTR; i++) {
		r = read(fd, line, sizeof(line) - 1);
		if (r >= 0 || errno != EINTR)
			break;
	}
	ret = -errno;
	close(fd);
	if (r < 0)
		return coord_seterr(err, ret, "checkpoint '%s/latest': read: %s", dir,
				    coord_strerror(ret));
	len = (size_t)r;
	line[len] = '\0';
	if (len && line[len - 1] == '\n')
		len--;
	if (!coord_ckpt_parse_name(line, len, stepp))
		return coord_seterr(err, -EBADMSG,
				    "checkpoint '%s/latest': does not name a checkpoint file", dir);
	return 0;
}

/* --- restoring one store from one directory ----------------------------------- */

static int load(struct coord_varstore *vs, int dfd, const char *dir, uint64_t step, bool nofollow,
		struct coord_error *err)
{
	char name[48], path[4200];
	struct coord_ckpt_stage *st = calloc(1, sizeof(*st));
	unsigned char *buf = NULL;
	struct ent *ents = NULL;
	struct ckpt_meta meta;
	uint64_t size;
	uint32_t n = 0;
	int ret;

	if (!st)
		return coord_seterr(err, -ENOMEM, "checkpoint restore: out of memory");
	coord_ckpt_name(name, sizeof(name), step);
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	ret = read_file(vs, dfd, name, path, nofollow, &buf, &size, err);
	if (!ret)
		ret = coord_ckpt_parse(buf, size, step, path, &ents, &n, &meta, err);
	for (uint32_t i = 0; i < n && !ret; i++)
		ret = stage_add(st, &ents[i], path, err);
	free(ents);
	free(buf);
	if (!ret)
		ret = stage_spares(st, err);
	if (!ret) {
		pthread_mutex_lock(&vs->names_lock);
		ret = stage_check_locked(vs, st, path, err);
		if (!ret)
			stage_commit_locked(vs, st);
		pthread_mutex_unlock(&vs->names_lock);
	}
	coord_ckpt_stage_free(st);
	return ret;
}

int coord_varstore_restore_step(struct coord_varstore *vs, const char *dir, uint64_t step,
				struct coord_error *err)
{
	int dfd = -1, ret; /* coord_ckpt_open_dir() sets it; -1 for a false maybe-uninitialized */

	if (!vs)
		return coord_seterr(err, -EINVAL, "checkpoint restore: NULL store");
	ret = coord_ckpt_open_dir(dir, &dfd, err);
	if (ret)
		return ret;
	ret = load(vs, dfd, dir, step, false, err);
	close(dfd);
	return ret;
}

/* Restore the latest checkpoint of @dfd (@dir in messages). */
static int restore_latest(struct coord_varstore *vs, int dfd, const char *dir, bool nofollow,
			  uint64_t *stepp, struct coord_error *err)
{
	uint64_t step;
	int ret = read_latest(dfd, dir, nofollow, &step, err);

	if (!ret)
		ret = load(vs, dfd, dir, step, nofollow, err);
	if (!ret && stepp)
		*stepp = step;
	return ret;
}

int coord_varstore_restore(struct coord_varstore *vs, const char *dir, uint64_t *stepp,
			   struct coord_error *err)
{
	int dfd, ret;

	if (!vs)
		return coord_seterr(err, -EINVAL, "checkpoint restore: NULL store");
	ret = coord_ckpt_open_dir(dir, &dfd, err);
	if (ret)
		return ret;
	ret = restore_latest(vs, dfd, dir, false, stepp, err);
	close(dfd);
	return ret;
}

int coord_varstore_restore_task(struct coord_varstore *vs, const char *dir, unsigned task,
				uint64_t *step, struct coord_error *err)
{
	char path[4200];
	int dfd, pfd, ret;

	if (!vs)
		return coord_seterr(err, -EINVAL, "checkpoint restore: NULL store");
	ret = coord_ckpt_open_beneath(vs, dir, &dfd, err);
	if (ret)
		return ret;
	ret = coord_ckpt_open_task_dir(vs, dfd, task, false, &pfd, err, dir);
	close(dfd);
	if (ret)
		return ret;
	snprintf(path, sizeof(path), "%s/ps-%u", dir, task);
	ret = restore_latest(vs, pfd, path, vs->ckpt_root != NULL, step, err);
	close(pfd);
	return ret;
}

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
		ret = read_file(vs, pfd, name, f->path, nofollow, &f->buf, &size, err);
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
		ret = stage_new(st, nm, r->ndim, dims, q->dir, &r->nv[j], err);
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
				ret = stage_add(st, e, f.path, err);
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
	int ret = stage_spares(st, err);

	if (ret)
		return ret;
	if (st->n) /* an empty checkpoint: no array (qsort wants one) */
		qsort(st->vars, st->n, sizeof(*st->vars), cmp_var);
	pthread_mutex_lock(&vs->names_lock);
	ret = stage_check_locked(vs, st, q->dir, err);
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
		ret = read_latest(pfd, q->dir, vs->ckpt_root != NULL, &latest, &e1);
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
	stage_commit_locked(vs, st);
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
