// SPDX-License-Identifier: MIT
/*
 * tests/testfns.c - the standard test functions as a shared object for
 * coord-worker --fns (the entry point coord-worker looks up).
 */
#include "helpers.h"

int coord_register_fns(struct coord_registry *reg);

int coord_register_fns(struct coord_registry *reg)
{
	return t_register(reg);
}
