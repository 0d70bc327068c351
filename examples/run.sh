#!/usr/bin/env bash
# examples/run.sh - install what is missing, build, and run the example on the
# in-process transport.
set -euo pipefail
cd "$(dirname "$0")/.."
. .ci/deps.sh
coord_install_deps
[ -f build/build.ninja ] || meson setup build
ninja -C build
exec ./build/examples/hello "$@"
