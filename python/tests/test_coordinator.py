# SPDX-License-Identifier: MIT
"""ClusterCoordinator over inproc and tcp: values and codecs, fetch over
structures, the error rule (S3) as TF-named exceptions, schedule_many,
per-worker values, ps variables and checkpoints, the GIL released while coord
waits, and (tcp) a worker killed mid-run."""
import collections
import os
import signal
import threading
import time

import numpy as np
import pytest

import coord
from conftest import PYFNS, start_workers

square = coord.function("square", returns=int)


def test_values_and_codecs(cc):
    assert cc.num_workers == 2
    rv = cc.schedule(square, 7)
    assert rv.fetch() == 49 and rv.fetch() == 49
    assert rv.state == coord.RemoteValueStatus.READY
    assert isinstance(rv.id, int)
    assert cc.schedule("echo", b"abc").fetch() == b"abc"
    assert cc.schedule("echo", bytearray(b"xy")).fetch() == b"xy"
    assert cc.schedule("echo").fetch() == b""
    assert cc.schedule(coord.function("add", returns=int), 1, 2, [3, 4]).fetch() == 10
    assert cc.schedule(coord.function("echo", returns="qd"), 5, 2.5).fetch() == (5, 2.5)
    a = np.arange(12, dtype=np.float32).reshape(3, 4)
    out = cc.schedule(coord.function("scale", returns=(np.float32, (3, 4))), a).fetch()
    np.testing.assert_array_equal(out, 2 * a)
    assert not out.flags.writeable and isinstance(out.base.base, coord.RemoteValue)  # no copy
    # a non-contiguous array is made contiguous before it is sent
    out = cc.schedule(coord.function("scale", returns=np.float32), a[:, 1]).fetch()
    np.testing.assert_array_equal(out, 2 * a[:, 1])
    assert bytes(memoryview(rv)) == (49).to_bytes(8, "little")


def test_fetch_structure(cc):
    Pair = collections.namedtuple("Pair", "a b")
    rvs = {"x": [cc.schedule(square, i) for i in range(3)],
           "y": (cc.schedule(square, 3), "as-is", 5), "z": Pair(cc.schedule(square, 4), None)}
    assert cc.fetch(rvs) == {"x": [0, 1, 4], "y": (9, "as-is", 5), "z": Pair(16, None)}
    assert cc.fetch(7) == 7


def test_error_rule(cc):
    bad = cc.schedule("fail", -22)
    with pytest.raises(coord.InvalidArgumentError) as ei:
        bad.fetch()
    e = ei.value
    assert e.code == -22 and e.closure == bad.id and e.worker in (0, 1)
    assert "on purpose" in e.message
    # the next join raises it once (S3), then the error is cleared
    with pytest.raises(coord.InvalidArgumentError):
        cc.join()
    cc.join()
    assert cc.done()
    # a closure failing with ETIMEDOUT is its own error, not a wait's timeout
    slow_fail = cc.schedule("fail", -110)
    with pytest.raises(coord.DeadlineExceededError) as ei:
        slow_fail.fetch()
    assert ei.value.closure == slow_fail.id
    with pytest.raises(coord.DeadlineExceededError) as ei:
        cc.join()
    assert ei.value.closure == slow_fail.id
    # a function's own code passes through as UnknownError
    cc.schedule("fail", -5)
    with pytest.raises(coord.UnknownError) as ei:
        cc.join()
    assert ei.value.code == -5
    # schedule() raises it too, and queued closures are cancelled
    blockers = [cc.schedule("sleep_ms", 50) for _ in range(8)]
    cc.schedule("fail", -22)
    queued = [cc.schedule("sleep_ms", 50) for _ in range(64)]
    with pytest.raises(coord.InvalidArgumentError):
        until = time.monotonic() + 30  # it fails within 8 x 50 ms / 2 workers
        for _ in range(100000):
            cc.schedule("sleep_ms", 0)
            if time.monotonic() > until:
                break
            time.sleep(0.001)
    states = {rv.state for rv in queued}
    assert coord.RemoteValueStatus.CANCELLED in states
    for rv in queued:
        if rv.state == coord.RemoteValueStatus.CANCELLED:
            with pytest.raises(coord.CancelledError):
                rv.fetch()
    # a blocker that had not started when the error was taken is cancelled
    # too (S3: the raising call returned, so none of the old round still runs);
    # one that ran keeps its outcome
    for rv in blockers:
        if rv.state == coord.RemoteValueStatus.CANCELLED:
            with pytest.raises(coord.CancelledError):
                rv.fetch()
        else:
            rv.fetch()
    cc.join()


def test_unknown_function(cc):
    with pytest.raises(coord.NotFoundError):
        cc.schedule("no_such_function")
    with pytest.raises(coord.NotFoundError):
        cc.create_per_worker_resource("no_such_creator")


def test_schedule_many(cc):
    rvs = cc.schedule_many(square, [(i,) for i in range(1000)])
    assert [rv.fetch() for rv in rvs] == [i * i for i in range(1000)]
    rows = np.arange(600, dtype=np.int64).reshape(600, 1)
    rvs = cc.schedule_many(square, rows)
    assert cc.fetch(rvs) == [i * i for i in range(600)]
    rvs = cc.schedule_many("echo", [b"a", bytearray(b"b"), None, np.int8([1, 2])])
    assert cc.fetch(rvs) == [b"a", b"b", b"", b"\1\2"]
    assert cc.schedule_many("echo", []) == []
    assert len({rv.id for rv in cc.schedule_many("noop", [b""] * 300)}) == 300
    cc.join()


def test_per_worker_values(cc):
    it = iter(cc.create_per_worker_dataset("from_tensor_slices", [1, 2, 3]))
    nxt = coord.function("next", returns=int)
    # one closure at a time: each worker's iterator is its own
    seen = [cc.schedule(nxt, it).fetch() for _ in range(12)]
    assert set(seen) == {1, 2, 3}
    assert any(it.state(w) == coord.RemoteValueStatus.READY for w in range(2))
    with pytest.raises(coord.InputError) as ei:
        cc.schedule(nxt, iter(cc.create_per_worker_dataset("from_tensor_slices"))).fetch()
    assert isinstance(ei.value.original_exception, coord.InvalidArgumentError)
    with pytest.raises(coord.InputError):
        cc.join()


def test_variables_and_checkpoint(cc, ckpt_dir, request):
    name = "w_" + request.node.callspec.id
    v = cc.create_variable(name, initial_value=np.arange(6).reshape(2, 3))
    assert v.shape == (2, 3) and cc.num_ps == 1
    np.testing.assert_array_equal(v.read(), np.arange(6).reshape(2, 3))
    out = np.empty((2, 3), np.float32)
    assert v.read(out) is out
    cc.save_checkpoint(ckpt_dir, 7)
    v.assign(np.ones((2, 3)))
    np.testing.assert_array_equal(cc.variable(name).numpy(), np.ones((2, 3)))
    assert cc.restore_checkpoint(ckpt_dir) == 7
    np.testing.assert_array_equal(v.read(), np.arange(6).reshape(2, 3))
    with pytest.raises(coord.AlreadyExistsError):
        cc.create_variable(name, shape=(3,))
    with pytest.raises(coord.NotFoundError):
        cc.variable("no_such_variable")
    with pytest.raises(ValueError):
        v.assign(np.ones(5))


def test_gil_released_while_waiting(cc, request):
    """fetch() and join() wait with the GIL released: the closure can finish
    only after another Python thread sets the variable it polls."""
    v = cc.create_variable("gate_" + request.node.callspec.id, shape=(1,))
    for wait in ("fetch", "join"):
        v.assign([0])
        rv = cc.schedule(coord.function("wait_var", returns="f"), v)
        t = threading.Timer(0.2, v.assign, args=([1.0],))
        t.start()
        if wait == "fetch":
            assert rv.fetch(timeout=30) == 1.0  # 10 s if the GIL were held
        else:
            cc.join(timeout=30)
            assert rv.state == coord.RemoteValueStatus.READY
        t.join()


def test_fetch_timeout(cc):
    rv = cc.schedule("sleep_ms", 500)
    with pytest.raises(coord.DeadlineExceededError):
        rv.fetch(timeout=0.05)
    assert rv.state == coord.RemoteValueStatus.NOT_READY
    assert rv.fetch(timeout=30) == b"\0" * 8 or rv.fetch() == (1).to_bytes(8, "little")
    cc.join()


def test_close(cc):
    rv = cc.schedule(square, 3)
    cc.join()
    cc.close()
    assert rv.fetch() == 9  # a RemoteValue outlives its coordinator
    with pytest.raises(ValueError):
        cc.schedule(square, 3)
    cc.close()


def test_worker_killed_mid_run():
    """tcp: SIGKILL one of two coord-worker processes while closures run on
    it; they are put back and run on the other (S2), every RemoteValue gets its
    value; the worker, restarted on its port, is brought back (S10)."""
    procs = start_workers(2)
    try:
        c = coord.ClusterCoordinator({"worker": [p.addr for p in procs]}, transport="tcp",
                                     functions=PYFNS, heartbeat_ms=200)
        sleep = coord.function("sleep_ms", returns=int)
        rvs = [c.schedule(sleep, 200) for _ in range(24)]
        time.sleep(0.15)
        procs[0].kill()
        assert all(w in (0, 1) for w in c.fetch(rvs))
        c.join(timeout=60)
        m = c.metrics()
        assert m["losses"] >= 1 and m["put_back"] >= 1
        procs[0].restart()
        until = time.monotonic() + 30
        while c.metrics()["workers_up"] < 2 and time.monotonic() < until:
            time.sleep(0.05)
        assert c.metrics()["workers_up"] == 2
        assert c.fetch([c.schedule(square, i) for i in range(50)]) == [i * i for i in range(50)]
        c.close()
    finally:
        for p in procs:
            p.stop()


def test_every_worker_lost_is_unavailable():
    """tcp: the only worker killed and not back within recovery_limit_ms is
    dropped (S10); schedule() then raises UnavailableError."""
    procs = start_workers(1)
    try:
        c = coord.ClusterCoordinator({"worker": [procs[0].addr]}, transport="tcp",
                                     functions=PYFNS, heartbeat_ms=100, recovery_limit_ms=300)
        assert c.schedule(square, 2).fetch() == 4
        procs[0].kill()
        with pytest.raises(coord.UnavailableError) as ei:
            until = time.monotonic() + 30
            for _ in range(100000):
                c.schedule(square, 1)
                if time.monotonic() > until:
                    break
                time.sleep(0.01)
        assert ei.value.code == coord._coord.EUNAVAILABLE
        c.close()
    finally:
        for p in procs:
            p.stop()


def test_python_threads(cc):
    """Several Python threads schedule and fetch at once (the GIL released
    in schedule and fetch); each gets its own values."""
    out = {}

    def work(k):
        out[k] = cc.fetch([cc.schedule(square, k * 1000 + i) for i in range(200)])

    ts = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in ts:
        t.start()
    for t in ts:
        t.join(60)
    assert out == {
        k: [(k * 1000 + i) ** 2 for i in range(200)] for k in range(4)}


def test_close_while_joining(cc):
    """close() from one thread while another waits in join(): the join ends
    with ValueError within a wait slice and close() returns."""
    cc.schedule("sleep_ms", 300)
    err = []

    def joiner():
        try:
            cc.join()
        except ValueError as e:
            err.append(e)

    t = threading.Thread(target=joiner)
    t.start()
    time.sleep(0.05)
    cc.close()
    t.join(30)
    assert not t.is_alive()
    # the join ended, by the close (ValueError) or because the closure finished first
    assert len(err) <= 1


def test_signal_reaches_a_waiting_fetch(cc, request):
    """A signal's handler runs while fetch() waits (slices of 100 ms), and
    its exception ends the wait: the closure cannot finish before the test
    sets the variable it polls, after the exception."""
    class Interrupted(Exception):
        pass

    def handler(signum, frame):
        raise Interrupted()

    v = cc.create_variable("sig_" + request.node.callspec.id, shape=(1,))
    old = signal.signal(signal.SIGUSR1, handler)
    try:
        rv = cc.schedule(coord.function("wait_var", returns="f"), v)
        threading.Timer(0.1, os.kill, args=(os.getpid(), signal.SIGUSR1)).start()
        with pytest.raises(Interrupted):
            rv.fetch(timeout=30)
    finally:
        signal.signal(signal.SIGUSR1, old)
    v.assign([1.0])
    assert rv.fetch(timeout=30) == 1.0
