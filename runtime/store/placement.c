// SPDX-License-Identifier: MIT
/*
 * runtime/store/placement.c - where a variable lives among the ps tasks:
 * pure functions of its name, shape and the task count (varstore.h,
 * "Placement of variables over ps tasks").  The coordinator decides with
 * them, every worker and ps agrees, and a checkpoint's layout is checked
 * against them; they keep no state and take no lock.
 */
#include <stdint.h>
#include <string.h>

#include <coord/var.h>

#include "runtime/store/varstore.h"
#include "runtime/util/util.h"

/* The shard number of a partition's name "BASE/part_J" (J decimal, no
 * leading zero, < 2^20), with *@base_len = strlen(BASE); -1 otherwise. */
long coord_var_part_of(const char *name, size_t *base_len)
{
	static const char suf[] = "/part_";
	const char *p = name ? strrchr(name, '/') : NULL;
	long j = 0;

	if (!p || p == name || strncmp(p, suf, sizeof(suf) - 1) != 0)
		return -1;
	p += sizeof(suf) - 1;
	if (!*p || (p[0] == '0' && p[1]) || strlen(p) > 7)
		return -1;
	for (; *p; p++) {
		if (*p < '0' || *p > '9')
			return -1;
		j = j * 10 + (*p - '0');
	}
	if (j >= (1l << 20))
		return -1;
	*base_len = (size_t)(strrchr(name, '/') - name);
	return j;
}

unsigned coord_var_shard(const char *name, unsigned nps)
{
	size_t blen;
	long j;

	if (nps <= 1)
		return 0;
	if (!name)
		name = "";
	j = coord_var_part_of(name, &blen);
	if (j >= 0) /* shard J of a partitioned variable: J tasks after BASE's */
		return (unsigned)((coord_var_fnv1a64(name, blen) % nps + (uint64_t)j) % nps);
	return (unsigned)(coord_var_fnv1a64(name, strlen(name)) % nps);
}

unsigned coord_var_shard_rr(uint64_t seq, unsigned nps)
{
	return nps <= 1 ? 0 : (unsigned)(seq % nps);
}

int coord_var_partition_rows(uint64_t rows, unsigned nps, unsigned i, uint64_t *first,
			     uint64_t *count)
{
	uint64_t base, extra;

	if (nps == 0 || i >= nps || !first || !count)
		return -EINVAL;
	base = rows / nps;
	extra = rows % nps;
	*count = base + (i < extra ? 1 : 0);
	*first = (uint64_t)i * base + (i < extra ? i : extra);
	return 0;
}

int coord_var_partition_count(const struct coord_partitioner *p, unsigned nps, uint64_t rows,
			      uint64_t rowb, unsigned *k, struct coord_error *err)
{
	struct coord_partitioner d = { 0 };
	uint64_t bytes = rows * rowb, want;

	if (!p)
		p = &d;
	if (p->num_shards) {
		if (p->max_shards || p->min_shard_bytes || p->max_shard_bytes ||
		    p->num_shards > COORD_VAR_MAX_PARTS)
			return coord_seterr(err, COORD_EINVAL,
					    "partitioner: num_shards is 1..%d, alone",
					    COORD_VAR_MAX_PARTS);
		want = p->num_shards;
	} else if (p->max_shard_bytes) {
		want = (bytes + p->max_shard_bytes - 1) / p->max_shard_bytes;
		if (p->max_shards && want > p->max_shards)
			want = p->max_shards;
	} else {
		uint64_t min = p->min_shard_bytes ? p->min_shard_bytes : 256 << 10;
		uint64_t max = p->max_shards ? p->max_shards : nps;

		want = bytes / min;
		if (want > max)
			want = max;
	}
	if (want < 1)
		want = 1;
	if (want > rows)
		want = rows;
	if (want > COORD_VAR_MAX_PARTS)
		want = COORD_VAR_MAX_PARTS;
	*k = (unsigned)want;
	return 0;
}
