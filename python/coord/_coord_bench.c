// SPDX-License-Identifier: MIT
/*
 * python/coord/_coord_bench.c - the C baseline of the Python benchmark
 * (bench/python_bench.py): the Coordinator's _bench_c* methods run the same
 * schedule, fetch and put loop as the coord package, in C, so the package's
 * own cost per call is their difference.
 *
 * What it keeps true: a baseline's loop runs with the GIL released and
 * counted in @busy; it only measures, and returns nanoseconds.
 */
#include "_coord.h"

#include <string.h>

/*
 * A baseline's arguments (fn_id, args: bytes, n[, chunk]) per @fmt ("ky*n" or
 * "ky*nn"), on an open coordinator; 0, or -1 with an exception and nothing held.
 */
static int bench_args(CoordObject *self, PyObject *args, const char *fmt, unsigned long *fn,
		      Py_buffer *b, Py_ssize_t *n, Py_ssize_t *chunk)
{
	if (!PyArg_ParseTuple(args, fmt, fn, b, n, chunk))
		return -1;
	if (check_open(self) < 0) {
		PyBuffer_Release(b);
		return -1;
	}
	return 0;
}

/* A baseline's end: the GIL back, the buffer released; 0, or -1 with @r raised. */
static int bench_end(CoordObject *self, PyThreadState *ts, Py_buffer *b, int r)
{
	relock(self, ts);
	PyBuffer_Release(b);
	if (r) {
		raise_code(r, NULL);
		return -1;
	}
	return 0;
}

/* _bench_c(fn_id, args: bytes, n) -> ns for n x (schedule, fetch, put) in C */
PyObject *py_bench_c(CoordObject *self, PyObject *args)
{
	PyThreadState *ts;
	unsigned long fn;
	Py_buffer b;
	Py_ssize_t n, i;
	int64_t t0, t1;
	int r = 0;

	if (bench_args(self, args, "ky*n", &fn, &b, &n, NULL) < 0)
		return NULL;
	ts = unlock(self);
	t0 = now_ns();
	for (i = 0; i < n && !r; i++) {
		struct coord_rv *rv;

		r = coord_schedule(self->c, (uint32_t)fn, b.buf, (size_t)b.len, &rv, NULL);
		if (!r) {
			r = coord_rv_fetch(rv, NULL, NULL, NULL);
			coord_rv_put(rv);
		}
	}
	t1 = now_ns();
	if (bench_end(self, ts, &b, r) < 0)
		return NULL;
	return PyLong_FromLongLong(t1 - t0);
}

/* _bench_c_split(fn_id, args: bytes, n) -> (ns to schedule n, ns to fetch and
 * put them once all are final): the C side of the layer's cost without waits */
PyObject *py_bench_c_split(CoordObject *self, PyObject *args)
{
	struct coord_rv **rvs;
	PyThreadState *ts;
	unsigned long fn;
	Py_buffer b;
	Py_ssize_t n, i, k = 0;
	int64_t t0, t1, t2, t3;
	int r = 0;

	if (bench_args(self, args, "ky*n", &fn, &b, &n, NULL) < 0)
		return NULL;
	rvs = PyMem_Calloc(n > 0 ? (size_t)n : 1, sizeof(*rvs));
	if (!rvs) {
		PyBuffer_Release(&b);
		return PyErr_NoMemory();
	}
	ts = unlock(self);
	t0 = now_ns();
	for (k = 0; k < n && !r; k++)
		r = coord_schedule(self->c, (uint32_t)fn, b.buf, (size_t)b.len, &rvs[k], NULL);
	t1 = now_ns();
	if (!r)
		r = coord_join(self->c, NULL);
	t2 = now_ns();
	for (i = 0; i < k; i++) {
		if (rvs[i] && coord_rv_fetch(rvs[i], NULL, NULL, NULL) && !r)
			r = COORD_EINVAL;
		coord_rv_put(rvs[i]);
	}
	t3 = now_ns();
	r = bench_end(self, ts, &b, r);
	PyMem_Free(rvs); /* with the GIL */
	if (r < 0)
		return NULL;
	return Py_BuildValue("LL", (long long)(t1 - t0), (long long)(t3 - t2));
}

/* _bench_c_many(fn_id, args: bytes, n, chunk) -> ns to schedule n with
 * coord_schedule_many() in chunks, RemoteValues put at once */
PyObject *py_bench_c_many(CoordObject *self, PyObject *args)
{
	PyThreadState *ts;
	struct coord_call calls[MANY_CHUNK];
	struct coord_rv *out[MANY_CHUNK];
	unsigned long fn;
	Py_buffer b;
	Py_ssize_t n, chunk, i, j;
	int64_t t0, t1;
	int r = 0;

	if (bench_args(self, args, "ky*nn", &fn, &b, &n, &chunk) < 0)
		return NULL;
	if (chunk < 1 || chunk > MANY_CHUNK)
		chunk = MANY_CHUNK;
	memset(calls, 0, sizeof(calls));
	for (i = 0; i < chunk; i++) {
		calls[i].fn = (uint32_t)fn;
		calls[i].args = b.buf;
		calls[i].len = (size_t)b.len;
	}
	ts = unlock(self);
	t0 = now_ns();
	for (i = 0; i < n && !r; i += chunk) {
		size_t k = (size_t)(n - i < chunk ? n - i : chunk), q = 0;

		r = coord_schedule_many(self->c, calls, k, out, &q, NULL);
		for (j = 0; j < (Py_ssize_t)q; j++)
			coord_rv_put(out[j]);
	}
	t1 = now_ns();
	if (bench_end(self, ts, &b, r) < 0)
		return NULL;
	return PyLong_FromLongLong(t1 - t0);
}
