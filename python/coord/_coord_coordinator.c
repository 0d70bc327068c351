// SPDX-License-Identifier: MIT
/*
 * python/coord/_coord_coordinator.c - Coordinator, the extension's type over
 * struct coord (coord.ClusterCoordinator wraps it): creation with its options
 * and worker library, close, lookup, schedule and schedule_many, join, done,
 * per-worker resources and metrics.  Its variable, checkpoint and benchmark
 * methods live in _coord_var.c and _coord_bench.c.
 *
 * What it keeps true:
 *   - The GIL is released around every call that can wait (create, schedule,
 *     join, done, and the methods of _coord_var.c); join waits in slices of
 *     WAIT_SLICE_NS (wait_in_slices()) so Ctrl-C and close() get in.
 *   - A coordinator is destroyed only when no call on it is running: calls
 *     count themselves in @busy (changed only with the GIL held, by unlock()
 *     and relock()), close() marks it closing and waits for @busy to drain.
 *   - Its registry and worker library are freed only in dealloc: every
 *     PerWorker handle holds a reference to it.
 */
#include "_coord.h"

#include <dlfcn.h>
#include <stddef.h>
#include <string.h>
#include <time.h>

#include <coord/spec.h>

/* Release the GIL for a call on @self that may wait; relock() takes it back. */
PyThreadState *unlock(CoordObject *self)
{
	self->busy++;
	return PyEval_SaveThread();
}

void relock(CoordObject *self, PyThreadState *ts)
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

int check_open(CoordObject *self)
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
	int r;

	if (nargs < 2 || nargs > 4)
		return PyErr_Format(PyExc_TypeError, "schedule(fn_id, args, codec, pw)");
	if (check_open(self) < 0)
		return NULL;
	if (u32_arg(args[0], &call.fn) < 0)
		return NULL;
	if (nargs > 3 && pw_args(args[3], pw, &call) < 0)
		return NULL;
	if (call_arg(args[1], &b, &call.args, &call.len) < 0)
		return NULL;
	ts = unlock(self);
	r = coord_schedule_call(self->c, &call, &rv, &e);
	relock(self, ts);
	if (b.obj)
		PyBuffer_Release(&b);
	if (r)
		return raise_code(r, &e);
	return rv_new(rv, codec);
}

/* The calls of a schedule_many(): the rows of one buffer, or a sequence. */
struct many_args {
	PyObject *fast; /* the sequence, or NULL: rows */
	Py_buffer rows;
	Py_ssize_t n, rowlen;
};

static int many_args_get(PyObject *a, struct many_args *m)
{
	if (!PyBytes_Check(a) && PyObject_CheckBuffer(a)) {
		if (PyObject_GetBuffer(a, &m->rows, PyBUF_C_CONTIGUOUS | PyBUF_ND) < 0)
			return -1;
		if (m->rows.ndim < 1) {
			PyBuffer_Release(&m->rows);
			PyErr_Format(PyExc_ValueError, "schedule_many: rows need ndim >= 1");
			return -1;
		}
		m->n = m->rows.shape[0];
		m->rowlen = m->n ? m->rows.len / m->n : 0;
		return 0;
	}
	m->fast = PySequence_Fast(a, "schedule_many: a sequence of buffers");
	if (!m->fast)
		return -1;
	m->n = PySequence_Fast_GET_SIZE(m->fast);
	return 0;
}

static void many_args_release(struct many_args *m)
{
	if (m->rows.obj)
		PyBuffer_Release(&m->rows);
	Py_XDECREF(m->fast);
}

/* @calls[0..@k) from the calls from @done on; buffers taken counted in @nb. */
static int many_fill(const struct many_args *m, uint32_t fn, Py_ssize_t done, Py_ssize_t k,
		     struct coord_call *calls, Py_buffer *bufs, Py_ssize_t *nb)
{
	Py_ssize_t i;

	memset(calls, 0, (size_t)k * sizeof(calls[0]));
	for (i = 0; i < k; i++) {
		calls[i].fn = fn;
		if (!m->fast) {
			calls[i].args = (char *)m->rows.buf + (done + i) * m->rowlen;
			calls[i].len = (size_t)m->rowlen;
			continue;
		}
		bufs[*nb].obj = NULL;
		if (call_arg(PySequence_Fast_GET_ITEM(m->fast, done + i), &bufs[*nb],
			     &calls[i].args, &calls[i].len) < 0)
			return -1;
		if (bufs[*nb].obj)
			(*nb)++;
	}
	return 0;
}

/*
 * Schedule up to MANY_CHUNK calls from @done on, their RemoteValues stored in
 * @list: how many were queued, or -1 with an exception.
 */
static Py_ssize_t many_chunk(CoordObject *self, const struct many_args *m, uint32_t fn,
			     PyObject *codec, PyObject *list, Py_ssize_t done)
{
	struct coord_call calls[MANY_CHUNK];
	struct coord_rv *out[MANY_CHUNK];
	Py_buffer bufs[MANY_CHUNK];
	struct coord_error e = { 0 };
	Py_ssize_t k = m->n - done < MANY_CHUNK ? m->n - done : MANY_CHUNK, i, nb = 0;
	size_t queued = 0;
	int r = 0, bad;

	bad = many_fill(m, fn, done, k, calls, bufs, &nb);
	if (!bad) {
		PyThreadState *ts = unlock(self);

		r = coord_schedule_many(self->c, calls, (size_t)k, out, &queued, &e);
		relock(self, ts);
	}
	while (nb)
		PyBuffer_Release(&bufs[--nb]);
	if (bad)
		return -1; /* a bad buffer: its exception is set */
	for (i = 0; i < (Py_ssize_t)queued; i++) {
		PyObject *o = rv_new(out[i], codec);

		if (!o) {
			while (++i < (Py_ssize_t)queued)
				coord_rv_put(out[i]);
			return -1;
		}
		PyList_SET_ITEM(list, done + i, o);
	}
	if (r) {
		raise_code(r, &e);
		return -1;
	}
	return (Py_ssize_t)queued;
}

/*
 * schedule_many(fn_id, args, codec=None): args is a sequence of buffers (or
 * None), or one buffer of ndim >= 1 whose rows are the calls' arguments (a
 * 2-D numpy array: no copy).  Returns the list of RemoteValues.
 */
static PyObject *py_schedule_many(CoordObject *self, PyObject *const *args, Py_ssize_t nargs)
{
	struct many_args m = { 0 };
	PyObject *codec = nargs > 2 ? args[2] : Py_None, *list;
	Py_ssize_t done = 0, q;
	uint32_t fn;

	if (nargs < 2 || nargs > 3)
		return PyErr_Format(PyExc_TypeError, "schedule_many(fn_id, args, codec)");
	if (check_open(self) < 0 || u32_arg(args[0], &fn) < 0 || many_args_get(args[1], &m) < 0)
		return NULL;
	list = PyList_New(m.n);
	while (list && done < m.n) {
		q = many_chunk(self, &m, fn, codec, list, done);
		if (q < 0)
			Py_CLEAR(list);
		else
			done += q;
	}
	many_args_release(&m);
	return list;
}

/* One slice of a join(), the GIL released. */
static int join_slice(void *self, int64_t slice_ns, struct coord_error *e)
{
	PyThreadState *ts = unlock(self);
	int r = coord_join_timeout(((CoordObject *)self)->c, slice_ns, e);

	relock(self, ts);
	return r;
}

/* A join() stops waiting once close() started. */
static int join_stop(void *self)
{
	if (!((CoordObject *)self)->closing)
		return 0;
	PyErr_SetString(PyExc_ValueError, "the coordinator was closed");
	return -1;
}

/* join(timeout=None) */
static PyObject *py_join(CoordObject *self, PyObject *const *args, Py_ssize_t nargs)
{
	struct coord_error e = { 0 };
	int64_t t = -1;
	int r;

	if (check_open(self) < 0)
		return NULL;
	if (nargs > 0 && timeout_arg(args[0], &t) < 0)
		return NULL;
	if (wait_in_slices(t, join_slice, join_stop, self, &e, &r) < 0)
		return NULL;
	if (r)
		return raise_code(r, &e);
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
	{ "var_create", (PyCFunction)py_var_create, METH_VARARGS,
	  "var_create(name, dims, init) -> handle" },
	{ "var_lookup", (PyCFunction)py_var_lookup, METH_O, "-> (handle, dims)" },
	{ "var_io", (PyCFunction)py_var_io, METH_VARARGS, "var_io(handle, off, buf, write)" },
	{ "checkpoint_save", (PyCFunction)py_ckpt_save, METH_VARARGS, "(dir, step)" },
	{ "checkpoint_restore", (PyCFunction)py_ckpt_restore, METH_VARARGS,
	  "(dir, fallback) -> (step, note)" },
	{ "_bench_c", (PyCFunction)py_bench_c, METH_VARARGS, "C baseline: schedule+fetch" },
	{ "_bench_c_split", (PyCFunction)py_bench_c_split, METH_VARARGS,
	  "C baseline: schedule n, then fetch n" },
	{ "_bench_c_many", (PyCFunction)py_bench_c_many, METH_VARARGS,
	  "C baseline: schedule_many" },
	{ NULL },
};

static PyGetSetDef coord_getset[] = {
	{ "num_workers", (getter)coord_nworkers, NULL, "coord_num_workers()", NULL },
	{ "num_ps", (getter)coord_nps, NULL, "coord_num_ps()", NULL },
	{ NULL },
};

PyTypeObject CoordType = {
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
