#!/usr/bin/env bash
# bench/scale.sh [BUILD_DIR] [CONNS...] - what a coordinator costs per worker
# connection, measured over loopback, for docs/scale.md.
#
# 4 coord-worker processes (bench/benchfns.c) on 127.0.0.1; for each count C
# (default 2 64 256 1024 4096) a fresh bench_window process makes one
# coordinator whose spec lists the 4 processes round robin C times (2: two
# processes once each), keeps $SCALE_INFLIGHT (default 256; "C": max(256, C),
# at least one on every connection) closures of `empty` in flight for
# $SCALE_SECONDS (default 3) and prints coord_create()'s time and the
# threads, descriptors and resident memory the coordinator added to its
# process; this script adds the worker processes' threads and resident
# memory after the run, and the rate relative to C = 2.  The coordinator's
# threads are fixed by its options (tcp_loops: one event loop per 4 CPUs,
# 1-4), not by C.  Raises the descriptor limit (ulimit -n) to what C needs.
set -euo pipefail
cd "$(dirname "$0")/.."
build=$(realpath "${1:-build}")
shift || true
counts=${*:-2 64 256 1024 4096}
secs=${SCALE_SECONDS:-3}
dir=$(mktemp -d /tmp/coord-scale-XXXXXX)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for p in "${pids[@]}"; do wait "$p" 2>/dev/null || true; done
	rm -rf "$dir"
}
trap cleanup EXIT
ulimit -n 65536 2>/dev/null || ulimit -n "$(ulimit -Hn)"
export COORD_LOG=error

ports=()
for i in 0 1 2 3; do
	"$build/tools/coord-worker" --fns "$build/bench/libcoordbenchfns.so" --listen 127.0.0.1:0 \
		--log error >"$dir/w$i.log" 2>&1 &
	pids+=($!)
done
for i in 0 1 2 3; do
	for _ in $(seq 100); do grep -q 'listening on port' "$dir/w$i.log" && break; sleep 0.05; done
	ports+=("$(sed -n 's/.*listening on port \([0-9]*\).*/\1/p' "$dir/w$i.log")")
	[ -n "${ports[$i]}" ] || { cat "$dir/w$i.log"; echo "scale.sh: worker $i did not start"; exit 1; }
done
status() { # PID FIELD
	sed -n "s/^$2:[[:space:]]*\([0-9]*\).*/\1/p" "/proc/$1/status"
}

echo "scale.sh: $(nproc) CPUs, load $(cut -d' ' -f1-3 /proc/loadavg), ulimit -n $(ulimit -n), ${secs} s per point"
printf '%6s %6s %10s %8s %7s %6s %9s %11s %10s %10s\n' conns F closures/s "x(C=2)" "create" \
	"+thr" "+fds" "+RSS KiB" "wrk thr" "wrk RSS"
base=
for c in $counts; do
	np=$((c < 4 ? c : 4))
	{
		printf '{"worker": ['
		for ((k = 0; k < c; k++)); do printf '%s"127.0.0.1:%s"' "$([ $k -gt 0 ] && echo ,)" "${ports[$((k % np))]}"; done
		printf ']}'
	} >"$dir/spec-$c.json"
	f=${SCALE_INFLIGHT:-256}
	[ "$f" != C ] || f=$((c > 256 ? c : 256))
	out=$("$build/bench/bench_window" --spec "$dir/spec-$c.json" --inflight "$f" --seconds "$secs" --rtt 0) ||
		{ echo "$out"; echo "scale.sh: bench_window at $c connections failed"; exit 1; }
	rate=$(echo "$out" | sed -n 's/^inflight [0-9]*: \([0-9]*\) closures.*/\1/p')
	read -r ms thr fds rss < <(echo "$out" | sed -n 's/^coord: .*created in \([0-9.]*\) ms; +\([0-9-]*\) threads, +\([0-9-]*\) fds, +\([0-9-]*\) KiB RSS/\1 \2 \3 \4/p')
	wthr=0 wrss=0
	for p in "${pids[@]}"; do
		wthr=$((wthr + $(status "$p" Threads)))
		wrss=$((wrss + $(status "$p" VmRSS)))
	done
	[ -n "$base" ] || base=$rate
	printf '%6s %6s %10s %8s %5s ms %6s %9s %11s %10s %7s MiB\n' "$c" "$f" "$rate" \
		"$(awk -v a="$rate" -v b="$base" 'BEGIN { printf "%.2f", a / b }')" "$ms" "$thr" "$fds" \
		"$rss" "$wthr" "$((wrss / 1024))"
done
