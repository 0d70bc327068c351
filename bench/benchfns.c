// SPDX-License-Identifier: MIT
/*
 * bench/benchfns.c - the functions of bench_tcp, as a shared object for
 * coord-worker --fns and compiled into the bench itself, so both sides
 * register the same table by the same code:
 *   empty   does nothing, no result (the cost of the runtime alone)
 */
#include <coord/coord.h>

int coord_register_fns(struct coord_registry *reg);

static int f_empty(struct coord_ctx *ctx, const void *args, size_t len)
{
	return 0;
}

int coord_register_fns(struct coord_registry *reg)
{
	return coord_registry_add(reg, "empty", f_empty);
}
