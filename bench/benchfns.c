// SPDX-License-Identifier: MIT
/*
 * bench/benchfns.c - the functions of bench_tcp and bench_fault, as a
 * shared object for coord-worker --fns and compiled into the benches
 * themselves, so both sides register the same table by the same code:
 *   empty   does nothing, no result (the cost of the runtime alone)
 *   inc     an int64 argument x, result x + 1 (a value to check: every
 *           RemoteValue of bench_fault must hold its own)
 *   hold    a uint64 argument d: sleeps d ns; result the CLOCK_MONOTONIC
 *           times it started and ended (bench_cancel: what ran, and when)
 *   fail    a uint64 argument d: sleeps d ns, then fails (bench_cancel's
 *           error); result-less
 */
#include <stdint.h>
#include <string.h>
#include <time.h>

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

static uint64_t mono_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

/* Sleep the uint64 ns in @args; its start time, or 0 on a bad argument. */
static uint64_t nap(const void *args, size_t len)
{
	uint64_t d, t0 = mono_ns();
	struct timespec ts;

	if (len != sizeof(d))
		return 0;
	memcpy(&d, args, sizeof(d));
	ts.tv_sec = (time_t)(d / 1000000000ull);
	ts.tv_nsec = (long)(d % 1000000000ull);
	while (nanosleep(&ts, &ts) != 0)
		;
	return t0;
}

static int f_hold(struct coord_ctx *ctx, const void *args, size_t len)
{
	uint64_t t[2];

	t[0] = nap(args, len);
	if (!t[0])
		return COORD_EINVAL;
	t[1] = mono_ns();
	return coord_ctx_set_result(ctx, t, sizeof(t));
}

static int f_fail(struct coord_ctx *ctx, const void *args, size_t len)
{
	if (!nap(args, len))
		return COORD_EINVAL;
	return coord_ctx_fail(ctx, COORD_EINVAL, "bench: the failing closure");
}

int coord_register_fns(struct coord_registry *reg)
{
	int r = coord_registry_add(reg, "empty", f_empty);

	r = r ? r : coord_registry_add(reg, "inc", f_inc);
	r = r ? r : coord_registry_add(reg, "hold", f_hold);
	return r ? r : coord_registry_add(reg, "fail", f_fail);
}
