#!/usr/bin/env bash
# .ci/deps.sh - install, with apt-get, whatever coord's build and tests need
# and this machine lacks.  Sourced by tests/run.sh, examples/run.sh, .ci/run.
coord_deps=(meson ninja-build pkg-config gcc clang libclang-rt-14-dev clang-format
	liburcu-dev libck-dev liburing-dev libcmocka-dev libjansson-dev
	libprotobuf-c-dev protobuf-c-compiler protobuf-compiler libsodium-dev
	libibverbs-dev librdmacm-dev)
# The soft-RoCE rig (tests/rdma/rig.sh installs these itself; not the normal path).
# shellcheck disable=SC2034 # used by tests/rdma/rig.sh
coord_rig_deps=(qemu-system-x86 busybox-static cpio kmod iproute2 ibverbs-utils
	ibverbs-providers rdmacm-utils perftest)

# coord_install_deps [PKG...]: those of PKG (default: coord_deps) not installed.
coord_install_deps() {
	local missing=() p
	[ $# -gt 0 ] || set -- "${coord_deps[@]}"
	for p in "$@"; do
		dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
			missing+=("$p")
	done
	[ ${#missing[@]} -eq 0 ] && return 0
	echo "installing: ${missing[*]}"
	local sudo=
	[ "$(id -u)" -ne 0 ] && sudo=sudo
	$sudo apt-get update -qq && DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq \
		--no-install-recommends "${missing[@]}" >/dev/null
}
