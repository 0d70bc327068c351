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

# Resume onto another number of ps tasks: restored whole (the held-out
# figures before training are those after the run that saved), and said so.
before() { sed -n 's/^before: *\(held-out loss [0-9.]*, accuracy [0-9.]*%\).*/\1/p' "$1"; }
after() { sed -n 's/^after: *\(held-out loss [0-9.]*, accuracy [0-9.]*%\).*/\1/p' "$1"; }
prev=$dir/tcp2.log
epochs=3
for ps in 1 3; do
	epochs=$((epochs + 1))
	timeout 120 "$trainer" --transport tcp --local 2 --ps $ps --epochs $epochs --steps 150 \
		--ckpt-dir "$dir/ckpt" >"$dir/ps$ps.log" 2>&1 || { cat "$dir/ps$ps.log"; exit 1; }
	grep -q "resumed from the checkpoint of step $(((epochs - 1) * 150)) .*re-placed onto $ps" \
		"$dir/ps$ps.log" || { cat "$dir/ps$ps.log"; echo "ps $ps: no re-placed resume"; exit 1; }
	[ "$(before "$dir/ps$ps.log")" = "$(after "$prev")" ] || {
		cat "$prev" "$dir/ps$ps.log"; echo "ps $ps: not the saved model"; exit 1; }
	prev=$dir/ps$ps.log
done

# A resume that cannot be done whole (one task's newest file corrupt: the
# largest) fails with the reason, and leaves every checkpoint file as it was.
f=$(ls -S "$dir"/ckpt/ps-*/ckpt-750.coord | head -n 1)
[ "$(stat -c %s "$f")" -gt 100 ] || { ls -lR "$dir/ckpt"; echo "no data in $f"; exit 1; }
printf 'X' | dd of="$f" bs=1 seek=60 conv=notrunc status=none
sum0=$(cd "$dir/ckpt" && find . -type f -exec md5sum {} + | sort)
if timeout 120 "$trainer" --transport tcp --local 2 --ps 2 --epochs 6 --steps 150 \
	--ckpt-dir "$dir/ckpt" >"$dir/bad.log" 2>&1; then
	cat "$dir/bad.log"; echo "a corrupt checkpoint was resumed"; exit 1
fi
grep -q "cannot resume from .*checksum mismatch" "$dir/bad.log" || { cat "$dir/bad.log"; exit 1; }
[ "$(cd "$dir/ckpt" && find . -type f -exec md5sum {} + | sort)" = "$sum0" ] ||
	{ echo "the refused resume changed the checkpoint"; exit 1; }
# The live-kill demo: without --epochs it trains on until the workers it
# killed were lost and are back, and still learns.
timeout 120 "$trainer" --local 2 --kill-worker-every 0.2 --kills 2 >"$dir/kill.log" 2>&1 ||
	{ cat "$dir/kill.log"; exit 1; }
tail -n 2 "$dir/kill.log" | grep -q "workers 2/2 up (2 lost, 2 recovered)" ||
	{ cat "$dir/kill.log"; echo "kill demo: not 2 lost and recovered at the end"; exit 1; }
[ "$(grep -c "trainer: killed worker" "$dir/kill.log")" -eq 2 ] || { cat "$dir/kill.log"; exit 1; }
a=$(acc "$dir/kill.log")
[ -n "$a" ] && [ "$a" -ge 75 ] || { cat "$dir/kill.log"; echo "kill demo: accuracy '$a'"; exit 1; }

# On an 80-column terminal (a pty from script(1)) every draw of the progress
# line fits in 79 columns, and each erases what a longer one left (EL).
if command -v script >/dev/null; then
	timeout 120 script -qec "stty cols 80; $trainer --epochs 2 --steps 150" /dev/null \
		>"$dir/tty.log" 2>&1 || { cat "$dir/tty.log"; exit 1; }
	tr '\r' '\n' <"$dir/tty.log" | grep -a "epoch [0-9]" >"$dir/draws" || true
	[ -s "$dir/draws" ] || { cat -v "$dir/tty.log"; echo "tty: no progress line"; exit 1; }
	if grep -av $'\033\\[K$' "$dir/draws" | grep -q .; then
		cat -v "$dir/draws"; echo "tty: a draw without EL"; exit 1
	fi
	long=$(sed $'s/\033\\[K$//' "$dir/draws" | awk 'length($0) > 79' | head -n 1)
	[ -z "$long" ] || { echo "tty: wider than 79 columns: $long"; exit 1; }
fi
echo "trainer: ok (inproc and tcp, checkpoint and resume, resume onto 1 and 3 ps tasks," \
	"kill demo, 80 columns)"
