#!/usr/bin/env bash
# tests/install_check.sh [BUILD_DIR] - coord as a user gets it (issue 26):
# `meson install` BUILD_DIR (default build/) into a temporary root, then,
# with pkg-config seeing only coord's own coord.pc,
#  - pkg-config --cflags --libs coord works and shows no flag of coord's
#    private dependencies;
#  - libcoord.so needs none of the libraries only benchmarks use;
#  - examples/hello.c + hello_fns.c build as a consumer program and
#    hello_fns.c as a worker library, with `cc $(pkg-config ...)` alone;
#  - the consumer runs on in-process workers, then against two installed
#    coord-worker processes serving that library over loopback tcp;
#  - man finds the installed pages (man coord_schedule, man coord-worker).
#  - libcoord.so starts on a machine without rdma-core: its DT_NEEDED names
#    neither libibverbs nor librdmacm (the container-free check); the rdma
#    provider (when built) is installed in <libdir>/coord, needs them itself,
#    and the installed tools load it, or say which file is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
src=$PWD
build=${1:-build}
tmp=$(mktemp -d)
pids=()
cleanup() {
	for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
	wait 2>/dev/null || true
	rm -rf "$tmp"
}
trap cleanup EXIT
fail() {
	echo "install_check: FAIL: $*" >&2
	exit 1
}

ninja -C "$build" >/dev/null
DESTDIR=$tmp/root meson install -C "$build" --quiet --no-rebuild
prefix=$(meson introspect --buildoptions "$build" |
	python3 -c 'import json,sys; o={x["name"]: x["value"] for x in json.load(sys.stdin)}; print(o["prefix"], o["libdir"], o["bindir"], o["mandir"])')
read -r pfx libdir bindir mandir <<<"$prefix"
root=$tmp/root
lib=$root$pfx/$libdir
[ -f "$lib/pkgconfig/coord.pc" ] || fail "no coord.pc under $lib/pkgconfig"

# pkg-config sees coord.pc and nothing else (no -dev package of coord's deps).
export PKG_CONFIG_LIBDIR=$lib/pkgconfig PKG_CONFIG_PATH= PKG_CONFIG_SYSROOT_DIR=$root
flags=$(pkg-config --cflags --libs coord) || fail "pkg-config --cflags --libs coord"
echo "pkg-config --cflags --libs coord: $flags"
case " $flags " in
*" -D"* | *urcu* | *" -lck"* | *sodium* | *jansson* | *protobuf* | *uring*)
	fail "coord's private dependencies leak into consumers: $flags" ;;
esac
pkg-config --modversion coord | grep -qx "$(sed -n 's/^#define COORD_VERSION_STRING "\(.*\)"/\1/p' \
	"$root$pfx/include/coord/version.h")" || fail "coord.pc's version is not coord/version.h's"

needed=$(readelf -d "$lib/libcoord.so" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
echo "libcoord.so needs: $needed"
case " $needed " in
*libck* | *urcu-cds* | *libm.so* | *cmocka*) fail "libcoord.so links what only tests or benchmarks use" ;;
*libibverbs* | *librdmacm*)
	fail "libcoord.so needs rdma-core at load time ($needed): rdma belongs in the provider" ;;
esac

# A consumer program and a worker library, with pkg-config alone.
# shellcheck disable=SC2086 # $flags is a list of flags
cc -Wall -Werror -o "$tmp/hello" "$src/examples/hello.c" "$src/examples/hello_fns.c" $flags ||
	fail "building a consumer program with pkg-config"
# shellcheck disable=SC2086
cc -Wall -Werror -shared -fPIC -o "$tmp/libhello_fns.so" "$src/examples/hello_fns.c" $flags ||
	fail "building a worker library with pkg-config"
export LD_LIBRARY_PATH=$lib
timeout 60 "$tmp/hello" >"$tmp/inproc.out" 2>&1 || { cat "$tmp/inproc.out"; fail "hello (in-process)"; }
grep -q '^square(7) = 49' "$tmp/inproc.out" || fail "hello (in-process) printed no square(7) = 49"

ports=()
for i in 0 1; do
	"$root$pfx/$bindir/coord-worker" --fns "$tmp/libhello_fns.so" --listen 127.0.0.1:0 \
		--log error >"$tmp/w$i.out" 2>&1 &
	pids+=($!)
done
for i in 0 1; do
	p=
	for _ in $(seq 100); do # up to 10 s
		p=$(sed -n 's/.*listening on port \([0-9]*\).*/\1/p' "$tmp/w$i.out")
		[ -n "$p" ] && break
		sleep 0.1
	done
	[ -n "$p" ] || { cat "$tmp/w$i.out"; fail "installed coord-worker $i did not start"; }
	ports+=("\"127.0.0.1:$p\"")
done
timeout 60 "$tmp/hello" --spec "{\"worker\": [${ports[0]}, ${ports[1]}]}" >"$tmp/tcp.out" 2>&1 ||
	{ cat "$tmp/tcp.out"; fail "hello --spec against installed coord-workers"; }
grep -q '^== 2 tcp workers' "$tmp/tcp.out" && grep -q '^square(7) = 49' "$tmp/tcp.out" ||
	{ cat "$tmp/tcp.out"; fail "hello --spec printed the wrong thing"; }
"$root$pfx/$bindir/coord-ps" --version | grep -q "^coord-ps " || fail "coord-ps --version"

# The rdma provider, when this build made one (libibverbs/librdmacm headers
# found): the installed coord-worker loads it (it gets as far as looking for
# an RDMA device: none here, or it listens until the timeout), and names the
# file when it is missing.
prov=$lib/coord/libcoord-rdma.so provok=
if [ -f "$prov" ]; then
	pneeded=$(readelf -d "$prov" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
	case " $pneeded " in
	*libibverbs*librdmacm* | *librdmacm*libibverbs*) ;;
	*) fail "the rdma provider does not link rdma-core: $pneeded" ;;
	esac
	rdma() {
		COORD_RDMA_PROVIDER=$1 timeout 5 "$root$pfx/$bindir/coord-worker" --fns "$tmp/libhello_fns.so" \
			--listen 127.0.0.1:0 --transport rdma --log error 2>&1 || true
	}
	out=$(rdma "$prov")
	case $out in
	*"cannot load"* | *refusing*) fail "the installed coord-worker cannot use the installed rdma provider: $out" ;;
	esac
	out=$(rdma "$tmp/no-provider.so")
	[[ $out == *"$tmp/no-provider.so"*"No such file"* ]] ||
		fail "coord-worker --transport rdma without its provider does not say which file: $out"
	echo "rdma provider: $prov (needs $pneeded)"
	provok=1
fi

# The Python package (python/, when built): the installed one imports and runs
# the worker library built above, in process, with Debian's interpreter.
pkg=$(find "$root" -path '*/coord/__init__.py' -print -quit)
if [ -n "$pkg" ]; then
	PYTHONPATH=$(dirname "$(dirname "$pkg")") timeout 60 /usr/bin/python3 -c '
import sys, coord
c = coord.ClusterCoordinator(functions=sys.argv[1], workers=2)
assert c.schedule(coord.function("square", returns=int), 7).fetch() == 49
c.close()' "$tmp/libhello_fns.so" || fail "the installed Python package"
fi

# Man pages: installed where man finds them (test 'man' renders each one).
export MANPATH=$root$pfx/$mandir
for page in coord_schedule coord_create coord_set_log_fn coord-worker coord-ps; do
	man -w "$page" >/dev/null 2>&1 || fail "man $page: no installed page"
done
n=$(find "$MANPATH" -type f -name '*.[13]' | wc -l)
man coord_schedule 2>/dev/null | grep -q 'coord_schedule' || fail "man coord_schedule does not render"
echo "install_check: ok ($n man pages; libcoord.so without rdma-core; consumer and worker library built with pkg-config ran in-process and over tcp${provok:+; the rdma provider loads}${pkg:+; the Python package ran})"
