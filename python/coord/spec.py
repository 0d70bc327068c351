# SPDX-License-Identifier: MIT
"""coord.spec - ClusterSpec with tf.train.ClusterSpec's constructor and methods,
and the TF_CONFIG and Slurm resolvers, over coord/spec.h.

The spec itself is coord's (parsed, checked and kept sorted by libcoord): this
module only converts Python dicts to the JSON coord_spec_parse() reads and back,
and raises ValueError where TensorFlow does (an unknown job or task).
"""
import json

from . import _coord

__all__ = ["ClusterSpec", "TFConfigClusterResolver", "SlurmClusterResolver"]


def _dict_json(cluster):
    out = {}
    for job, tasks in cluster.items():
        if not isinstance(job, str):
            raise TypeError("job names must be strings, not %r" % (job,))
        if isinstance(tasks, dict):
            out[job] = {str(int(i)): a for i, a in tasks.items()}
        elif isinstance(tasks, (list, tuple)):
            out[job] = list(tasks)
        elif isinstance(tasks, str):
            out[job] = [tasks]
        else:
            raise TypeError("job %r: a list of addresses or a dict from task index to "
                            "address, not %r" % (job, type(tasks).__name__))
    return json.dumps(out)


class ClusterSpec:
    """A cluster as jobs of tasks, as tf.train.ClusterSpec.

    ClusterSpec({"worker": ["h0:2222", "h1:2222"], "ps": {0: "p:2222"}}), another
    ClusterSpec, or ClusterDef wire bytes (what as_cluster_def() returns).
    """

    def __init__(self, cluster):
        if isinstance(cluster, ClusterSpec):
            self._s = cluster._s
        elif isinstance(cluster, _coord.Spec):
            self._s = cluster
        elif isinstance(cluster, dict):
            self._s = _coord.spec_parse(_dict_json(cluster))
        elif isinstance(cluster, (bytes, bytearray, memoryview)):
            self._s = _coord.spec_from_cluster_def(cluster)
        else:
            raise TypeError("ClusterSpec takes a dict of jobs, a ClusterSpec or ClusterDef "
                            "bytes, not %r" % type(cluster).__name__)

    @classmethod
    def from_arg(cls, arg):
        """The spec of a --spec argument: "tf_config", "slurm[:OPT,...]", JSON
        text or a file (coord_spec_from_arg())."""
        return cls(_coord.spec_from_arg(arg)[0])

    def __bool__(self):
        return bool(self._s)

    __nonzero__ = __bool__

    def __eq__(self, other):
        if not isinstance(other, ClusterSpec):
            return NotImplemented
        return self._s == other._s

    def __ne__(self, other):
        r = self.__eq__(other)
        return r if r is NotImplemented else not r

    def __str__(self):
        return "ClusterSpec(%s)" % self._s.as_json()

    __repr__ = __str__

    @property
    def jobs(self):
        """The job names, sorted."""
        return self._s.jobs()

    def _job(self, job_name):
        if not self._s.has_job(job_name):
            raise ValueError("No such job in cluster: %r" % (job_name,))

    def num_tasks(self, job_name):
        self._job(job_name)
        return self._s.num_tasks(job_name)

    def task_indices(self, job_name):
        self._job(job_name)
        return self._s.task_indices(job_name)

    def task_address(self, job_name, task_index):
        self._job(job_name)
        if task_index not in self._s.task_indices(job_name):
            raise ValueError("No task with index %r in job %r" % (task_index, job_name))
        return self._s.task_address(job_name, task_index)

    def job_tasks(self, job_name):
        self._job(job_name)
        return self._s.job_tasks(job_name)

    def as_dict(self):
        """Job -> list of addresses (dense) or dict from index to address."""
        d = json.loads(self._s.as_json())
        return {j: t if isinstance(t, list) else {int(i): a for i, a in t.items()}
                for j, t in d.items()}

    def as_cluster_def(self):
        """The tensorflow.ClusterDef wire bytes (canonical: equal specs, equal bytes)."""
        return self._s.as_cluster_def()


class TFConfigClusterResolver:
    """The cluster of $TF_CONFIG (or of @config, the same JSON text), as
    tf.distribute.cluster_resolver.TFConfigClusterResolver."""

    def __init__(self, task_type=None, task_id=None, config=None):
        spec, job, index = _coord.spec_from_tf_config(config)
        self._spec = ClusterSpec(spec)
        self.task_type = task_type if task_type is not None else (job or None)
        self.task_id = task_id if task_id is not None else (index if index >= 0 else None)

    def cluster_spec(self):
        return self._spec


class SlurmClusterResolver:
    """The cluster of the current Slurm allocation, as
    tf.distribute.cluster_resolver.SlurmClusterResolver: @jobs maps job names to
    task counts (default one job "worker" of every task); ranks go to the jobs
    sorted by name; a node's k-th task listens on @port_base + k."""

    def __init__(self, jobs=None, port_base=8888, tasks_per_node=None):
        jl = None if jobs is None else sorted(jobs.items())
        spec, job, index = _coord.spec_resolve_slurm(port_base, tasks_per_node or 0, jl)
        self._spec = ClusterSpec(spec)
        self.task_type = job or None
        self.task_id = index if index >= 0 else None

    def cluster_spec(self):
        return self._spec
