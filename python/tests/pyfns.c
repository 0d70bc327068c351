// SPDX-License-Identifier: MIT
/*
 * python/tests/pyfns.c - the worker functions of the Python tests, examples and
 * benchmark, as a shared object for ClusterCoordinator(functions=...) and
 * coord-worker --fns.  Arguments and results are little-endian int64, float32
 * or float64 arrays, as the package's struct codec packs them.
 */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <coord/coord.h>
#include <coord/var.h>

int coord_register_fns(struct coord_registry *reg);

static int f_noop(struct coord_ctx *ctx, const void *args, size_t len)
{
	return 0;
}

static int f_echo(struct coord_ctx *ctx, const void *args, size_t len)
{
	return coord_ctx_set_result(ctx, args, len);
}

/* int64 -> its square */
static int f_square(struct coord_ctx *ctx, const void *args, size_t len)
{
	int64_t x;

	if (len != sizeof(x))
		return coord_ctx_fail(ctx, COORD_EINVAL, "square takes one int64, not %zu bytes",
				      len);
	memcpy(&x, args, sizeof(x));
	x *= x;
	return coord_ctx_set_result(ctx, &x, sizeof(x));
}

/* int64[n] -> their sum */
static int f_add(struct coord_ctx *ctx, const void *args, size_t len)
{
	int64_t s = 0, x;
	size_t i;

	for (i = 0; i + sizeof(x) <= len; i += sizeof(x)) {
		memcpy(&x, (const char *)args + i, sizeof(x));
		s += x;
	}
	return coord_ctx_set_result(ctx, &s, sizeof(s));
}

/* float32[n] -> float32[n] * 2 (written in place in the result) */
static int f_scale(struct coord_ctx *ctx, const void *args, size_t len)
{
	float *out = coord_ctx_result_buf(ctx, len), x;
	size_t i;

	if (!out)
		return coord_ctx_fail(ctx, COORD_ENOMEM, "no result buffer");
	for (i = 0; i < len / sizeof(x); i++) {
		memcpy(&x, (const char *)args + i * sizeof(x), sizeof(x));
		out[i] = 2 * x;
	}
	return 0;
}

/* int64 code -> fails with it */
static int f_fail(struct coord_ctx *ctx, const void *args, size_t len)
{
	int64_t code = COORD_EINVAL;

	if (len == sizeof(code))
		memcpy(&code, args, sizeof(code));
	return coord_ctx_fail(ctx, (int)code, "failed on purpose (code %lld)", (long long)code);
}

/* int64 ms -> sleeps that long; the worker's index */
static int f_sleep_ms(struct coord_ctx *ctx, const void *args, size_t len)
{
	int64_t ms = 0, w = coord_ctx_worker(ctx);
	struct timespec ts;

	if (len == sizeof(ms))
		memcpy(&ms, args, sizeof(ms));
	ts.tv_sec = ms / 1000;
	ts.tv_nsec = (ms % 1000) * 1000000;
	nanosleep(&ts, NULL);
	return coord_ctx_set_result(ctx, &w, sizeof(w));
}

/* uint64 var -> waits (up to 10 s) until element 0 of the variable is not 0 */
static int f_wait_var(struct coord_ctx *ctx, const void *args, size_t len)
{
	struct timespec ts = { 0, 1000000 };
	coord_var_t v;
	float x = 0;
	int i, r;

	if (len != sizeof(v))
		return coord_ctx_fail(ctx, COORD_EINVAL, "wait_var takes a variable");
	memcpy(&v, args, sizeof(v));
	for (i = 0; i < 10000 && x == 0; i++) {
		r = coord_ctx_var_read(ctx, v, 0, 1, &x);
		if (r)
			return r;
		if (x == 0)
			nanosleep(&ts, NULL);
	}
	if (x == 0)
		return coord_ctx_fail(ctx, COORD_ETIMEDOUT, "the variable stayed 0 for 10 s");
	return coord_ctx_set_result(ctx, &x, sizeof(x));
}

/* A dataset "from_tensor_slices" of int64 values, repeated forever; its
 * per-worker component is the iterator. */
struct ds {
	size_t pos, n;
	int64_t v[];
};

static int r_ds_create(struct coord_ctx *ctx, const void *args, size_t len, void **res)
{
	size_t n = len / sizeof(int64_t);
	struct ds *d;

	if (!n)
		return coord_ctx_fail(ctx, COORD_EINVAL, "from_tensor_slices takes int64 values");
	d = malloc(sizeof(*d) + n * sizeof(int64_t));
	if (!d)
		return COORD_ENOMEM;
	d->pos = 0;
	d->n = n;
	memcpy(d->v, args, n * sizeof(int64_t));
	*res = d;
	return 0;
}

static int ds_next(struct coord_ctx *ctx, int64_t *x)
{
	struct ds *d = coord_ctx_per_worker(ctx, 0);

	if (!d)
		return coord_ctx_fail(ctx, COORD_EINVAL, "takes a per-worker iterator");
	/* one worker runs one closure at a time, but be safe: relaxed, a counter */
	*x = d->v[__atomic_fetch_add(&d->pos, 1, __ATOMIC_RELAXED) % d->n];
	return 0;
}

/* (per-worker iterator) -> next(iterator) as int64 */
static int f_next(struct coord_ctx *ctx, const void *args, size_t len)
{
	int64_t x;
	int r = ds_next(ctx, &x);

	return r ? r : coord_ctx_set_result(ctx, &x, sizeof(x));
}

/* (uint64 var, per-worker iterator) -> v.assign_add(next(iterator));
 * v.read_value() as float32 (the seed's fetch example) */
static int f_assign_add_next(struct coord_ctx *ctx, const void *args, size_t len)
{
	coord_var_t v;
	int64_t x;
	float f;
	int r;

	if (len != sizeof(v))
		return coord_ctx_fail(ctx, COORD_EINVAL, "takes a variable");
	memcpy(&v, args, sizeof(v));
	r = ds_next(ctx, &x);
	if (r)
		return r;
	f = (float)x;
	r = coord_ctx_var_assign_add(ctx, v, 0, 1, &f);
	if (!r)
		r = coord_ctx_var_read(ctx, v, 0, 1, &f);
	return r ? r : coord_ctx_set_result(ctx, &f, sizeof(f));
}

int coord_register_fns(struct coord_registry *reg)
{
	if (coord_registry_add(reg, "noop", f_noop) || coord_registry_add(reg, "echo", f_echo) ||
	    coord_registry_add(reg, "square", f_square) || coord_registry_add(reg, "add", f_add) ||
	    coord_registry_add(reg, "scale", f_scale) || coord_registry_add(reg, "fail", f_fail) ||
	    coord_registry_add(reg, "sleep_ms", f_sleep_ms) ||
	    coord_registry_add(reg, "wait_var", f_wait_var) ||
	    coord_registry_add(reg, "next", f_next) ||
	    coord_registry_add(reg, "assign_add_next", f_assign_add_next) ||
	    coord_registry_add_resource(reg, "from_tensor_slices", r_ds_create, free))
		return COORD_EINVAL;
	return 0;
}
