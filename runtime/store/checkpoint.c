// SPDX-License-Identifier: MIT
/*
 * runtime/store/checkpoint.c - crash-safe save and verified restore of a variable
 * store (see varstore.h for the API, varstore.c for the locking).
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
 * Crash safety (save): each file is written as DIR/.<name>.tmp.<pid>.<n>
 * (O_EXCL), fsync'd, closed, renamed over its final name, and then DIR is
 * fsync'd so the rename itself is durable.  The checkpoint is renamed
 * before latest is written, so latest only ever names a whole file.  A
 * crash leaves at most a stray temp file, which restore never opens (it
 * opens only the name latest gives, or the step asked for), and which the
 * next save into that directory removes (one store per directory: no
 * other writer's temp file can be there), as coord-ps does at start.
 *
 * Verification (restore): a file is read whole into memory and checked
 * before the store is touched: size against opts.max_ckpt_bytes, magic,
 * version, flags, step, the header's size against the real size (so a
 * truncated file is reported as truncated), the CRC, then every length
 * against the bytes that remain, names, shapes, duplicates.  Its variables
 * are then built as new unpublished variables (a stage), checked against
 * the store (same shape or absent), and committed under the name lock:
 * live ones overwritten, the others published, with nothing left to fail.
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
 * Reach: a coord-ps has a checkpoint root (coord_varstore_set_ckpt_root()):
 * DIR is opened beneath it with openat2(RESOLVE_BENEATH |
 * RESOLVE_NO_MAGICLINKS) and every file below DIR is opened with *at()
 * calls by single names, without following symbolic links.  In-process ps
 * stores have no root: DIR is the caller's path.
 */
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/openat2.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "runtime/store/varstore.h"

#define COORD_CKPT_MAGIC "COORDCKP"
#define COORD_CKPT_VERSION 2u
#define HDR_V1_BYTES 40u
#define HDR_BYTES 48u
#define TRAILER_BYTES 4u
#define WBUF_BYTES (1u << 20)
/* Bounds on retries and directory scans (style: every loop bounded). */
#define IO_MAX_EINTR 1000
#define DIR_MAX_ENTRIES (1u << 20)

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

/* --- little-endian encoding ------------------------------------------------ */

static void put_le32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static void put_le64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static uint32_t get_le32(const unsigned char *p)
{
	uint32_t v = 0;

	for (int i = 0; i < 4; i++)
		v |= (uint32_t)p[i] << (8 * i);
	return v;
}

static uint64_t get_le64(const unsigned char *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

/* Copy @n floats between host order and little-endian bytes. */
static void floats_to_le(unsigned char *dst, const float *src, size_t n)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	memcpy(dst, src, n * sizeof(float));
#else
	for (size_t i = 0; i < n; i++) {
		uint32_t w;

		memcpy(&w, &src[i], 4);
		put_le32(dst + 4 * i, w);
	}
#endif
}

static void floats_from_le(float *dst, const unsigned char *src, size_t n)
{
#if __BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__
	memcpy(dst, src, n * sizeof(float));
#else
	for (size_t i = 0; i < n; i++) {
		uint32_t w = get_le32(src + 4 * i);

		memcpy(&dst[i], &w, 4);
	}
#endif
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
static void ckpt_name(char *buf, size_t len, uint64_t step)
{
	snprintf(buf, len, "ckpt-%" PRIu64 ".coord", step);
}

/* Parse "ckpt-<digits>.coord" exactly (digits: 1..20, value fits u64). */
static bool parse_ckpt_name(const char *s, size_t len, uint64_t *step)
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

/*
 * Write the checkpoint @j (or, when @j is NULL, the @small_len bytes at
 * @small) to @dfd/@final via a temp file, fsync, rename, fsync the directory.
 */
static int atomic_write(int dfd, const char *dir, const char *final, struct ckpt_job *j,
			const void *small, size_t small_len, uint64_t seq, struct coord_error *err)
{
	char tmp[128], path[4200];
	struct wbuf w = { .fd = -1 };
	int fd, ret;

	snprintf(tmp, sizeof(tmp), ".%s.tmp.%ld.%" PRIu64, final, (long)getpid(), seq);
	snprintf(path, sizeof(path), "%s/%s", dir, final);
	fd = openat(dfd, tmp, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0644);
	if (fd < 0) {
		ret = -errno;
		return coord_seterr(err, ret, "checkpoint '%s/%s': create: %s", dir, tmp,
				    coord_strerror(ret));
	}
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
	if (close(fd) && !ret) {
		ret = -errno;
		coord_seterr(err, ret, "'%s': close: %s", path, coord_strerror(ret));
	}
	if (!ret && renameat(dfd, tmp, dfd, final)) {
		ret = -errno;
		coord_seterr(err, ret, "'%s': rename from %s: %s", path, tmp, coord_strerror(ret));
	}
	if (ret) {
		unlinkat(dfd, tmp, 0);
		return ret;
	}
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
static DIR *list_dir(int dfd)
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
static long list_steps(int dfd, const char *dir, uint64_t **stepsp)
{
	uint64_t *steps = NULL, step;
	size_t n = 0, cap = 0;
	struct dirent *de;
	DIR *d = list_dir(dfd);

	*stepsp = NULL;
	if (!d) {
		coord_log(COORD_LOG_WARN, "checkpoint dir '%s': cannot list", dir);
		return -EIO;
	}
	for (unsigned i = 0; i < DIR_MAX_ENTRIES && (de = readdir(d)); i++) {
		if (!parse_ckpt_name(de->d_name, strlen(de->d_name), &step))
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
	n = list_steps(dfd, dir, &steps);
	for (long i = 0; i < n; i++) {
		char name[48];

		if (steps[i] == cur)
			continue;
		if (kept < keep) {
			kept++;
			continue;
		}
		ckpt_name(name, sizeof(name), steps[i]);
		if (unlinkat(dfd, name, 0))
			coord_log(COORD_LOG_WARN, "checkpoint '%s/%s': cannot delete: %s", dir,
				  name, coord_strerror(-errno));
	}
	free(steps);
}

static int open_dir(const char *dir, int *dfd, struct coord_error *err)
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
static bool all_digits(const char *s, size_t len)
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
	      parse_ckpt_name(s + 1, (size_t)(t - s - 1), &step)))
		return false;
	t += 5;
	dot = strchr(t, '.');
	return dot && all_digits(t, (size_t)(dot - t)) && all_digits(dot + 1, strlen(dot + 1));
}

/*
 * Remove the temp files interrupted saves left in @dfd (one store per
 * directory, saves serialised: none of them is being written now).
 * Bounded by DIR_MAX_ENTRIES; failures are logged.  Return: files removed.
 */
static unsigned clean_tmp(int dfd, const char *dir)
{
	struct dirent *de;
	unsigned n = 0;
	DIR *d = list_dir(dfd);

	if (!d) {
		coord_log(COORD_LOG_WARN, "checkpoint dir '%s': cannot list to clean", dir);
		return 0;
	}
	for (unsigned i = 0; i < DIR_MAX_ENTRIES && (de = readdir(d)); i++) {
		if (!is_tmp_name(de->d_name))
			continue;
		if (unlinkat(dfd, de->d_name, 0) == 0)
			n++;
		else
			coord_log(COORD_LOG_WARN, "checkpoint '%s/%s': cannot delete: %s", dir,
				  de->d_name, coord_strerror(-errno));
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
	clean_tmp(dfd, dir);
	/* The set of variables and their shapes, at one instant (V2, V3). */
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
	ckpt_name(final, sizeof(final), step);
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
	int dfd, ret;

	if (!vs)
		return coord_seterr(err, -EINVAL, "checkpoint save: NULL store");
	ret = open_dir(dir, &dfd, err);
	if (ret)
		return ret;
	ret = save_at(vs, dfd, dir, step, 0, 1, err);
	close(dfd);
	return ret;
}

/* --- restore ------------------------------------------------------------------ */

struct ent {
	char nm[COORD_VAR_NAME_MAX + 1];
	unsigned ndim;
	uint64_t dims[COORD_VAR_MAX_DIMS];
	uint64_t nelem;
	const unsigned char *data;
};

/* What a file's header says of the layout that wrote it. */
struct ckpt_meta {
	uint32_t version;
	uint32_t task, nps; /* version 2; 0 and 0 in version 1 */
};

static int cmp_ent(const void *a, const void *b)
{
	return strcmp(((const struct ent *)a)->nm, ((const struct ent *)b)->nm);
}

#define BAD(...) coord_seterr(err, -EBADMSG, __VA_ARGS__)

/* Parse and check the whole of @buf (@size bytes); fill @ents. */
static int parse(const unsigned char *buf, uint64_t size, uint64_t step, const char *path,
		 struct ent **entsp, uint32_t *nentsp, struct ckpt_meta *meta,
		 struct coord_error *err)
{
	uint32_t ver, nvars, stored, crc, hdr;
	uint64_t o, end = size - TRAILER_BYTES, hsize, hstep;
	struct ent *ents;
	struct coord_error sub;

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

static bool shape_eq(const struct coord_var *v, unsigned ndim, const uint64_t *dims)
{
	if (v->ndim != ndim)
		return false;
	for (unsigned d = 0; d < ndim; d++)
		if (v->dims[d] != dims[d])
			return false;
	return true;
}

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

static void stage_free(struct coord_ckpt_stage *st)
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

/* Add a copy of @e (verified) to @st. */
static int stage_add(struct coord_ckpt_stage *st, const struct ent *e, const char *path,
		     struct coord_error *err)
{
	struct coord_var *v;
	int ret;

	if (st->n == st->cap) {
		uint32_t cap = st->cap ? st->cap * 2 : 16;
		struct coord_var **nv = realloc(st->vars, cap * sizeof(*nv));

		if (!nv)
			return coord_seterr(err, -ENOMEM, "checkpoint '%s': out of memory", path);
		st->vars = nv;
		st->cap = cap;
	}
	ret = coord_vs_var_alloc(e->nm, e->ndim, e->dims, &v, err);
	if (ret)
		return ret;
	floats_from_le(v->data, e->data, e->nelem);
	st->vars[st->n++] = v;
	return 0;
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

		if (old && !shape_eq(old, v->ndim, v->dims)) {
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
			if (!shape_eq(old, v->ndim, v->dims))
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
	if (hit && !shape_eq(*hit, ndim, dims)) {
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

static int open_sub(int dfd, const char *name, int flags, bool nofollow)
{
	return openat(dfd, name, flags | O_CLOEXEC | (nofollow ? O_NOFOLLOW : 0));
}

/* Read @dfd/@name (@path in messages) whole into *@bufp (caller frees). */
static int read_file(struct coord_varstore *vs, int dfd, const char *name, const char *path,
		     bool nofollow, unsigned char **bufp, uint64_t *sizep, struct coord_error *err)
{
	unsigned char *buf = NULL;
	struct stat st;
	uint64_t limit;
	int fd, ret;

	fd = open_sub(dfd, name, O_RDONLY, nofollow);
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

	fd = open_sub(dfd, "latest", O_RDONLY, nofollow);
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
	if (!parse_ckpt_name(line, len, stepp))
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
	ckpt_name(name, sizeof(name), step);
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	ret = read_file(vs, dfd, name, path, nofollow, &buf, &size, err);
	if (!ret)
		ret = parse(buf, size, step, path, &ents, &n, &meta, err);
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
	stage_free(st);
	return ret;
}

int coord_varstore_restore_step(struct coord_varstore *vs, const char *dir, uint64_t step,
				struct coord_error *err)
{
	int dfd = -1, ret; /* open_dir() sets it; -1 for a false maybe-uninitialized */

	if (!vs)
		return coord_seterr(err, -EINVAL, "checkpoint restore: NULL store");
	ret = open_dir(dir, &dfd, err);
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
	ret = open_dir(dir, &dfd, err);
	if (ret)
		return ret;
	ret = restore_latest(vs, dfd, dir, false, stepp, err);
	close(dfd);
	return ret;
}

/* --- the checkpoint root of a coord-ps ----------------------------------------- */

/* Walk at most this deep and this many entries under a root at start. */
#define SWEEP_MAX_DEPTH 8
#define SWEEP_MAX_ENTRIES 100000u
#define MAX_PS_TASKS 4096u

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
static int open_ckpt_dir(struct coord_varstore *vs, const char *dir, int *dfd,
			 struct coord_error *err)
{
	struct open_how how = { .flags = O_RDONLY | O_DIRECTORY | O_CLOEXEC,
				.resolve = RESOLVE_BENEATH | RESOLVE_NO_MAGICLINKS };
	const char *rel = dir;
	int ret;

	if (!vs->ckpt_root)
		return open_dir(dir, dfd, err);
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
	DIR *d = list_dir(dfd);

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
		sub = open_sub(dfd, de->d_name, O_RDONLY | O_DIRECTORY, true);
		if (sub < 0)
			continue;
		if (!strcmp(de->d_name, psname))
			clean_tmp(sub, de->d_name);
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
	stage_free(vs->stage);
	vs->stage = NULL;
	if (vs->ckpt_root)
		close(vs->ckpt_root_fd);
	free(vs->ckpt_root);
	vs->ckpt_root = NULL;
}

/* --- the directory of one ps task: DIR/ps-<task> -------------------------------- */

static int open_task_dir(struct coord_varstore *vs, int dfd, unsigned task, bool make, int *pfd,
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
	*pfd = open_sub(dfd, name, O_RDONLY | O_DIRECTORY, vs->ckpt_root != NULL);
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

int coord_varstore_save_task(struct coord_varstore *vs, const char *dir, unsigned task,
			     unsigned nps, uint64_t step, struct coord_error *err)
{
	char path[4200];
	int dfd, pfd, ret;

	if (!vs)
		return coord_seterr(err, -EINVAL, "checkpoint save: NULL store");
	ret = open_ckpt_dir(vs, dir, &dfd, err);
	if (ret)
		return ret;
	ret = open_task_dir(vs, dfd, task, true, &pfd, err, dir);
	close(dfd);
	if (ret)
		return ret;
	snprintf(path, sizeof(path), "%s/ps-%u", dir, task);
	ret = save_at(vs, pfd, path, step, task, nps, err);
	close(pfd);
	return ret;
}

int coord_varstore_restore_task(struct coord_varstore *vs, const char *dir, unsigned task,
				uint64_t *step, struct coord_error *err)
{
	char path[4200];
	int dfd, pfd, ret;

	if (!vs)
		return coord_seterr(err, -EINVAL, "checkpoint restore: NULL store");
	ret = open_ckpt_dir(vs, dir, &dfd, err);
	if (ret)
		return ret;
	ret = open_task_dir(vs, dfd, task, false, &pfd, err, dir);
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
	DIR *d = list_dir(dfd);

	if (!have || !d) {
		if (d)
			closedir(d);
		free(have);
		return coord_seterr(err, -EIO, "checkpoint dir '%s': cannot list", dir);
	}
	ckpt_name(name, sizeof(name), step);
	for (unsigned i = 0; i < DIR_MAX_ENTRIES && (de = readdir(d)); i++) {
		const char *s = de->d_name;
		struct stat st;
		unsigned long t;
		int pfd;

		if (strncmp(s, "ps-", 3) || !all_digits(s + 3, strlen(s + 3)) ||
		    (t = strtoul(s + 3, NULL, 10)) >= MAX_PS_TASKS)
			continue;
		pfd = open_sub(dfd, s, O_RDONLY | O_DIRECTORY, vs->ckpt_root != NULL);
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

/*
 * Read and verify every file of @step in @dfd (@dir), stage into @st the
 * variables that place on task q->task of q->nps.  Nothing in @vs changes.
 */
static int prepare_step(struct coord_varstore *vs, const struct coord_ckpt_prep *q, int dfd,
			uint64_t step, struct coord_ckpt_stage *st, struct coord_ckpt_prep_res *res,
			struct coord_error *err)
{
	struct name_set ns = { 0 };
	struct ckpt_meta m0 = { 0 };
	uint32_t ntasks = 1;
	bool nofollow = vs->ckpt_root != NULL;
	int ret = 0;

	res->nstaged = res->ntotal = 0;
	res->dig_staged = res->dig_total = 0;
	for (uint32_t t = 0; t < ntasks && !ret; t++) {
		char name[48], path[4200];
		unsigned char *buf = NULL;
		struct ent *ents = NULL;
		struct ckpt_meta m;
		uint64_t size;
		uint32_t n = 0;
		int pfd;

		ckpt_name(name, sizeof(name), step);
		snprintf(path, sizeof(path), "%s/ps-%" PRIu32 "/%s", q->dir, t, name);
		ret = open_task_dir(vs, dfd, t, false, &pfd, err, q->dir);
		if (!ret) {
			ret = read_file(vs, pfd, name, path, nofollow, &buf, &size, err);
			close(pfd);
		}
		if (ret == -ENOENT) { /* an incomplete checkpoint, not none */
			char why[COORD_ERRMSG_LEN];

			snprintf(why, sizeof(why), "%s", err ? err->msg : "a file is missing");
			ret = BAD("checkpoint '%s' step %" PRIu64 " is incomplete: %s", q->dir,
				  step, why);
		}
		if (!ret)
			ret = parse(buf, size, step, path, &ents, &n, &m, err);
		if (!ret && t == 0) {
			m0 = m;
			if (m.version == 1)
				ret = count_v1(vs, dfd, q->dir, step, &ntasks, err);
			else if (m.nps > MAX_PS_TASKS)
				ret = BAD("checkpoint '%s': header says %" PRIu32 " ps tasks", path,
					  m.nps);
			else
				ntasks = m.nps;
		} else if (!ret && m.version != m0.version) {
			ret = BAD("checkpoint '%s': format version %" PRIu32 ", but ps-0's file of "
				  "that step is version %" PRIu32 ": the files disagree",
				  path, m.version, m0.version);
		}
		if (!ret && m.version != 1 && (m.task != t || m.nps != ntasks))
			ret = BAD("checkpoint '%s': header says task %" PRIu32 " of %" PRIu32
				  ", expected task %" PRIu32 " of %" PRIu32
				  " (ps-0's file): the files disagree",
				  path, m.task, m.nps, t, ntasks);
		if (!ret && n > SIZE_MAX / 2 - ns.n)
			ret = BAD("checkpoint '%s': too many variables", path);
		if (!ret && ns.n + n > ns.cap) {
			size_t cap = (ns.n + n) * 2;
			void *p = realloc(ns.nm, (cap ? cap : 1) * sizeof(*ns.nm));

			if (!p)
				ret = coord_seterr(err, -ENOMEM,
						   "checkpoint restore: out of memory");
			else
				ns.nm = p, ns.cap = cap;
		}
		for (uint32_t i = 0; i < n && !ret; i++) {
			uint64_t h = name_mix(ents[i].nm);

			memcpy(ns.nm[ns.n++], ents[i].nm, sizeof(ents[i].nm));
			res->ntotal++;
			res->dig_total += h;
			if (coord_var_shard(ents[i].nm, q->nps) != q->task)
				continue;
			ret = stage_add(st, &ents[i], path, err);
			res->nstaged++;
			res->dig_staged += h;
		}
		free(ents);
		free(buf);
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
	stage_free(st);
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
	ret = open_ckpt_dir(vs, q->dir, &dfd, err);
	if (ret)
		goto out_unlock;
	/* The candidates: the step asked for, or ps-0's latest, then (with
	 * FALLBACK) every older step in ps-0, newest first. */
	if (q->step != COORD_CKPT_STEP_LATEST) {
		latest = q->step;
		have_latest = true;
		fallback = false;
	} else {
		ret = open_task_dir(vs, dfd, 0, false, &pfd, err, q->dir);
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
			nsteps = list_steps(pfd, q->dir, &steps);
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
		stage_free(st);
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
		ret = stage_spares(st, err);
	if (!ret) {
		if (st->n) /* an empty checkpoint: no array (qsort wants one) */
			qsort(st->vars, st->n, sizeof(*st->vars), cmp_var);
		pthread_mutex_lock(&vs->names_lock);
		ret = stage_check_locked(vs, st, q->dir, err);
		if (!ret) {
			st->owner = q->owner;
			st->nonce = q->nonce;
			vs->stage = st;
			st = NULL;
		}
		pthread_mutex_unlock(&vs->names_lock);
	}
out:
	close(dfd);
out_unlock:
	pthread_mutex_unlock(&vs->save_lock);
	stage_free(st);
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
	stage_free(st);
	return 0;
}

void coord_varstore_abort(struct coord_varstore *vs, const void *owner)
{
	if (vs)
		drop_stage(vs, owner);
}
