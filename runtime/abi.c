// SPDX-License-Identifier: MIT
/*
 * runtime/abi.c - the public option structs that can grow: their _init()
 * and the check of what a caller passes (runtime/abi.h says the rules).
 */
#include <string.h>

#include <coord/coord.h>
#include <coord/version.h>

#include "runtime/abi.h"

#define offsetofend(type, member) (offsetof(type, member) + sizeof(((type *)0)->member))

/*
 * The size of each struct when it was first published (0.1.0): never
 * change these; a field added later lies past them.
 */
#define OPTS_SIZE_0 offsetofend(struct coord_opts, flags)
#define SERVER_OPTS_SIZE_0 offsetofend(struct coord_server_opts, transport)
#define SLURM_OPTS_SIZE_0 offsetofend(struct coord_slurm_opts, njobs)

/* Fill the caller's @size bytes at @o from the defaults @d (@dsize bytes). */
static void struct_init(void *o, size_t size, const void *d, size_t dsize)
{
	if (!o || size < sizeof(size_t))
		return;
	memcpy(o, d, size < dsize ? size : dsize);
	if (size > dsize)
		memset((char *)o + dsize, 0, size - dsize);
	memcpy(o, &size, sizeof(size));
}

/* @out (@osize bytes, holding the defaults) overlaid with the caller's @in. */
static int struct_in(void *out, size_t osize, const void *in, size_t min, const char *what,
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
				what, i, size, coord_version());
	memcpy(out, in, size < osize ? size : osize);
	memcpy(out, &osize, sizeof(osize));
	return 0;
}

void coord_opts_init_size(struct coord_opts *o, size_t size)
{
	struct coord_opts d;

	coord_opts_defaults(&d);
	struct_init(o, size, &d, sizeof(d));
}

void coord_server_opts_init_size(struct coord_server_opts *o, size_t size)
{
	struct coord_server_opts d;

	coord_server_opts_defaults(&d);
	struct_init(o, size, &d, sizeof(d));
}

void coord_slurm_opts_init_size(struct coord_slurm_opts *o, size_t size)
{
	struct coord_slurm_opts d;

	coord_slurm_opts_defaults(&d);
	struct_init(o, size, &d, sizeof(d));
}

int coord_opts_in(struct coord_opts *out, const struct coord_opts *in, struct coord_error *err)
{
	coord_opts_defaults(out);
	return struct_in(out, sizeof(*out), in, OPTS_SIZE_0, "coord_opts", err);
}

int coord_server_opts_in(struct coord_server_opts *out, const struct coord_server_opts *in,
			 struct coord_error *err)
{
	coord_server_opts_defaults(out);
	return struct_in(out, sizeof(*out), in, SERVER_OPTS_SIZE_0, "coord_server_opts", err);
}

int coord_slurm_opts_in(struct coord_slurm_opts *out, const struct coord_slurm_opts *in,
			struct coord_error *err)
{
	coord_slurm_opts_defaults(out);
	return struct_in(out, sizeof(*out), in, SLURM_OPTS_SIZE_0, "coord_slurm_opts", err);
}
