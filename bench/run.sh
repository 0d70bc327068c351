#!/bin/sh
# SPDX-License-Identifier: MIT
# bench/run.sh - build coord in release mode and run every benchmark, one at
# a time, printing their tables and SUMMARY lines.
#
#   bench/run.sh            # from the source tree; build dir: build-bench
#   BUILD=dir bench/run.sh  # another build dir
#   bench/run.sh --quick    # extra arguments go to every bench
#
# Exits non-zero if a build fails or a bench finds a conservation error.
# Speed is printed only; the machine may be shared and noisy.
set -eu

src=$(cd "$(dirname "$0")/.." && pwd)
build=${BUILD:-build-bench}
cd "$src"

if [ ! -d "$build" ]; then
	meson setup "$build" --buildtype=release
fi
meson configure "$build" -Dbuildtype=release >/dev/null
ninja -C "$build" >/dev/null

export COORD_LOG="${COORD_LOG:-error}"
echo "# coord $(git rev-parse --short HEAD 2>/dev/null || echo '?'), $(nproc) CPUs," \
	"$(uname -r), $(date -u +%Y-%m-%dT%H:%M:%SZ), loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
# Another busy process on a 2-CPU VM leaves one CPU to the bench: rates and
# especially coord's round trip (its fetch spins spin_ns before sleeping)
# then change a lot.  The load average above tells such runs apart.
status=0
# bench_tcp (issue 3) starts its own coord-worker processes on ephemeral
# loopback ports and forked raw echo servers (the ping-pong is their
# one-at-a-time case); about a minute and a half.
# bench_fault (issue 4) starts 4 coord-workers and kills, stops and restarts
# them (a series goes to $BENCH_FAULT_SERIES if set); about 45 s.
# bench_tcp --sweep: coord against the raw echo at every point of the
# in-flight, argument-size and connection sweeps; about a minute and a half.
# python (issue 28): the Python layer's cost against the C API in the same run,
# with Debian's interpreter (the one meson builds the extension for); ~1 min.
py=/usr/bin/python3
[ -x "$py" ] || py=python3
for b in ring schedule e2e dataflow hints tcp tcp_sweep fault python; do
	echo "## bench_$b $*"
	start=$(date +%s)
	case $b in
	tcp_sweep) cmd="$build/bench/bench_tcp --sweep" ;;
	python)
		[ -f "$build/python/libpyfns.so" ] || continue
		cmd="env PYTHONPATH=$build/python COORD_PYFNS=$build/python/libpyfns.so $py bench/python_bench.py"
		;;
	*) cmd="$build/bench/bench_$b" ;;
	esac
	# shellcheck disable=SC2086 # $cmd is a path and fixed options
	if ! $cmd "$@"; then
		echo "## bench_$b FAILED"
		status=1
	fi
	echo "## bench_$b took $(( $(date +%s) - start )) s, loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
	echo
done
exit $status
