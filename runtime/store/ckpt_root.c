// SPDX-License-Identifier: MIT
/*
 * runtime/store/ckpt_root.c - where checkpoint files are opened: the
 * directory a request names, beneath a coord-ps's checkpoint root, and its
 * ps-<task> directories.
 *
 * Reach: a coord-ps has a checkpoint root (coord_varstore_set_ckpt_root()):
 * DIR is opened beneath it with openat2(RESOLVE_BENEATH |
 * RESOLVE_NO_MAGICLINKS) and every file below DIR is opened with *at()
 * calls by single names, without following symbolic links.  In-process ps
 * stores have no root: DIR is the caller's path.
 *
 * At start (coord_varstore_set_ckpt_root() with a task) the temp files of
 * interrupted saves are removed from every ps-<task> directory under the
 * root, within a bounded walk.
 *
 * Synchronization: none but a once-only warning flag (a relaxed exchange).
 */
#include <dirent.h>
#include <fcntl.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "runtime/store/ckpt_pvt.h"

int coord_ckpt_open_sub(int dfd, const char *name, int flags, bool nofollow)
{
	return openat(dfd, name, flags | O_CLOEXEC | (nofollow ? O_NOFOLLOW : 0));
}

/* --- the checkpoint root of a coord-ps ----------------------------------------- */

/* Walk at most this deep and this many entries under a root at start. */
#define SWEEP_MAX_DEPTH 8
#define SWEEP_MAX_ENTRIES 100000u

static int refuse_escape(const struct coord_varstore *vs, const char *dir, struct coord_error *err)
{
	coord_log(COORD_LOG_WARN,
		  "refused checkpoint dir '%s': it escapes the checkpoint root '%s'", dir,
		  vs->ckpt_root);
	return coord_seterr(err, -EACCES,
			    "checkpoint dir '%s' escapes this ps's checkpoint root '%s' (.., a "
			    "symbolic link or an absolute path elsewhere): refused",
			    dir, vs->ckpt_root);
}

/* Under the root without openat2 (Linux < 5.6): a realpath prefix check. */
static int open_beneath_compat(struct coord_varstore *vs, const char *dir, const char *rel,
			       int *dfd, struct coord_error *err)
{
	/* Relaxed: a flag for one log line; orders nothing. */
	static _Atomic int warned;
	char full[8300], real[PATH_MAX];
	size_t rl = strlen(vs->ckpt_root);
	int ret;

	/* Relaxed: as above; only one thread logs. */
	if (!atomic_exchange_explicit(&warned, 1, memory_order_relaxed))
		coord_log(COORD_LOG_WARN, "openat2() is not available (Linux < 5.6): checkpoint "
					  "dirs are checked against the root with realpath(), "
					  "which a concurrent rename can race");
	snprintf(full, sizeof(full), "%s/%s", vs->ckpt_root, rel);
	if (!realpath(full, real)) {
		ret = -errno;
		return coord_seterr(err, ret, "checkpoint dir '%s': %s", dir, coord_strerror(ret));
	}
	if (strcmp(vs->ckpt_root, "/") &&
	    (strncmp(real, vs->ckpt_root, rl) || (real[rl] != '/' && real[rl] != '\0')))
		return refuse_escape(vs, dir, err);
	*dfd = open(real, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (*dfd < 0) {
		ret = -errno;
		return coord_seterr(err, ret, "checkpoint dir '%s': %s", dir, coord_strerror(ret));
	}
	return 0;
}

/*
 * Open the checkpoint directory @dir as a request names it: as given when
 * @vs has no root (in-process ps tasks: the caller's own paths), else
 * beneath the root only (openat2 RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS;
 * an absolute @dir is accepted when it lies under the root's real path).
 */
int coord_ckpt_open_beneath(struct coord_varstore *vs, const char *dir, int *dfd,
			    struct coord_error *err)
{
	struct open_how how = { .flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC,
				.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS };
	const char *rel = dir;
	int ret;

	if (!vs->ckpt_root)
		return coord_ckpt_open_dir(dir, dfd, err);
	if (!dir || !*dir)
		return coord_seterr(err, -EINVAL, "checkpoint dir is NULL or empty");
	if (dir[0] == '/') {
		size_t rl = strlen(vs->ckpt_root);

		if (rl == 1)
			rel = dir + 1;
		else if (!strncmp(dir, vs->ckpt_root, rl) && (dir[rl] == '/' || !dir[rl]))
			rel = dir + rl;
		else
			return refuse_escape(vs, dir, err);
		/* Bounded by the string's length. */
		while (*rel == '/')
			rel++;
		if (!*rel)
			rel = ".";
	}
	*dfd = (int)syscall(SYS_openat2, vs->ckpt_root_fd, rel, &how, sizeof(how));
	if (*dfd >= 0)
		return 0;
	ret = -errno;
	if (ret == -ENOSYS)
		return open_beneath_compat(vs, dir, rel, dfd, err);
	if (ret == -EXDEV || ret == -ELOOP)
		return refuse_escape(vs, dir, err);
	return coord_seterr(err, ret, "checkpoint dir '%s' (under the root '%s'): %s", dir,
			    vs->ckpt_root, coord_strerror(ret));
}

/* Remove temp files in every ps-<@task> directory under @dfd, bounded. */
static void sweep(int dfd, const char *psname, unsigned depth, unsigned *budget)
{
	struct dirent *de;
	DIR *d = coord_ckpt_list_dir(dfd);

	if (!d)
		return;
	for (; *budget && (de = readdir(d)); (*budget)--) {
		int sub;

		if (de->d_type != DT_DIR && de->d_type != DT_UNKNOWN)
			continue;
		if (!strcmp(de->d_name, ".") || !strcmp(de->d_name, ".."))
			continue;
		if (strcmp(de->d_name, psname) && depth >= SWEEP_MAX_DEPTH)
			continue;
		sub = coord_ckpt_open_sub(dfd, de->d_name, O_RDONLY | O_DIRECTORY, true);
		if (sub < 0)
			continue;
		if (!strcmp(de->d_name, psname))
			coord_ckpt_clean_tmp(sub, de->d_name);
		else
			sweep(sub, psname, depth + 1, budget);
		close(sub);
	}
	closedir(d);
}

int coord_varstore_set_ckpt_root(struct coord_varstore *vs, const char *root, int task,
				 struct coord_error *err)
{
	char real[PATH_MAX], psname[32];
	unsigned budget = SWEEP_MAX_ENTRIES;
	int fd, ret;

	if (!vs || !root || !*root)
		return coord_seterr(err, -EINVAL, "checkpoint root: NULL or empty");
	fd = open(root, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (fd < 0 || !realpath(root, real)) {
		ret = -errno;
		if (fd >= 0)
			close(fd);
		return coord_seterr(err, ret, "checkpoint root '%s': %s", root,
				    coord_strerror(ret));
	}
	free(vs->ckpt_root);
	if (vs->ckpt_root)
		close(vs->ckpt_root_fd);
	vs->ckpt_root = strdup(real);
	if (!vs->ckpt_root) {
		close(fd);
		return coord_seterr(err, -ENOMEM, "checkpoint root: out of memory");
	}
	vs->ckpt_root_fd = fd;
	coord_log(COORD_LOG_INFO, "checkpoints only beneath '%s'", real);
	if (task >= 0) {
		snprintf(psname, sizeof(psname), "ps-%d", task);
		sweep(fd, psname, 0, &budget);
		if (!budget)
			coord_log(COORD_LOG_WARN,
				  "checkpoint root '%s': stopped looking for temp files after "
				  "%u entries",
				  real, SWEEP_MAX_ENTRIES);
	}
	return 0;
}

void coord_ckpt_fini(struct coord_varstore *vs)
{
	coord_ckpt_stage_free(vs->stage);
	vs->stage = NULL;
	if (vs->ckpt_root)
		close(vs->ckpt_root_fd);
	free(vs->ckpt_root);
	vs->ckpt_root = NULL;
}

/* --- the directory of one ps task: DIR/ps-<task> -------------------------------- */

int coord_ckpt_open_task_dir(struct coord_varstore *vs, int dfd, unsigned task, bool make, int *pfd,
			     struct coord_error *err, const char *dir)
{
	char name[32];
	int ret;

	snprintf(name, sizeof(name), "ps-%u", task);
	if (make && mkdirat(dfd, name, 0755) < 0 && errno != EEXIST) {
		ret = -errno;
		return coord_seterr(err, ret, "checkpoint: mkdir %s/%s: %s", dir, name,
				    coord_strerror(ret));
	}
	*pfd = coord_ckpt_open_sub(dfd, name, O_RDONLY | O_DIRECTORY, vs->ckpt_root != NULL);
	if (*pfd < 0) {
		ret = -errno;
		if (ret == -ELOOP || ret == -ENOTDIR)
			return coord_seterr(err, -EACCES,
					    "checkpoint: %s/%s is not a directory (a symbolic link "
					    "is refused under a checkpoint root)",
					    dir, name);
		return coord_seterr(err, ret, "checkpoint: %s/%s: %s", dir, name,
				    coord_strerror(ret));
	}
	return 0;
}
