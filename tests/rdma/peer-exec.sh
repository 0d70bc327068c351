#!/bin/sh
# tests/rdma/peer-exec.sh - run a command in the other guest of the rig's pair
# mode (rig.sh pair), as if here: guest A's side of tests/rdma/peer-serve.sh.
#
#   peer-exec.sh CMD [ARG...]
#
# Sends one line to peer-serve.sh on $RIG_PEER port ${RIG_PEER_PORT:-7000}
# (busybox nc): `cd` to this working directory, the COORD_* and T_*
# variables of this environment, then `exec CMD ARG...`, every word quoted.
# The command's stdout comes back as this process's stdout (a test reads a
# server's "listening on port N" line from it); its stderr goes to the peer
# guest's output.  This process becomes the nc (exec: same pid), so what
# ends it (SIGTERM from t_reap(), SIGKILL, its parent's death signal) closes
# the connection, and peer-serve.sh then kills the command's process group:
# the command lives exactly as long as this process.  Set as T_SPAWN_WRAP,
# the tests' servers (tests/helpers.c t_spawn()) run in the peer guest.
# COORD_TEST_SHM names the same shared memory in both guests ($RIG_SHM, an
# ivshmem device), so test counters work across them.
set -u
[ $# -ge 1 ] || {
	echo "usage: peer-exec.sh CMD [ARG...]" >&2
	exit 2
}
[ -n "${RIG_PEER:-}" ] || {
	echo "peer-exec.sh: RIG_PEER is not set (rig.sh pair sets it in guest A)" >&2
	exit 2
}

q() {
	printf "'%s'" "$(printf '%s' "$1" | sed "s/'/'\\\\''/g")"
}

line="cd $(q "$PWD") &&"
val=
for v in $(env | sed -n 's/^\(\(COORD\|T\)_[A-Za-z0-9_]*\)=.*/\1/p'); do
	case $v in
	T_SPAWN_WRAP | T_WORKER_WRAP | T_SERVER_STDERR) continue ;; # here, not there
	esac
	eval "val=\${$v}"
	line="$line $v=$(q "$val")"
done
line="$line exec"
for a in "$@"; do
	line="$line $(q "$a")"
done

# nc's stdin: the line, then held open (EOF would end the command there);
# the writer is left behind when nc goes, until the rig command ends.
fifo=${TMPDIR:-/tmp}/peer-exec.$$
mkfifo "$fifo" || exit 1
{
	printf '%s\n' "$line"
	exec sleep 2147483647
} >"$fifo" &
exec <"$fifo"
rm -f "$fifo"
exec nc "$RIG_PEER" "${RIG_PEER_PORT:-7000}"
