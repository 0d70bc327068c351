#!/usr/bin/env bash
# tests/recommender_test.sh RECOMMENDER - the recommender example end to end,
# small (5,000-row tables, each a partitioned variable of 3 shards):
# in-process, over tcp with local server processes, with workers killed and
# restarted, and checkpointed and resumed onto other numbers of ps tasks (the
# restore re-places the shards; their count stays the checkpoint's).  It must learn: held-out AUC from
# about 0.5 to above 0.62 (about 0.69 of a ceiling of 0.84 at this size), and
# the kill demo ends with every killed worker lost and recovered.
set -euo pipefail
rec=$1
dir=$(mktemp -d /tmp/coord-rec-XXXXXX)
trap 'rm -rf "$dir"' EXIT
small=(--vocab 5000 --shards 3 --steps 100 --batch 128 --eval 5000)

# The held-out AUC after training, in thousandths.
auc() { sed -n 's/^after: *held-out AUC 0\.\([0-9]\{3\}\).*/\1/p' "$1" | sed 's/^0*//'; }
check() { # LOG WHAT
	local a
	a=$(auc "$1")
	[ -n "$a" ] && [ "$a" -ge 620 ] || { cat "$1"; echo "$2: AUC 0.$a"; exit 1; }
	grep -q "^before: held-out AUC 0\.[45]" "$1" || { cat "$1"; echo "$2: before?"; exit 1; }
}

timeout 300 "$rec" "${small[@]}" --epochs 3 >"$dir/inproc.log" 2>&1 || { cat "$dir/inproc.log"; exit 1; }
check "$dir/inproc.log" inproc
# 7 tables of 3 shards, the smallest (12 rows) too
grep -q "^tables: 16 partitioned variables in 48 shards over 2 ps tasks (rec/emb0: 5000 x 16 in 3)" \
	"$dir/inproc.log" || { cat "$dir/inproc.log"; echo "inproc: not sharded"; exit 1; }
timeout 300 "$rec" "${small[@]}" --local 2 --epochs 3 >"$dir/tcp.log" 2>&1 || { cat "$dir/tcp.log"; exit 1; }
check "$dir/tcp.log" tcp
plot=()
command -v gnuplot >/dev/null && plot=(--plot "$dir/rec.png")
timeout 300 "$rec" "${small[@]}" --local 2 --kill-worker-every 0.3 --kills 2 "${plot[@]}" \
	>"$dir/kill.log" 2>&1 || { cat "$dir/kill.log"; exit 1; }
if [ ${#plot[@]} -gt 0 ]; then # a PNG, and a point per epoch plus the start
	[ "$(head -c 8 "$dir/rec.png" | od -An -tx1 | tr -d ' ')" = 89504e470d0a1a0a ] ||
		{ cat "$dir/kill.log"; echo "--plot: no PNG"; exit 1; }
	[ "$(grep -vc '^#' "$dir/rec.png.dat")" -ge 3 ] || { cat "$dir/rec.png.dat"; exit 1; }
fi
check "$dir/kill.log" kill
grep "^epoch" "$dir/kill.log" | tail -n 1 | grep -q "workers 2/2 up (2 lost, 2 recovered)" ||
	{ cat "$dir/kill.log"; echo "kill: not 2 lost and recovered at the end"; exit 1; }
"$rec" --vocab 1 >/dev/null 2>&1 && { echo "--vocab 1 was taken"; exit 1; }

# Checkpoint over tcp, resume onto 3 ps tasks, then in-process onto 1: each
# run starts from the model the one before saved (its held-out figures).
before() { sed -n 's/^before: *\(held-out AUC [0-9.]*, log loss [0-9.]*\);.*/\1/p' "$1"; }
after() { sed -n 's/^after: *\(held-out AUC [0-9.]*\) of a .*, \(log loss [0-9.]*\) .*/\1, \2/p' "$1"; }
timeout 300 "$rec" "${small[@]}" --local 2 --epochs 2 --ckpt-dir "$dir/ck" >"$dir/ck1.log" 2>&1 ||
	{ cat "$dir/ck1.log"; exit 1; }
grep -q "checkpoint: step 200 saved" "$dir/ck1.log" || { cat "$dir/ck1.log"; exit 1; }
prev=$dir/ck1.log
epochs=2
for run in "--local 2 --ps 3" "--ps 1"; do
	epochs=$((epochs + 1))
	# shellcheck disable=SC2086
	timeout 300 "$rec" "${small[@]}" $run --epochs $epochs --ckpt-dir "$dir/ck" >"$dir/ck$epochs.log" 2>&1 ||
		{ cat "$dir/ck$epochs.log"; exit 1; }
	grep -q "resumed from the checkpoint of step $(((epochs - 1) * 100)) .*re-placed onto" \
		"$dir/ck$epochs.log" || { cat "$dir/ck$epochs.log"; echo "$run: no resume"; exit 1; }
	[ "$(before "$dir/ck$epochs.log")" = "$(after "$prev")" ] || {
		cat "$prev" "$dir/ck$epochs.log"; echo "$run: not the saved model"; exit 1; }
	grep -q "(.* s, 100 steps; [0-9]* steps/s between evaluations)" "$dir/ck$epochs.log" ||
		{ cat "$dir/ck$epochs.log"; exit 1; }
	grep -q "^tables: .* in 48 shards over ${run##* } ps tasks" "$dir/ck$epochs.log" ||
		{ cat "$dir/ck$epochs.log"; echo "$run: shards?"; exit 1; }
	prev=$dir/ck$epochs.log
done
echo "recommender: ok (inproc, tcp, kill demo${plot:+ and its plot}, checkpoint and resume onto 3 and 1 ps tasks)"
