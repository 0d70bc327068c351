// SPDX-License-Identifier: MIT
/*
 * python/coord/_coord_rv.c - RemoteValue, the extension's type over struct
 * coord_rv (what schedule() returns), and PerWorker over struct coord_pw.
 *
 * What it keeps true:
 *   - A RemoteValue owns one coord_rv reference, put in its dealloc; its
 *     value is exported (buffer protocol) in place, read-only, and the export
 *     keeps the object, hence the value, alive (zero-copy numpy results).
 *   - fetch() releases the GIL while it waits, in slices (wait_in_slices());
 *     a final value is taken without releasing it.
 *   - A PerWorker handle holds a reference to its Coordinator, which frees
 *     its registry and unloads its worker library only in dealloc: a handle
 *     put after close() never meets a freed registry.
 */
#include "_coord.h"

/* ---- PerWorker -------------------------------------------------------------- */

static void pw_dealloc(PWObject *self)
{
	coord_per_worker_put(self->pw);
	Py_XDECREF(self->owner);
	PyObject_Free(self);
}

static PyObject *pw_state(PWObject *self, PyObject *arg)
{
	uint32_t w;

	if (u32_arg(arg, &w) < 0)
		return NULL;
	return state_obj(coord_per_worker_state(self->pw, w));
}

static PyMethodDef pw_methods[] = {
	{ "state", (PyCFunction)pw_state, METH_O, "coord_per_worker_state() on a worker" },
	{ NULL },
};

PyTypeObject PWType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "coord._coord.PerWorker",
	.tp_basicsize = sizeof(PWObject),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "a per-worker resource handle (struct coord_pw)",
	.tp_dealloc = (destructor)pw_dealloc,
	.tp_methods = pw_methods,
};

/* ---- RemoteValue ------------------------------------------------------------ */

PyObject *rv_new(struct coord_rv *rv, PyObject *codec)
{
	RVObject *o = PyObject_New(RVObject, &RVType);

	if (!o) {
		coord_rv_put(rv);
		return NULL;
	}
	o->rv = rv;
	o->codec = Py_NewRef(codec);
	o->val = NULL;
	o->len = 0;
	o->fetched = 0;
	return (PyObject *)o;
}

static void rv_dealloc(RVObject *self)
{
	coord_rv_put(self->rv);
	Py_XDECREF(self->codec);
	PyObject_Free(self);
}

/* What a slice of rv_wait() fetches. */
struct rv_slice {
	struct coord_rv *rv;
	const void *v;
	size_t l;
};

/* One slice of rv_wait(), the GIL released. */
static int rv_slice(void *rv, int64_t slice_ns, struct coord_error *e)
{
	struct rv_slice *w = rv;
	PyThreadState *ts = PyEval_SaveThread();
	int r = coord_rv_fetch_timeout(w->rv, slice_ns, &w->v, &w->l, e);

	PyEval_RestoreThread(ts);
	return r;
}

/*
 * Wait for the value: 0 with self->val/len set, or -1 with an exception.
 * A final value is taken without releasing the GIL (no wait).
 */
static int rv_wait(RVObject *self, int64_t timeout_ns)
{
	struct coord_error e = { 0 };
	enum coord_rv_state st = coord_rv_state(self->rv);
	struct rv_slice w = { .rv = self->rv };
	int r;

	if (self->fetched)
		return 0;
	if (st == COORD_RV_READY || st == COORD_RV_CANCELLED) {
		r = coord_rv_fetch(self->rv, &w.v, &w.l, &e);
	} else {
		if (wait_in_slices(timeout_ns, rv_slice, NULL, &w, &e, &r) < 0)
			return -1;
		if (r == COORD_ETIMEDOUT && e.closure == COORD_NO_CLOSURE) {
			raise_msg(COORD_ETIMEDOUT, "RemoteValue.fetch: timed out");
			return -1;
		}
	}
	if (r) {
		raise_code(r, &e);
		return -1;
	}
	self->val = w.v;
	self->len = w.l;
	self->fetched = 1;
	return 0;
}

/* fetch(timeout=None): the value, decoded by the codec; raises its error. */
static PyObject *rv_fetch(RVObject *self, PyObject *const *args, Py_ssize_t nargs,
			  PyObject *kwnames)
{
	Py_ssize_t nkw = kwnames ? PyTuple_GET_SIZE(kwnames) : 0;
	int64_t t = -1;

	if (!self->fetched) {
		if (nargs + nkw > 1 || (nkw && !PyUnicode_Check(PyTuple_GET_ITEM(kwnames, 0))) ||
		    (nkw && PyUnicode_CompareWithASCIIString(PyTuple_GET_ITEM(kwnames, 0),
							     "timeout") != 0))
			return PyErr_Format(PyExc_TypeError, "fetch(timeout=None)");
		if (nargs + nkw == 1 && timeout_arg(args[0], &t) < 0)
			return NULL;
		if (rv_wait(self, t) < 0)
			return NULL;
	}
	if (self->codec == Py_None)
		return PyBytes_FromStringAndSize(self->val, (Py_ssize_t)self->len);
	return PyObject_CallOneArg(self->codec, (PyObject *)self);
}

static PyObject *rv_get_state(RVObject *self, void *unused)
{
	return state_obj(coord_rv_state(self->rv));
}

static PyObject *rv_get_id(RVObject *self, void *unused)
{
	return PyLong_FromUnsignedLongLong(coord_rv_id(self->rv));
}

static PyObject *rv_get_codec(RVObject *self, void *unused)
{
	return Py_NewRef(self->codec);
}

static int rv_getbuffer(RVObject *self, Py_buffer *view, int flags)
{
	if (!self->fetched && rv_wait(self, 0) < 0) {
		PyObject *t, *v, *tb;

		PyErr_Fetch(&t, &v, &tb);
		Py_XDECREF(t);
		Py_XDECREF(tb);
		PyErr_Format(PyExc_BufferError, "RemoteValue has no value: %S", v ? v : Py_None);
		Py_XDECREF(v);
		return -1;
	}
	return PyBuffer_FillInfo(view, (PyObject *)self, (void *)self->val, (Py_ssize_t)self->len,
				 1, flags);
}

static PyBufferProcs rv_buffer = { .bf_getbuffer = (getbufferproc)rv_getbuffer };

static PyMethodDef rv_methods[] = {
	{ "fetch", (PyCFunction)(void (*)(void))rv_fetch, METH_FASTCALL | METH_KEYWORDS,
	  "fetch(timeout=None): wait for the value (GIL released) and return it decoded" },
	{ NULL },
};

static PyGetSetDef rv_getset[] = {
	{ "state", (getter)rv_get_state, NULL, "coord_rv_state(): a RemoteValueStatus", NULL },
	{ "id", (getter)rv_get_id, NULL, "the closure's sequence number", NULL },
	{ "codec", (getter)rv_get_codec, NULL, "the result decoder (None: bytes)", NULL },
	{ NULL },
};

PyTypeObject RVType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "coord._coord.RemoteValue",
	.tp_basicsize = sizeof(RVObject),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
	.tp_doc = "a RemoteValue (struct coord_rv); the buffer protocol exports its value",
	.tp_dealloc = (destructor)rv_dealloc,
	.tp_methods = rv_methods,
	.tp_getset = rv_getset,
	.tp_as_buffer = &rv_buffer,
};
