#!/usr/bin/env bash
# tests/run.sh - install what is missing, build, and run the whole test suite
# (unit, contract, stress, spec, bench smoke tests; not the benchmarks).
#   BUILD_DIR=build (default)  MESON_ARGS="-Db_sanitize=address,undefined" ...
set -euo pipefail
cd "$(dirname "$0")/.."
. .ci/deps.sh
coord_install_deps
build=${BUILD_DIR:-build}
if [ ! -f "$build/build.ninja" ]; then
	meson setup "$build" -Dtests=enabled ${MESON_ARGS:-}
elif [ "$(meson introspect --buildoptions "$build" | python3 -c 'import json, sys
print(next((o["value"] for o in json.load(sys.stdin) if o["name"] == "tests"), ""))')" != enabled ]; then
	# set up by examples/run.sh (perhaps before cmocka was installed), or
	# before the option existed
	meson setup --reconfigure "$build" -Dtests=enabled
fi
ninja -C "$build"
meson test -C "$build" --print-errorlogs --num-processes 2 ${MESON_TEST_ARGS:-}
