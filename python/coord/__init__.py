# SPDX-License-Identifier: MIT
"""coord: schedule native functions on workers from Python, with the shape of
TensorFlow's ClusterCoordinator (schedule / join / done / fetch, RemoteValues,
per-worker datasets, ps variables, ClusterSpec and its resolvers).

    import coord
    c = coord.ClusterCoordinator(functions="libmyfns.so", workers=4)
    square = coord.function("square", returns=int)
    rvs = [c.schedule(square, i) for i in range(10)]
    c.join()
    print(c.fetch(rvs))

The extension (_coord) wraps libcoord's public C API; python/README.md says why
it is the CPython C API and what each call costs.
"""
from ._coord import set_log_level, strerror
from .coordinator import (ClusterCoordinator, Dataset, Function, PerWorkerDataset,
                          PerWorkerValues, RemoteValue, RemoteValueStatus, Variable, function,
                          make_codec)
from .errors import *  # noqa: F401,F403 (the TF-named exceptions)
from .errors import __all__ as _errors_all
from .spec import ClusterSpec, SlurmClusterResolver, TFConfigClusterResolver

__all__ = ["ClusterCoordinator", "Dataset", "Function", "PerWorkerDataset", "PerWorkerValues",
           "RemoteValue", "RemoteValueStatus", "Variable", "function", "make_codec",
           "ClusterSpec", "SlurmClusterResolver", "TFConfigClusterResolver", "set_log_level",
           "strerror"] + _errors_all
