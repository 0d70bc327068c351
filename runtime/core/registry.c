// SPDX-License-Identifier: MIT
/*
 * runtime/core/registry.c - functions and resource creators by name.
 *
 * Built once before use, then read-only: no synchronization is needed after
 * it is handed to coord_create() (documented in coord/worker.h).
 */
#include <stdlib.h>
#include <string.h>

#include "runtime/core/internal.h"

int coord_registry_create(struct coord_registry **out)
{
	struct coord_registry *r = calloc(1, sizeof(*r));

	if (!r)
		return COORD_ENOMEM;
	*out = r;
	return 0;
}

void coord_registry_destroy(struct coord_registry *reg)
{
	if (!reg)
		return;
	free(reg->fns);
	free(reg);
}

static int reg_add(struct coord_registry *reg, const char *name, coord_fn_t fn,
		   coord_res_create_t create, coord_res_destroy_t destroy)
{
	size_t len;

	if (!reg || !name || (!fn && !create))
		return COORD_EINVAL;
	len = strlen(name);
	if (len == 0 || len >= COORD_FN_NAME_MAX)
		return COORD_EINVAL;
	for (uint32_t i = 0; i < reg->n; i++)
		if (!strcmp(reg->fns[i].name, name))
			return COORD_EINVAL;
	if (reg->n == reg->cap) {
		uint32_t cap = reg->cap ? reg->cap * 2 : 16;
		struct coord_fn_entry *f = realloc(reg->fns, cap * sizeof(*f));

		if (!f)
			return COORD_ENOMEM;
		reg->fns = f;
		reg->cap = cap;
	}
	memset(&reg->fns[reg->n], 0, sizeof(reg->fns[0]));
	memcpy(reg->fns[reg->n].name, name, len + 1);
	reg->fns[reg->n].fn = fn;
	reg->fns[reg->n].create = create;
	reg->fns[reg->n].destroy = destroy;
	reg->n++;
	return 0;
}

int coord_registry_add(struct coord_registry *reg, const char *name, coord_fn_t fn)
{
	return fn ? reg_add(reg, name, fn, NULL, NULL) : COORD_EINVAL;
}

int coord_registry_add_resource(struct coord_registry *reg, const char *name,
				coord_res_create_t create, coord_res_destroy_t destroy)
{
	return create ? reg_add(reg, name, NULL, create, destroy) : COORD_EINVAL;
}
