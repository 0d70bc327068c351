// SPDX-License-Identifier: MIT
/*
 * runtime/store/checkpoint.c - the checkpoint file format: its save (crash-safe)
 * and its parse (verified).  See varstore.h for the API, varstore.c for the
 * locking.  ckpt_restore.c stages what a parse returns and commits it
 * (restore, prepare/commit/abort); ckpt_root.c opens the directories, beneath
 * a coord-ps's checkpoint root; ckpt_pvt.h is what the three share.
 *
 * File DIR/ckpt-<step>.coord, every integer little-endian:
 *
 *   offset  size  field
 *   0       8     magic "COORDCKP"
 *   8       4     version (COORD_CKPT_VERSION, 2; version 1 is still read)
 *   12      4     flags, 0 (a reader refuses other values)
 *   16      8     step (must match the file name)
 *   24      4     variable count
 *   28      4     reserved, 0
 *   32      8     total file size in bytes, trailer included
 *   40      4     task: the ps task that wrote it (version 2 only)
 *   44      4     ps task count of the cluster that wrote it, > task (v2 only)
 *   48      ...   per variable (at 40 in version 1):
 *                   4        name length L (1..63)
 *                   L        name, [A-Za-z0-9_./-], no NUL
 *                   4        ndim (0..4)
 *                   8*ndim   dims
 *                   4*nelem  float32 data, row-major
 *   size-4  4     CRC-32C (Castagnoli) of bytes [0, size - 4)
 *
 * Every variable of a file lived on the file's task.  A version 1 file does
 * not record the layout: its count is the number of ps-<t> directories that
 * hold that step, and its task is its directory's.
 *
 * DIR/latest holds one line, "ckpt-<step>.coord\n".
 *
 * Crash safety (save): each file is written as DIR/.<name>.tmp.<pid>.<n>,
 * fsync'd, renamed over its final name, and then DIR is fsync'd so the
 * rename itself is durable.  The checkpoint is renamed before latest is
 * written, so latest only ever names a whole file.  A crash leaves at most
 * a stray temp file, which restore never opens (it opens only the name
 * latest gives, or the step asked for), and which the next save into that
 * directory removes, as coord-ps does at start in every ps-<task> directory
 * beneath its root.
 *
 * CK-T1  A temp file is locked (flock, exclusive) by its writer from before
 *        it has a name until after its rename: it is made unnamed
 *        (O_TMPFILE), locked, written, then linked under its temp name
 *        (tmp_create(), tmp_name()).  A cleaner removes a temp file only
 *        while it holds that lock itself (LOCK_NB), so a save that is alive,
 *        in this process or another sharing the directory or the root (two
 *        clusters under /tmp), is never removed from under its writer; a
 *        killed writer's lock died with it.  Where O_TMPFILE is refused (a
 *        file system without it), the file is made by name (O_EXCL) and
 *        locked at once: a cleaner can then take one between the two calls,
 *        and that save fails with a clear error rather than tearing data.
 *
 * Verification (restore, coord_ckpt_parse()): a file is read whole into
 * memory and checked before the store is touched: size against
 * opts.max_ckpt_bytes, magic, version, flags, step, the header's size against
 * the real size (so a truncated file is reported as truncated), the CRC, then
 * every length against the bytes that remain, names, shapes, duplicates.
 * What it returns is staged and committed by ckpt_restore.c.
 *
 * Synchronization: the store's locks (varstore.c V3: save_lock, then
 * names_lock, then stripes) and varstore.h's table of what may run together.
 */
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/store/ckpt_pvt.h"

#define WBUF_BYTES (1u << 20)

/* --- CRC-32C ---------------------------------------------------------------- */

static uint32_t crc_table[256];
static pthread_once_t crc_once = PTHREAD_ONCE_INIT;

static void crc_init(void)
{
	for (uint32_t i = 0; i < 256; i++) {
		uint32_t c = i;

		for (int k = 0; k < 8; k++)
			c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1)));
		crc_table[i] = c;
	}
}

#if defined(__x86_64__)
__attribute__((target("sse4.2"))) static uint32_t crc_hw(uint32_t c, const unsigned char *b,
							 size_t len)
{
	uint64_t c64 = c;

	for (; len >= 8; len -= 8, b += 8) {
		uint64_t w;

		memcpy(&w, b, 8);
		c64 = __builtin_ia32_crc32di(c64, w);
	}
	c = (uint32_t)c64;
	for (; len; len--, b++)
		c = __builtin_ia32_crc32qi(c, *b);
	return c;
}
#endif

uint32_t coord_crc32c_sw(uint32_t crc, const void *p, size_t len)
{
	const unsigned char *b = p;
	uint32_t c = ~crc;

	pthread_once(&crc_once, crc_init);
	for (size_t i = 0; i < len; i++)
		c = crc_table[(c ^ b[i]) & 0xff] ^ (c >> 8);
	return ~c;
}

uint32_t coord_crc32c(uint32_t crc, const void *p, size_t len)
{
#if defined(__x86_64__)
	if (__builtin_cpu_supports("sse4.2"))
		return ~crc_hw(~crc, p, len);
#endif
	return coord_crc32c_sw(crc, p, len);
}

/* --- file helpers ------------------------------------------------------------ */

static int write_all(int fd, const void *p, size_t len)
{
	const char *b = p;
	unsigned eintr = 0;

	/* Bounded: each pass writes >= 1 byte, or is one of IO_MAX_EINTR retries. */
	while (len) {
		ssize_t r = write(fd, b, len);

		if (r < 0) {
			if (errno == EINTR && ++eintr < IO_MAX_EINTR)
				continue;
			return -errno;
		}
		if (r == 0)
			return -EIO;
		b += r;
		len -= (size_t)r;
	}
	return 0;
}

/* A buffered writer that keeps the running CRC. */
struct wbuf {
	int fd;
	uint32_t crc;
	size_t len;
	uint64_t total;
	unsigned char *buf; /* WBUF_BYTES */
};

static int wb_flush(struct wbuf *w)
{
	int ret;

	if (!w->len)
		return 0;
	w->crc = coord_crc32c(w->crc, w->buf, w->len);
	ret = write_all(w->fd, w->buf, w->len);
	w->total += w->len;
	w->len = 0;
	return ret;
}

static int wb_put(struct wbuf *w, const void *p, size_t len)
{
	const unsigned char *b = p;

	while (len) {
		size_t k = WBUF_BYTES - w->len < len ? WBUF_BYTES - w->len : len;
		int ret;

		memcpy(w->buf + w->len, b, k);
		w->len += k;
		b += k;
		len -= k;
		if (w->len == WBUF_BYTES) {
			ret = wb_flush(w);
			if (ret)
				return ret;
		}
	}
	return 0;
}

/* Checkpoint file name of @step into @buf (room for 48 bytes). */
void coord_ckpt_name(char *buf, size_t len, uint64_t step)
{
	snprintf(buf, len, "ckpt-%" PRIu64 ".coord", step);
}

/* Parse "ckpt-<digits>.coord" exactly (digits: 1..20, value fits u64). */
bool coord_ckpt_parse_name(const char *s, size_t len, uint64_t *step)
{
	static const char pre[] = "ckpt-", suf[] = ".coord";
	size_t nd;
	uint64_t v = 0;

	if (len < sizeof(pre) + sizeof(suf) - 1 || memcmp(s, pre, sizeof(pre) - 1) ||
	    memcmp(s + len - (sizeof(suf) - 1), suf, sizeof(suf) - 1))
		return false;
	nd = len - (sizeof(pre) - 1) - (sizeof(suf) - 1);
	if (nd == 0 || nd > 20)
		return false;
	for (size_t i = 0; i < nd; i++) {
		unsigned char c = (unsigned char)s[sizeof(pre) - 1 + i];

		if (c < '0' || c > '9' || v > (UINT64_MAX - (c - '0')) / 10)
			return false;
		v = v * 10 + (c - '0');
	}
	*step = v;
	return true;
}

/* What coord_varstore_save() writes: variables @ids, @bytes in all. */
struct ckpt_job {
	struct coord_varstore *vs;
	uint32_t *ids;
	uint32_t nids;
	uint64_t step;
	uint64_t bytes;
	uint32_t task, nps; /* the layout (version 2 header) */
};

static int write_vars(struct wbuf *w, struct ckpt_job *j, struct coord_error *err, const char *path)
{
	unsigned char hdr[HDR_BYTES] = { 0 }, ent[4 + COORD_VAR_NAME_MAX + 4 + 8 * 4];
	int ret;

	memcpy(hdr, COORD_CKPT_MAGIC, 8);
	put_le32(hdr + 8, COORD_CKPT_VERSION);
	put_le64(hdr + 16, j->step);
	put_le32(hdr + 24, j->nids);
	put_le64(hdr + 32, j->bytes);
	put_le32(hdr + 40, j->task);
	put_le32(hdr + 44, j->nps);
	ret = wb_put(w, hdr, sizeof(hdr));
	for (uint32_t i = 0; i < j->nids && !ret; i++) {
		struct coord_var *v = coord_vs_get(j->vs, j->ids[i]);
		size_t nl = strlen(v->name), o = 0, done = 0;

		put_le32(ent, (uint32_t)nl);
		memcpy(ent + 4, v->name, nl);
		o = 4 + nl;
		put_le32(ent + o, v->ndim);
		o += 4;
		for (unsigned d = 0; d < v->ndim; d++, o += 8)
			put_le64(ent + o, v->dims[d]);
		ret = wb_put(w, ent, o);
		/* Data in chunks that fit the buffer, each under its stripes;
		 * the flush (I/O) happens with no lock held.  Bounded: each
		 * pass copies >= 1 element or flushes a full buffer. */
		while (!ret && done < v->nelem) {
			size_t room = (WBUF_BYTES - w->len) / sizeof(float);
			size_t n = v->nelem - done < room ? v->nelem - done : room;
			unsigned lo, hi;

			if (n == 0) {
				ret = wb_flush(w);
				continue;
			}
			lo = (unsigned)(done / v->rowlen / v->rows_per_stripe);
			hi = (unsigned)((done + n - 1) / v->rowlen / v->rows_per_stripe);
			coord_vs_lock(v, lo, hi);
			if (v->deleted) {
				coord_vs_unlock(v, lo, hi);
				return coord_seterr(err, -EAGAIN,
						    "checkpoint '%s': variable '%s' was deleted "
						    "during the save",
						    path, v->name);
			}
			floats_to_le(w->buf + w->len, v->data + done, n);
			coord_vs_unlock(v, lo, hi);
			w->len += n * sizeof(float);
			done += n;
		}
	}
	if (!ret)
		ret = wb_flush(w);
	if (!ret) {
		unsigned char t[TRAILER_BYTES];

		put_le32(t, w->crc);
		ret = write_all(w->fd, t, sizeof(t));
		w->total += sizeof(t);
	}
	if (ret)
		return coord_seterr(err, ret, "checkpoint '%s': write: %s", path,
				    coord_strerror(ret));
	if (w->total != j->bytes)
		return coord_seterr(err, -EIO,
				    "checkpoint '%s': wrote %" PRIu64 " bytes, expected %" PRIu64,
				    path, w->total, j->bytes);
	return 0;
}

/* CK-T1: a temp file in @dfd, locked; *@named: it already has the name @tmp
 * (the O_EXCL fallback), else tmp_name() gives it one.  -errno. */
static int tmp_create(int dfd, const char *tmp, bool *named)
{
	int fd = openat(dfd, ".", O_TMPFILE | O_WRONLY | O_CLOEXEC, 0644);

	*named = fd < 0;
	if (fd < 0 && errno != EOPNOTSUPP && errno != EISDIR && errno != EINVAL)
		return -errno;
	if (fd < 0)
		fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0)
		return -errno;
	if (flock(fd, LOCK_EX | LOCK_NB)) { /* nobody else knows the file: no wait */
		int ret = -errno;

		if (*named)
			unlinkat(dfd, tmp, 0);
		close(fd);
		return ret;
	}
	return fd;
}

/* CK-T1: give the unnamed, written temp file @fd the name @tmp in @dfd. */
static int tmp_name(int fd, int dfd, const char *tmp)
{
	char self[64];

	snprintf(self, sizeof(self), "/proc/self/fd/%d", fd);
	return linkat(AT_FDCWD, self, dfd, tmp, AT_SYMLINK_FOLLOW) ? -errno : 0;
}

/*
 * Write the checkpoint @j (or, when @j is NULL, the @small_len bytes at
 * @small) to @dfd/@final via a temp file (CK-T1), fsync, rename, fsync the
 * directory.
 */
static int atomic_write(int dfd, const char *dir, const char *final, struct ckpt_job *j,
			const void *small, size_t small_len, uint64_t seq, struct coord_error *err)
{
	char tmp[128], path[4200];
	struct wbuf w = { .fd = -1 };
	bool named;
	int fd, ret;

	snprintf(tmp, sizeof(tmp), ".%s.tmp.%ld.%" PRIu64, final, (long)getpid(), seq);
	snprintf(path, sizeof(path), "%s/%s", dir, final);
	fd = tmp_create(dfd, tmp, &named);
	if (fd < 0)
		return coord_seterr(err, fd, "checkpoint '%s/%s': create: %s", dir, tmp,
				    coord_strerror(fd));
	if (j) {
		w.fd = fd;
		w.buf = malloc(WBUF_BYTES);
		ret = w.buf ? write_vars(&w, j, err, path)
			    : coord_seterr(err, -ENOMEM, "checkpoint '%s': out of memory", path);
		free(w.buf);
	} else {
		ret = write_all(fd, small, small_len);
		if (ret)
			coord_seterr(err, ret, "'%s': write: %s", path, coord_strerror(ret));
	}
	if (!ret && fsync(fd)) {
		ret = -errno;
		coord_seterr(err, ret, "'%s': fsync: %s", path, coord_strerror(ret));
	}
	if (!ret && !named) {
		ret = tmp_name(fd, dfd, tmp);
		if (ret)
			coord_seterr(err, ret, "'%s': link %s: %s", path, tmp, coord_strerror(ret));
		else
			named = true;
	}
	if (!ret && renameat(dfd, tmp, dfd, final)) {
		ret = -errno;
		coord_seterr(err, ret, "'%s': rename from %s: %s", path, tmp, coord_strerror(ret));
	}
	if (ret && named)
		unlinkat(dfd, tmp, 0); /* still ours: we hold its lock (CK-T1) */
	/* The lock goes with the descriptor, after the rename (CK-T1); the
	 * data was fsync'd above, so close() has nothing left to report. */
	close(fd);
	if (ret)
		return ret;
	if (fsync(dfd)) {
		ret = -errno;
		return coord_seterr(err, ret, "checkpoint dir '%s': fsync: %s", dir,
				    coord_strerror(ret));
	}
	return 0;
}

static int cmp_desc(const void *a, const void *b)
{
	uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;

	return x < y ? 1 : x > y ? -1 : 0;
}

/*
 * A listing of @dfd from its start (a dup shares the file offset, which an
 * earlier listing left at the end), or NULL.  closedir() it.
 */
DIR *coord_ckpt_list_dir(int dfd)
{
	int fd = dup(dfd);
	DIR *d = fd < 0 ? NULL : fdopendir(fd);

	if (!d) {
		if (fd >= 0)
			close(fd);
		return NULL;
	}
	rewinddir(d);
	return d;
}

/*
 * The steps of the checkpoint files in @dfd, newest first, into *@stepsp
 * (caller frees; NULL when there are none).  Bounded by DIR_MAX_ENTRIES.
 * Return: their count, or -errno (logged).
 */
long coord_ckpt_list_steps(int dfd, const char *dir, uint64_t **stepsp)
{
	uint64_t *steps = NULL, step;
	size_t n = 0, cap = 0;
	struct dirent *de;
	DIR *d = coord_ckpt_list_dir(dfd);

	*stepsp = NULL;
	if (!d) {
		coord_log(COORD_LOG_WARN, "checkpoint dir '%s': cannot list", dir);
		return -EIO;
	}
	for (unsigned i = 0; i < DIR_MAX_ENTRIES && (de = readdir(d)); i++) {
		if (!coord_ckpt_parse_name(de->d_name, strlen(de->d_name), &step))
			continue;
		if (n == cap) {
			uint64_t *ns = realloc(steps, (cap ? cap * 2 : 16) * sizeof(*ns));

			if (!ns) {
				closedir(d);
				free(steps);
				return -ENOMEM;
			}
			steps = ns;
			cap = cap ? cap * 2 : 16;
		}
		steps[n++] = step;
	}
	closedir(d);
	if (n)
		qsort(steps, n, sizeof(*steps), cmp_desc);
	*stepsp = steps;
	return (long)n;
}

/*
 * Delete checkpoints beyond the newest @keep (by step), never @cur.
 * Failures are logged: the new checkpoint is already safe.
 */
static void prune(int dfd, const char *dir, unsigned keep, uint64_t cur)
{
	uint64_t *steps;
	size_t kept = 1; /* cur */
	long n;

	if (keep == 0)
		return;
	n = coord_ckpt_list_steps(dfd, dir, &steps);
	for (long i = 0; i < n; i++) {
		char name[48];

		if (steps[i] == cur)
			continue;
		if (kept < keep) {
			kept++;
			continue;
		}
		coord_ckpt_name(name, sizeof(name), steps[i]);
		if (unlinkat(dfd, name, 0))
			coord_log(COORD_LOG_WARN, "checkpoint '%s/%s': cannot delete: %s", dir,
				  name, coord_strerror(-errno));
	}
	free(steps);
}

int coord_ckpt_open_dir(const char *dir, int *dfd, struct coord_error *err)
{
	int ret;

	if (!dir || !*dir)
		return coord_seterr(err, -EINVAL, "checkpoint dir is NULL or empty");
	if (strnlen(dir, 4096) >= 4096)
		return coord_seterr(err, -ENAMETOOLONG, "checkpoint dir name is too long");
	*dfd = open(dir, O_RDONLY | O_DIRECTORY | O_CLOEXEC);
	if (*dfd < 0) {
		ret = -errno;
		return coord_seterr(err, ret, "checkpoint dir '%s': %s", dir, coord_strerror(ret));
	}
	return 0;
}

/* Digits only, 1..20 of them. */
bool coord_ckpt_all_digits(const char *s, size_t len)
{
	if (len == 0 || len > 20)
		return false;
	for (size_t i = 0; i < len; i++)
		if (s[i] < '0' || s[i] > '9')
			return false;
	return true;
}

/* Is @s the temp name of an interrupted save: ".<final>.tmp.<pid>.<n>" with
 * <final> "latest" or a checkpoint name (atomic_write())? */
static bool is_tmp_name(const char *s)
{
	const char *t = strstr(s, ".tmp."), *dot;
	uint64_t step;

	if (s[0] != '.' || !t)
		return false;
	if (!((t - s - 1 == 6 && !memcmp(s + 1, "latest", 6)) ||
	      coord_ckpt_parse_name(s + 1, (size_t)(t - s - 1), &step)))
		return false;
	t += 5;
	dot = strchr(t, '.');
	return dot && coord_ckpt_all_digits(t, (size_t)(dot - t)) &&
	       coord_ckpt_all_digits(dot + 1, strlen(dot + 1));
}

/* CK-T1: remove temp file @name of @dfd if no writer holds it.  -EAGAIN: a
 * live save's; else 0 or -errno. */
static int tmp_remove(int dfd, const char *name)
{
	int fd = openat(dfd, name, O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC), ret = 0;

	if (fd < 0)
		return errno == ENOENT ? -EAGAIN : -errno; /* renamed meanwhile */
	if (flock(fd, LOCK_EX | LOCK_NB))
		ret = errno == EWOULDBLOCK ? -EAGAIN : -errno;
	else if (unlinkat(dfd, name, 0))
		ret = -errno;
	close(fd);
	return ret;
}

/*
 * Remove the temp files interrupted saves left in @dfd; a temp file whose
 * writer is alive, in any process, is left alone (CK-T1).  Bounded by
 * DIR_MAX_ENTRIES; failures are logged.  Return: files removed.
 */
unsigned coord_ckpt_clean_tmp(int dfd, const char *dir)
{
	struct dirent *de;
	unsigned n = 0;
	DIR *d = coord_ckpt_list_dir(dfd);

	if (!d) {
		coord_log(COORD_LOG_WARN, "checkpoint dir '%s': cannot list to clean", dir);
		return 0;
	}
	for (unsigned i = 0; i < DIR_MAX_ENTRIES && (de = readdir(d)); i++) {
		int r;

		if (!is_tmp_name(de->d_name))
			continue;
		r = tmp_remove(dfd, de->d_name);
		if (r == 0)
			n++;
		else if (r != -EAGAIN)
			coord_log(COORD_LOG_WARN, "checkpoint '%s/%s': cannot delete: %s", dir,
				  de->d_name, coord_strerror(r));
	}
	closedir(d);
	if (n)
		coord_log(COORD_LOG_INFO,
			  "checkpoint dir '%s': removed %u temp file(s) of interrupted saves", dir,
			  n);
	return n;
}

/* Save into the open directory @dfd (named @dir in messages). */
static int save_at(struct coord_varstore *vs, int dfd, const char *dir, uint64_t step,
		   uint32_t task, uint32_t nps, struct coord_error *err)
{
	struct ckpt_job j = {
		.vs = vs, .step = step, .bytes = HDR_BYTES + TRAILER_BYTES, .task = task, .nps = nps
	};
	char final[48], latest[64];
	uint32_t n;
	int ret;

	if (!vs)
		return coord_seterr(err, -EINVAL, "checkpoint save: NULL store");
	if (task >= nps)
		return coord_seterr(err, -EINVAL, "checkpoint save: task %" PRIu32 " of %" PRIu32,
				    task, nps);
	pthread_mutex_lock(&vs->save_lock);
	coord_ckpt_clean_tmp(dfd, dir);
	/* The set of variables and their shapes, at one instant (varstore.c V2,
	 * V3). */
	pthread_mutex_lock(&vs->names_lock);
	/* Relaxed: names_lock is held and nvars is stored only under it. */
	n = atomic_load_explicit(&vs->nvars, memory_order_relaxed);
	j.ids = malloc((n ? n : 1) * sizeof(*j.ids));
	if (j.ids) {
		for (uint32_t id = 0; id < n; id++) {
			struct coord_var *v = coord_vs_get(vs, id);

			if (v->deleted)
				continue;
			j.ids[j.nids++] = id;
			j.bytes += 4 + strlen(v->name) + 4 + 8ull * v->ndim + 4ull * v->nelem;
		}
	}
	pthread_mutex_unlock(&vs->names_lock);
	if (!j.ids) {
		ret = coord_seterr(err, -ENOMEM, "checkpoint save: out of memory");
		goto out;
	}
	coord_ckpt_name(final, sizeof(final), step);
	ret = atomic_write(dfd, dir, final, &j, NULL, 0, vs->tmp_seq++, err);
	if (ret)
		goto out;
	snprintf(latest, sizeof(latest), "%s\n", final);
	ret = atomic_write(dfd, dir, "latest", NULL, latest, strlen(latest), vs->tmp_seq++, err);
	if (ret)
		goto out;
	prune(dfd, dir, vs->opts.keep_checkpoints, step);
out:
	pthread_mutex_unlock(&vs->save_lock);
	free(j.ids);
	return ret;
}

int coord_varstore_save(struct coord_varstore *vs, const char *dir, uint64_t step,
			struct coord_error *err)
{
	int dfd = -1, ret;

	if (!vs)
		return coord_seterr(err, -EINVAL, "checkpoint save: NULL store");
	ret = coord_ckpt_open_dir(dir, &dfd, err);
	if (ret)
		return ret;
	ret = save_at(vs, dfd, dir, step, 0, 1, err);
	close(dfd);
	return ret;
}

/* --- parsing a file ---------------------------------------------------------- */

static int cmp_ent(const void *a, const void *b)
{
	return strcmp(((const struct ent *)a)->nm, ((const struct ent *)b)->nm);
}

/*
 * Check the header and trailer of @buf (@size bytes, the file of @step):
 * fill @meta, *@op (where the first variable starts) and *@nvarsp.
 */
static int parse_header(const unsigned char *buf, uint64_t size, uint64_t step, const char *path,
			struct ckpt_meta *meta, uint64_t *op, uint32_t *nvarsp,
			struct coord_error *err)
{
	uint32_t ver, nvars, stored, crc, hdr;
	uint64_t o, end = size - TRAILER_BYTES, hsize, hstep;

	if (size < HDR_V1_BYTES + TRAILER_BYTES)
		return BAD("checkpoint '%s': truncated: %" PRIu64 " bytes, smaller than the "
			   "%u-byte header and trailer",
			   path, size, HDR_V1_BYTES + TRAILER_BYTES);
	if (memcmp(buf, COORD_CKPT_MAGIC, 8))
		return BAD("checkpoint '%s': bad magic: not a coord checkpoint", path);
	ver = get_le32(buf + 8);
	if (ver != 1 && ver != COORD_CKPT_VERSION)
		return BAD("checkpoint '%s': format version %" PRIu32 ", this build reads "
			   "versions 1 and %u",
			   path, ver, COORD_CKPT_VERSION);
	hdr = ver == 1 ? HDR_V1_BYTES : HDR_BYTES;
	o = hdr;
	if (size < hdr + TRAILER_BYTES)
		return BAD("checkpoint '%s': truncated: %" PRIu64 " bytes, smaller than the "
			   "%" PRIu32 "-byte header and trailer",
			   path, size, hdr + TRAILER_BYTES);
	hsize = get_le64(buf + 32);
	if (hsize > size)
		return BAD("checkpoint '%s': truncated: header says %" PRIu64
			   " bytes, the file has %" PRIu64,
			   path, hsize, size);
	if (hsize < size)
		return BAD("checkpoint '%s': %" PRIu64 " bytes of trailing data after the %" PRIu64
			   " the header gives",
			   path, size - hsize, hsize);
	stored = get_le32(buf + end);
	crc = coord_crc32c(0, buf, end);
	if (crc != stored)
		return BAD("checkpoint '%s': checksum mismatch (stored 0x%08" PRIx32
			   ", computed 0x%08" PRIx32 "): the file is corrupted",
			   path, stored, crc);
	if (get_le32(buf + 12) || get_le32(buf + 28))
		return BAD("checkpoint '%s': unknown flags in the header", path);
	hstep = get_le64(buf + 16);
	if (hstep != step)
		return BAD("checkpoint '%s': header step %" PRIu64 " does not match the name", path,
			   hstep);
	meta->version = ver;
	meta->task = ver == 1 ? 0 : get_le32(buf + 40);
	meta->nps = ver == 1 ? 0 : get_le32(buf + 44);
	if (ver != 1 && meta->task >= meta->nps)
		return BAD("checkpoint '%s': header says task %" PRIu32 " of %" PRIu32 " ps tasks",
			   path, meta->task, meta->nps);
	nvars = get_le32(buf + 24);
	/* The smallest entry, a scalar with a 1-byte name, is 4 (name length)
	 * + 1 (name) + 4 (ndim) + 4 (one float) = 13 bytes. */
	if (nvars > (end - o) / 13)
		return BAD("checkpoint '%s': %" PRIu32 " variables cannot fit in %" PRIu64 " bytes",
			   path, nvars, end - o);
	*op = o;
	*nvarsp = nvars;
	return 0;
}

/* Parse and check the whole of @buf (@size bytes); fill @ents. */
int coord_ckpt_parse(const unsigned char *buf, uint64_t size, uint64_t step, const char *path,
		     struct ent **entsp, uint32_t *nentsp, struct ckpt_meta *meta,
		     struct coord_error *err)
{
	uint32_t nvars = 0;			    /* parse_header() sets them; 0 for */
	uint64_t o = 0, end = size - TRAILER_BYTES; /* a false maybe-uninitialized */
	struct ent *ents;
	struct coord_error sub;
	int ret = parse_header(buf, size, step, path, meta, &o, &nvars, err);

	if (ret)
		return ret;
	ents = calloc(nvars ? nvars : 1, sizeof(*ents));
	if (!ents)
		return coord_seterr(err, -ENOMEM, "checkpoint '%s': out of memory", path);
	for (uint32_t i = 0; i < nvars; i++) {
		struct ent *e = &ents[i];
		uint32_t nl;

		if (end - o < 4)
			goto short_;
		nl = get_le32(buf + o);
		o += 4;
		if (nl == 0 || nl > COORD_VAR_NAME_MAX || end - o < nl) {
			BAD("checkpoint '%s': variable %" PRIu32 ": name length %" PRIu32
			    " is bad or past the end",
			    path, i, nl);
			goto fail;
		}
		memcpy(e->nm, buf + o, nl);
		e->nm[nl] = '\0';
		if (coord_vs_check_name((const char *)buf + o, nl, &sub)) {
			BAD("checkpoint '%s': variable %" PRIu32 ": %s", path, i, sub.msg);
			goto fail;
		}
		o += nl;
		if (end - o < 4)
			goto short_;
		e->ndim = get_le32(buf + o);
		o += 4;
		if (e->ndim > COORD_VAR_MAX_DIMS) {
			BAD("checkpoint '%s': variable '%s': %u dimensions", path, e->nm, e->ndim);
			goto fail;
		}
		if (end - o < 8ull * e->ndim)
			goto short_;
		for (unsigned d = 0; d < e->ndim; d++, o += 8)
			e->dims[d] = get_le64(buf + o);
		if (coord_vs_check_shape(e->nm, e->ndim, e->dims, &sub)) {
			BAD("checkpoint '%s': %s", path, sub.msg);
			goto fail;
		}
		e->nelem = 1;
		for (unsigned d = 0; d < e->ndim; d++)
			e->nelem *= e->dims[d];
		if (end - o < 4 * e->nelem)
			goto short_;
		e->data = buf + o;
		o += 4 * e->nelem;
	}
	if (o != end) {
		BAD("checkpoint '%s': %" PRIu64 " unaccounted bytes after the last variable", path,
		    end - o);
		goto fail;
	}
	if (nvars > 1) {
		qsort(ents, nvars, sizeof(*ents), cmp_ent);
		for (uint32_t i = 1; i < nvars; i++)
			if (!strcmp(ents[i - 1].nm, ents[i].nm)) {
				BAD("checkpoint '%s': variable '%s' appears twice", path,
				    ents[i].nm);
				goto fail;
			}
	}
	*entsp = ents;
	*nentsp = nvars;
	return 0;
short_:
	BAD("checkpoint '%s': a length runs past the end of the data", path);
fail:
	free(ents);
	return -EBADMSG;
}

int coord_varstore_save_task(struct coord_varstore *vs, const char *dir, unsigned task,
			     unsigned nps, uint64_t step, struct coord_error *err)
{
	char path[4200];
	int dfd, pfd, ret;

	if (!vs)
		return coord_seterr(err, -EINVAL, "checkpoint save: NULL store");
	ret = coord_ckpt_open_beneath(vs, dir, &dfd, err);
	if (ret)
		return ret;
	ret = coord_ckpt_open_task_dir(vs, dfd, task, true, &pfd, err, dir);
	close(dfd);
	if (ret)
		return ret;
	snprintf(path, sizeof(path), "%s/ps-%u", dir, task);
	ret = save_at(vs, pfd, path, step, task, nps, err);
	close(pfd);
	return ret;
}
