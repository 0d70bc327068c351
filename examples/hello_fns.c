// SPDX-License-Identifier: MIT
/*
 * examples/hello_fns.c - the functions of examples/hello.c, as a worker
 * library: hello links them in for its in-process workers, and meson builds
 * them as libhello_fns.so for coord-worker processes (hello --spec):
 *
 *   build/tools/coord-worker --fns build/examples/libhello_fns.so --listen 127.0.0.1:7001
 *
 * A worker library exports coord_register_fns() (coord/worker.h), which
 * registers every function under the name the coordinator looks up.
 * Outside this tree, build one with pkg-config alone:
 *
 *   cc -shared -fPIC -o libhello_fns.so hello_fns.c $(pkg-config --cflags --libs coord)
 */
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <time.h>

#include <coord/coord.h>

/* square(x) = x * x, for one int64 x. */
static int square(struct coord_ctx *ctx, const void *args, size_t len)
{
	int64_t x, y;

	if (len != sizeof(x))
		return coord_ctx_fail(ctx, COORD_EINVAL, "square wants one int64");
	memcpy(&x, args, sizeof(x));
	y = x * x;
	return coord_ctx_set_result(ctx, &y, sizeof(y));
}

/* Sleeps 2 ms: something to cancel. */
static int slow(struct coord_ctx *ctx, const void *args, size_t len)
{
	struct timespec ts = { 0, 2000000 };

	nanosleep(&ts, NULL);
	return 0;
}

/* Always fails, naming its worker. */
static int fail(struct coord_ctx *ctx, const void *args, size_t len)
{
	return coord_ctx_fail(ctx, -EIO, "worker %d: the disk is on fire", coord_ctx_worker(ctx));
}

int coord_register_fns(struct coord_registry *reg);
int coord_register_fns(struct coord_registry *reg)
{
	int r = coord_registry_add(reg, "square", square);

	if (!r)
		r = coord_registry_add(reg, "slow", slow);
	if (!r)
		r = coord_registry_add(reg, "fail", fail);
	return r;
}
