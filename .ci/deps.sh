#!/usr/bin/env bash
# .ci/deps.sh - install, with apt-get, whatever coord's build and tests need
# and this machine lacks.  Sourced by tests/run.sh, examples/run.sh, .ci/run.
#
# It says what it installs (and why) before it does, shows apt's progress,
# and waits, bounded ($COORD_APT_WAIT seconds, default 300), for another
# apt or dpkg holding its lock instead of failing at once.

# Building libcoord, the tools and the examples (examples/run.sh); the rdma
# transport is built only when libibverbs-dev and librdmacm-dev are there.
coord_build_deps=(meson ninja-build pkg-config gcc
	liburcu-dev liburing-dev libjansson-dev libprotobuf-c-dev protobuf-c-compiler
	libsodium-dev)
# The whole suite and CI (tests/run.sh, .ci/run): the build's, plus cmocka,
# ConcurrencyKit (bench_ring), clang (fuzzing, sanitizers), clang-format,
# protoc (test_spec's reference encoder), the rdma headers, abigail-tools
# (abidiff: the ABI check), man-db (man -l: the man pages check), and the
# Python package's build and tests (python3-dev: the extension; numpy, pytest:
# suite 'python', python/README.md).
coord_deps=("${coord_build_deps[@]}" clang libclang-rt-14-dev clang-format
	libck-dev libcmocka-dev protobuf-compiler libibverbs-dev librdmacm-dev
	abigail-tools man-db python3-dev python3-numpy python3-pytest)
# The soft-RoCE rig (tests/rdma/rig.sh installs these itself; not the normal path).
# shellcheck disable=SC2034 # used by tests/rdma/rig.sh
coord_rig_deps=(qemu-system-x86 busybox-static cpio kmod iproute2 ibverbs-utils
	ibverbs-providers rdmacm-utils perftest)

# coord_apt ARGS...: apt-get ARGS, waiting up to $COORD_APT_WAIT s (300) while
# another apt or dpkg holds its lock (dpkg's own locks through apt's
# DPkg::Lock::Timeout; the package lists' lock, which that does not cover,
# by trying again every 5 s).
coord_apt() {
	local - # set +e below stays inside this function
	local wait=${COORD_APT_WAIT:-300} sudo= log rc said=
	local deadline=$(($(date +%s) + wait))
	[ "$(id -u)" -ne 0 ] && sudo=sudo
	log=$(mktemp)
	while :; do
		set +e
		$sudo env DEBIAN_FRONTEND=noninteractive apt-get -q -o DPkg::Lock::Timeout="$wait" \
			"$@" 2>&1 | tee "$log"
		rc=${PIPESTATUS[0]}
		[ "$rc" -eq 0 ] && break
		if ! grep -qE 'Could not get lock|Unable to lock|is another process using it' "$log"; then
			rm -f "$log"
			return "$rc"
		fi
		if [ "$(date +%s)" -ge "$deadline" ]; then
			echo "coord: apt/dpkg is still locked by another process after ${wait}s; giving up" >&2
			rm -f "$log"
			return "$rc"
		fi
		[ -n "$said" ] || echo "coord: another apt or dpkg holds its lock; waiting (up to ${wait}s)..." >&2
		said=1
		sleep 5
	done
	rm -f "$log"
}

# coord_install_deps [PKG...]: those of PKG (default: coord_deps) not installed.
coord_install_deps() {
	local missing=() p
	[ $# -gt 0 ] || set -- "${coord_deps[@]}"
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
			missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	echo "coord: installing with apt-get what this needs and the machine lacks:"
	echo "  ${missing[*]}"
	echo "coord: apt-get update..."
	coord_apt update -qq
	echo "coord: apt-get install (this can take a few minutes)..."
	coord_apt install -y --no-install-recommends "${missing[@]}"
	echo "coord: installed ${missing[*]}"
}
