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
 * Restoring across layouts (prepare, commit, abort) and re-splitting
 * partitioned variables are in ckpt_prepare.c, over this file's stage and
 * file readers (ckpt_pvt.h).
 *
 * Synchronization: as checkpoint.c: the store's locks (varstore.c V3) and
 * varstore.h's table; the stage (vs->stage) under names_lock.
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

int coord_ckpt_cmp_var(const void *a, const void *b)
{
	return strcmp((*(struct coord_var *const *)a)->name, (*(struct coord_var *const *)b)->name);
}

/* Add a new variable @name of shape @ndim, @dims to @st (*@vp; its values
 * are the caller's to fill). */
int coord_ckpt_stage_new(struct coord_ckpt_stage *st, const char *name, unsigned ndim,
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
int coord_ckpt_stage_add(struct coord_ckpt_stage *st, const struct ent *e, const char *path,
			 struct coord_error *err)
{
	struct coord_var *v;
	int ret = coord_ckpt_stage_new(st, e->nm, e->ndim, e->dims, path, &v, err);

	if (!ret)
		floats_from_le(v->data, e->data, e->nelem);
	return ret;
}

/* The chunk arrays @st's ids may need: n ids span at most n / CHUNK + 2. */
int coord_ckpt_stage_spares(struct coord_ckpt_stage *st, struct coord_error *err)
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
int coord_ckpt_stage_check_locked(struct coord_varstore *vs, const struct coord_ckpt_stage *st,
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
 * (same shape: coord_ckpt_stage_check_locked(), and coord_ckpt_create_check_locked()
 * keeps a create from changing that), publish the staged one otherwise.
 * Cannot fail.  Caller holds names_lock; @st is emptied (not freed).
 */
void coord_ckpt_stage_commit_locked(struct coord_varstore *vs, struct coord_ckpt_stage *st)
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
	hit = bsearch(&kp, st->vars, st->n, sizeof(*st->vars), coord_ckpt_cmp_var);
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
int coord_ckpt_read_file(struct coord_varstore *vs, int dfd, const char *name, const char *path,
			 bool nofollow, unsigned char **bufp, uint64_t *sizep,
			 struct coord_error *err)
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
int coord_ckpt_read_latest(int dfd, const char *dir, bool nofollow, uint64_t *stepp,
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
	ret = coord_ckpt_read_file(vs, dfd, name, path, nofollow, &buf, &size, err);
	if (!ret)
		ret = coord_ckpt_parse(buf, size, step, path, &ents, &n, &meta, err);
	for (uint32_t i = 0; i < n && !ret; i++)
		ret = coord_ckpt_stage_add(st, &ents[i], path, err);
	free(ents);
	free(buf);
	if (!ret)
		ret = coord_ckpt_stage_spares(st, err);
	if (!ret) {
		pthread_mutex_lock(&vs->names_lock);
		ret = coord_ckpt_stage_check_locked(vs, st, path, err);
		if (!ret)
			coord_ckpt_stage_commit_locked(vs, st);
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
	int ret = coord_ckpt_read_latest(dfd, dir, nofollow, &step, err);

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
