#!/bin/sh
# SPDX-License-Identifier: MIT
# bench/compare_rev.sh - one bench of two builds side by side in one run:
# the working tree's against an earlier commit's, alternating, so the noise
# of a shared machine falls on both alike.
#
#   bench/compare_rev.sh REV [BENCH [ROUNDS [ARGS...]]]
#   bench/compare_rev.sh a0e6141                 # bench_e2e, 5 rounds
#   bench/compare_rev.sh a0e6141 bench_e2e 7 --repeats=3
#
# REV is built in release mode in a detached worktree under $TMPDIR (kept,
# so a second run reuses it); the working tree's build dir is build-bench.
# For every SUMMARY key ending in _per_s or _us (and ns medians) it prints
# the median over the rounds for each build and the ratio (this / REV: > 1
# is faster for rates, slower for times).  Nothing is asserted.
set -eu

rev=${1:?usage: compare_rev.sh REV [BENCH [ROUNDS [ARGS...]]]}
bench=${2:-bench_e2e}
rounds=${3:-5}
[ $# -ge 3 ] && shift 3 || shift $#
src=$(cd "$(dirname "$0")/.." && pwd)
sha=$(git -C "$src" rev-parse --short "$rev")
base=${TMPDIR:-/tmp}/coord-base-$sha
cur=$src/${BUILD:-build-bench}

if [ ! -d "$base" ]; then
	git -C "$src" worktree add --detach "$base" "$sha" >/dev/null
fi
[ -d "$base/build" ] || meson setup "$base/build" "$base" --buildtype=release >/dev/null
# Everything, not only the bench: bench_tcp and bench_fault start coord-worker
# processes with the bench's function library.
ninja -C "$base/build" >/dev/null
[ -d "$cur" ] || meson setup "$cur" "$src" --buildtype=release >/dev/null
ninja -C "$cur" >/dev/null

export COORD_LOG="${COORD_LOG:-error}"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
echo "# $bench: this tree ($(git -C "$src" rev-parse --short HEAD)+) against $sha," \
	"$rounds alternating rounds, $(nproc) CPUs, loadavg $(cut -d' ' -f1-3 /proc/loadavg)"
i=0
while [ "$i" -lt "$rounds" ]; do
	"$base/build/bench/$bench" "$@" | sed -n 's/^SUMMARY /base /p' >>"$out"
	"$cur/bench/$bench" "$@" | sed -n 's/^SUMMARY /this /p' >>"$out"
	i=$((i + 1))
done
# One line per (config, workers, key): median of each build, ratio.
awk '
function median(s,   n, a, i, j, t) {
	n = split(s, a, " ")
	for (i = 1; i <= n; i++) for (j = i + 1; j <= n; j++)
		if (a[j] + 0 < a[i] + 0) { t = a[i]; a[i] = a[j]; a[j] = t }
	return n % 2 ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2
}
{
	who = $1; cfg = ""
	for (f = 3; f <= NF; f++) {
		split($f, kv, "=")
		if (kv[1] == "config" || kv[1] == "workers") { cfg = cfg kv[1] "=" kv[2] " "; continue }
		if (kv[1] !~ /(_per_s|_us|_ns_median)$/) continue
		k = cfg kv[1]
		if (!(k in seen)) { seen[k] = 1; order[++nk] = k }
		v[who, k] = v[who, k] " " kv[2]
	}
}
END {
	printf "%-58s %14s %14s %8s\n", "# summary key", "base median", "this median", "this/base"
	for (i = 1; i <= nk; i++) {
		k = order[i]
		if (!((("base", k) in v) && (("this", k) in v))) continue
		b = median(v["base", k]); t = median(v["this", k])
		printf "%-58s %14.4g %14.4g %8.3f\n", k, b, t, b ? t / b : 0
	}
}' "$out"
