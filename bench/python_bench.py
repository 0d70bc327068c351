#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""bench/python_bench.py - what the Python layer (python/coord) adds to coord.

In one process and over one in-process coordinator (1 worker, python/tests'
libpyfns.so), alternating rounds of:
  c-api    schedule + fetch + put of an 8-byte echo, one at a time, in C
           (the extension's _bench_c loop: the C API with no Python at all)
  python   rv = c.schedule(fn, payload); rv.fetch()  (RemoteValue, bytes back)
  cffi     the same three calls through cffi's ABI mode (when python3-cffi is
           installed): the alternative python/README.md weighs
  paired   one C call then one Python call, each timed alone, 20000 pairs a
           round: the median of (python - c-api) over a round's pairs, so a
           slow stretch of the machine falls on both sides of a pair
  cffi-pair the same pairs with the cffi calls
  layer    the same without waits: schedule a block, join (not timed), fetch
           the block (final by then) and drop it; Python - C of the same round.
           The round trip's own spread (a futex wake each way) does not enter,
           so this is the cost the layer adds; "added" above includes noise
and the scheduling rate of
  c-many   coord_schedule_many() in chunks of 256, RemoteValues put at once
  py-many  c.schedule_many(fn, list of bytes), in chunks of 1024 calls
  py-rows  c.schedule_many(fn, 2-D numpy array): each row a call's arguments
Prints per call: median, p99 and min - max over the rounds, and the added cost
(python - c-api of the same round).  Targets (issue 28): <= 2 us added per
schedule + fetch, >= 1 M closures/s with schedule_many from one Python thread.

  PYTHONPATH=build/python COORD_PYFNS=build/python/libpyfns.so bench/python_bench.py
  ... --quick          (bench-smoke: a few rounds)
"""
import argparse
import os
import statistics
import sys
import time

import numpy as np

import coord

PAYLOAD = b"\0" * 8


def pct(xs, p):
    s = sorted(xs)
    return s[min(len(s) - 1, int(round(p / 100 * (len(s) - 1))))]


def row(name, xs, unit, scale=1.0):
    xs = [x * scale for x in xs]
    print("%-9s %10.3f %10.3f %10.3f - %-10.3f %s" % (name, statistics.median(xs), pct(xs, 99),
                                                      min(xs), max(xs), unit))


def cffi_loop(pyfns):
    """A schedule+fetch closure through cffi's ABI mode, or None."""
    try:
        import cffi
    except ImportError:
        return None
    libcoord = os.path.join(os.path.dirname(coord.__file__), "..", "..", "libcoord.so")
    if not os.path.exists(libcoord):
        return None
    ffi = cffi.FFI()
    ffi.cdef("""
    struct coord_registry; struct coord; struct coord_rv; struct coord_spec;
    struct coord_error { int code; int cause; int worker; uint64_t closure; char msg[256]; };
    struct coord_opts { size_t size; const struct coord_registry *registry;
        const char *transport; unsigned inproc_workers; unsigned ring_capacity;
        int64_t start_delay_ms; int64_t start_delay_max_ms; uint64_t spin_ns;
        uint64_t spin_max_ns; unsigned batch; unsigned tcp_loops; unsigned window;
        uint32_t max_frame; int connect_timeout_ms; const char *key_file; unsigned inproc_ps;
        int ps_timeout_ms; int ps_failure_threshold; int restart_exit_code;
        int64_t recovery_limit_ms; int heartbeat_ms; int heartbeat_misses;
        int64_t closure_timeout_ms; int64_t affinity_fallback_ms; int64_t priority_aging_ms;
        uint64_t flags; };
    void coord_opts_init_size(struct coord_opts *o, size_t size);
    int coord_registry_create(struct coord_registry **out);
    int coord_register_fns(struct coord_registry *reg);
    int coord_create(const struct coord_spec *spec, const struct coord_opts *opts,
                     struct coord **out, struct coord_error *err);
    void coord_destroy(struct coord *c);
    int coord_fn_lookup(const struct coord *c, const char *name, uint32_t *id,
                        struct coord_error *err);
    int coord_schedule(struct coord *c, uint32_t fn, const void *args, size_t len,
                       struct coord_rv **out, struct coord_error *err);
    int coord_rv_fetch(struct coord_rv *rv, const void **val, size_t *len,
                       struct coord_error *err);
    void coord_rv_put(struct coord_rv *rv);
    """)
    lib = ffi.dlopen(libcoord)
    fns = ffi.dlopen(pyfns)
    reg = ffi.new("struct coord_registry **")
    o = ffi.new("struct coord_opts *")
    c = ffi.new("struct coord **")
    fid = ffi.new("uint32_t *")
    assert lib.coord_registry_create(reg) == 0 and fns.coord_register_fns(reg[0]) == 0
    lib.coord_opts_init_size(o, ffi.sizeof("struct coord_opts"))
    o.registry = reg[0]
    o.inproc_workers = 1
    assert lib.coord_create(ffi.NULL, o, c, ffi.NULL) == 0
    assert lib.coord_fn_lookup(c[0], b"echo", fid, ffi.NULL) == 0
    keep = (ffi, lib, fns, reg, o)

    def loop(n):
        cp, f = c[0], fid[0]
        t0 = time.perf_counter_ns()
        for _ in range(n):
            out = ffi.new("struct coord_rv **")
            if lib.coord_schedule(cp, f, PAYLOAD, 8, out, ffi.NULL):
                raise RuntimeError("schedule")
            v = ffi.new("void **")
            ln = ffi.new("size_t *")
            if lib.coord_rv_fetch(out[0], v, ln, ffi.NULL):
                raise RuntimeError("fetch")
            ffi.buffer(v[0], ln[0])[:]
            lib.coord_rv_put(out[0])
        return time.perf_counter_ns() - t0

    def one():
        out = ffi.new("struct coord_rv **")
        if lib.coord_schedule(c[0], fid[0], PAYLOAD, 8, out, ffi.NULL):
            raise RuntimeError("schedule")
        v = ffi.new("void **")
        ln = ffi.new("size_t *")
        if lib.coord_rv_fetch(out[0], v, ln, ffi.NULL):
            raise RuntimeError("fetch")
        ffi.buffer(v[0], ln[0])[:]
        lib.coord_rv_put(out[0])

    def close():
        keep[1].coord_destroy(c[0])
    return loop, close, one


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="a few short rounds (bench-smoke)")
    ap.add_argument("--rounds", type=int, default=21)
    ap.add_argument("--calls", type=int, default=20000, help="schedule+fetch per round")
    ap.add_argument("--many", type=int, default=200000, help="closures per schedule_many round")
    a = ap.parse_args()
    if a.quick:
        a.rounds, a.calls, a.many = 3, 2000, 20000
    pyfns = os.environ.get("COORD_PYFNS")
    if not pyfns:
        sys.exit("set COORD_PYFNS to libpyfns.so (meson test sets it)")
    print("# python_bench: %d rounds, %d schedule+fetch, %d schedule_many per round; "
          "%d CPUs, loadavg %s" % (a.rounds, a.calls, a.many, os.cpu_count(),
                                   " ".join(open("/proc/loadavg").read().split()[:3])))
    c = coord.ClusterCoordinator(functions=pyfns, workers=1)
    fn = coord.function("echo")
    fid = c._c.lookup("echo")
    cf = cffi_loop(pyfns)
    lists = [PAYLOAD] * 1024
    rows = np.zeros((1024, 1), np.int64)
    res = {k: [] for k in ("c-api", "python", "added", "cffi", "c-many", "py-many", "py-rows",
                           "c-split", "py-split", "layer", "paired", "cffi-paired")}
    for _ in range(2):  # warm up
        c._c._bench_c(fid, PAYLOAD, a.calls // 4)
        for _ in range(a.calls // 4):
            c.schedule(fn, PAYLOAD).fetch()
    block = 250  # C and Python alternate in blocks, so both see the same load
    for r in range(a.rounds):
        tc = tp = 0
        for _ in range(a.calls // block):
            tc += c._c._bench_c(fid, PAYLOAD, block)
            t0 = time.perf_counter_ns()
            for _ in range(block):
                c.schedule(fn, PAYLOAD).fetch()
            tp += time.perf_counter_ns() - t0
        n = a.calls // block * block
        tc /= n
        tp /= n
        res["c-api"].append(tc)
        res["python"].append(tp)
        res["added"].append(tp - tc)
        if cf:
            res["cffi"].append(cf[0](n) / n)
        c.join()
        diffs = []
        bc, pc, sched = c._c._bench_c, time.perf_counter_ns, c.schedule
        for _ in range(n):
            tc1 = bc(fid, PAYLOAD, 1)
            t0 = pc()
            sched(fn, PAYLOAD).fetch()
            diffs.append(pc() - t0 - tc1)
        res["paired"].append(statistics.median(diffs))
        if cf:
            diffs = []
            for _ in range(n):
                tc1 = bc(fid, PAYLOAD, 1)
                t0 = pc()
                cf[2]()
                diffs.append(pc() - t0 - tc1)
            res["cffi-paired"].append(statistics.median(diffs))
        tc = tp = 0
        for _ in range(a.calls // block):
            s_ns, f_ns = c._c._bench_c_split(fid, PAYLOAD, block)
            tc += s_ns + f_ns
            sched = c.schedule
            t0 = time.perf_counter_ns()
            rvs = [sched(fn, PAYLOAD) for _ in range(block)]
            t1 = time.perf_counter_ns()
            c.join()
            t2 = time.perf_counter_ns()
            for rv in rvs:
                rv.fetch()
            del rvs
            tp += t1 - t0 + time.perf_counter_ns() - t2
        res["c-split"].append(tc / n)
        res["py-split"].append(tp / n)
        res["layer"].append((tp - tc) / n)
        c.join()
        res["c-many"].append(a.many / c._c._bench_c_many(fid, PAYLOAD, a.many, 256) * 1e3)
        c.join()
        t0 = time.perf_counter_ns()
        for _ in range(a.many // 1024):
            rvs = c.schedule_many(fn, lists)
        del rvs
        res["py-many"].append((a.many // 1024 * 1024) / (time.perf_counter_ns() - t0) * 1e3)
        c.join()
        t0 = time.perf_counter_ns()
        for _ in range(a.many // 1024):
            rvs = c.schedule_many(fn, rows)
        del rvs
        res["py-rows"].append((a.many // 1024 * 1024) / (time.perf_counter_ns() - t0) * 1e3)
        c.join()
    print("%-9s %10s %10s %23s" % ("# per call", "median", "p99", "min - max"))
    for k in ("c-api", "python", "cffi"):
        if res[k]:
            row(k, res[k], "us per schedule+fetch", 1e-3)
    row("added", res["added"], "us per schedule+fetch (python - c-api, same round)", 1e-3)
    row("paired", res["paired"], "us per schedule+fetch (median of python - c-api, call pairs)",
        1e-3)
    if res["cffi"]:
        row("cffi-add", [x - y for x, y in zip(res["cffi"], res["c-api"])],
            "us per schedule+fetch (cffi ABI - c-api, same round)", 1e-3)
        row("cffi-pair", res["cffi-paired"],
            "us per schedule+fetch (median of cffi ABI - c-api, call pairs)", 1e-3)
    row("c-split", res["c-split"], "us per schedule + fetch of a final value, C", 1e-3)
    row("py-split", res["py-split"], "us per schedule + fetch of a final value, Python", 1e-3)
    row("layer", res["layer"], "us added per schedule + fetch (py-split - c-split)", 1e-3)
    print("%-9s %10s %10s %23s" % ("# rate", "median", "p99(slow)", "min - max"))
    for k in ("c-many", "py-many", "py-rows"):
        xs = res[k]
        print("%-9s %10.3f %10.3f %10.3f - %-10.3f M closures/s scheduled" % (
            k, statistics.median(xs), pct(xs, 1), min(xs), max(xs)))
    added = statistics.median(res["layer"]) / 1e3
    many = statistics.median(res["py-many"])
    print("SUMMARY python_bench layer_added_us=%.3f (target <= 2) paired_added_us=%.3f "
          "round_trip_added_us=%.3f schedule_many_Mps=%.2f (target >= 1) rows_Mps=%.2f"
          % (added, statistics.median(res["paired"]) / 1e3,
             statistics.median(res["added"]) / 1e3, many, statistics.median(res["py-rows"])))
    if cf:
        cf[1]()
    c.close()


if __name__ == "__main__":
    main()
