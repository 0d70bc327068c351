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
	if [ "$(id -u)" = 0 ]; then
		apt-get install -y --no-install-recommends gnuplot-nox >/dev/null
	else
		sudo apt-get install -y --no-install-recommends gnuplot-nox >/dev/null
	fi
fi

rm -f "$out/rows.jsonl"
status=0
BENCH_JSON="$out/rows.jsonl" bash "$src/bench/run.sh" "$@" | tee "$out/run.txt" || status=$?
{
	echo "["
	sed '$!s/$/,/' "$out/rows.jsonl"
	echo "]"
} >"$out/results.json"

# field NAME LINE: a value of one row (rows are flat, one per line).
field() { sed -n "s/.*\"$1\": \\(\"\\([^\"\\\\]\\|\\\\.\\)*\"\\|[-0-9.e+]*\\).*/\\1/p" <<<"$2" | tr -d '"'; }

# Data files: "label" median min max p99, one row per line.
: >"$out/ring.dat"
: >"$out/roundtrip.dat"
: >"$out/inflight.dat"
while IFS= read -r row; do
	table=$(field table "$row")
	impl=$(field impl "$row")
	vals="$(field median "$row") $(field min "$row") $(field max "$row") $(field p99 "$row")"
	case $table in
	bench_ring:*)
		conf=${table#bench_ring: }
		conf=${conf%%,*}
		echo "\"$conf $impl\" $vals" >>"$out/ring.dat"
		;;
	*"round trip"*)
		echo "\"$impl\" $vals" >>"$out/roundtrip.dat"
		;;
	"bench_tcp throughput"*)
		if [[ $impl =~ ([0-9]+)\ workers?,\ ([0-9]+)\ in\ flight ]]; then
			echo "${BASH_REMATCH[1]} ${BASH_REMATCH[2]} $vals" >>"$out/inflight.dat"
		fi
		;;
	esac
done <"$out/rows.jsonl"

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
echo "report: $out/results.json, $out/ring.png, $out/roundtrip.png, $out/inflight.png"
exit $status
