// SPDX-License-Identifier: MIT
/*
 * runtime/util/env.c - integers from the environment, for options any layer
 * reads (TF_* and COORD_* variables).
 */
#include <errno.h>
#include <stdint.h>
#include <stdlib.h>

#include "runtime/util/util.h"

/* A non-negative integer from the environment, else @def (warns when set
 * to something else). */
int coord_env_int(const char *name, int def)
{
	const char *v = getenv(name);
	char *end;
	long x;

	if (!v || !*v)
		return def;
	errno = 0;
	x = strtol(v, &end, 10);
	if (errno || *end || x < 0 || x > INT32_MAX) {
		coord_log(COORD_LOG_WARN, "ignoring %s=%s: not a non-negative integer", name, v);
		return def;
	}
	return (int)x;
}
