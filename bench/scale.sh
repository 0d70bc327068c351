#!/usr/bin/env bash
# bench/scale.sh [BUILD_DIR] [CONNS...] - what a coordinator costs per worker
# connection, measured over loopback, for docs/scale.md.
#
# 4 coord-worker processes (bench/benchfns.c) on 127.0.0.1; for each count C
# (default 2 64 256 1024 4096) a fresh bench_window process makes one
# coordinator whose spec lists the 4 processes round robin C times (2: two
# processes once each), keeps $SCALE_INFLIGHT (default 256; "C": max(256, C),
# at least one on every connection) closures of `empty` in flight for
# $SCALE_SECONDS (default 3), twice: with a window of 256 per connection (the
# coordinator places closures where it likes, as bench_tcp's scale row) and
# with ceil(F / C) (every connection carries its share: past C = F, one
# closure per frame), and prints coord_create()'s time and the
# threads, descriptors and resident memory the coordinator added to its
# process; this script adds the worker processes' threads and resident
# memory after the run, and the rate relative to C = 2.  The coordinator's
# threads are fixed by its options (tcp_loops: one event loop per 4 CPUs,
# 1-4), not by C.  Raises the descriptor limit (ulimit -n) to what C needs.
# Then, at each C, the coordinator connected and idle for $SCALE_IDLE s
# (default 3): packets and bytes per second per connection on loopback
# (inside its own network namespace when run as root: nothing else counted),
# i.e. what heartbeats cost (a PING and a PONG per silent heartbeat interval).
set -euo pipefail
cd "$(dirname "$0")/.."
# As root, in a network namespace of its own: its loopback carries only this
# run's traffic (the heartbeat counts) and its ports collide with nobody's.
if [ -z "${SCALE_IN_NETNS:-}" ] && [ "$(id -u)" -eq 0 ] && ip netns list >/dev/null 2>&1; then
	ns=coordscale$$
	ip netns add "$ns"
	trap 'ip netns pids "$ns" 2>/dev/null | xargs -r kill -KILL; ip netns del "$ns"' EXIT
	ip -n "$ns" link set lo up
	rc=0
	ip netns exec "$ns" env SCALE_IN_NETNS=1 bash "$0" "$@" || rc=$?
	exit $rc
fi
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
printf '%6s %5s %11s %6s %11s %6s %10s %5s %6s %9s %8s %8s\n' "" "" "window 256" "" \
	"window F/C" "" "" "" "" "" "workers" ""
printf '%6s %5s %11s %6s %11s %6s %10s %5s %6s %9s %8s %8s\n' conns F closures/s "x(C=2)" \
	closures/s "x(C=2)" "create" "+thr" "+fds" "+RSS KiB" "threads" "RSS MiB"
base=
sbase=
for c in $counts; do
	np=$((c < 4 ? c : 4))
	{
		printf '{"worker": ['
		for ((k = 0; k < c; k++)); do printf '%s"127.0.0.1:%s"' "$([ $k -gt 0 ] && echo ,)" "${ports[$((k % np))]}"; done
		printf ']}'
	} >"$dir/spec-$c.json"
	f=${SCALE_INFLIGHT:-256}
	[ "$f" != C ] || f=$((c > 256 ? c : 256))
	# window 256: the coordinator puts closures where it likes (bench_tcp's
	# scale row); window ceil(F/C): every connection carries its share
	out=$("$build/bench/bench_window" --spec "$dir/spec-$c.json" --inflight "$f" --seconds "$secs" \
		--rtt 0 --window 256) ||
		{ echo "$out"; echo "scale.sh: bench_window at $c connections failed"; exit 1; }
	sout=$("$build/bench/bench_window" --spec "$dir/spec-$c.json" --inflight "$f" --seconds "$secs" \
		--rtt 0) ||
		{ echo "$sout"; echo "scale.sh: bench_window at $c connections failed"; exit 1; }
	rate=$(echo "$out" | sed -n 's/^inflight [0-9]*: \([0-9]*\) closures.*/\1/p')
	srate=$(echo "$sout" | sed -n 's/^inflight [0-9]*: \([0-9]*\) closures.*/\1/p')
	read -r ms thr fds rss < <(echo "$out" | sed -n 's/^coord: .*created in \([0-9.]*\) ms; +\([0-9-]*\) threads, +\([0-9-]*\) fds, +\([0-9-]*\) KiB RSS/\1 \2 \3 \4/p')
	wthr=0 wrss=0
	for p in "${pids[@]}"; do
		wthr=$((wthr + $(status "$p" Threads)))
		wrss=$((wrss + $(status "$p" VmRSS)))
	done
	[ -n "$base" ] || base=$rate
	[ -n "$sbase" ] || sbase=$srate
	printf '%6s %5s %11s %6s %11s %6s %7s ms %5s %6s %9s %8s %8s\n' "$c" "$f" "$rate" \
		"$(awk -v a="$rate" -v b="$base" 'BEGIN { printf "%.2f", a / b }')" "$srate" \
		"$(awk -v a="$srate" -v b="$sbase" 'BEGIN { printf "%.2f", a / b }')" "$ms" "$thr" "$fds" \
		"$rss" "$wthr" "$((wrss / 1024))"
done
idle=${SCALE_IDLE:-3}
if [ "${SCALE_IN_NETNS:-}" = 1 ]; then
	echo "scale.sh: idle, $idle s each: heartbeat traffic on this namespace's loopback (tx, both directions)"
	printf '%6s %12s %12s %12s %10s %16s\n' conns packets/s bytes/s "pkts/s/conn" "B/s/conn" \
		"coord CPU us/s/conn"
	st=/sys/class/net/lo/statistics
	for c in $counts; do
		"$build/bench/bench_window" --spec "$dir/spec-$c.json" --inflight 1 --idle "$idle" \
			>"$dir/idle-$c.out" 2>&1 &
		bp=$!
		for _ in $(seq 600); do grep -q '^idle: ' "$dir/idle-$c.out" && break; sleep 0.05; done
		sleep 0.5 # the connections' first exchanges done
		p0=$(cat $st/tx_packets) b0=$(cat $st/tx_bytes) t0=$(date +%s.%N)
		sleep "$(awk -v i="$idle" 'BEGIN { print i - 1 }')"
		p1=$(cat $st/tx_packets) b1=$(cat $st/tx_bytes) t1=$(date +%s.%N)
		wait $bp || { cat "$dir/idle-$c.out"; echo "scale.sh: idle run at $c failed"; exit 1; }
		grep -q '^idle: done' "$dir/idle-$c.out" || { cat "$dir/idle-$c.out"; exit 1; }
		cpu=$(sed -n 's/^idle: done, coordinator CPU \([0-9.]*\) ms.*/\1/p' "$dir/idle-$c.out")
		awk -v c="$c" -v p=$((p1 - p0)) -v b=$((b1 - b0)) -v t0="$t0" -v t1="$t1" -v cpu="$cpu" \
			-v i="$idle" 'BEGIN { t = t1 - t0
			printf "%6d %12.0f %12.0f %12.2f %10.1f %16.2f\n", c, p / t, b / t, p / t / c, b / t / c,
				cpu * 1000 / i / c }'
	done
fi
