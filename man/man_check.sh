#!/usr/bin/env bash
# man/man_check.sh LIBCOORD_SO DIR - every coord_* symbol LIBCOORD_SO exports
# has a section-3 page in DIR, both tools a section-1 page, and every page
# renders with `man -l` without a warning.  The symbols of the version node
# COORD_PRIVATE_* are not API (what the rdma provider calls,
# transport/rdma_provider.h): no page.
set -u
lib=$1 dir=$2
fail=0
command -v man >/dev/null || { echo "man_check: man not found (apt install man-db)"; exit 1; }
syms=$(nm -D --defined-only "$lib" |
	awk '$3 ~ /^coord_/ && $3 !~ /@+COORD_PRIVATE_/ { sub(/@.*/, "", $3); print $3 }' | sort -u)
[ -n "$syms" ] || { echo "man_check: no coord_* symbol in $lib"; exit 1; }
n=0
for s in $syms; do
	n=$((n + 1))
	[ -f "$dir/$s.3" ] && continue
	echo "man_check: $s is exported but has no page: document it in its header" \
		"(a kernel-doc block, /** $s() - ... */), then meson setup --reconfigure"
	fail=1
done
for t in coord-worker coord-ps; do
	[ -f "$dir/$t.1" ] || { echo "man_check: no $t.1"; fail=1; }
done
pages=0
for p in "$dir"/*.[13]; do
	pages=$((pages + 1))
	out=$(LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -l "$p" 2>&1 >/dev/null)
	if [ $? -ne 0 ] || [ -n "$out" ]; then
		echo "man_check: $(basename "$p") does not render cleanly: $out"
		fail=1
	fi
done
[ $fail = 0 ] && echo "man_check: $n exported symbols, each with a page; $pages pages render"
exit $fail
