#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# bench/report.sh - run every benchmark (bench/run.sh) and write a report:
#
#   OUT/run.txt        the benchmarks' own output (tables, SUMMARY lines)
#   OUT/results.json   every table row: table, unit, impl, median, p99, min, max,
#                      repeats, ratio to the table's baseline
#   OUT/ring.png       ring Mops/s per implementation (median, min-max bars)
#   OUT/roundtrip.png  one-at-a-time round trip per transport against its
#                      baseline (median and p99)
#   OUT/inflight.png   tcp closures/s against closures in flight
#   OUT/fault.dat      bench_fault's series: closures/s and workers up per
#                      20 ms through a worker kill ($BENCH_FAULT_SERIES)
#   OUT/fault.png      that series, the kill, restart and re-admission marked
#
#   bench/report.sh [OUT] [bench args...]     (OUT defaults to bench-report/)
#
# gnuplot comes from Debian (gnuplot-nox), installed here when missing.
# Figures are medians over repeats on whatever machine runs this: compare
# the ratios within one report, not absolutes across machines.
set -euo pipefail
src=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-bench-report}
[ $# -gt 0 ] && shift
mkdir -p "$out"
out=$(cd "$out" && pwd)

if ! command -v gnuplot >/dev/null; then
	. "$src/.ci/deps.sh"
	coord_install_deps gnuplot-nox
fi

rm -f "$out/rows.jsonl"
status=0
rm -f "$out/fault.dat"
BENCH_JSON="$out/rows.jsonl" BENCH_FAULT_SERIES="$out/fault.dat" \
	bash "$src/bench/run.sh" "$@" | tee "$out/run.txt" || status=$?
# results.json and the plots' data files, read with python3's json (rows
# are one JSON object per line).  Data files: "label" median min max p99.
python3 - "$out" <<'PY'
import json, re, sys

out = sys.argv[1]
with open(out + "/rows.jsonl", encoding="utf-8") as f:
    rows = [json.loads(l) for l in f if l.strip()]
with open(out + "/results.json", "w", encoding="utf-8") as f:
    f.write("[\n" + ",\n".join(json.dumps(r) for r in rows) + "\n]\n")
dat = {k: open("%s/%s.dat" % (out, k), "w", encoding="utf-8")
       for k in ("ring", "roundtrip", "inflight")}
for r in rows:
    table, impl = r.get("table", ""), r.get("impl", "")
    vals = " ".join(str(r.get(k, "")) for k in ("median", "min", "max", "p99"))
    if table.startswith("bench_ring:"):
        conf = table[len("bench_ring: "):].split(",")[0]
        dat["ring"].write('"%s %s" %s\n' % (conf, impl, vals))
    elif "round trip" in table:
        dat["roundtrip"].write('"%s" %s\n' % (impl, vals))
    elif table.startswith("bench_tcp throughput"):
        m = re.search(r"(\d+) workers?, (\d+) in flight", impl)
        if m:
            dat["inflight"].write("%s %s %s\n" % (m.group(1), m.group(2), vals))
for f in dat.values():
    f.close()
PY

cd "$out"
gnuplot <<'GP'
set terminal pngcairo size 1100,620 font ",10" noenhanced
set style data histograms
set style histogram errorbars gap 1 lw 1
set style fill solid 0.6 border -1
set grid ytics
set key off
set xtics rotate by -35 left

set output "ring.png"
set title "MPMC ring: Mops/s per implementation (median, min-max)"
set ylabel "Mops/s"
plot "ring.dat" using 2:3:4:xtic(1) lc rgb "#3a6ea5"

set output "roundtrip.png"
set title "one closure at a time: round trip per transport and baseline (median, min-max)"
set ylabel "microseconds (log)"
set logscale y
plot "roundtrip.dat" using 2:3:4:xtic(1) lc rgb "#c0504d"
unset logscale y

set output "inflight.png"
set style data linespoints
set xtics norotate
set title "tcp loopback: empty closures/s against closures in flight (median)"
set xlabel "closures in flight"
set ylabel "closures/s (log)"
set logscale xy
set key top left
plot "inflight.dat" using ($1 == 1 ? $2 : 1/0):3 title "1 worker" lw 2, \
     "inflight.dat" using ($1 == 2 ? $2 : 1/0):3 title "2 workers" lw 2
GP

# fault.png: the kill, restart and re-admission times are in fault.dat's
# "# kill_ms=... restart_ms=... readmit_ms=..." line (readmit -1: never).
if [ -s fault.dat ] && grep -q '^[0-9]' fault.dat; then
	marks=$(sed -n 's/^# kill_ms=\([-0-9.]*\) restart_ms=\([-0-9.]*\) readmit_ms=\([-0-9.]*\).*/\1 \2 \3/p' fault.dat)
	read -r kill_ms restart_ms readmit_ms <<<"${marks:-0 0 -1}"
	gnuplot <<GP
set terminal pngcairo size 1100,620 font ",10" noenhanced
set output "fault.png"
set title "tcp loopback, 4 coord-worker processes: closures/s per 20 ms through a SIGKILL, restart and re-admission"
set xlabel "ms since the flow started"
set ylabel "closures/s"
set y2label "workers up"
set yrange [0:*]
set y2range [0:5]
set y2tics 1
set ytics nomirror
set grid ytics
set key top right
set arrow 1 from $kill_ms, graph 0 to $kill_ms, graph 1 nohead lc rgb "#c0504d" lw 2
set label 1 "SIGKILL" at $kill_ms, graph 0.97 left offset 0.5,0 tc rgb "#c0504d"
set arrow 2 from $restart_ms, graph 0 to $restart_ms, graph 1 nohead lc rgb "#808080" dt 2
set label 2 "restarted" at $restart_ms, graph 0.91 left offset 0.5,0 tc rgb "#808080"
if ($readmit_ms >= 0) {
	set arrow 3 from $readmit_ms, graph 0 to $readmit_ms, graph 1 nohead lc rgb "#4f8a3a" lw 2
	set label 3 "re-admitted" at $readmit_ms, graph 0.85 left offset 0.5,0 tc rgb "#4f8a3a"
}
plot "fault.dat" using 1:2 with linespoints lw 2 pt 7 ps 0.5 lc rgb "#3a6ea5" title "closures/s", \
     "fault.dat" using 1:3 axes x1y2 with steps lw 1 lc rgb "#4f8a3a" title "workers up"
GP
	echo "report: $out/fault.png"
fi
echo "report: $out/results.json, $out/ring.png, $out/roundtrip.png, $out/inflight.png"
exit $status
