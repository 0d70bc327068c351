// SPDX-License-Identifier: MIT
/*
 * python/coord/_coord_var.c - the Coordinator's methods over coord/var.h:
 * ps variables (create, look up, read and assign a slice) and checkpoints
 * (save, restore).  coord.Variable and coord.checkpoint wrap them.
 *
 * What it keeps true: every call runs with the GIL released and counted in
 * the Coordinator's @busy (unlock()/relock()), so close() waits for it; a
 * variable's values pass through the caller's C-contiguous float32 buffer,
 * never copied here.
 */
#include "_coord.h"

/* var_create(name, dims: tuple, init: buffer | None) -> handle */
PyObject *py_var_create(CoordObject *self, PyObject *args)
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

PyObject *py_var_lookup(CoordObject *self, PyObject *arg)
{
	PyThreadState *ts;
	struct coord_error e = { 0 };
	struct coord_var_shape sh;
	const char *name = PyUnicode_AsUTF8(arg);
	PyObject *dims;
	coord_var_t v;
	int r;

	if (!name || check_open(self) < 0)
		return NULL;
	ts = unlock(self);
	r = coord_var_lookup(self->c, name, &v, &sh, &e);
	relock(self, ts);
	if (r)
		return raise_code(r, &e);
	dims = seq_of(1, sh.ndim, item_u64, sh.dims);
	return dims ? Py_BuildValue("KN", (unsigned long long)v, dims) : NULL;
}

/* var_io(handle, off, buffer, write): read into (write=0) or assign from it */
PyObject *py_var_io(CoordObject *self, PyObject *args)
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

PyObject *py_ckpt_save(CoordObject *self, PyObject *args)
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
PyObject *py_ckpt_restore(CoordObject *self, PyObject *args)
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
