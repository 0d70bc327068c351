# SPDX-License-Identifier: MIT
"""coord.coordinator - ClusterCoordinator with TensorFlow's shape over libcoord.

Functions run natively on the workers: they are looked up by name in a shared
object that exports coord_register_fns() (the file coord-worker --fns serves),
exactly as from C.  A call's arguments are one buffer (bytes, bytearray,
memoryview or a C-contiguous numpy array, passed to coord without a copy) or
are packed by a small struct codec (int -> int64, float -> float64, bool,
numpy scalars and arrays, bytes, str as UTF-8, lists and tuples of those,
Variables as their uint64 handle, little-endian, concatenated).  Results are
bytes unless the function says how to decode them (function(name, returns=...):
int, float, a struct format, a numpy dtype or (dtype, shape), or a callable
given the RemoteValue, which exports its value as a read-only buffer).
"""
import enum
import struct

import numpy as np

from . import _coord
from .errors import make_error
from .spec import ClusterSpec

__all__ = ["ClusterCoordinator", "Function", "function", "RemoteValue", "RemoteValueStatus",
           "Dataset", "PerWorkerDataset", "PerWorkerValues", "Variable"]

_coord._set_error_factory(make_error)

#: A RemoteValue: .fetch(timeout=None), .state, .id (the C type itself).
RemoteValue = _coord.RemoteValue


class RemoteValueStatus(enum.IntEnum):
    """RemoteValue.state and PerWorkerValues.state(): coord_rv_state()."""
    NOT_READY = 0
    READY = 1
    ABORTED = 2
    CANCELLED = 3


_coord._set_state_type(RemoteValueStatus)

_Q = struct.Struct("<Q")
_PACK_Q = _Q.pack
_PACK_q = struct.Struct("<q").pack
_PACK_d = struct.Struct("<d").pack
_BUFFERS = (bytes, bytearray, memoryview)


def _struct1(st):
    unpack = st.unpack
    if len(unpack(bytes(st.size))) == 1:
        return lambda rv: unpack(rv)[0]
    return unpack


def make_codec(returns):
    """The decoder of a function's result (None: bytes)."""
    if returns is None or returns is bytes:
        return None
    if returns is memoryview:
        return memoryview
    if returns is bool:
        return _struct1(struct.Struct("<?"))
    if returns is int:
        return _struct1(struct.Struct("<q"))
    if returns is float:
        return _struct1(struct.Struct("<d"))
    if isinstance(returns, str):
        return _struct1(struct.Struct(returns if returns[:1] in "<>!=@" else "<" + returns))
    if isinstance(returns, tuple) and len(returns) == 2:
        dt, shape = np.dtype(returns[0]), tuple(returns[1])
        return lambda rv: np.frombuffer(rv, dt).reshape(shape)
    if isinstance(returns, np.dtype) or (isinstance(returns, type) and
                                         issubclass(returns, np.generic)):
        dt = np.dtype(returns)
        return lambda rv: np.frombuffer(rv, dt)
    if callable(returns):
        return returns
    raise TypeError("returns: bytes, int, float, bool, a struct format, a numpy dtype, "
                    "(dtype, shape) or a callable, not %r" % (returns,))


class Function:
    """A function of the worker library, by name, and how to decode its result;
    what schedule() takes in place of a tf.function."""
    __slots__ = ("name", "returns", "codec")

    def __init__(self, name, returns=None):
        self.name = name
        self.returns = returns
        self.codec = make_codec(returns)

    def __repr__(self):
        return "coord.function(%r, returns=%r)" % (self.name, self.returns)


def function(name, returns=None):
    """A worker function by name (coord's tf.function): schedule(function(...), ...)."""
    return Function(name, returns)


def _pack(v):
    t = type(v)
    if t is bytes:
        return v
    if t is int:
        return _PACK_q(v)
    if t is float:
        return _PACK_d(v)
    if t is bool:
        return b"\1" if v else b"\0"
    if isinstance(v, np.ndarray):
        return np.ascontiguousarray(v).tobytes()
    if isinstance(v, np.generic):
        return v.tobytes()
    if isinstance(v, _BUFFERS):
        return bytes(v)
    if isinstance(v, Variable):
        return _PACK_Q(v.handle)
    if isinstance(v, (list, tuple)):
        return b"".join([_pack(x) for x in v])
    if isinstance(v, str):
        return v.encode()
    if v is None:
        return b""
    if isinstance(v, RemoteValue):
        raise TypeError("a RemoteValue is not an argument (as in TensorFlow): fetch it first")
    if isinstance(v, (PerWorkerValues, PerWorkerDataset)):
        raise TypeError("per-worker values are arguments of schedule() itself, not nested")
    raise TypeError("cannot pass %r to a native function" % t.__name__)


def _encode(values):
    """(payload, per-worker tuple or None) of a call's arguments."""
    pw = None
    rest = values
    if any(isinstance(v, PerWorkerValues) for v in values):
        pw = tuple(v._pw for v in values if isinstance(v, PerWorkerValues))
        rest = [v for v in values if not isinstance(v, PerWorkerValues)]
    if len(rest) == 1:
        v = rest[0]
        if type(v) is bytes:
            return v, pw
        if isinstance(v, np.ndarray):
            return (v if v.flags.c_contiguous else np.ascontiguousarray(v)), pw
        if isinstance(v, (bytearray, memoryview)) and memoryview(v).c_contiguous:
            return v, pw
    return b"".join([_pack(v) for v in rest]), pw


class Dataset:
    """What a dataset_fn returns: a per-worker resource creator of the worker
    library (coord_registry_add_resource()) and its arguments."""

    def __init__(self, creator, *args):
        self.creator = creator
        self.args = args


class PerWorkerValues:
    """One value per worker (S8), e.g. the iterators of a per-worker dataset:
    as an argument of schedule(), each worker's function gets its own
    (coord_ctx_per_worker()).  Made lazily on a worker, again after it recovers."""

    def __init__(self, pw):
        self._pw = pw

    def __next__(self):
        raise TypeError("next() is called by the worker function on its own iterator; "
                        "pass these to schedule()")

    def state(self, worker):
        """RemoteValueStatus of the value on @worker: READY once made there."""
        return self._pw.state(worker)


class PerWorkerDataset:
    """A dataset on every worker (create_per_worker_dataset()); iter() gives a
    PerWorkerValues of fresh iterators."""

    def __init__(self, coordinator, ds):
        self._c = coordinator
        self._ds = ds
        self._first = coordinator._per_worker(ds)  # checks the creator now

    def __iter__(self):
        first, self._first = self._first, None
        return first if first is not None else self._c._per_worker(self._ds)


class Variable:
    """A ps variable (coord/var.h): a named dense float32 tensor on its ps task.
    Pass it to a function as an argument (its uint64 handle)."""
    dtype = np.dtype(np.float32)

    def __init__(self, coordinator, name, handle, shape):
        self._c = coordinator
        self.name = name
        self.handle = handle
        self.shape = tuple(shape)
        self.size = int(np.prod(self.shape, dtype=np.int64))

    def read(self, out=None):
        """The value as a new float32 array, or read into @out (C-contiguous
        float32 of the variable's size) without an allocation."""
        if out is None:
            out = np.empty(self.shape, np.float32)
        elif out.dtype != np.float32 or out.size != self.size:
            raise ValueError("out: %d float32, not %d %s" % (self.size, out.size, out.dtype))
        self._c._c.var_io(self.handle, 0, out, False)
        return out

    numpy = read
    read_value = read

    def assign(self, value):
        """Set the whole variable from an array (converted to float32 if need be)."""
        a = np.ascontiguousarray(value, dtype=np.float32)
        if a.size != self.size:
            raise ValueError("assign: %d elements, the variable has %d" % (a.size, self.size))
        self._c._c.var_io(self.handle, 0, a, True)

    def __repr__(self):
        return "<coord.Variable %r shape=%r>" % (self.name, self.shape)


def _native_spec(spec):
    if spec is None:
        return None
    if hasattr(spec, "cluster_spec"):
        spec = spec.cluster_spec()
    if isinstance(spec, str):
        return ClusterSpec.from_arg(spec)._s
    return ClusterSpec(spec)._s


class ClusterCoordinator:
    """Schedule native functions on workers and get RemoteValues back, with the
    semantics of tf.distribute.experimental.coordinator.ClusterCoordinator.

    ClusterCoordinator(spec=None, transport="inproc", functions="libfoo.so",
    workers=N, ps=None, key_file=None, **options): @spec is a ClusterSpec, a
    dict, a --spec string ("tf_config", "slurm:...", JSON, a file) or a
    resolver; None runs @workers in-process workers (default 2).  @options are
    struct coord_opts fields (window=, batch=, closure_timeout_ms=, ...).
    """

    def __init__(self, spec=None, transport="inproc", functions=None, workers=None, ps=None,
                 key_file=None, **options):
        if workers is not None:
            options["inproc_workers"] = workers
        if ps is not None:
            options["inproc_ps"] = ps
        self._c = _coord.Coordinator(functions, transport, _native_spec(spec), key_file,
                                     options)
        self._ids = {}  # function name -> id (coord_fn_lookup(), once)

    # -- lifetime --
    def close(self):
        """Stop the workers (queued closures are cancelled, running ones
        finish).  RemoteValues stay readable."""
        self._c.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    @property
    def num_workers(self):
        return self._c.num_workers

    @property
    def num_ps(self):
        return self._c.num_ps

    def metrics(self):
        """coord_metrics(): counters (completed, failed, put_back, losses, ...)."""
        return self._c.metrics()

    # -- scheduling --
    def _resolve(self, fn):
        """(id, codec) of a function name or Function; ids cached by name."""
        t = type(fn)
        if t is Function:
            name, codec = fn.name, fn.codec
        elif t is str:
            name, codec = fn, None
        else:
            raise TypeError("schedule() takes a function name or coord.function(), not %r"
                            % t.__name__)
        fid = self._ids.get(name)
        if fid is None:
            fid = self._ids[name] = self._c.lookup(name)
        return fid, codec

    def schedule(self, fn, *a, args=None, kwargs=None):
        """Queue fn(*args) on any worker and return its RemoteValue at once (S1).

        Raises an earlier closure's error, once, after cancelling what was
        queued (S3).  Arguments are schedule(fn, x, y) or, as in TensorFlow,
        schedule(fn, args=(x, y)); PerWorkerValues among them go to each
        worker's own component."""
        if kwargs:
            raise TypeError("native functions take no keyword arguments")
        if args is not None:
            if a:
                raise TypeError("give the arguments positionally or as args=, not both")
            a = tuple(args)
        f = self._resolve(fn)
        if not a:
            return self._c.schedule(f[0], None, f[1])
        if len(a) == 1 and type(a[0]) is bytes:
            return self._c.schedule(f[0], a[0], f[1])
        payload, pw = _encode(a)
        return self._c.schedule(f[0], payload, f[1], pw)

    def schedule_many(self, fn, calls):
        """Queue many calls of @fn at once (coord_schedule_many()): @calls is a
        list of each call's arguments (a buffer, or a tuple to encode) or a
        C-contiguous array whose rows are the calls' arguments (no copy).
        Returns their RemoteValues, in order."""
        f = self._resolve(fn)
        if isinstance(calls, np.ndarray):
            return self._c.schedule_many(f[0], np.ascontiguousarray(calls), f[1])
        if not isinstance(calls, (list, tuple)):
            calls = list(calls)
        if calls and not isinstance(calls[0], _BUFFERS + (np.ndarray, type(None))):
            calls = [_encode(c if isinstance(c, tuple) else (c,))[0] for c in calls]
        return self._c.schedule_many(f[0], calls, f[1])

    def join(self, timeout=None):
        """Wait until every scheduled closure is final (S4); raises the first
        error, once (S3).  The GIL is released while it waits."""
        self._c.join(timeout)

    def done(self):
        """Whether every scheduled closure is final (S5); raises as join()."""
        return self._c.done()

    def fetch(self, val):
        """The values of a RemoteValue or of a structure of them (lists,
        tuples, namedtuples, dicts), waiting as needed; other values as-is."""
        t = type(val)
        if t is RemoteValue:
            return val.fetch()
        if t is list:
            return [x.fetch() if type(x) is RemoteValue else self.fetch(x) for x in val]
        if isinstance(val, tuple):
            items = [self.fetch(x) for x in val]
            return t(*items) if hasattr(val, "_fields") else t(items)
        if isinstance(val, dict):
            return t((k, self.fetch(v)) for k, v in val.items())
        if isinstance(val, list):
            return t(self.fetch(x) for x in val)
        return val

    # -- per-worker values --
    def _per_worker(self, ds):
        payload = _encode(ds.args)[0] if ds.args else b""
        return PerWorkerValues(self._c.per_worker(ds.creator, payload))

    def create_per_worker_dataset(self, dataset_fn, *args):
        """A dataset on every worker: @dataset_fn is a callable returning a
        Dataset (as TensorFlow's dataset_fn), a Dataset, or a creator's name
        and its arguments.  iter() of the result is a PerWorkerValues."""
        if isinstance(dataset_fn, str):
            ds = Dataset(dataset_fn, *args)
        elif isinstance(dataset_fn, Dataset):
            ds = dataset_fn
        elif callable(dataset_fn):
            ds = dataset_fn(*args)
            if not isinstance(ds, Dataset):
                raise TypeError("dataset_fn must return a coord.Dataset")
        else:
            raise TypeError("create_per_worker_dataset() takes a dataset_fn, a Dataset or "
                            "a creator's name")
        return PerWorkerDataset(self, ds)

    def create_per_worker_resource(self, creator, *args):
        """PerWorkerValues made by the resource creator @creator (S9)."""
        return self._per_worker(Dataset(creator, *args))

    # -- ps variables --
    def create_variable(self, name, initial_value=None, shape=None):
        """A float32 variable on its ps task (idempotent: one of the same name
        and shape is returned unchanged).  @initial_value: an array (its shape
        is the variable's), else zeros of @shape (default a scalar)."""
        init = None
        if initial_value is not None:
            init = np.ascontiguousarray(initial_value, dtype=np.float32)
            if shape is not None and tuple(shape) != init.shape:
                raise ValueError("shape %r and initial value %r disagree"
                                 % (tuple(shape), init.shape))
            shape = init.shape
        shape = tuple(int(d) for d in (shape or ()))
        h = self._c.var_create(name, shape, init)
        return Variable(self, name, h, shape)

    def variable(self, name):
        """The existing variable @name (NotFoundError if none)."""
        h, shape = self._c.var_lookup(name)
        return Variable(self, name, h, shape)

    def save_checkpoint(self, directory, step):
        """Every ps task saves its variables under @directory (crash-safe)."""
        self._c.checkpoint_save(str(directory), int(step))

    def restore_checkpoint(self, directory, fallback=False):
        """Restore the newest checkpoint in @directory, whole or not at all;
        with @fallback the newest intact one.  Returns the step restored."""
        step, _note = self._c.checkpoint_restore(str(directory), bool(fallback))
        return step
