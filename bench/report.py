#!/usr/bin/env python3
# SPDX-License-Identifier: MIT
"""bench/report.py - turn the benches' JSON rows into results.json and the
gnuplot data files of bench/report.sh (Debian's python3, standard library
only).

    report.py OUT SRC

reads OUT/rows.jsonl (one JSON object per table row, written by
bench/stats.c when $BENCH_JSON is set) and writes:

    OUT/results.json   {"schema": N, "meta": {...}, "rows": [...]}: the run's
                       metadata (commit, machine, load average at the start
                       and the end, dates, kernel, bench arguments) and every
                       row as the bench wrote it (each with its own schema,
                       bench and load average at the time it was written)
    OUT/ring.dat       "label" median min max            (bench_ring)
    OUT/roundtrip.dat  "label" p50 min p99 p99.9         (every round-trip table)
    OUT/sweep_<x>.dat  x median min max, one block per series, blocks
                       separated by two blank lines, series names in
                       OUT/sweep_<x>.series (one per line, block order)

The metadata comes from $REPORT_LOAD_START, $REPORT_DATE_START and
$REPORT_ARGS (set by report.sh) and from this machine.
"""
import json
import os
import platform
import subprocess
import sys
import time

SCHEMA = 2


def cpu_model():
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "?"


def loadavg():
    try:
        with open("/proc/loadavg") as f:
            return [float(x) for x in f.read().split()[:3]]
    except OSError:
        return None


def commit(src):
    try:
        out = subprocess.run(["git", "-C", src, "rev-parse", "HEAD"], capture_output=True,
                             text=True, check=True).stdout.strip()
        dirty = subprocess.run(["git", "-C", src, "status", "--porcelain", "--untracked-files=no"],
                               capture_output=True, text=True, check=True).stdout.strip()
        return out + ("+dirty" if dirty else "")
    except (OSError, subprocess.CalledProcessError):
        return None


def q(s):
    """A gnuplot string: double quotes, inner quotes dropped."""
    return '"' + s.replace('"', "'") + '"'


def main():
    out, src = sys.argv[1], sys.argv[2]
    rows = []
    path = os.path.join(out, "rows.jsonl")
    if os.path.exists(path):
        with open(path) as f:
            for n, line in enumerate(f, 1):
                line = line.strip()
                if not line:
                    continue
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as e:
                    print(f"report.py: {path}:{n}: {e}; row skipped", file=sys.stderr)
    start = os.environ.get("REPORT_LOAD_START", "")
    meta = {
        "commit": commit(src),
        "nproc": os.cpu_count(),
        "cpu_model": cpu_model(),
        "kernel": platform.release(),
        "loadavg_start": [float(x) for x in start.split()[:3]] if start else None,
        "loadavg_end": loadavg(),
        "date_start": os.environ.get("REPORT_DATE_START"),
        "date_end": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "args": os.environ.get("REPORT_ARGS", ""),
    }
    with open(os.path.join(out, "results.json"), "w") as f:
        json.dump({"schema": SCHEMA, "meta": meta, "rows": rows}, f, indent=1)
        f.write("\n")

    ring, rtt, sweeps = [], [], {}
    for r in rows:
        table, impl, unit = r.get("table", ""), r.get("impl", ""), r.get("unit", "")
        if unit == "ratio":
            continue
        if table.startswith("bench_ring:"):
            conf = table[len("bench_ring: "):].split(",")[0]
            ring.append(f'{q(conf + " " + impl)} {r["median"]} {r["min"]} {r["max"]}')
        elif "round trip" in table and unit.startswith("us"):
            who = table.split(" ")[0]
            rtt.append(f'{q(who + ": " + impl)} {r["median"]} {r["min"]} {r["p99"]} '
                       f'{r.get("p999", r["p99"])}')
        elif table.startswith("bench_tcp sweep") and "series" in r:
            key = impl.rsplit(", ", 1)[-1].split("=")[0]  # inflight, arg_bytes, conns
            sweeps.setdefault(key, {}).setdefault(r["series"], []).append(
                (r["x"], r["median"], r["min"], r["max"]))
        elif table.startswith("bench_tcp throughput") and "series" in r:
            # the default run's points: in flight 1, 64, 256 per configuration
            sweeps.setdefault("throughput", {}).setdefault(r["series"], []).append(
                (r["x"], r["median"], r["min"], r["max"]))

    with open(os.path.join(out, "ring.dat"), "w") as f:
        f.write("\n".join(ring) + ("\n" if ring else ""))
    with open(os.path.join(out, "roundtrip.dat"), "w") as f:
        f.write("\n".join(rtt) + ("\n" if rtt else ""))
    for key, series in sweeps.items():
        with open(os.path.join(out, f"sweep_{key}.dat"), "w") as f, \
                open(os.path.join(out, f"sweep_{key}.series"), "w") as g:
            for name, pts in series.items():
                g.write(name + "\n")
                f.write(f"# {name}\n")
                for p in sorted(pts):
                    f.write(" ".join(str(v) for v in p) + "\n")
                f.write("\n\n")
    print(f"report.py: {len(rows)} rows, sweeps: {', '.join(sorted(sweeps)) or 'none'}")


if __name__ == "__main__":
    main()
