// SPDX-License-Identifier: MIT
/*
 * python/coord/_coord_conv.c - argument and result conversion for the
 * coord._coord extension, written once for all its types: a function id, a
 * call's argument bytes, a timeout, a list or tuple made from a C array, and
 * the wait in slices that every blocking call (fetch, join) runs.
 *
 * What it keeps true:
 *   - A call's arguments are passed from the caller's memory, never copied:
 *     bytes directly, any other object through a C-contiguous buffer that the
 *     caller releases after the coord call (call_arg()).
 *   - A wait releases the GIL only inside its slice callback and looks at
 *     signals (Ctrl-C) between slices of at most WAIT_SLICE_NS; a slice that
 *     ran out is told from a closure's own COORD_ETIMEDOUT by err.closure:
 *     only the closure's names it.
 */
#include "_coord.h"

#include <string.h>
#include <time.h>

int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

/* A timeout argument: None (forever, -1) or seconds >= 0. */
int timeout_arg(PyObject *o, int64_t *ns)
{
	double s;

	if (!o || o == Py_None) {
		*ns = -1;
		return 0;
	}
	s = PyFloat_AsDouble(o);
	if (s == -1.0 && PyErr_Occurred())
		return -1;
	*ns = s <= 0 ? 0 : (int64_t)(s * 1e9);
	return 0;
}

/* A function id (coord_fn_lookup()'s) or a worker's index: truncated to 32 bits. */
int u32_arg(PyObject *o, uint32_t *v)
{
	unsigned long l = PyLong_AsUnsignedLong(o);

	if (l == (unsigned long)-1 && PyErr_Occurred())
		return -1;
	*v = (uint32_t)l;
	return 0;
}

/*
 * A call's argument bytes from @a: bytes (no buffer taken), None (empty), or
 * any C-contiguous buffer, taken into @b: release it (b->obj set) after the
 * call.  @b starts zeroed.
 */
int call_arg(PyObject *a, Py_buffer *b, const void **args, size_t *len)
{
	if (PyBytes_CheckExact(a)) {
		*args = PyBytes_AS_STRING(a);
		*len = (size_t)PyBytes_GET_SIZE(a);
	} else if (a != Py_None) {
		if (PyObject_GetBuffer(a, b, PyBUF_C_CONTIGUOUS) < 0)
			return -1;
		*args = b->buf;
		*len = (size_t)b->len;
	}
	return 0;
}

/* A list (or a tuple) of @n items made by @item from @arr; NULL with an exception. */
PyObject *seq_of(int tuple, size_t n, item_fn item, const void *arr)
{
	PyObject *l = tuple ? PyTuple_New((Py_ssize_t)n) : PyList_New((Py_ssize_t)n);
	size_t i;

	for (i = 0; l && i < n; i++) {
		PyObject *v = item(arr, i);

		if (!v) {
			Py_CLEAR(l);
			break;
		}
		if (tuple)
			PyTuple_SET_ITEM(l, (Py_ssize_t)i, v);
		else
			PyList_SET_ITEM(l, (Py_ssize_t)i, v);
	}
	return l;
}

PyObject *item_str(const void *arr, size_t i)
{
	return PyUnicode_FromString(((const char *const *)arr)[i]);
}

PyObject *item_str_or_none(const void *arr, size_t i)
{
	const char *s = ((const char *const *)arr)[i];

	return s ? PyUnicode_FromString(s) : Py_NewRef(Py_None);
}

PyObject *item_i64(const void *arr, size_t i)
{
	return PyLong_FromLongLong(((const int64_t *)arr)[i]);
}

PyObject *item_u64(const void *arr, size_t i)
{
	return PyLong_FromUnsignedLongLong(((const uint64_t *)arr)[i]);
}

/*
 * Wait for @timeout_ns (-1: forever) in slices: @call(ctx, slice, e) waits up
 * to one slice (it releases the GIL itself) and returns a coord code.  Between
 * slices, signals and @stop(ctx) (may be NULL; -1 with an exception stops) get
 * in.  Returns 0 with *@code set to @call's code (@e filled), or to
 * COORD_ETIMEDOUT with e->closure == COORD_NO_CLOSURE once @timeout_ns passed;
 * or -1 with a Python exception.
 */
int wait_in_slices(int64_t timeout_ns, slice_fn call, int (*stop)(void *ctx), void *ctx,
		   struct coord_error *e, int *code)
{
	int64_t until = timeout_ns < 0 ? -1 : now_ns() + timeout_ns;

	for (;;) {
		int64_t slice = WAIT_SLICE_NS, left;

		if (until >= 0) {
			left = until - now_ns();
			slice = left < slice ? (left < 0 ? 0 : left) : slice;
		}
		memset(e, 0, sizeof(*e));
		*code = call(ctx, slice, e);
		/* the slice ran out (no closure named), or the closure's own
		 * outcome, whatever its code (it names the closure) */
		if (*code != COORD_ETIMEDOUT || e->closure != COORD_NO_CLOSURE)
			return 0;
		if (PyErr_CheckSignals())
			return -1;
		if (stop && stop(ctx) < 0)
			return -1;
		if (until >= 0 && now_ns() >= until)
			return 0;
	}
}
