#!/bin/sh
# SPDX-License-Identifier: MIT
#
# tests/fuzz/run.sh SECONDS - build the libFuzzer harnesses with clang under
# ASan+UBSan in their own build directory and run each for SECONDS.
#
#   tests/fuzz/run.sh 60                      # from anywhere in the tree
#   FUZZ_BUILD_DIR=/tmp/bf tests/fuzz/run.sh 30
#
# The seed corpus (tests/fuzz/corpus/<harness>) is read, never written; new
# inputs go to $FUZZ_BUILD_DIR/corpus/<harness>.  A crash, leak, UB report or
# failed invariant leaves crash-* files in $FUZZ_BUILD_DIR/artifacts and makes
# the script exit non-zero.  Needs: clang (Debian clang + libclang-rt-dev),
# meson, ninja and the build's dependencies.
set -eu

secs=${1:-}
case "$secs" in
'' | *[!0-9]*)
	echo "usage: $0 SECONDS" >&2
	exit 2
	;;
esac

src=$(cd "$(dirname "$0")/../.." && pwd)
build=${FUZZ_BUILD_DIR:-$src/build-fuzz}
harnesses="spec_json spec_arg hostlist wire"

if [ ! -f "$build/build.ninja" ]; then
	CC=${FUZZ_CC:-clang} meson setup "$build" "$src" \
		-Db_sanitize=address,undefined -Db_lundef=false -Dbuildtype=debugoptimized
fi
targets=""
for h in $harnesses; do
	targets="$targets tests/fuzz_$h"
done
# shellcheck disable=SC2086 # word splitting of the target list is intended
ninja -C "$build" $targets

export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-halt_on_error=1:print_stacktrace=1}"
mkdir -p "$build/artifacts"
status=0
for h in $harnesses; do
	mkdir -p "$build/corpus/$h"
	echo "== fuzz_$h for ${secs}s"
	if ! "$build/tests/fuzz_$h" -max_total_time="$secs" -max_len=4096 -timeout=10 \
		-rss_limit_mb=2048 -print_final_stats=1 \
		-artifact_prefix="$build/artifacts/$h-" \
		"$build/corpus/$h" "$src/tests/fuzz/corpus/$h"; then
		echo "fuzz_$h FAILED (see $build/artifacts)" >&2
		status=1
	fi
done
exit $status
