#!/usr/bin/env bash
# tools/check-includes.sh - includes point only downward (docs/layout.md).
#
# The layers of runtime/ and transport/, lowest first; a folder may include
# the headers of its own folder and of any folder on an earlier line, never
# of a folder on its own line or a later one.  Public headers (<coord/...>)
# and system headers are open to all.  Anything outside these folders
# (tools/, tests/, bench/, examples/) sits above them all.
#
# Usage: tools/check-includes.sh [SRCDIR]   (default: the repository root)
# Prints file:line: message for every upward include and exits 1 if any.
set -euo pipefail
cd "${1:-$(dirname "$0")/..}"

layers='
runtime/util
runtime/spec runtime/store
runtime/core
runtime/ps
transport/wire
transport/engine
transport/inproc transport/tcp transport/rdma
transport/psclient
transport/server
transport
'

# The core's private headers: for runtime/ only.  transport/ sees the core
# through runtime/core/dispatch.h (and exec.h); the files listed here still
# read struct coord directly (docs/layout.md, "What a transport may touch").
private='runtime/core/internal.h runtime/core/coord_pvt.h'
private_ok='
transport/transports.c
'

declare -A rank
r=0
while read -r line; do
	[ -n "$line" ] || continue
	for f in $line; do rank[$f]=$r; done
	r=$((r + 1))
done <<<"$layers"

bad=0
while IFS= read -r file; do
	dir=${file%/*}
	[ -n "${rank[$dir]+x}" ] || { echo "$file: folder $dir is not in the layer list of $0"; bad=1; continue; }
	me=${rank[$dir]}
	while IFS=: read -r ln inc; do
		idir=${inc%/*}
		[ "$idir" = "$dir" ] && continue
		case " $private " in
		*" $inc "*)
			case "$file" in
			runtime/*) ;;
			*) if ! grep -qx "$file" <<<"$private_ok"; then
				echo "$file:$ln: includes \"$inc\", private to runtime/ (use runtime/core/dispatch.h)"
				bad=1
			   fi ;;
			esac ;;
		esac
		if [ -z "${rank[$idir]+x}" ]; then
			echo "$file:$ln: includes \"$inc\" from outside the layers"
			bad=1
		elif [ "${rank[$idir]}" -ge "$me" ]; then
			echo "$file:$ln: includes \"$inc\": $idir is not below $dir"
			bad=1
		fi
	done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$file" |
		 sed 's/^\([0-9]*\):[^"]*"\([^"]*\)".*/\1:\2/')
done < <(find runtime transport -name '*.[ch]' | LC_ALL=C sort)
exit $bad
