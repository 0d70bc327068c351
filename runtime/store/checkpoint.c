// SPDX-License-Identifier: MIT
/*
 * runtime/store/checkpoint.c - crash-safe save and verified restore of a variable
 * store (see varstore.h for the API, varstore.c for the locking).
 *
 * File DIR/ckpt-<step>.coord, every integer little-endian:
 *
 *   offset  size  field
 *   0       8     magic "COORDCKP"
 *   8       4     version (COORD_CKPT_VERSION)
 *   12      4     flags, 0 (a reader refuses other values)
 *   16      8     step (must match the file name)
 *   24      4     variable count
 *   28      4     reserved, 0
 *   32      8     total file size in bytes, trailer included
 *   40      ...   per variable:
 *                   4        name length L (1..63)
 *                   L        name, [A-Za-z0-9_./-], no NUL
 *                   4        ndim (0..4)
 *                   8*ndim   dims
 *                   4*nelem  float32 data, row-major
 *   size-4  4     CRC-32C (Castagnoli) of bytes [0, size - 4)
 *
 * DIR/latest holds one line, "ckpt-<step>.coord\n".
 *
 * Crash safety (save): each file is written as DIR/.<name>.tmp.<pid>.<n>
 * (O_EXCL), fsync'd, closed, renamed over its final name, and then DIR is
 * fsync'd so the rename itself is durable.  The checkpoint is renamed
 * before latest is written, so latest only ever names a whole file.  A
 * crash leaves at most a stray temp file, which restore never opens (it
 * opens only the name latest gives, or the step asked for).
 *
 * Verification (restore): the file is read whole into memory and checked
 * before the store is touched: size against opts.max_ckpt_bytes, magic,
 * version, flags, step, the header's size against the real size (so a
 * truncated file is reported as truncated), the CRC, then every length
 * against the bytes that remain, names, shapes, duplicates, and each name
 * against the store (same shape or absent).  New variables are allocated
 * and filled unpublished; only when nothing can fail any more are they
 * published and the existing ones overwritten.
 */
#include <dirent.h>
#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "runtime/store/varstore.h"

#define COORD_CKPT_MAGIC "COORDCKP"
#define COORD_CKPT_VERSION 1u
#define HDR_BYTES 40u
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
 * Delete checkpoints beyond the newest @keep (by step), never @cur.
 * Failures are logged: the new checkpoint is already safe.
 */
static void prune(int dfd, const char *dir, unsigned keep, uint64_t cur)
{
	uint64_t *steps = NULL, step;
	size_t n = 0, cap = 0, kept = 1; /* cur */
	struct dirent *de;
	DIR *d;
	int fd;

	if (keep == 0)
		return;
	fd = dup(dfd);
	if (fd < 0 || !(d = fdopendir(fd))) {
		if (fd >= 0)
			close(fd);
		coord_log(COORD_LOG_WARN, "checkpoint dir '%s': cannot list to prune", dir);
		return;
	}
	for (unsigned i = 0; i < DIR_MAX_ENTRIES && (de = readdir(d)); i++) {
		if (!parse_ckpt_name(de->d_name, strlen(de->d_name), &step) || step == cur)
			continue;
		if (n == cap) {
			uint64_t *ns = realloc(steps, (cap ? cap * 2 : 16) * sizeof(*ns));

			if (!ns)
				break;
			steps = ns;
			cap = cap ? cap * 2 : 16;
		}
		steps[n++] = step;
	}
	closedir(d);
	if (n)
		qsort(steps, n, sizeof(*steps), cmp_desc);
	for (size_t i = 0; i < n; i++) {
		char name[48];

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

int coord_varstore_save(struct coord_varstore *vs, const char *dir, uint64_t step,
			struct coord_error *err)
{
	struct ckpt_job j = { .vs = vs, .step = step, .bytes = HDR_BYTES + TRAILER_BYTES };
	char final[48], latest[64];
	uint32_t n;
	int dfd, ret;

	if (!vs)
		return coord_seterr(err, -EINVAL, "checkpoint save: NULL store");
	ret = open_dir(dir, &dfd, err);
	if (ret)
		return ret;
	pthread_mutex_lock(&vs->save_lock);
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
	struct coord_var *old; /* existing variable of that name */
	struct coord_var *nv;  /* new, unpublished */
};

static int cmp_ent(const void *a, const void *b)
{
	return strcmp(((const struct ent *)a)->nm, ((const struct ent *)b)->nm);
}

#define BAD(...) coord_seterr(err, -EBADMSG, __VA_ARGS__)

/* Parse and check the whole of @buf (@size bytes); fill @ents. */
static int parse(const unsigned char *buf, uint64_t size, uint64_t step, const char *path,
		 struct ent **entsp, uint32_t *nentsp, struct coord_error *err)
{
	uint32_t ver, nvars, stored, crc;
	uint64_t o = HDR_BYTES, end = size - TRAILER_BYTES, hsize, hstep;
	struct ent *ents;
	struct coord_error sub;

	if (size < HDR_BYTES + TRAILER_BYTES)
		return BAD("checkpoint '%s': truncated: %" PRIu64 " bytes, smaller than the "
			   "%u-byte header and trailer",
			   path, size, HDR_BYTES + TRAILER_BYTES);
	if (memcmp(buf, COORD_CKPT_MAGIC, 8))
		return BAD("checkpoint '%s': bad magic: not a coord checkpoint", path);
	ver = get_le32(buf + 8);
	if (ver != COORD_CKPT_VERSION)
		return BAD("checkpoint '%s': format version %" PRIu32 ", this build reads "
			   "version %u",
			   path, ver, COORD_CKPT_VERSION);
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

static bool shape_eq(const struct coord_var *v, const struct ent *e)
{
	if (v->ndim != e->ndim)
		return false;
	for (unsigned d = 0; d < e->ndim; d++)
		if (v->dims[d] != e->dims[d])
			return false;
	return true;
}

/* Apply verified entries; all or nothing.  Caller holds vs->names_lock. */
static int apply_locked(struct coord_varstore *vs, struct ent *ents, uint32_t n, const char *path,
			struct coord_error *err)
{
	/* Relaxed: names_lock is held and nvars is stored only under it. */
	uint32_t nvars = atomic_load_explicit(&vs->nvars, memory_order_relaxed);
	uint32_t nnew = 0;
	int ret = 0;

	for (uint32_t i = 0; i < n; i++) {
		struct ent *e = &ents[i];

		e->old = coord_vs_find_locked(vs, e->nm);
		if (e->old && !shape_eq(e->old, e)) {
			char have[96], want[96];

			coord_vs_fmt_shape(have, sizeof(have), e->old->ndim, e->old->dims);
			coord_vs_fmt_shape(want, sizeof(want), e->ndim, e->dims);
			return coord_seterr(err, -EEXIST,
					    "checkpoint '%s': variable '%s' has shape %s in the "
					    "checkpoint, %s in the store",
					    path, e->nm, want, have);
		}
		nnew += !e->old;
	}
	if (nnew > COORD_VAR_MAX_VARS - nvars)
		return coord_seterr(err, -ENOSPC,
				    "checkpoint '%s': %" PRIu32 " new variables do not fit", path,
				    nnew);
	/* Chunks for the new ids now, so that publishing cannot fail. */
	for (uint64_t id = nvars; id < (uint64_t)nvars + nnew && !ret;
	     id += COORD_VS_CHUNK - (id & (COORD_VS_CHUNK - 1))) {
		unsigned c = (unsigned)(id >> COORD_VS_CHUNK_SHIFT);

		if (!vs->chunks[c]) {
			vs->chunks[c] = calloc(COORD_VS_CHUNK, sizeof(*vs->chunks[c]));
			if (!vs->chunks[c])
				ret = coord_seterr(err, -ENOMEM, "checkpoint '%s': out of memory",
						   path);
		}
	}
	for (uint32_t i = 0; i < n && !ret; i++) {
		struct ent *e = &ents[i];

		if (e->old)
			continue;
		ret = coord_vs_var_alloc(e->nm, e->ndim, e->dims, &e->nv, err);
		if (!ret)
			floats_from_le(e->nv->data, e->data, e->nelem);
	}
	if (ret) {
		for (uint32_t i = 0; i < n; i++) {
			coord_vs_var_free(ents[i].nv);
			ents[i].nv = NULL;
		}
		return ret;
	}
	/* Nothing below can fail. */
	for (uint32_t i = 0; i < n; i++) {
		struct ent *e = &ents[i];

		if (e->old) {
			coord_vs_lock(e->old, 0, e->old->nstripes - 1);
			coord_vs_write_begin(e->old); /* varstore.c SNAP1 */
			floats_from_le(e->old->data, e->data, e->nelem);
			coord_vs_write_end(e->old);
			coord_vs_unlock(e->old, 0, e->old->nstripes - 1);
		} else if (coord_vs_publish_locked(vs, e->nv, err)) {
			coord_die("checkpoint restore: publish failed after its checks", EIO);
		}
	}
	return 0;
}

static int load(struct coord_varstore *vs, int dfd, const char *dir, uint64_t step,
		struct coord_error *err)
{
	char name[48], path[4200];
	unsigned char *buf = NULL;
	struct ent *ents = NULL;
	uint32_t n = 0;
	struct stat st;
	uint64_t limit;
	int fd, ret;

	ckpt_name(name, sizeof(name), step);
	snprintf(path, sizeof(path), "%s/%s", dir, name);
	fd = openat(dfd, name, O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		ret = -errno;
		return coord_seterr(err, ret, "checkpoint '%s': open: %s", path,
				    coord_strerror(ret));
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
	if (ret == -ENODATA) {
		ret = coord_seterr(err, -EBADMSG, "checkpoint '%s': shrank while being read", path);
		goto out;
	} else if (ret) {
		coord_seterr(err, ret, "checkpoint '%s': read: %s", path, coord_strerror(ret));
		goto out;
	}
	ret = parse(buf, (uint64_t)st.st_size, step, path, &ents, &n, err);
	if (ret)
		goto out;
	pthread_mutex_lock(&vs->names_lock);
	ret = apply_locked(vs, ents, n, path, err);
	pthread_mutex_unlock(&vs->names_lock);
out:
	free(ents);
	free(buf);
	close(fd);
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
	ret = load(vs, dfd, dir, step, err);
	close(dfd);
	return ret;
}

int coord_varstore_restore(struct coord_varstore *vs, const char *dir, uint64_t *stepp,
			   struct coord_error *err)
{
	char line[64];
	uint64_t step;
	ssize_t r = -1;
	size_t len;
	int dfd, fd, ret;

	if (!vs)
		return coord_seterr(err, -EINVAL, "checkpoint restore: NULL store");
	ret = open_dir(dir, &dfd, err);
	if (ret)
		return ret;
	fd = openat(dfd, "latest", O_RDONLY | O_CLOEXEC);
	if (fd < 0) {
		ret = -errno;
		if (ret == -ENOENT)
			coord_seterr(err, ret, "no checkpoint in '%s' (no 'latest' file)", dir);
		else
			coord_seterr(err, ret, "checkpoint '%s/latest': open: %s", dir,
				     coord_strerror(ret));
		goto out;
	}
	/* The file is small and was written whole (rename): one read, retried
	 * only on EINTR, a bounded number of times. */
	for (unsigned i = 0; i < IO_MAX_EINTR; i++) {
		r = read(fd, line, sizeof(line) - 1);
		if (r >= 0 || errno != EINTR)
			break;
	}
	close(fd);
	if (r < 0) {
		ret = -errno;
		coord_seterr(err, ret, "checkpoint '%s/latest': read: %s", dir,
			     coord_strerror(ret));
		goto out;
	}
	len = (size_t)r;
	line[len] = '\0';
	if (len && line[len - 1] == '\n')
		len--;
	if (!parse_ckpt_name(line, len, &step)) {
		ret = coord_seterr(err, -EBADMSG,
				   "checkpoint '%s/latest': does not name a checkpoint file", dir);
		goto out;
	}
	ret = load(vs, dfd, dir, step, err);
	if (!ret && stepp)
		*stepp = step;
out:
	close(dfd);
	return ret;
}
