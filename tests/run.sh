#!/usr/bin/env bash
# tests/run.sh - install what is missing, build, and run the whole test suite
# (unit, contract, stress, spec, bench smoke tests; not the benchmarks).
#   BUILD_DIR=build (default)  MESON_ARGS="-Db_sanitize=address,undefined" ...
set -euo pipefail
cd "$(dirname "$0")/.."
. .ci/deps.sh
coord_install_deps
build=${BUILD_DIR:-build}
[ -f "$build/build.ninja" ] || meson setup "$build" ${MESON_ARGS:-}
ninja -C "$build"
meson test -C "$build" --print-errorlogs --num-processes 2 ${MESON_TEST_ARGS:-}
