// SPDX-License-Identifier: MIT
/*
 * runtime/abi.c - the public option structs that can grow: filling the
 * caller's bytes of one (its _init_size()) and reading what a caller passes
 * (runtime/abi.h says the rules), and filling one the library returns.
 * Used by runtime/opts.c, spec_slurm.c and metrics.c.
 */
#include <string.h>

#include <coord/version.h>

#include "runtime/util/abi.h"

void coord_struct_init(void *o, size_t size, const void *d, size_t dsize)
{
	if (!o || size < sizeof(size_t))
		return;
	memcpy(o, d, size < dsize ? size : dsize);
	if (size > dsize)
		memset((char *)o + dsize, 0, size - dsize);
	memcpy(o, &size, sizeof(size));
}

int coord_struct_in(void *out, size_t osize, const void *in, size_t min, const char *what,
		    struct coord_error *err)
{
	const unsigned char *tail = in;
	size_t size;

	memcpy(&size, in, sizeof(size));
	if (size < min)
		return coord_seterr(err, COORD_EINVAL,
				    "struct %s has size %zu: fill it with %s_init() first", what,
				    size, what);
	for (size_t i = osize; i < size; i++)
		if (tail[i])
			return coord_seterr(
				err, COORD_EINVAL,
				"struct %s sets an option (byte %zu of %zu) that libcoord "
				"%s does not know: a newer coord/*.h than the library",
				what, i, size, COORD_VERSION_STRING);
	memcpy(out, in, size < osize ? size : osize);
	memcpy(out, &osize, sizeof(osize));
	return 0;
}

int coord_struct_out(void *out, size_t size, const void *src, size_t ssize, size_t min,
		     const char *what, struct coord_error *err)
{
	size_t n = size < ssize ? size : ssize;

	if (size < min)
		return coord_seterr(
			err, COORD_EINVAL,
			"struct %s of %zu bytes: smaller than any libcoord %s has filled", what,
			size, what);
	memcpy(out, src, n);
	if (size > n)
		memset((char *)out + n, 0, size - n);
	memcpy(out, &n, sizeof(n));
	return 0;
}
