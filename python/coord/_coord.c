// SPDX-License-Identifier: MIT
/*
 * python/coord/_coord.c - the CPython extension under the coord package: thin
 * types over the public C API (coord/coord.h, var.h, spec.h), nothing of the
 * runtime re-implemented.  The Python layer (coordinator.py, spec.py) gives
 * them TensorFlow's shape.
 *
 * Why the CPython C API and not cffi (python/README.md has the figures): one
 * compiled call per schedule and per fetch, RemoteValues made as C objects
 * (no Python __init__), arguments passed from the caller's buffer (bytes,
 * numpy) without a copy, and meson builds it with py.extension_module() from
 * a fresh clone (python3-dev only; no build-time code generation).
 *
 * What it keeps true:
 *   - The GIL is released around every call that can wait (create, schedule,
 *     fetch, join, done, variable and checkpoint calls); waits run in slices
 *     of WAIT_SLICE_NS so Ctrl-C (PyErr_CheckSignals) and, for join,
 *     close() get in.  A slice that ran out is told from a closure's own
 *     COORD_ETIMEDOUT by err.closure: only the closure's names it.
 *   - A coordinator is destroyed only when no call on it is running: calls
 *     count themselves in @busy (changed only with the GIL held), close()
 *     marks it closing and waits for @busy to drain.
 *   - A RemoteValue owns one coord_rv reference, put in its dealloc; its
 *     value is exported (buffer protocol) in place, read-only, and the export
 *     keeps the object, hence the value, alive (zero-copy numpy results).
 *   - A PerWorker handle holds a reference to its Coordinator, which frees
 *     its registry and unloads its worker library only in dealloc: a handle
 *     put after close() never meets a freed registry.
 *   - Errors become exceptions through the factory the package installs
 *     (_set_error_factory): code, cause, worker, closure, message.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <dlfcn.h>
#include <stddef.h>
#include <string.h>
#include <time.h>

#include <coord/coord.h>
#include <coord/var.h>

PyMODINIT_FUNC PyInit__coord(void);

/* Longest a blocked call waits before it looks at signals and close(). */
#define WAIT_SLICE_NS 100000000ll
/* Calls of one coord_schedule_many() (stack arrays). */
#define MANY_CHUNK 256

static PyObject *err_factory; /* callable(code, cause, worker, closure, msg) */
static PyObject *state_type;  /* RemoteValueStatus: called with coord_rv_state() */

static PyObject *raise_code(int code, const struct coord_error *e)
{
	const char *msg = e && e->msg[0] ? e->msg : coord_strerror(code);
	PyObject *exc;

	if (!err_factory) {
		PyErr_Format(PyExc_RuntimeError, "coord error %d: %s", code, msg);
		return NULL;
	}
	exc = PyObject_CallFunction(err_factory, "iiiKN", code, e ? e->cause : 0,
				    e ? e->worker : COORD_NO_WORKER,
				    (unsigned long long)(e ? e->closure : COORD_NO_CLOSURE),
				    PyUnicode_DecodeUTF8(msg, (Py_ssize_t)strlen(msg), "replace"));
	if (!exc)
		return NULL;
	PyErr_SetObject((PyObject *)Py_TYPE(exc), exc);
	Py_DECREF(exc);
	return NULL;
}

static PyObject *raise_msg(int code, const char *msg)
{
	struct coord_error e = { .code = code,
				 .worker = COORD_NO_WORKER,
				 .closure = COORD_NO_CLOSURE };

	snprintf(e.msg, sizeof(e.msg), "%s", msg);
	return raise_code(code, &e);
}

static int64_t now_ns(void)
{
	struct timespec ts;

	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (int64_t)ts.tv_sec * 1000000000ll + ts.tv_nsec;
}

/* A timeout argument: None (forever, -1) or seconds >= 0. */
static int timeout_arg(PyObject *o, int64_t *ns)
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

/* ---- Spec ------------------------------------------------------------------- */

typedef struct {
	PyObject_HEAD struct coord_spec *s;
} SpecObject;

static PyTypeObject SpecType;

static PyObject *spec_wrap(struct coord_spec *s)
{
	SpecObject *o = PyObject_New(SpecObject, &SpecType);

	if (!o) {
		coord_spec_destroy(s);
		return NULL;
	}
	o->s = s;
	return (PyObject *)o;
}

static void spec_dealloc(SpecObject *self)
{
	coord_spec_destroy(self->s);
	PyObject_Free(self);
}

/* (spec, job, index) from a resolver's outputs. */
static PyObject *spec_self_tuple(struct coord_spec *s, const struct coord_task_id *id)
{
	PyObject *o = spec_wrap(s);

	if (!o)
		return NULL;
	return Py_BuildValue("NsL", o, id->job, (long long)id->index);
}

static PyObject *spec_jobs(SpecObject *self, PyObject *unused)
{
	size_t n = coord_spec_jobs(self->s, NULL, 0), i;
	const char **names = PyMem_Calloc(n ? n : 1, sizeof(*names));
	PyObject *l;

	if (!names)
		return PyErr_NoMemory();
	coord_spec_jobs(self->s, names, n);
	l = PyList_New((Py_ssize_t)n);
	for (i = 0; l && i < n; i++) {
		PyObject *s = PyUnicode_FromString(names[i]);

		if (!s) {
			Py_CLEAR(l);
			break;
		}
		PyList_SET_ITEM(l, (Py_ssize_t)i, s);
	}
	PyMem_Free(names);
	return l;
}

static PyObject *spec_has_job(SpecObject *self, PyObject *arg)
{
	const char *job = PyUnicode_AsUTF8(arg);

	if (!job)
		return NULL;
	return PyBool_FromLong(coord_spec_has_job(self->s, job));
}

static PyObject *spec_num_tasks(SpecObject *self, PyObject *arg)
{
	const char *job = PyUnicode_AsUTF8(arg);

	if (!job)
		return NULL;
	return PyLong_FromSize_t(coord_spec_num_tasks(self->s, job));
}

static PyObject *spec_task_address(SpecObject *self, PyObject *args)
{
	struct coord_error e = { 0 };
	const char *job, *addr;
	long long idx;
	int r;

	if (!PyArg_ParseTuple(args, "sL", &job, &idx))
		return NULL;
	r = coord_spec_task_address(self->s, job, idx, &addr, &e);
	if (r)
		return raise_code(r, &e);
	return PyUnicode_FromString(addr);
}

static PyObject *spec_task_indices(SpecObject *self, PyObject *arg)
{
	struct coord_error e = { 0 };
	const char *job = PyUnicode_AsUTF8(arg);
	int64_t *idx;
	size_t n = 0, i;
	PyObject *l;
	int r;

	if (!job)
		return NULL;
	r = coord_spec_task_indices(self->s, job, NULL, 0, &n, &e);
	if (r)
		return raise_code(r, &e);
	idx = PyMem_Calloc(n ? n : 1, sizeof(*idx));
	if (!idx)
		return PyErr_NoMemory();
	r = coord_spec_task_indices(self->s, job, idx, n, &n, &e);
	if (r) {
		PyMem_Free(idx);
		return raise_code(r, &e);
	}
	l = PyList_New((Py_ssize_t)n);
	for (i = 0; l && i < n; i++) {
		PyObject *v = PyLong_FromLongLong(idx[i]);

		if (!v) {
			Py_CLEAR(l);
			break;
		}
		PyList_SET_ITEM(l, (Py_ssize_t)i, v);
	}
	PyMem_Free(idx);
	return l;
}

static PyObject *spec_job_tasks(SpecObject *self, PyObject *arg)
{
	struct coord_error e = { 0 };
	const char *job = PyUnicode_AsUTF8(arg);
	const char **a;
	size_t n = 0, i;
	PyObject *l;
	int r;

	if (!job)
		return NULL;
	r = coord_spec_job_tasks(self->s, job, NULL, 0, &n, &e);
	if (r)
		return raise_code(r, &e);
	a = PyMem_Calloc(n ? n : 1, sizeof(*a));
	if (!a)
		return PyErr_NoMemory();
	r = coord_spec_job_tasks(self->s, job, a, n, &n, &e);
	if (r) {
		PyMem_Free(a);
		return raise_code(r, &e);
	}
	l = PyList_New((Py_ssize_t)n);
	for (i = 0; l && i < n; i++) {
		PyObject *v = a[i] ? PyUnicode_FromString(a[i]) : Py_NewRef(Py_None);

		if (!v) {
			Py_CLEAR(l);
			break;
		}
		PyList_SET_ITEM(l, (Py_ssize_t)i, v);
	}
	PyMem_Free(a);
	return l;
}

static PyObject *spec_as_json(SpecObject *self, PyObject *unused)
{
	struct coord_error e = { 0 };
	char *json;
	PyObject *s;
	int r = coord_spec_as_dict(self->s, &json, &e);

	if (r)
		return raise_code(r, &e);
	s = PyUnicode_FromString(json);
	free(json);
	return s;
}

static PyObject *spec_as_cluster_def(SpecObject *self, PyObject *unused)
{
	struct coord_error e = { 0 };
	uint8_t *buf;
	size_t len;
	PyObject *b;
	int r = coord_spec_as_cluster_def(self->s, &buf, &len, &e);

	if (r)
		return raise_code(r, &e);
	b = PyBytes_FromStringAndSize((const char *)buf, (Py_ssize_t)len);
	free(buf);
	return b;
}

static PyObject *spec_richcompare(PyObject *a, PyObject *b, int op)
{
	bool eq;

	if (!PyObject_TypeCheck(b, &SpecType) || (op != Py_EQ && op != Py_NE))
		Py_RETURN_NOTIMPLEMENTED;
	eq = coord_spec_equal(((SpecObject *)a)->s, ((SpecObject *)b)->s);
	return PyBool_FromLong(op == Py_EQ ? eq : !eq);
}

static int spec_bool(SpecObject *self)
{
	return !coord_spec_empty(self->s);
}

static PyMethodDef spec_methods[] = {
	{ "jobs", (PyCFunction)spec_jobs, METH_NOARGS, "job names, sorted" },
	{ "has_job", (PyCFunction)spec_has_job, METH_O, "whether the job exists" },
	{ "num_tasks", (PyCFunction)spec_num_tasks, METH_O, "tasks of a job (0 if none)" },
	{ "task_address", (PyCFunction)spec_task_address, METH_VARARGS, "(job, index) -> addr" },
	{ "task_indices", (PyCFunction)spec_task_indices, METH_O, "indices of a job, ascending" },
	{ "job_tasks", (PyCFunction)spec_job_tasks, METH_O, "dense view, None for gaps" },
	{ "as_json", (PyCFunction)spec_as_json, METH_NOARGS, "coord_spec_as_dict() text" },
	{ "as_cluster_def", (PyCFunction)spec_as_cluster_def, METH_NOARGS, "ClusterDef bytes" },
	{ NULL },
};

static PyNumberMethods spec_number = { .nb_bool = (inquiry)spec_bool };

static PyTypeObject SpecType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "coord._coord.Spec",
	.tp_basicsize = sizeof(SpecObject),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "a struct coord_spec (use coord.ClusterSpec)",
	.tp_dealloc = (destructor)spec_dealloc,
	.tp_methods = spec_methods,
	.tp_richcompare = spec_richcompare,
	.tp_as_number = &spec_number,
};

static PyObject *m_spec_parse(PyObject *mod, PyObject *arg)
{
	struct coord_error e = { 0 };
	struct coord_spec *s;
	const char *json = PyUnicode_AsUTF8(arg);
	int r;

	if (!json)
		return NULL;
	r = coord_spec_parse(json, &s, &e);
	return r ? raise_code(r, &e) : spec_wrap(s);
}

static PyObject *m_spec_from_cluster_def(PyObject *mod, PyObject *arg)
{
	struct coord_error e = { 0 };
	struct coord_spec *s;
	Py_buffer b;
	int r;

	if (PyObject_GetBuffer(arg, &b, PyBUF_SIMPLE) < 0)
		return NULL;
	r = coord_spec_from_cluster_def(b.buf, (size_t)b.len, &s, &e);
	PyBuffer_Release(&b);
	return r ? raise_code(r, &e) : spec_wrap(s);
}

static PyObject *m_spec_from_tf_config(PyObject *mod, PyObject *arg)
{
	struct coord_error e = { 0 };
	struct coord_task_id id;
	struct coord_spec *s;
	int r;

	if (arg == Py_None) {
		r = coord_spec_resolve_tf_config(&s, &id, &e);
	} else {
		const char *text = PyUnicode_AsUTF8(arg);

		if (!text)
			return NULL;
		r = coord_spec_from_tf_config(text, &s, &id, &e);
	}
	return r ? raise_code(r, &e) : spec_self_tuple(s, &id);
}

static PyObject *m_spec_from_arg(PyObject *mod, PyObject *arg)
{
	struct coord_error e = { 0 };
	struct coord_task_id id;
	struct coord_spec *s;
	const char *a = PyUnicode_AsUTF8(arg);
	int r;

	if (!a)
		return NULL;
	r = coord_spec_from_arg(a, &s, &id, &e);
	return r ? raise_code(r, &e) : spec_self_tuple(s, &id);
}

/* resolve_slurm(port_base, tasks_per_node, [(job, ntasks), ...] or None) */
static PyObject *m_spec_resolve_slurm(PyObject *mod, PyObject *args)
{
	struct coord_slurm_job jobs[16];
	struct coord_slurm_opts o;
	struct coord_error e = { 0 };
	struct coord_task_id id;
	struct coord_spec *s;
	unsigned port, tpn;
	PyObject *jl, *fast = NULL;
	Py_ssize_t n = 0, i;
	int r;

	if (!PyArg_ParseTuple(args, "IIO", &port, &tpn, &jl))
		return NULL;
	coord_slurm_opts_init(&o);
	if (port)
		o.port_base = port;
	o.tasks_per_node = tpn;
	if (jl != Py_None) {
		fast = PySequence_Fast(jl, "jobs must be a sequence of (name, ntasks)");
		if (!fast)
			return NULL;
		n = PySequence_Fast_GET_SIZE(fast);
		if (n > 16) {
			Py_DECREF(fast);
			return raise_msg(COORD_EINVAL, "at most 16 Slurm jobs");
		}
		for (i = 0; i < n; i++)
			if (!PyArg_ParseTuple(PySequence_Fast_GET_ITEM(fast, i), "sI",
					      &jobs[i].name, &jobs[i].ntasks)) {
				Py_DECREF(fast);
				return NULL;
			}
		o.jobs = jobs;
		o.njobs = (size_t)n;
	}
	r = coord_spec_resolve_slurm(&o, &s, &id, &e);
	Py_XDECREF(fast); /* after the call: the names point into it */
	return r ? raise_code(r, &e) : spec_self_tuple(s, &id);
}

static PyObject *state_obj(long st)
{
	PyObject *i = PyLong_FromLong(st), *o;

	if (!i || !state_type)
		return i;
	o = PyObject_CallOneArg(state_type, i);
	Py_DECREF(i);
	return o;
}

/* ---- PerWorker -------------------------------------------------------------- */

typedef struct {
	PyObject_HEAD struct coord_pw *pw;
	PyObject *owner; /* the Coordinator: its registry outlives the handle */
} PWObject;

static PyTypeObject PWType;

static void pw_dealloc(PWObject *self)
{
	coord_per_worker_put(self->pw);
	Py_XDECREF(self->owner);
	PyObject_Free(self);
}

static PyObject *pw_state(PWObject *self, PyObject *arg)
{
	unsigned long w = PyLong_AsUnsignedLong(arg);

	if (w == (unsigned long)-1 && PyErr_Occurred())
		return NULL;
	return state_obj(coord_per_worker_state(self->pw, (unsigned)w));
}

static PyMethodDef pw_methods[] = {
	{ "state", (PyCFunction)pw_state, METH_O, "coord_per_worker_state() on a worker" },
	{ NULL },
};

static PyTypeObject PWType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "coord._coord.PerWorker",
	.tp_basicsize = sizeof(PWObject),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "a per-worker resource handle (struct coord_pw)",
	.tp_dealloc = (destructor)pw_dealloc,
	.tp_methods = pw_methods,
};

/* ---- RemoteValue ------------------------------------------------------------ */

typedef struct {
	PyObject_HEAD struct coord_rv *rv;
	PyObject *codec; /* None: bytes; else called with the RemoteValue */
	const void *val;
	size_t len;
	int fetched;
} RVObject;

static PyTypeObject RVType;

static PyObject *rv_new(struct coord_rv *rv, PyObject *codec)
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

/*
 * Wait for the value: 0 with self->val/len set, or -1 with an exception.
 * A final value is taken without releasing the GIL (no wait).
 */
static int rv_wait(RVObject *self, int64_t timeout_ns)
{
	struct coord_error e = { 0 };
	enum coord_rv_state st = coord_rv_state(self->rv);
	int64_t until = timeout_ns < 0 ? -1 : now_ns() + timeout_ns;
	const void *v = NULL;
	size_t l = 0;
	int r;

	if (self->fetched)
		return 0;
	if (st == COORD_RV_READY || st == COORD_RV_CANCELLED) {
		r = coord_rv_fetch(self->rv, &v, &l, &e);
	} else {
		for (;;) {
			int64_t slice = WAIT_SLICE_NS, left;
			PyThreadState *ts;

			if (until >= 0) {
				left = until - now_ns();
				slice = left < slice ? (left < 0 ? 0 : left) : slice;
			}
			ts = PyEval_SaveThread();
			r = coord_rv_fetch_timeout(self->rv, slice, &v, &l, &e);
			PyEval_RestoreThread(ts);
			/* the slice ran out (no closure named), or the closure's own
			 * outcome, whatever its code (it names the closure) */
			if (r != COORD_ETIMEDOUT || e.closure != COORD_NO_CLOSURE)
				break;
			if (PyErr_CheckSignals())
				return -1;
			if (until >= 0 && now_ns() >= until) {
				raise_msg(COORD_ETIMEDOUT, "RemoteValue.fetch: timed out");
				return -1;
			}
		}
	}
	if (r) {
		raise_code(r, &e);
		return -1;
	}
	self->val = v;
	self->len = l;
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

static PyTypeObject RVType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "coord._coord.RemoteValue",
	.tp_basicsize = sizeof(RVObject),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
	.tp_doc = "a RemoteValue (struct coord_rv); the buffer protocol exports its value",
	.tp_dealloc = (destructor)rv_dealloc,
	.tp_methods = rv_methods,
	.tp_getset = rv_getset,
	.tp_as_buffer = &rv_buffer,
};

/* ---- Coordinator ------------------------------------------------------------ */

typedef struct {
	PyObject_HEAD struct coord *c;
	struct coord_registry *reg;
	void *dl;
	int busy;    /* calls running with the GIL released (GIL-protected) */
	int closing; /* close() started */
} CoordObject;

static PyTypeObject CoordType;

/* Release the GIL for a call on @self that may wait; relock() takes it back. */
static PyThreadState *unlock(CoordObject *self)
{
	self->busy++;
	return PyEval_SaveThread();
}

static void relock(CoordObject *self, PyThreadState *ts)
{
	PyEval_RestoreThread(ts);
	self->busy--;
}

/* Integer options of struct coord_opts, by name (Coordinator(opts=dict)). */
enum { O_UNS, O_I32, O_I64, O_U64 };
static const struct {
	const char *name;
	size_t off;
	int kind;
} opt_table[] = {
#define O(f, k)                                                                                    \
	{                                                                                          \
#f, offsetof(struct coord_opts, f), k                                              \
	}
	O(inproc_workers, O_UNS),
	O(ring_capacity, O_UNS),
	O(start_delay_ms, O_I64),
	O(start_delay_max_ms, O_I64),
	O(spin_ns, O_U64),
	O(spin_max_ns, O_U64),
	O(batch, O_UNS),
	O(tcp_loops, O_UNS),
	O(window, O_UNS),
	O(max_frame, O_UNS),
	O(connect_timeout_ms, O_I32),
	O(inproc_ps, O_UNS),
	O(ps_timeout_ms, O_I32),
	O(ps_failure_threshold, O_I32),
	O(restart_exit_code, O_I32),
	O(recovery_limit_ms, O_I64),
	O(heartbeat_ms, O_I32),
	O(heartbeat_misses, O_I32),
	O(closure_timeout_ms, O_I64),
	O(affinity_fallback_ms, O_I64),
	O(priority_aging_ms, O_I64),
#undef O
};

static int set_opt(struct coord_opts *o, PyObject *key, PyObject *val)
{
	const char *k = PyUnicode_AsUTF8(key);
	long long v;
	size_t i;

	if (!k)
		return -1;
	v = PyLong_AsLongLong(val);
	if (v == -1 && PyErr_Occurred())
		return -1;
	for (i = 0; i < sizeof(opt_table) / sizeof(opt_table[0]); i++) {
		char *p = (char *)o + opt_table[i].off;

		if (strcmp(k, opt_table[i].name) != 0)
			continue;
		switch (opt_table[i].kind) {
		case O_UNS:
			*(unsigned *)p = (unsigned)v;
			break;
		case O_I32:
			*(int *)p = (int)v;
			break;
		case O_I64:
			*(int64_t *)p = v;
			break;
		default:
			*(uint64_t *)p = (uint64_t)v;
		}
		return 0;
	}
	PyErr_Format(PyExc_TypeError, "unknown coordinator option '%s'", k);
	return -1;
}

/* Load @path's coord_register_fns() into self->reg (as coord-worker --fns). */
static int load_fns(CoordObject *self, const char *path)
{
	coord_register_fns_t fn;
	int r;

	self->dl = dlopen(path, RTLD_NOW | RTLD_LOCAL);
	if (!self->dl) {
		raise_msg(COORD_EINVAL, dlerror());
		return -1;
	}
	*(void **)&fn = dlsym(self->dl, COORD_REGISTER_FNS_SYMBOL);
	if (!fn) {
		PyErr_Format(PyExc_ValueError, "%s does not export " COORD_REGISTER_FNS_SYMBOL "()",
			     path);
		return -1;
	}
	r = fn(self->reg);
	if (r) {
		raise_msg(r, "coord_register_fns() failed");
		return -1;
	}
	return 0;
}

/* Coordinator(functions, transport, spec, key_file, opts: dict) */
static int coord_init(CoordObject *self, PyObject *args, PyObject *kw)
{
	PyThreadState *ts;
	static char *kwlist[] = { "functions", "transport", "spec", "key_file", "opts", NULL };
	const char *fns = NULL, *transport = "inproc", *key = NULL;
	PyObject *spec = Py_None, *opts = NULL, *k, *v;
	struct coord_error e = { 0 };
	struct coord_opts o;
	struct coord *c = NULL;
	Py_ssize_t pos = 0;
	int r;

	if (self->c || self->reg)
		return PyErr_Format(PyExc_RuntimeError, "Coordinator already initialized"), -1;
	if (!PyArg_ParseTupleAndKeywords(args, kw, "|zsOzO!", kwlist, &fns, &transport, &spec, &key,
					 &PyDict_Type, &opts))
		return -1;
	if (spec != Py_None && !PyObject_TypeCheck(spec, &SpecType)) {
		PyErr_SetString(PyExc_TypeError, "spec must be a coord._coord.Spec or None");
		return -1;
	}
	r = coord_registry_create(&self->reg);
	if (r) {
		raise_msg(r, "coord_registry_create() failed");
		return -1;
	}
	if (fns && load_fns(self, fns) < 0)
		return -1;
	coord_opts_init(&o);
	o.registry = self->reg;
	o.transport = transport;
	o.key_file = key;
	while (opts && PyDict_Next(opts, &pos, &k, &v))
		if (set_opt(&o, k, v) < 0)
			return -1;
	ts = PyEval_SaveThread();
	r = coord_create(spec == Py_None ? NULL : ((SpecObject *)spec)->s, &o, &c, &e);
	PyEval_RestoreThread(ts);
	if (r) {
		raise_code(r, &e);
		return -1;
	}
	self->c = c;
	return 0;
}

static int check_open(CoordObject *self)
{
	if (self->c && !self->closing)
		return 0;
	PyErr_SetString(PyExc_ValueError, "the coordinator is closed");
	return -1;
}

static PyObject *coord_close(CoordObject *self, PyObject *unused)
{
	PyThreadState *ts;
	struct coord *c = self->c;

	if (!c || self->closing)
		Py_RETURN_NONE;
	self->closing = 1;
	/* calls running with the GIL released end within WAIT_SLICE_NS once
	 * they see @closing (waits), or when coord returns (schedule) */
	while (self->busy) {
		struct timespec ms = { 0, 1000000 };

		ts = PyEval_SaveThread();
		nanosleep(&ms, NULL);
		PyEval_RestoreThread(ts);
	}
	ts = PyEval_SaveThread();
	coord_destroy(c);
	PyEval_RestoreThread(ts);
	self->c = NULL;
	/* The registry and the worker library stay until dealloc: a per-worker
	 * handle (which holds a reference to this object) may still be put. */
	Py_RETURN_NONE;
}

static void coord_dealloc(CoordObject *self)
{
	PyObject *r = coord_close(self, NULL);

	Py_XDECREF(r);
	/* every PerWorker handle is gone (each holds a reference to us) */
	coord_registry_destroy(self->reg);
	if (self->dl)
		dlclose(self->dl);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyObject *coord_lookup(CoordObject *self, PyObject *arg)
{
	struct coord_error e = { 0 };
	const char *name = PyUnicode_AsUTF8(arg);
	uint32_t id;
	int r;

	if (!name || check_open(self) < 0)
		return NULL;
	r = coord_fn_lookup(self->c, name, &id, &e);
	return r ? raise_code(r, &e) : PyLong_FromUnsignedLong(id);
}

/* Fill call->pw from a tuple of PerWorker objects; 0 or -1. */
static int pw_args(PyObject *t, struct coord_pw **pw, struct coord_call *call)
{
	Py_ssize_t n, i;

	if (t == Py_None)
		return 0;
	if (!PyTuple_Check(t) || PyTuple_GET_SIZE(t) > COORD_MAX_PW) {
		PyErr_Format(PyExc_TypeError, "per-worker arguments: a tuple of at most %d",
			     COORD_MAX_PW);
		return -1;
	}
	n = PyTuple_GET_SIZE(t);
	for (i = 0; i < n; i++) {
		PyObject *o = PyTuple_GET_ITEM(t, i);

		if (!PyObject_TypeCheck(o, &PWType)) {
			PyErr_SetString(PyExc_TypeError, "per-worker arguments must be PerWorker");
			return -1;
		}
		pw[i] = ((PWObject *)o)->pw;
	}
	call->pw = pw;
	call->npw = (unsigned)n;
	return 0;
}

/* schedule(fn_id, args: buffer | None, codec=None, pw: tuple | None) */
static PyObject *coord_schedule1(CoordObject *self, PyObject *const *args, Py_ssize_t nargs)
{
	PyThreadState *ts;
	struct coord_call call = { 0 };
	struct coord_pw *pw[COORD_MAX_PW];
	struct coord_error e = { 0 };
	struct coord_rv *rv = NULL;
	PyObject *codec = nargs > 2 ? args[2] : Py_None;
	Py_buffer b = { 0 };
	unsigned long fn;
	int r;

	if (nargs < 2 || nargs > 4)
		return PyErr_Format(PyExc_TypeError, "schedule(fn_id, args, codec, pw)");
	if (check_open(self) < 0)
		return NULL;
	fn = PyLong_AsUnsignedLong(args[0]);
	if (fn == (unsigned long)-1 && PyErr_Occurred())
		return NULL;
	call.fn = (uint32_t)fn;
	if (nargs > 3 && pw_args(args[3], pw, &call) < 0)
		return NULL;
	if (PyBytes_CheckExact(args[1])) {
		call.args = PyBytes_AS_STRING(args[1]);
		call.len = (size_t)PyBytes_GET_SIZE(args[1]);
	} else if (args[1] != Py_None) {
		if (PyObject_GetBuffer(args[1], &b, PyBUF_C_CONTIGUOUS) < 0)
			return NULL;
		call.args = b.buf;
		call.len = (size_t)b.len;
	}
	ts = unlock(self);
	r = coord_schedule_call(self->c, &call, &rv, &e);
	relock(self, ts);
	if (b.obj)
		PyBuffer_Release(&b);
	if (r)
		return raise_code(r, &e);
	return rv_new(rv, codec);
}

/*
 * schedule_many(fn_id, args, codec=None): args is a sequence of buffers (or
 * None), or one buffer of ndim >= 1 whose rows are the calls' arguments (a
 * 2-D numpy array: no copy).  Returns the list of RemoteValues.
 */
static PyObject *py_schedule_many(CoordObject *self, PyObject *const *args, Py_ssize_t nargs)
{
	struct coord_call calls[MANY_CHUNK];
	struct coord_rv *out[MANY_CHUNK];
	Py_buffer bufs[MANY_CHUNK], rows = { 0 };
	struct coord_error e = { 0 };
	PyObject *codec = nargs > 2 ? args[2] : Py_None, *fast = NULL, *list = NULL;
	Py_ssize_t n, done = 0, rowlen = 0;
	unsigned long fn;
	int r = 0;

	if (nargs < 2 || nargs > 3)
		return PyErr_Format(PyExc_TypeError, "schedule_many(fn_id, args, codec)");
	if (check_open(self) < 0)
		return NULL;
	fn = PyLong_AsUnsignedLong(args[0]);
	if (fn == (unsigned long)-1 && PyErr_Occurred())
		return NULL;
	if (!PyBytes_Check(args[1]) && PyObject_CheckBuffer(args[1])) {
		if (PyObject_GetBuffer(args[1], &rows, PyBUF_C_CONTIGUOUS | PyBUF_ND) < 0)
			return NULL;
		if (rows.ndim < 1) {
			PyBuffer_Release(&rows);
			return PyErr_Format(PyExc_ValueError, "schedule_many: rows need ndim >= 1");
		}
		n = rows.shape[0];
		rowlen = n ? rows.len / n : 0;
	} else {
		fast = PySequence_Fast(args[1], "schedule_many: a sequence of buffers");
		if (!fast)
			return NULL;
		n = PySequence_Fast_GET_SIZE(fast);
	}
	list = PyList_New(n);
	if (!list)
		goto out;
	while (done < n) {
		Py_ssize_t k = n - done < MANY_CHUNK ? n - done : MANY_CHUNK, i, nb = 0;
		size_t queued = 0;

		memset(calls, 0, (size_t)k * sizeof(calls[0]));
		for (i = 0; i < k; i++) {
			calls[i].fn = (uint32_t)fn;
			if (!fast) {
				calls[i].args = (char *)rows.buf + (done + i) * rowlen;
				calls[i].len = (size_t)rowlen;
				continue;
			}
			PyObject *a = PySequence_Fast_GET_ITEM(fast, done + i);

			if (PyBytes_CheckExact(a)) {
				calls[i].args = PyBytes_AS_STRING(a);
				calls[i].len = (size_t)PyBytes_GET_SIZE(a);
			} else if (a != Py_None) {
				if (PyObject_GetBuffer(a, &bufs[nb], PyBUF_C_CONTIGUOUS) < 0)
					break;
				calls[i].args = bufs[nb].buf;
				calls[i].len = (size_t)bufs[nb++].len;
			}
		}
		if (i == k) {
			PyThreadState *ts = unlock(self);

			r = coord_schedule_many(self->c, calls, (size_t)k, out, &queued, &e);
			relock(self, ts);
		}
		while (nb)
			PyBuffer_Release(&bufs[--nb]);
		if (i < k)
			goto fail; /* a bad buffer: its exception is set */
		for (i = 0; i < (Py_ssize_t)queued; i++) {
			PyObject *o = rv_new(out[i], codec);

			if (!o) {
				while (++i < (Py_ssize_t)queued)
					coord_rv_put(out[i]);
				goto fail;
			}
			PyList_SET_ITEM(list, done + i, o);
		}
		done += (Py_ssize_t)queued;
		if (r) {
			raise_code(r, &e);
			goto fail;
		}
	}
	goto out;
fail:
	Py_CLEAR(list);
out:
	if (rows.obj)
		PyBuffer_Release(&rows);
	Py_XDECREF(fast);
	return list;
}

/* A wait of join() / done()-style calls in slices; 0, or -1 with an exception. */
static int coord_wait_slices(CoordObject *self, int64_t timeout_ns)
{
	struct coord_error e = { 0 };
	int64_t until = timeout_ns < 0 ? -1 : now_ns() + timeout_ns;
	PyThreadState *ts;
	int r;

	for (;;) {
		int64_t slice = WAIT_SLICE_NS, left;

		if (until >= 0) {
			left = until - now_ns();
			slice = left < slice ? (left < 0 ? 0 : left) : slice;
		}
		memset(&e, 0, sizeof(e));
		ts = unlock(self);
		r = coord_join_timeout(self->c, slice, &e);
		relock(self, ts);
		/* a closure's error names it; the slice's own timeout does not */
		if (r != COORD_ETIMEDOUT || e.closure != COORD_NO_CLOSURE)
			break;
		if (PyErr_CheckSignals())
			return -1;
		if (self->closing) {
			PyErr_SetString(PyExc_ValueError, "the coordinator was closed");
			return -1;
		}
		if (until >= 0 && now_ns() >= until)
			break;
	}
	if (r) {
		raise_code(r, &e);
		return -1;
	}
	return 0;
}

static PyObject *py_join(CoordObject *self, PyObject *const *args, Py_ssize_t nargs)
{
	int64_t t = -1;

	if (check_open(self) < 0)
		return NULL;
	if (nargs > 0 && timeout_arg(args[0], &t) < 0)
		return NULL;
	if (coord_wait_slices(self, t) < 0)
		return NULL;
	Py_RETURN_NONE;
}

static PyObject *coord_done_(CoordObject *self, PyObject *unused)
{
	PyThreadState *ts;
	struct coord_error e = { 0 };
	int r;

	if (check_open(self) < 0)
		return NULL;
	ts = unlock(self);
	r = coord_done(self->c, &e);
	relock(self, ts);
	if (r < 0)
		return raise_code(r, &e);
	return PyBool_FromLong(r);
}

static PyObject *coord_nworkers(CoordObject *self, void *unused)
{
	return PyLong_FromUnsignedLong(self->c ? coord_num_workers(self->c) : 0);
}

static PyObject *coord_nps(CoordObject *self, void *unused)
{
	return PyLong_FromUnsignedLong(self->c ? coord_num_ps(self->c) : 0);
}

static PyObject *coord_per_worker(CoordObject *self, PyObject *args)
{
	struct coord_error e = { 0 };
	struct coord_pw *pw;
	const char *creator;
	Py_buffer b;
	PWObject *o;
	int r;

	if (!PyArg_ParseTuple(args, "sy*", &creator, &b))
		return NULL;
	if (check_open(self) < 0) {
		PyBuffer_Release(&b);
		return NULL;
	}
	r = coord_per_worker_create(self->c, creator, b.buf, (size_t)b.len, &pw, &e);
	PyBuffer_Release(&b);
	if (r)
		return raise_code(r, &e);
	o = PyObject_New(PWObject, &PWType);
	if (!o) {
		coord_per_worker_put(pw);
		return NULL;
	}
	o->pw = pw;
	o->owner = Py_NewRef((PyObject *)self);
	return (PyObject *)o;
}

static PyObject *coord_metrics_(CoordObject *self, PyObject *unused)
{
	struct coord_metrics m;
	int r;

	if (check_open(self) < 0)
		return NULL;
	r = coord_metrics(self->c, &m, NULL, 0);
	if (r)
		return raise_code(r, NULL);
	return Py_BuildValue(
		"{sKsKsKsKsKsKsKsKsIsIsIsIsKsKsKsKsKsK}", "queued", (unsigned long long)m.queued,
		"in_flight", (unsigned long long)m.in_flight, "outstanding",
		(unsigned long long)m.outstanding, "completed", (unsigned long long)m.completed,
		"failed", (unsigned long long)m.failed, "cancelled",
		(unsigned long long)m.cancelled, "put_back", (unsigned long long)m.put_back,
		"now_ns", (unsigned long long)m.now_ns, "workers", m.workers, "workers_up",
		m.workers_up, "workers_down", m.workers_down, "workers_dropped", m.workers_dropped,
		"losses", (unsigned long long)m.losses, "recoveries",
		(unsigned long long)m.recoveries, "waits", (unsigned long long)m.waits, "parked",
		(unsigned long long)m.parked, "round_trip_p50_ns",
		(unsigned long long)coord_hist_percentile(&m.round_trip_ns, 50), "exec_p50_ns",
		(unsigned long long)coord_hist_percentile(&m.exec_ns, 50));
}

/* ---- variables and checkpoints ---------------------------------------------- */

/* var_create(name, dims: tuple, init: buffer | None) -> handle */
static PyObject *coord_var_create_(CoordObject *self, PyObject *args)
{
	PyThreadState *ts;
	struct coord_error e = { 0 };
	uint64_t dims[COORD_VAR_DIMS], nelem = 1;
	PyObject *dt, *init;
	Py_buffer b = { 0 };
	const char *name;
	Py_ssize_t nd, i;
	coord_var_t v;
	int r;

	if (!PyArg_ParseTuple(args, "sO!O", &name, &PyTuple_Type, &dt, &init))
		return NULL;
	if (check_open(self) < 0)
		return NULL;
	nd = PyTuple_GET_SIZE(dt);
	if (nd > COORD_VAR_DIMS)
		return raise_msg(COORD_EINVAL, "a variable has at most 4 dimensions");
	for (i = 0; i < nd; i++) {
		long long d = PyLong_AsLongLong(PyTuple_GET_ITEM(dt, i));

		if (d == -1 && PyErr_Occurred())
			return NULL;
		if (d < 1)
			return raise_msg(COORD_EINVAL, "a variable's dimensions are >= 1");
		dims[i] = (uint64_t)d;
		nelem *= (uint64_t)d;
	}
	if (init != Py_None) {
		if (PyObject_GetBuffer(init, &b, PyBUF_C_CONTIGUOUS) < 0)
			return NULL;
		if ((uint64_t)b.len != nelem * sizeof(float)) {
			PyBuffer_Release(&b);
			return raise_msg(COORD_EINVAL, "initial value: not nelem float32");
		}
	}
	ts = unlock(self);
	r = coord_var_create(self->c, name, (unsigned)nd, nd ? dims : NULL, b.obj ? b.buf : NULL,
			     &v, &e);
	relock(self, ts);
	if (b.obj)
		PyBuffer_Release(&b);
	return r ? raise_code(r, &e) : PyLong_FromUnsignedLongLong(v);
}

static PyObject *coord_var_lookup_(CoordObject *self, PyObject *arg)
{
	PyThreadState *ts;
	struct coord_error e = { 0 };
	struct coord_var_shape sh;
	const char *name = PyUnicode_AsUTF8(arg);
	PyObject *dims;
	coord_var_t v;
	unsigned i;
	int r;

	if (!name || check_open(self) < 0)
		return NULL;
	ts = unlock(self);
	r = coord_var_lookup(self->c, name, &v, &sh, &e);
	relock(self, ts);
	if (r)
		return raise_code(r, &e);
	dims = PyTuple_New(sh.ndim);
	for (i = 0; dims && i < sh.ndim; i++) {
		PyObject *d = PyLong_FromUnsignedLongLong(sh.dims[i]);

		if (!d) {
			Py_CLEAR(dims);
			break;
		}
		PyTuple_SET_ITEM(dims, i, d);
	}
	return dims ? Py_BuildValue("KN", (unsigned long long)v, dims) : NULL;
}

/* var_io(handle, off, buffer, write): read into (write=0) or assign from it */
static PyObject *coord_var_io(CoordObject *self, PyObject *args)
{
	PyThreadState *ts;
	struct coord_error e = { 0 };
	unsigned long long v, off;
	PyObject *o;
	Py_buffer b;
	int wr, r;

	if (!PyArg_ParseTuple(args, "KKOp", &v, &off, &o, &wr))
		return NULL;
	if (check_open(self) < 0)
		return NULL;
	if (PyObject_GetBuffer(o, &b, PyBUF_C_CONTIGUOUS | (wr ? 0 : PyBUF_WRITABLE)) < 0)
		return NULL;
	if (b.len % sizeof(float)) {
		PyBuffer_Release(&b);
		return raise_msg(COORD_EINVAL, "a variable's buffer holds float32");
	}
	ts = unlock(self);
	if (wr)
		r = coord_var_assign(self->c, v, off, (uint64_t)b.len / sizeof(float), b.buf, &e);
	else
		r = coord_var_read(self->c, v, off, (uint64_t)b.len / sizeof(float), b.buf, &e);
	relock(self, ts);
	PyBuffer_Release(&b);
	if (r)
		return raise_code(r, &e);
	Py_RETURN_NONE;
}

static PyObject *coord_ckpt_save(CoordObject *self, PyObject *args)
{
	PyThreadState *ts;
	struct coord_error e = { 0 };
	unsigned long long step;
	const char *dir;
	int r;

	if (!PyArg_ParseTuple(args, "sK", &dir, &step))
		return NULL;
	if (check_open(self) < 0)
		return NULL;
	ts = unlock(self);
	r = coord_checkpoint_save(self->c, dir, step, &e);
	relock(self, ts);
	if (r)
		return raise_code(r, &e);
	Py_RETURN_NONE;
}

/* checkpoint_restore(dir, fallback) -> (step, note) */
static PyObject *coord_ckpt_restore(CoordObject *self, PyObject *args)
{
	PyThreadState *ts;
	struct coord_error e = { 0 };
	const char *dir;
	uint64_t step = 0;
	int fb, r;

	if (!PyArg_ParseTuple(args, "sp", &dir, &fb))
		return NULL;
	if (check_open(self) < 0)
		return NULL;
	ts = unlock(self);
	r = coord_checkpoint_restore_ex(self->c, dir, fb ? COORD_CKPT_FALLBACK : 0, &step, &e);
	relock(self, ts);
	if (r)
		return raise_code(r, &e);
	return Py_BuildValue("Ks", (unsigned long long)step, e.msg);
}

/* ---- the C baseline of the benchmark (bench/python_bench.py) ---------------- */

/* _bench_c(fn_id, args: bytes, n) -> ns for n x (schedule, fetch, put) in C */
static PyObject *coord_bench_c(CoordObject *self, PyObject *args)
{
	PyThreadState *ts;
	unsigned long fn;
	Py_buffer b;
	Py_ssize_t n, i;
	int64_t t0, t1;
	int r = 0;

	if (!PyArg_ParseTuple(args, "ky*n", &fn, &b, &n))
		return NULL;
	if (check_open(self) < 0) {
		PyBuffer_Release(&b);
		return NULL;
	}
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
	relock(self, ts);
	PyBuffer_Release(&b);
	if (r)
		return raise_code(r, NULL);
	return PyLong_FromLongLong(t1 - t0);
}

/* _bench_c_split(fn_id, args: bytes, n) -> (ns to schedule n, ns to fetch and
 * put them once all are final): the C side of the layer's cost without waits */
static PyObject *coord_bench_c_split(CoordObject *self, PyObject *args)
{
	struct coord_rv **rvs;
	PyThreadState *ts;
	unsigned long fn;
	Py_buffer b;
	Py_ssize_t n, i, k = 0;
	int64_t t0, t1, t2, t3;
	int r = 0;

	if (!PyArg_ParseTuple(args, "ky*n", &fn, &b, &n))
		return NULL;
	rvs = PyMem_Calloc(n > 0 ? (size_t)n : 1, sizeof(*rvs));
	if (!rvs || check_open(self) < 0) {
		PyMem_Free(rvs);
		PyBuffer_Release(&b);
		return rvs ? NULL : PyErr_NoMemory();
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
	relock(self, ts);
	PyMem_Free(rvs);
	PyBuffer_Release(&b);
	if (r)
		return raise_code(r, NULL);
	return Py_BuildValue("LL", (long long)(t1 - t0), (long long)(t3 - t2));
}

/* _bench_c_many(fn_id, args: bytes, n, chunk) -> ns to schedule n with
 * coord_schedule_many() in chunks, RemoteValues put at once */
static PyObject *coord_bench_c_many(CoordObject *self, PyObject *args)
{
	PyThreadState *ts;
	struct coord_call calls[MANY_CHUNK];
	struct coord_rv *out[MANY_CHUNK];
	unsigned long fn;
	Py_buffer b;
	Py_ssize_t n, chunk, i, j;
	int64_t t0, t1;
	int r = 0;

	if (!PyArg_ParseTuple(args, "ky*nn", &fn, &b, &n, &chunk))
		return NULL;
	if (chunk < 1 || chunk > MANY_CHUNK)
		chunk = MANY_CHUNK;
	if (check_open(self) < 0) {
		PyBuffer_Release(&b);
		return NULL;
	}
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
	relock(self, ts);
	PyBuffer_Release(&b);
	if (r)
		return raise_code(r, NULL);
	return PyLong_FromLongLong(t1 - t0);
}

static PyMethodDef coord_methods[] = {
	{ "close", (PyCFunction)coord_close, METH_NOARGS, "coord_destroy()" },
	{ "lookup", (PyCFunction)coord_lookup, METH_O, "coord_fn_lookup() -> id" },
	{ "schedule", (PyCFunction)(void (*)(void))coord_schedule1, METH_FASTCALL,
	  "schedule(fn_id, args, codec=None, pw=None) -> RemoteValue" },
	{ "schedule_many", (PyCFunction)(void (*)(void))py_schedule_many, METH_FASTCALL,
	  "schedule_many(fn_id, args, codec=None) -> [RemoteValue]" },
	{ "join", (PyCFunction)(void (*)(void))py_join, METH_FASTCALL, "join(timeout=None)" },
	{ "done", (PyCFunction)coord_done_, METH_NOARGS, "coord_done()" },
	{ "per_worker", (PyCFunction)coord_per_worker, METH_VARARGS,
	  "per_worker(creator, args) -> PerWorker" },
	{ "metrics", (PyCFunction)coord_metrics_, METH_NOARGS, "coord_metrics() as a dict" },
	{ "var_create", (PyCFunction)coord_var_create_, METH_VARARGS,
	  "var_create(name, dims, init) -> handle" },
	{ "var_lookup", (PyCFunction)coord_var_lookup_, METH_O, "-> (handle, dims)" },
	{ "var_io", (PyCFunction)coord_var_io, METH_VARARGS, "var_io(handle, off, buf, write)" },
	{ "checkpoint_save", (PyCFunction)coord_ckpt_save, METH_VARARGS, "(dir, step)" },
	{ "checkpoint_restore", (PyCFunction)coord_ckpt_restore, METH_VARARGS,
	  "(dir, fallback) -> (step, note)" },
	{ "_bench_c", (PyCFunction)coord_bench_c, METH_VARARGS, "C baseline: schedule+fetch" },
	{ "_bench_c_split", (PyCFunction)coord_bench_c_split, METH_VARARGS,
	  "C baseline: schedule n, then fetch n" },
	{ "_bench_c_many", (PyCFunction)coord_bench_c_many, METH_VARARGS,
	  "C baseline: schedule_many" },
	{ NULL },
};

static PyGetSetDef coord_getset[] = {
	{ "num_workers", (getter)coord_nworkers, NULL, "coord_num_workers()", NULL },
	{ "num_ps", (getter)coord_nps, NULL, "coord_num_ps()", NULL },
	{ NULL },
};

static PyTypeObject CoordType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "coord._coord.Coordinator",
	.tp_basicsize = sizeof(CoordObject),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_BASETYPE,
	.tp_doc = "a struct coord (use coord.ClusterCoordinator)",
	.tp_new = PyType_GenericNew,
	.tp_init = (initproc)coord_init,
	.tp_dealloc = (destructor)coord_dealloc,
	.tp_methods = coord_methods,
	.tp_getset = coord_getset,
};

/* ---- module ------------------------------------------------------------------ */

static PyObject *m_set_error_factory(PyObject *mod, PyObject *fn)
{
	Py_XSETREF(err_factory, Py_NewRef(fn));
	Py_RETURN_NONE;
}

static PyObject *m_set_state_type(PyObject *mod, PyObject *t)
{
	Py_XSETREF(state_type, Py_NewRef(t));
	Py_RETURN_NONE;
}

static PyObject *m_strerror(PyObject *mod, PyObject *arg)
{
	long code = PyLong_AsLong(arg);

	if (code == -1 && PyErr_Occurred())
		return NULL;
	return PyUnicode_FromString(coord_strerror((int)code));
}

static PyObject *m_set_log_level(PyObject *mod, PyObject *arg)
{
	long lv = PyLong_AsLong(arg);
	int r;

	if (lv == -1 && PyErr_Occurred())
		return NULL;
	r = coord_set_log_level((int)lv);
	return r < 0 ? raise_code(r, NULL) : PyLong_FromLong(r);
}

static PyMethodDef module_methods[] = {
	{ "_set_error_factory", m_set_error_factory, METH_O, "install the exception factory" },
	{ "_set_state_type", m_set_state_type, METH_O, "install RemoteValueStatus" },
	{ "strerror", m_strerror, METH_O, "coord_strerror()" },
	{ "set_log_level", m_set_log_level, METH_O, "coord_set_log_level() -> previous" },
	{ "spec_parse", m_spec_parse, METH_O, "coord_spec_parse(json) -> Spec" },
	{ "spec_from_cluster_def", m_spec_from_cluster_def, METH_O, "ClusterDef bytes -> Spec" },
	{ "spec_from_tf_config", m_spec_from_tf_config, METH_O,
	  "text, or None for $TF_CONFIG -> (Spec, job, index)" },
	{ "spec_resolve_slurm", m_spec_resolve_slurm, METH_VARARGS,
	  "(port_base, tasks_per_node, jobs) -> (Spec, job, index)" },
	{ "spec_from_arg", m_spec_from_arg, METH_O, "a --spec argument -> (Spec, job, index)" },
	{ NULL },
};

static struct PyModuleDef coord_module = {
	PyModuleDef_HEAD_INIT,
	.m_name = "coord._coord",
	.m_doc = "the public C API of libcoord, for the coord package",
	.m_size = -1,
	.m_methods = module_methods,
};

PyMODINIT_FUNC PyInit__coord(void)
{
	PyObject *m;

	if (PyType_Ready(&SpecType) < 0 || PyType_Ready(&PWType) < 0 || PyType_Ready(&RVType) < 0 ||
	    PyType_Ready(&CoordType) < 0)
		return NULL;
	m = PyModule_Create(&coord_module);
	if (!m)
		return NULL;
	if (PyModule_AddObjectRef(m, "Spec", (PyObject *)&SpecType) < 0 ||
	    PyModule_AddObjectRef(m, "PerWorker", (PyObject *)&PWType) < 0 ||
	    PyModule_AddObjectRef(m, "RemoteValue", (PyObject *)&RVType) < 0 ||
	    PyModule_AddObjectRef(m, "Coordinator", (PyObject *)&CoordType) < 0 ||
	    PyModule_AddIntConstant(m, "ECANCELLED", COORD_ECANCELLED) < 0 ||
	    PyModule_AddIntConstant(m, "EUNAVAILABLE", COORD_EUNAVAILABLE) < 0 ||
	    PyModule_AddIntConstant(m, "EINPUT", COORD_EINPUT) < 0 ||
	    PyModule_AddIntConstant(m, "ENOFN", COORD_ENOFN) < 0 ||
	    PyModule_AddIntConstant(m, "ESTALE", COORD_ESTALE) < 0 ||
	    PyModule_AddIntConstant(m, "ETIMEDOUT", COORD_ETIMEDOUT) < 0 ||
	    PyModule_AddIntConstant(m, "EINVAL", COORD_EINVAL) < 0 ||
	    PyModule_AddIntConstant(m, "ENOMEM", COORD_ENOMEM) < 0 ||
	    PyModule_AddIntConstant(m, "NO_WORKER", COORD_NO_WORKER) < 0) {
		Py_DECREF(m);
		return NULL;
	}
	return m;
}
