# SPDX-License-Identifier: MIT
"""Fixtures of the Python tests: coordinators over inproc and over tcp, where
the workers are real coord-worker processes (and the ps task a coord-ps) on
loopback ports, started as tests/helpers.c does (--listen 127.0.0.1:0, the
"listening on port P" banner, killed with the test run)."""
import ctypes
import os
import select
import signal
import subprocess
import time

import pytest

import coord

PYFNS = os.environ.get("COORD_PYFNS", "")
WORKER_BIN = os.environ.get("COORD_WORKER_BIN", "")
PS_BIN = os.environ.get("COORD_PS_BIN", "")

if not (PYFNS and WORKER_BIN and PS_BIN):
    pytest.exit("run through meson test (COORD_PYFNS, COORD_WORKER_BIN, COORD_PS_BIN)", 2)


def _die_with_parent():
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG


class Server:
    """A coord-worker or coord-ps process on a loopback port."""

    def __init__(self, argv, banner, cwd=None, port=0):
        self.argv, self.banner, self.cwd = argv, banner, cwd
        self.port = port
        self.start()

    def start(self):
        argv = self.argv + ["--listen", "127.0.0.1:%d" % self.port, "--log", "error"]
        self.p = subprocess.Popen(argv, stdout=subprocess.PIPE, cwd=self.cwd,
                                  preexec_fn=_die_with_parent)
        line = b""
        until = time.monotonic() + 20
        while not line.endswith(b"\n") and time.monotonic() < until:
            if select.select([self.p.stdout], [], [], 0.1)[0]:
                c = self.p.stdout.read1(1)
                if not c:
                    break
                line += c
        prefix = ("%s listening on port " % self.banner).encode()
        if not line.startswith(prefix):
            self.p.kill()
            raise RuntimeError("%s did not start: %r" % (argv[0], line))
        self.port = int(line[len(prefix):])

    @property
    def addr(self):
        return "127.0.0.1:%d" % self.port

    def kill(self):
        self.p.kill()
        self.p.wait()

    def restart(self):
        """Start again on the same port (a machine back at its address)."""
        for _ in range(50):
            try:
                self.start()
                return
            except RuntimeError:
                time.sleep(0.02)
        raise RuntimeError("could not restart on port %d" % self.port)

    def stop(self):
        if self.p.poll() is None:
            self.p.terminate()
            try:
                self.p.wait(5)
            except subprocess.TimeoutExpired:
                self.kill()


def start_workers(n):
    return [Server([WORKER_BIN, "--fns", PYFNS], "coord-worker") for _ in range(n)]


def start_ps(cwd):
    return Server([PS_BIN, "--task", "0"], "coord-ps", cwd=str(cwd))


@pytest.fixture(scope="module")
def tcp_cluster(tmp_path_factory):
    """Two coord-worker processes and one coord-ps, shared by a module's tests."""
    procs = start_workers(2)
    procs.append(start_ps(tmp_path_factory.mktemp("ps")))
    yield {"worker": [p.addr for p in procs[:2]], "ps": [procs[2].addr]}, procs[2].cwd
    for p in procs:
        p.stop()


@pytest.fixture(params=["inproc", "tcp"])
def transport(request):
    return request.param


@pytest.fixture
def cc(request, transport):
    """A ClusterCoordinator over @transport with two workers and one ps task."""
    if transport == "inproc":
        c = coord.ClusterCoordinator(functions=PYFNS, workers=2)
    else:
        spec, _ = request.getfixturevalue("tcp_cluster")
        c = coord.ClusterCoordinator(spec, transport="tcp", functions=PYFNS)
    yield c
    c.close()


@pytest.fixture
def ckpt_dir(request, transport, tmp_path):
    """A checkpoint directory every ps task of @transport can write."""
    if transport == "inproc":
        return str(tmp_path)
    _, root = request.getfixturevalue("tcp_cluster")
    d = os.path.join(root, os.path.basename(str(tmp_path)))
    os.makedirs(d, exist_ok=True)
    return d
