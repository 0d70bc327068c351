#!/usr/bin/env bash
# tests/abi_check.sh [--update] [BUILD_DIR] - compare the ABI of
# BUILD_DIR/libcoord.so (default build/, built first) with the committed
# baseline abi/libcoord.abi (abidw, abidiff: Debian's abigail-tools).
#
# Fails on any change to what the public headers expose except added
# functions: a changed struct or signature, a removed symbol.  The private
# symbols (version node COORD_PRIVATE_<version>, what the rdma provider of
# the same build calls) are not ABI: abi/private.suppr leaves them out.  A conscious
# change: if it keeps old binaries working (a field appended to an options
# struct, which carries its size; runtime/abi.h), run with --update and
# commit abi/libcoord.abi; if it breaks them, bump the soname too
# (soversion of shared_library('coord') in meson.build) before updating.
set -euo pipefail
cd "$(dirname "$0")/.."
update=
if [ "${1:-}" = --update ]; then
	update=1
	shift
fi
build=${1:-build}
baseline=abi/libcoord.abi
for t in abidw abidiff; do
	command -v $t >/dev/null || { echo "abi_check: $t not found (apt install abigail-tools)"; exit 1; }
done
ninja -C "$build" "$(basename "$(readlink -f "$build/libcoord.so")")" >/dev/null
cur=$(mktemp)
trap 'rm -f "$cur"' EXIT
# Only the types the installed headers (and the generated version.h) expose.
abidw --headers-dir include/coord --headers-dir "$build/include/coord" --drop-private-types \
	--no-corpus-path "$build/libcoord.so" >"$cur"
if [ -n "$update" ]; then
	cp "$cur" "$baseline"
	echo "abi_check: $baseline updated from $build/libcoord.so; commit it"
	exit 0
fi
if abidiff --no-added-syms --suppressions abi/private.suppr "$baseline" "$cur"; then
	echo "abi_check: the ABI of $build/libcoord.so matches $baseline"
	exit 0
fi
cat <<'MSG'
abi_check: the ABI differs from abi/libcoord.abi (above).  If old binaries still
work (a field appended to an options struct), run `bash tests/abi_check.sh --update`
and commit abi/libcoord.abi; if not, bump the soname as well (soversion of
shared_library('coord') in meson.build).
MSG
exit 1
