#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# bench/report.sh - run every benchmark (bench/run.sh) and write a report:
#
#   OUT/run.txt        the benchmarks' own output (tables, SUMMARY lines)
#   OUT/results.json   {"schema", "meta", "rows"}: the run's metadata (commit,
#                      machine, load average at the start and the end, dates)
#                      and every table row: table, unit, impl, median, p99,
#                      p99.9, stdev, min, max, n, ratio to the table's
#                      baseline, the bench and the load when it was written
#                      (bench/report.py, python3's json module)
#   OUT/ring.png       ring Mops/s per implementation: bar = median over the
#                      repeats, whiskers = min - max over the repeats
#   OUT/roundtrip.png  one-at-a-time round trip per transport and baseline:
#                      bar = p50 of every round trip, whiskers = min - p99
#   OUT/inflight.png   tcp closures/s against closures in flight, coord and
#                      the raw echo, every point of the sweep: point =
#                      median over the rounds, whiskers = min - max
#   OUT/argsize.png    the same against argument bytes
#   OUT/conns.png      the same against connections
#   OUT/fault.dat      bench_fault's series: closures/s and workers up per
#                      20 ms through a worker kill ($BENCH_FAULT_SERIES)
#   OUT/fault.png      that series, the kill, restart and re-admission marked
#
#   bench/report.sh [OUT] [bench args...]     (OUT defaults to bench-report/)
#
# gnuplot comes from Debian (gnuplot-nox), installed here when missing.
# Figures are medians over repeats on whatever machine runs this: compare
# the ratios within one report, not absolutes across machines, and look at
# the load averages in results.json's meta and in every row.
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

rm -f "$out/rows.jsonl" "$out"/sweep_*.dat "$out"/sweep_*.series
status=0
rm -f "$out/fault.dat"
export REPORT_LOAD_START="$(cut -d' ' -f1-3 /proc/loadavg)"
export REPORT_DATE_START="$(date -u +%Y-%m-%dT%H:%M:%SZ)"
export REPORT_ARGS="$*"
BENCH_JSON="$out/rows.jsonl" BENCH_FAULT_SERIES="$out/fault.dat" \
	bash "$src/bench/run.sh" "$@" | tee "$out/run.txt" || status=$?
python3 "$src/bench/report.py" "$out" "$src"

# sweep_plot NAME XLABEL OUTPUT TITLE: gnuplot commands for one sweep's
# series (sweep_NAME.dat / .series from report.py), or nothing.
sweep_plot() {
	local dat="sweep_$1.dat" names="sweep_$1.series" i=0 sep="plot" name
	[ -s "$out/$dat" ] || return 0
	echo "set output \"$3\""
	echo "set title \"$4\""
	echo "set xlabel \"$2\""
	while IFS= read -r name; do
		printf '%s "%s" index %d using 1:2:3:4 with yerrorlines lw 2 pt 7 ps 0.6 title "%s"' \
			"$sep" "$dat" "$i" "${name//\"/}"
		sep=", \\
    "
		i=$((i + 1))
	done <"$out/$names"
	echo
}

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
set title "MPMC ring: Mops/s per implementation (bar = median over the repeats, whiskers = min - max)"
set ylabel "Mops/s"
plot "ring.dat" using 2:3:4:xtic(1) lc rgb "#3a6ea5"

set output "roundtrip.png"
set title "one closure at a time: round trip per transport and baseline (bar = p50 of every round trip, whiskers = min - p99)"
set ylabel "microseconds (log)"
set logscale y
plot "roundtrip.dat" using 2:3:4:xtic(1) lc rgb "#c0504d"
unset logscale y

GP
	# inflight.png: the sweep if it ran, else the default run's three points
	{
		echo 'set terminal pngcairo size 1100,620 font ",10" noenhanced'
		echo 'set grid xtics ytics'
		echo 'set key top left'
		echo 'set logscale xy'
		echo 'set ylabel "closures/s (log)"'
		what="point = median over the alternating rounds, whiskers = min - max"
		if [ -s "$out/sweep_inflight.dat" ]; then
			sweep_plot inflight "closures in flight (log)" inflight.png \
				"tcp loopback, 1 connection: closures/s against closures in flight, coord and the raw echo ($what)"
		else
			sweep_plot throughput "closures in flight (log)" inflight.png \
				"tcp loopback: closures/s against closures in flight ($what)"
		fi
		sweep_plot arg_bytes "argument bytes per closure (log)" argsize.png \
			"tcp loopback, 1 connection: closures/s against argument size, coord and the raw echo ($what)"
		sweep_plot conns "connections (log; over min(C, 4) processes, max(256, C) in flight)" conns.png \
			"tcp loopback: closures/s against connections, coord and the raw echo ($what)"
	} | gnuplot

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
echo "report: $out/results.json, $out/ring.png, $out/roundtrip.png, $out/inflight.png" \
	"$( [ -s "$out/sweep_arg_bytes.dat" ] && echo "$out/argsize.png $out/conns.png")"
exit $status
