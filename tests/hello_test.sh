#!/usr/bin/env bash
# tests/hello_test.sh WORKER HELLO FNS OTHER_FNS - examples/hello --spec as
# shipped: two coord-worker processes serving libhello_fns.so on loopback,
# hello runs against them; against workers serving OTHER_FNS (without
# hello's functions) it fails saying which function is missing and how to
# serve it.  Every wait is bounded.
set -u
worker=$1 hello=$2 fns=$3 other=$4
dir=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	rm -rf "$dir"
}
trap cleanup EXIT

# start_workers LIB: two workers on free ports; writes $dir/spec.json
start_workers() {
	local lib=$1 ports=() i p
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null; done
	wait 2>/dev/null
	pids=()
	for i in 0 1; do
		"$worker" --fns "$lib" --listen 127.0.0.1:0 --log error >"$dir/w$i.out" 2>&1 &
		pids+=($!)
	done
	for i in 0 1; do
		for _ in $(seq 100); do # up to 10 s
			p=$(sed -n 's/.*listening on port \([0-9]*\).*/\1/p' "$dir/w$i.out")
			[ -n "$p" ] && break
			sleep 0.1
		done
		[ -n "$p" ] || { echo "worker $i did not start:"; cat "$dir/w$i.out"; exit 1; }
		ports+=("\"127.0.0.1:$p\"")
	done
	echo "{\"worker\": [${ports[0]}, ${ports[1]}]}" >"$dir/spec.json"
}

start_workers "$fns"
out=$(timeout 60 "$hello" --spec "$dir/spec.json" 2>&1) || { echo "hello --spec failed: $out"; exit 1; }
echo "$out"
grep -q '^== 2 tcp workers' <<<"$out" || { echo "FAIL: not 2 tcp workers"; exit 1; }
grep -q '^square(7) = 49' <<<"$out" || { echo "FAIL: square(7)"; exit 1; }

start_workers "$other"
out=$(timeout 60 "$hello" --spec "$dir/spec.json" 2>&1)
rc=$?
echo "$out"
[ "$rc" = 1 ] || { echo "FAIL: hello against the wrong functions exited $rc, want 1"; exit 1; }
grep -q 'libhello_fns.so' <<<"$out" || { echo "FAIL: hello did not say how to serve its functions"; exit 1; }
exit 0
