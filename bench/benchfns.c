// SPDX-License-Identifier: MIT
/*
 * bench/benchfns.c - the functions of bench_tcp and bench_fault, as a
 * shared object for coord-worker --fns and compiled into the benches
 * themselves, so both sides register the same table by the same code:
 *   empty   does nothing, no result (the cost of the runtime alone)
 *   inc     an int64 argument x, result x + 1 (a value to check: every
 *           RemoteValue of bench_fault must hold its own)
 */
#include <stdint.h>
#include <string.h>

#include <coord/coord.h>

int coord_register_fns(struct coord_registry *reg);

static int f_empty(struct coord_ctx *ctx, const void *args, size_t len)
{
	return 0;
}

static int f_inc(struct coord_ctx *ctx, const void *args, size_t len)
{
	int64_t x;

	if (len != sizeof(x))
		return COORD_EINVAL;
	memcpy(&x, args, sizeof(x));
	x++;
	return coord_ctx_set_result(ctx, &x, sizeof(x));
}

int coord_register_fns(struct coord_registry *reg)
{
	int r = coord_registry_add(reg, "empty", f_empty);

	return r ? r : coord_registry_add(reg, "inc", f_inc);
}
