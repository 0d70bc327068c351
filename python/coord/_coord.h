/* SPDX-License-Identifier: MIT */
/*
 * python/coord/_coord.h - what the files of the coord._coord extension share:
 * the object layouts of its four types, the error and argument conversions
 * (_coord.c, _coord_conv.c) and the Coordinator's methods that live in their
 * own files (variables, checkpoints, the benchmark's C baseline).
 *
 * The extension's files, one responsibility each:
 *   _coord.c             the module, its functions, errors as exceptions
 *   _coord_conv.c        argument and result conversion, timeouts, waits in slices
 *   _coord_spec.c        Spec (struct coord_spec) and the resolvers
 *   _coord_rv.c          RemoteValue (struct coord_rv) and PerWorker (struct coord_pw)
 *   _coord_coordinator.c the Coordinator: lifecycle, options, schedule, join, metrics
 *   _coord_var.c         ps variables and checkpoints (Coordinator methods)
 *   _coord_bench.c       the C baseline of bench/python_bench.py (Coordinator methods)
 *
 * What it keeps true: every name here is hidden in the built module (meson's
 * gnu_symbol_visibility 'hidden'); only PyInit__coord() is exported.
 */
#ifndef COORD_PY_COORD_H
#define COORD_PY_COORD_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>

#include <stdint.h>

#include <coord/coord.h>
#include <coord/var.h>

/* Longest a blocked call waits before it looks at signals and close(). */
#define WAIT_SLICE_NS 100000000ll
/* Calls of one coord_schedule_many() (stack arrays). */
#define MANY_CHUNK 256

typedef struct {
	PyObject_HEAD struct coord_spec *s;
} SpecObject;

typedef struct {
	PyObject_HEAD struct coord_pw *pw;
	PyObject *owner; /* the Coordinator: its registry outlives the handle */
} PWObject;

typedef struct {
	PyObject_HEAD struct coord_rv *rv;
	PyObject *codec; /* None: bytes; else called with the RemoteValue */
	const void *val;
	size_t len;
	int fetched;
} RVObject;

typedef struct {
	PyObject_HEAD struct coord *c;
	struct coord_registry *reg;
	void *dl;
	int busy;    /* calls running with the GIL released (GIL-protected) */
	int closing; /* close() started */
} CoordObject;

extern PyTypeObject SpecType, PWType, RVType, CoordType;

/* _coord.c: errors become exceptions (NULL returned, for `return raise_...`). */
PyObject *raise_code(int code, const struct coord_error *e);
PyObject *raise_msg(int code, const char *msg);
/* A RemoteValueStatus for a coord_rv_state() value. */
PyObject *state_obj(long st);

/* _coord_conv.c: arguments in, results out; 0 or -1 with an exception. */
int64_t now_ns(void);
int timeout_arg(PyObject *o, int64_t *ns);
int u32_arg(PyObject *o, uint32_t *v);
int call_arg(PyObject *a, Py_buffer *b, const void **args, size_t *len);
typedef PyObject *(*item_fn)(const void *arr, size_t i);
PyObject *seq_of(int tuple, size_t n, item_fn item, const void *arr);
PyObject *item_str(const void *arr, size_t i);
PyObject *item_str_or_none(const void *arr, size_t i);
PyObject *item_i64(const void *arr, size_t i);
PyObject *item_u64(const void *arr, size_t i);
typedef int (*slice_fn)(void *ctx, int64_t slice_ns, struct coord_error *e);
int wait_in_slices(int64_t timeout_ns, slice_fn call, int (*stop)(void *ctx), void *ctx,
		   struct coord_error *e, int *code);

/* _coord_rv.c */
PyObject *rv_new(struct coord_rv *rv, PyObject *codec);

/* _coord_coordinator.c: a call that may wait counts itself while the GIL is out. */
int check_open(CoordObject *self);
PyThreadState *unlock(CoordObject *self);
void relock(CoordObject *self, PyThreadState *ts);

/* _coord_var.c, _coord_bench.c: Coordinator methods (coord_methods[]). */
PyObject *py_var_create(CoordObject *self, PyObject *args);
PyObject *py_var_lookup(CoordObject *self, PyObject *arg);
PyObject *py_var_io(CoordObject *self, PyObject *args);
PyObject *py_ckpt_save(CoordObject *self, PyObject *args);
PyObject *py_ckpt_restore(CoordObject *self, PyObject *args);
PyObject *py_bench_c(CoordObject *self, PyObject *args);
PyObject *py_bench_c_split(CoordObject *self, PyObject *args);
PyObject *py_bench_c_many(CoordObject *self, PyObject *args);

/* _coord_spec.c: module functions (module_methods[]). */
PyObject *m_spec_parse(PyObject *mod, PyObject *arg);
PyObject *m_spec_from_cluster_def(PyObject *mod, PyObject *arg);
PyObject *m_spec_from_tf_config(PyObject *mod, PyObject *arg);
PyObject *m_spec_from_arg(PyObject *mod, PyObject *arg);
PyObject *m_spec_resolve_slurm(PyObject *mod, PyObject *args);

#endif
