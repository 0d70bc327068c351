/* SPDX-License-Identifier: MIT */
/*
 * runtime/abi.h - the public option structs that can grow (issue 26).
 *
 * Each caller-filled options struct (coord_opts, coord_server_opts,
 * coord_slurm_opts) starts with `size_t size`, set by its inline _init() to
 * the sizeof the caller was compiled with (libbpf's opts and the kernel's
 * extensible structs, clone3()/openat2(), work the same way).  A function
 * taking one reads it through coord_opts_in(): a smaller struct (an older
 * program) gets this library's defaults for the fields it lacks; a larger
 * one (a newer program) is accepted only if every byte this library does not
 * know is zero.  A struct the library fills (coord_metrics) is passed with
 * the caller's sizeof by an inline wrapper: the library fills the common
 * prefix, zeroes the rest and says in its leading size how much it filled.  Fields are only ever appended; the first published size of
 * each struct (opts.c, spec_slurm.c) is the smallest accepted.
 */
#ifndef COORD_RUNTIME_ABI_H
#define COORD_RUNTIME_ABI_H

#include <coord/coord.h>

#include "runtime/util/util.h"

/*
 * coord_struct_init() - fill the caller's @size bytes at @o from this
 * library's defaults @d (@dsize bytes: a newer caller's tail is zeroed) and
 * store @size in its leading size field.  NULL or @size < sizeof(size_t):
 * nothing.
 */
COORD_HIDDEN void coord_struct_init(void *o, size_t size, const void *d, size_t dsize);

/*
 * coord_struct_in() - overlay @out (@osize bytes, holding the defaults) with
 * the caller's @in, whose size is its leading field.  Return: 0;
 * COORD_EINVAL (message names struct @what) for a size below @min (the
 * first published one: not from @what's _init()) or a non-zero byte past
 * @osize.
 */
COORD_HIDDEN int coord_struct_in(void *out, size_t osize, const void *in, size_t min,
				 const char *what, struct coord_error *err);

/*
 * coord_struct_out() - copy this library's filled struct @src (@ssize bytes)
 * to the caller's @out of @size bytes (its compiled sizeof): the common
 * prefix, zeros past it, and that prefix's length in @out's leading size
 * field.  Return: 0; COORD_EINVAL (message names struct @what) for a @size
 * below @min (the first published one).
 */
COORD_HIDDEN int coord_struct_out(void *out, size_t size, const void *src, size_t ssize, size_t min,
				  const char *what, struct coord_error *err);

/* The defaults of each struct, this library's whole size (no size set). */
COORD_HIDDEN void coord_opts_defaults(struct coord_opts *o);
COORD_HIDDEN void coord_server_opts_defaults(struct coord_server_opts *o);

/*
 * coord_*_opts_in() - the caller's @in as this library's struct in @out:
 * its fields, the defaults for those it lacks (coord_struct_in()).
 */
COORD_HIDDEN int coord_opts_in(struct coord_opts *out, const struct coord_opts *in,
			       struct coord_error *err);
COORD_HIDDEN int coord_server_opts_in(struct coord_server_opts *out,
				      const struct coord_server_opts *in, struct coord_error *err);
COORD_HIDDEN int coord_slurm_opts_in(struct coord_slurm_opts *out,
				     const struct coord_slurm_opts *in, struct coord_error *err);

#endif
