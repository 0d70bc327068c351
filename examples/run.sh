#!/usr/bin/env bash
# examples/run.sh - install what is missing, build, and run the main job: the
# example trainer (async SGD with parameter servers), on the in-process
# transport unless told otherwise (arguments go to it: --help).
set -euo pipefail
cd "$(dirname "$0")/.."
. .ci/deps.sh
coord_install_deps
[ -f build/build.ninja ] || meson setup build
ninja -C build
exec ./build/examples/trainer "$@"
