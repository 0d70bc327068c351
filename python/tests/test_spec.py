# SPDX-License-Identifier: MIT
"""ClusterSpec with tf.train.ClusterSpec's constructor and methods (the
examples of ../shared/seeds/003_*), and the TF_CONFIG and Slurm resolvers."""
import json

import pytest

import coord


def test_dense_and_sparse():
    cluster = coord.ClusterSpec({"worker": ["worker0.example.com:2222",
                                            "worker1.example.com:2222",
                                            "worker2.example.com:2222"],
                                 "ps": ["ps0.example.com:2222",
                                        "ps1.example.com:2222"]})
    assert cluster.jobs == ["ps", "worker"]
    assert cluster.num_tasks("worker") == 3
    assert cluster.task_indices("ps") == [0, 1]
    assert cluster.task_address("worker", 2) == "worker2.example.com:2222"
    assert cluster.job_tasks("ps") == ["ps0.example.com:2222", "ps1.example.com:2222"]
    assert cluster.as_dict()["worker"][0] == "worker0.example.com:2222"
    assert cluster and not coord.ClusterSpec({})

    sparse = coord.ClusterSpec({"worker": {1: "worker1.example.com:2222"},
                                "ps": ["ps0.example.com:2222", "ps1.example.com:2222"]})
    assert sparse.as_dict() == {"worker": {1: "worker1.example.com:2222"},
                                "ps": ["ps0.example.com:2222", "ps1.example.com:2222"]}
    assert sparse.job_tasks("worker") == [None, "worker1.example.com:2222"]
    assert sparse.task_indices("worker") == [1]
    for bad in (lambda: sparse.num_tasks("chief"), lambda: sparse.task_address("worker", 0),
                lambda: sparse.task_indices("chief"), lambda: sparse.job_tasks("chief")):
        with pytest.raises(ValueError):
            bad()


def test_cluster_def_and_equality():
    a = coord.ClusterSpec({"worker": ["h:1", "h:2"], "ps": {0: "p:1"}})
    b = coord.ClusterSpec({"ps": ["p:1"], "worker": {1: "h:2", 0: "h:1"}})
    assert a == b and not a != b
    cd = a.as_cluster_def()
    assert isinstance(cd, bytes) and cd == b.as_cluster_def()
    assert coord.ClusterSpec(cd) == a and coord.ClusterSpec(a) == a
    with pytest.raises(coord.InvalidArgumentError):
        coord.ClusterSpec({"worker": ["no-port"]})
    with pytest.raises(TypeError):
        coord.ClusterSpec(42)


def test_tf_config(monkeypatch):
    cfg = {"cluster": {"worker": ["w0:2222", "w1:2222"], "ps": ["p0:2222"]},
           "task": {"type": "worker", "index": 1}}
    monkeypatch.setenv("TF_CONFIG", json.dumps(cfg))
    r = coord.TFConfigClusterResolver()
    assert r.task_type == "worker" and r.task_id == 1
    assert r.cluster_spec().as_dict() == cfg["cluster"]
    assert coord.ClusterSpec.from_arg("tf_config") == r.cluster_spec()


def test_slurm(monkeypatch):
    for k, v in {"SLURM_JOB_NODELIST": "node[1-2]", "SLURM_PROCID": "1", "SLURM_NTASKS": "4",
                 "SLURM_NTASKS_PER_NODE": "2"}.items():
        monkeypatch.setenv(k, v)
    r = coord.SlurmClusterResolver(jobs={"worker": 3, "ps": 1}, port_base=9000)
    assert r.cluster_spec().as_dict() == {"ps": ["node1:9000"],
                                          "worker": ["node1:9001", "node2:9000", "node2:9001"]}
    assert r.task_type == "worker" and r.task_id == 0
