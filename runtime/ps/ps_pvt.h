/* SPDX-License-Identifier: MIT */
/*
 * runtime/ps/ps_pvt.h - what ps.c, ps_ckpt.c and ps_part.c share: little-endian
 * loads and stores of the packed op results (runtime/ps/ps.h has their
 * layouts), the decoding of a variable record, the end of a ctx call.
 */
#ifndef COORD_RUNTIME_PS_PVT_H
#define COORD_RUNTIME_PS_PVT_H

#include <endian.h>
#include <stdint.h>
#include <string.h>

#include <coord/var.h>

#include "runtime/ps/ps.h"

static inline uint32_t ld32(const uint8_t *p)
{
	uint32_t v;

	memcpy(&v, p, 4);
	return le32toh(v);
}

static inline uint64_t ld64(const uint8_t *p)
{
	uint64_t v;

	memcpy(&v, p, 8);
	return le64toh(v);
}

static inline void st32(uint8_t *p, uint32_t v)
{
	v = htole32(v);
	memcpy(p, &v, 4);
}

static inline void st64(uint8_t *p, uint64_t v)
{
	v = htole64(v);
	memcpy(p, &v, 8);
}

/* A CREATE or LOOKUP result of @op into @var and @shape (either may be
 * NULL); -EPROTO if malformed. */
COORD_HIDDEN int coord_ps_info_out(const struct coord_ps_op *op, coord_var_t *var,
				   struct coord_var_shape *shape, struct coord_error *err);

/* The end of a ctx call that ran @ops (r: coord_ps_run()'s): a ps that
 * could not be reached is the closure's cause (S11); the message becomes
 * the ctx's.  Return: @r. */
struct coord_ctx;
COORD_HIDDEN int coord_ps_ctx_end(struct coord_ctx *ctx, const struct coord_ps_op *ops, unsigned n,
				  int r, const struct coord_error *e);

#endif /* COORD_RUNTIME_PS_PVT_H */
