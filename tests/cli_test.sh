#!/usr/bin/env bash
# tests/cli_test.sh VERSION TOOL... - the tools' command line (issue 26):
# --version prints "NAME VERSION" and exits 0; --help exits 0; no arguments,
# an unknown option, a stray argument or a missing --spec/--listen print the
# usage to stderr and exit 2; a --spec file that does not exist is named as
# one ("No such file or directory", issue 21) and exits 1.
set -u
version=$1
shift
fail=0
expect() { # expect STATUS TOOL ARGS...
	local want=$1 tool=$2 out rc
	shift 2
	out=$("$tool" "$@" 2>&1)
	rc=$?
	if [ "$rc" != "$want" ]; then
		echo "FAIL: $(basename "$tool") $* exited $rc, want $want: $out"
		fail=1
	fi
	if [ "$want" = 2 ] && ! grep -q '^usage:' <<<"$out"; then
		echo "FAIL: $(basename "$tool") $* printed no usage: $out"
		fail=1
	fi
}
for t in "$@"; do
	name=$(basename "$t")
	out=$("$t" --version)
	[ "$out" = "$name $version" ] || { echo "FAIL: $name --version said '$out'"; fail=1; }
	expect 0 "$t" --version
	expect 0 "$t" --help
	expect 2 "$t"
	expect 2 "$t" --no-such-option
	expect 2 "$t" stray
	expect 2 "$t" --task nan
	expect 2 "$t" --log loud
done
expect 2 "${@: -1}" --log error  # coord-ps: neither --spec nor --listen
out=$("${@: -1}" --spec /nonexistent/coord-spec.json --task 0 2>&1)
rc=$?
if [ "$rc" != 1 ] || ! grep -q "cannot be opened as a file: No such file or directory" <<<"$out"; then
	echo "FAIL: coord-ps with a missing --spec file exited $rc: $out"
	fail=1
fi
exit $fail
