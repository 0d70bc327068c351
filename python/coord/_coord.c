// SPDX-License-Identifier: MIT
/*
 * python/coord/_coord.c - the CPython extension under the coord package: thin
 * types over the public C API (coord/coord.h, var.h, spec.h), nothing of the
 * runtime re-implemented.  The Python layer (coordinator.py, spec.py) gives
 * them TensorFlow's shape.  This file is the module: its functions, its
 * constants, and errors made exceptions; _coord.h lists the other files.
 *
 * Why the CPython C API and not cffi (python/README.md has the figures): one
 * compiled call per schedule and per fetch, RemoteValues made as C objects
 * (no Python __init__), arguments passed from the caller's buffer (bytes,
 * numpy) without a copy, and meson builds it with py.extension_module() from
 * a fresh clone (python3-dev only; no build-time code generation).
 *
 * What it keeps true (each file's header says its part):
 *   - The GIL is released around every call that can wait, and a wait runs
 *     in slices so that Ctrl-C and close() get in (_coord_conv.c).
 *   - A coordinator is destroyed only when no call on it is running
 *     (_coord_coordinator.c); a RemoteValue's exported value lives as long as
 *     the export, a PerWorker handle never meets a freed registry (_coord_rv.c).
 *   - Errors become exceptions through the factory the package installs
 *     (_set_error_factory): code, cause, worker, closure, message.
 */
#include "_coord.h"

#include <string.h>

PyMODINIT_FUNC PyInit__coord(void);

static PyObject *err_factory; /* callable(code, cause, worker, closure, msg) */
static PyObject *state_type;  /* RemoteValueStatus: called with coord_rv_state() */

PyObject *raise_code(int code, const struct coord_error *e)
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

PyObject *raise_msg(int code, const char *msg)
{
	struct coord_error e = { .code = code,
				 .worker = COORD_NO_WORKER,
				 .closure = COORD_NO_CLOSURE };

	snprintf(e.msg, sizeof(e.msg), "%s", msg);
	return raise_code(code, &e);
}

PyObject *state_obj(long st)
{
	PyObject *i = PyLong_FromLong(st), *o;

	if (!i || !state_type)
		return i;
	o = PyObject_CallOneArg(state_type, i);
	Py_DECREF(i);
	return o;
}

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
