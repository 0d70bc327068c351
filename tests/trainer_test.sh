#!/usr/bin/env bash
# tests/trainer_test.sh TRAINER - the example trainer end to end: in-process,
# then over tcp with local server processes, checkpointing, and a second run
# that resumes from the first one's checkpoint.  It must learn: held-out
# accuracy above 75% (about 46% before training; 86-90% after).
set -euo pipefail
trainer=$1
dir=$(mktemp -d /tmp/coord-trainer-XXXXXX)
trap 'rm -rf "$dir"' EXIT

acc() { sed -n 's/^after: *held-out loss [0-9.]*, accuracy \([0-9]*\).*/\1/p' "$1"; }

timeout 120 "$trainer" --epochs 3 --steps 200 >"$dir/inproc.log" 2>&1
a=$(acc "$dir/inproc.log")
[ -n "$a" ] && [ "$a" -ge 75 ] || { cat "$dir/inproc.log"; echo "inproc: accuracy '$a'"; exit 1; }

timeout 120 "$trainer" --transport tcp --local 2 --epochs 2 --steps 150 \
	--ckpt-dir "$dir/ckpt" --ckpt-every 150 >"$dir/tcp1.log" 2>&1
grep -q "checkpoint: step 300 saved" "$dir/tcp1.log" || { cat "$dir/tcp1.log"; exit 1; }
timeout 120 "$trainer" --transport tcp --local 2 --epochs 3 --steps 150 \
	--ckpt-dir "$dir/ckpt" >"$dir/tcp2.log" 2>&1
grep -q "resumed from the checkpoint of step 300" "$dir/tcp2.log" || { cat "$dir/tcp2.log"; exit 1; }
grep -q "(.* s, 150 steps)" "$dir/tcp2.log" || { cat "$dir/tcp2.log"; exit 1; }
a=$(acc "$dir/tcp2.log")
[ -n "$a" ] && [ "$a" -ge 75 ] || { cat "$dir/tcp2.log"; echo "tcp: accuracy '$a'"; exit 1; }
echo "trainer: ok (inproc and tcp, checkpoint and resume)"
