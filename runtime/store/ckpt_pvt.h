/* SPDX-License-Identifier: MIT */
/*
 * runtime/store/ckpt_pvt.h - what the checkpoint files share, private to
 * runtime/store/: checkpoint.c (the format, its save and its parse),
 * ckpt_restore.c (staging, reading files, restore), ckpt_prepare.c
 * (prepare/commit/abort across layouts, re-splitting) and ckpt_root.c
 * (the checkpoint root and the ps-<task> directories).  The file format is
 * the offset table at the top of checkpoint.c.
 */
#ifndef COORD_RUNTIME_CKPT_PVT_H
#define COORD_RUNTIME_CKPT_PVT_H

#include <dirent.h>
#include <stdbool.h>
#include <stdint.h>
#include <string.h>

#include "runtime/store/varstore.h"

/* The header (checkpoint.c's offset table). */
#define COORD_CKPT_MAGIC "COORDCKP"
#define COORD_CKPT_VERSION 2u
#define HDR_V1_BYTES 40u
#define HDR_BYTES 48u
#define TRAILER_BYTES 4u
/* Bounds on retries and directory scans (style: every loop bounded). */
#define IO_MAX_EINTR 1000
#define DIR_MAX_ENTRIES (1u << 20)
#define MAX_PS_TASKS 4096u

/* An -EBADMSG into the caller's @err: a file that is not a whole checkpoint. */
#define BAD(...) coord_seterr(err, -EBADMSG, __VA_ARGS__)

/* --- little-endian encoding ------------------------------------------------ */

static inline void put_le32(unsigned char *p, uint32_t v)
{
	for (int i = 0; i < 4; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static inline void put_le64(unsigned char *p, uint64_t v)
{
	for (int i = 0; i < 8; i++)
		p[i] = (unsigned char)(v >> (8 * i));
}

static inline uint32_t get_le32(const unsigned char *p)
{
	uint32_t v = 0;

	for (int i = 0; i < 4; i++)
		v |= (uint32_t)p[i] << (8 * i);
	return v;
}

static inline uint64_t get_le64(const unsigned char *p)
{
	uint64_t v = 0;

	for (int i = 0; i < 8; i++)
		v |= (uint64_t)p[i] << (8 * i);
	return v;
}

/* Copy @n floats between host order and little-endian bytes. */
static inline void floats_to_le(unsigned char *dst, const float *src, size_t n)
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

static inline void floats_from_le(float *dst, const unsigned char *src, size_t n)
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

/* One variable of a parsed file; @data points into the file's buffer. */
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

/* checkpoint.c */
COORD_HIDDEN void coord_ckpt_name(char *buf, size_t len, uint64_t step);
COORD_HIDDEN bool coord_ckpt_parse_name(const char *s, size_t len, uint64_t *step);
COORD_HIDDEN bool coord_ckpt_all_digits(const char *s, size_t len);
COORD_HIDDEN DIR *coord_ckpt_list_dir(int dfd);
COORD_HIDDEN long coord_ckpt_list_steps(int dfd, const char *dir, uint64_t **stepsp);
COORD_HIDDEN unsigned coord_ckpt_clean_tmp(int dfd, const char *dir);
COORD_HIDDEN int coord_ckpt_open_dir(const char *dir, int *dfd, struct coord_error *err);
COORD_HIDDEN int coord_ckpt_parse(const unsigned char *buf, uint64_t size, uint64_t step,
				  const char *path, struct ent **entsp, uint32_t *nentsp,
				  struct ckpt_meta *meta, struct coord_error *err);

/* ckpt_restore.c: the stage, and reading files (ckpt_prepare.c uses both) */
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

COORD_HIDDEN void coord_ckpt_stage_free(struct coord_ckpt_stage *st);
COORD_HIDDEN int coord_ckpt_cmp_var(const void *a, const void *b);
COORD_HIDDEN int coord_ckpt_stage_new(struct coord_ckpt_stage *st, const char *name, unsigned ndim,
				      const uint64_t *dims, const char *path, struct coord_var **vp,
				      struct coord_error *err);
COORD_HIDDEN int coord_ckpt_stage_add(struct coord_ckpt_stage *st, const struct ent *e,
				      const char *path, struct coord_error *err);
COORD_HIDDEN int coord_ckpt_stage_spares(struct coord_ckpt_stage *st, struct coord_error *err);
COORD_HIDDEN int coord_ckpt_stage_check_locked(struct coord_varstore *vs,
					       const struct coord_ckpt_stage *st, const char *what,
					       struct coord_error *err);
COORD_HIDDEN void coord_ckpt_stage_commit_locked(struct coord_varstore *vs,
						 struct coord_ckpt_stage *st);
COORD_HIDDEN int coord_ckpt_read_file(struct coord_varstore *vs, int dfd, const char *name,
				      const char *path, bool nofollow, unsigned char **bufp,
				      uint64_t *sizep, struct coord_error *err);
COORD_HIDDEN int coord_ckpt_read_latest(int dfd, const char *dir, bool nofollow, uint64_t *stepp,
					struct coord_error *err);

/* ckpt_root.c */
COORD_HIDDEN int coord_ckpt_open_sub(int dfd, const char *name, int flags, bool nofollow);
COORD_HIDDEN int coord_ckpt_open_beneath(struct coord_varstore *vs, const char *dir, int *dfd,
					 struct coord_error *err);
COORD_HIDDEN int coord_ckpt_open_task_dir(struct coord_varstore *vs, int dfd, unsigned task,
					  bool make, int *pfd, struct coord_error *err,
					  const char *dir);

#endif /* COORD_RUNTIME_CKPT_PVT_H */
