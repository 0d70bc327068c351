#!/usr/bin/env bash
# examples/run.sh - install what building coord and its examples needs and is
# missing (.ci/deps.sh: coord_build_deps, not the test and CI tools), build,
# and run the main job: the example trainer (async SGD with parameter
# servers), on the in-process transport unless told otherwise (arguments go
# to it: --help).  `run.sh recommender ARGS` runs the second example, the
# wide & deep recommender, instead.
set -euo pipefail
cd "$(dirname "$0")/.."
. .ci/deps.sh
coord_install_deps "${coord_build_deps[@]}"
[ -f build/build.ninja ] || meson setup build
ninja -C build
if [ "${1:-}" = recommender ]; then
	shift
	exec ./build/examples/recommender "$@"
fi
exec ./build/examples/trainer "$@"
