#!/usr/bin/env bash
# bench/rec_scaling.sh [BUILD_DIR] [ARGS...] - the recommender's steps/s with
# 1, 2 and 4 workers and 1 and 2 ps tasks, in process and over tcp (local
# coord-worker / coord-ps processes), and its held-out AUC against the
# generating model's ceiling; extra ARGS go to every run (default: 3 epochs
# of 200 steps of 256 on the default 1 M-row tables).  Steps/s excludes the
# evaluations between epochs.  REPEATS=N (default 3) runs each row N times
# and prints the median and the range.  Printed, not asserted; the load
# average is printed with each row (the machine is shared).
set -euo pipefail
build=${1:-build}
[ $# -gt 0 ] && shift
rec=$build/examples/recommender
[ -x "$rec" ] || { echo "no $rec: build first (ninja -C $build)"; exit 1; }
export COORD_WORKER_BIN=${COORD_WORKER_BIN:-$build/tools/coord-worker}
export COORD_PS_BIN=${COORD_PS_BIN:-$build/tools/coord-ps}
args=(--epochs 3 --steps 200 "$@")
repeats=${REPEATS:-3}
printf '%-7s %7s %3s %9s %-13s %6s %8s %6s\n' transport workers ps "steps/s" "(min-max)" AUC \
	ceiling load
for t in inproc tcp; do
	for ps in 1 2; do
		for w in 1 2 4; do
			if [ $t = inproc ]; then
				run=(--workers "$w" --ps "$ps")
			else
				run=(--local "$w" --ps "$ps")
			fi
			rates=()
			for ((i = 0; i < repeats; i++)); do
				out=$("$rec" --quiet "${run[@]}" "${args[@]}" | tail -n 1)
				rates+=("$(sed -n 's/.*; \([0-9]*\) steps\/s between.*/\1/p' <<<"$out")")
			done
			mapfile -t rates < <(printf '%s\n' "${rates[@]}" | sort -n)
			auc=$(sed -n 's/^after: *held-out AUC \([0-9.]*\) of .*/\1/p' <<<"$out")
			ceil=$(sed -n 's/.* of a ceiling of \([0-9.]*\) .*/\1/p' <<<"$out")
			printf '%-7s %7s %3s %9s %-13s %6s %8s %6s\n' $t "$w" "$ps" \
				"${rates[$((repeats / 2))]}" "(${rates[0]}-${rates[$((repeats - 1))]})" \
				"$auc" "$ceil" "$(cut -d' ' -f1 /proc/loadavg)"
		done
	done
done
