/* SPDX-License-Identifier: MIT */
/*
 * runtime/ps/ps_pvt.h - what ps.c and ps_ckpt.c share: little-endian loads
 * and stores of the packed op results (runtime/ps/ps.h has their layouts).
 */
#ifndef COORD_RUNTIME_PS_PVT_H
#define COORD_RUNTIME_PS_PVT_H

#include <endian.h>
#include <stdint.h>
#include <string.h>

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

#endif /* COORD_RUNTIME_PS_PVT_H */
