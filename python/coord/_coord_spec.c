// SPDX-License-Identifier: MIT
/*
 * python/coord/_coord_spec.c - Spec, the extension's type over struct
 * coord_spec (coord.ClusterSpec wraps it), and the module functions that
 * make one: parse JSON or a ClusterDef, and the resolvers (TF_CONFIG, Slurm,
 * a --spec argument).
 *
 * What it keeps true: a Spec owns its struct coord_spec (destroyed in its
 * dealloc) and never changes it; a resolver's outputs are returned as
 * (Spec, job, index), the task this process is.
 */
#include "_coord.h"

#include <coord/spec.h>

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
	size_t n = coord_spec_jobs(self->s, NULL, 0);
	const char **names = PyMem_Calloc(n ? n : 1, sizeof(*names));
	PyObject *l;

	if (!names)
		return PyErr_NoMemory();
	coord_spec_jobs(self->s, names, n);
	l = seq_of(0, n, item_str, names);
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

/* A per-job query of coord/spec.h that fills @out[@cap] and says how many in @n. */
typedef int (*job_query_fn)(const struct coord_spec *s, const char *job, void *out, size_t cap,
			    size_t *n, struct coord_error *e);

static int query_indices(const struct coord_spec *s, const char *job, void *out, size_t cap,
			 size_t *n, struct coord_error *e)
{
	return coord_spec_task_indices(s, job, out, cap, n, e);
}

static int query_tasks(const struct coord_spec *s, const char *job, void *out, size_t cap,
		       size_t *n, struct coord_error *e)
{
	return coord_spec_job_tasks(s, job, out, cap, n, e);
}

/* The list of @query's answer for the job named by @arg (@size: one entry's). */
static PyObject *spec_job_list(SpecObject *self, PyObject *arg, job_query_fn query, size_t size,
			       item_fn item)
{
	struct coord_error e = { 0 };
	const char *job = PyUnicode_AsUTF8(arg);
	size_t n = 0;
	PyObject *l;
	void *a;
	int r;

	if (!job)
		return NULL;
	r = query(self->s, job, NULL, 0, &n, &e);
	if (r)
		return raise_code(r, &e);
	a = PyMem_Calloc(n ? n : 1, size);
	if (!a)
		return PyErr_NoMemory();
	r = query(self->s, job, a, n, &n, &e);
	if (r) {
		PyMem_Free(a);
		return raise_code(r, &e);
	}
	l = seq_of(0, n, item, a);
	PyMem_Free(a);
	return l;
}

static PyObject *spec_task_indices(SpecObject *self, PyObject *arg)
{
	return spec_job_list(self, arg, query_indices, sizeof(int64_t), item_i64);
}

static PyObject *spec_job_tasks(SpecObject *self, PyObject *arg)
{
	return spec_job_list(self, arg, query_tasks, sizeof(const char *), item_str_or_none);
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

PyTypeObject SpecType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "coord._coord.Spec",
	.tp_basicsize = sizeof(SpecObject),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "a struct coord_spec (use coord.ClusterSpec)",
	.tp_dealloc = (destructor)spec_dealloc,
	.tp_methods = spec_methods,
	.tp_richcompare = spec_richcompare,
	.tp_as_number = &spec_number,
};

PyObject *m_spec_parse(PyObject *mod, PyObject *arg)
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

PyObject *m_spec_from_cluster_def(PyObject *mod, PyObject *arg)
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

PyObject *m_spec_from_tf_config(PyObject *mod, PyObject *arg)
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

PyObject *m_spec_from_arg(PyObject *mod, PyObject *arg)
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
PyObject *m_spec_resolve_slurm(PyObject *mod, PyObject *args)
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
