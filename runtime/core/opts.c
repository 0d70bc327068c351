// SPDX-License-Identifier: MIT
/*
 * runtime/opts.c - coord_opts and coord_server_opts as structs that can
 * grow (runtime/abi.h): their exported _init_size() and the readers
 * coord_create() and the servers use.  The defaults themselves stay beside
 * their users (coordinator.c, transport/server/tcp_server.c).
 */
#include <coord/coord.h>

#include "runtime/util/abi.h"

#define offsetofend(type, member) (offsetof(type, member) + sizeof(((type *)0)->member))

/* The sizes first published (0.1.0): never change them. */
#define OPTS_SIZE_0 offsetofend(struct coord_opts, flags)
#define SERVER_OPTS_SIZE_0 offsetofend(struct coord_server_opts, transport)

void coord_opts_init_size(struct coord_opts *o, size_t size)
{
	struct coord_opts d;

	coord_opts_defaults(&d);
	coord_struct_init(o, size, &d, sizeof(d));
}

void coord_server_opts_init_size(struct coord_server_opts *o, size_t size)
{
	struct coord_server_opts d;

	coord_server_opts_defaults(&d);
	coord_struct_init(o, size, &d, sizeof(d));
}

int coord_opts_in(struct coord_opts *out, const struct coord_opts *in, struct coord_error *err)
{
	coord_opts_defaults(out);
	return coord_struct_in(out, sizeof(*out), in, OPTS_SIZE_0, "coord_opts", err);
}

int coord_server_opts_in(struct coord_server_opts *out, const struct coord_server_opts *in,
			 struct coord_error *err)
{
	coord_server_opts_defaults(out);
	return coord_struct_in(out, sizeof(*out), in, SERVER_OPTS_SIZE_0, "coord_server_opts", err);
}
