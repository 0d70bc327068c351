#!/bin/sh
# tests/rdma/perftest_pair.sh - run one perftest tool as server and client on
# one RDMA device (rxe0 in the rig: it loops back to itself) and print its
# typical latency.  Guest side of rig.sh (busybox sh); also runs natively.
#
#   sh tests/rdma/perftest_pair.sh ib_send_lat -n 1000
#   RIG_DEV=mlx5_0 RIG_ADDR=192.168.1.5 RIG_GID=3 sh tests/rdma/perftest_pair.sh ib_read_lat
#
# The server is started first; the client starts once the server's TCP
# out-of-band port is listening (bounded wait; not with -R, whose rdma_cm port
# never shows in /proc/net/tcp).  Exit: the client's status, or 1 if the
# server never listened or failed.
set -u
[ $# -ge 1 ] || {
	echo "usage: perftest_pair.sh TOOL [ARGS...]" >&2
	exit 2
}
tool=$1
shift
dev=${RIG_DEV:-rxe0}
addr=${RIG_ADDR:-10.0.2.15}
gid=${RIG_GID:-1} # rxe over eth0: GID 1 is the IPv4-mapped one (RoCEv2)
port=${RIG_PORT:-18515}
log=${TMPDIR:-/tmp}/perftest_pair.$$
opts="-d $dev -x $gid -F -p $port"

# shellcheck disable=SC2086 # $opts is a list of words
"$tool" $opts "$@" >"$log.server" 2>&1 &
spid=$!

hexport=$(printf '%04X' "$port")
i=0
while ! grep -q ":$hexport [0-9A-F]*:0000 0A" /proc/net/tcp /proc/net/tcp6 2>/dev/null; do
	i=$((i + 1))
	if [ $i -gt 100 ] || ! kill -0 $spid 2>/dev/null; then
		echo "perftest_pair: $tool server did not listen on port $port within 20 s:"
		kill $spid 2>/dev/null
		cat "$log.server"
		exit 1
	fi
	sleep 0.2
done

# shellcheck disable=SC2086
"$tool" $opts "$@" "$addr" >"$log.client" 2>&1
crc=$?
cat "$log.client"

# The server ends with the client; give it 10 s.
i=0
while kill -0 $spid 2>/dev/null && [ $i -lt 50 ]; do
	i=$((i + 1))
	sleep 0.2
done
kill -KILL $spid 2>/dev/null
wait $spid
src=$?
if [ $crc -ne 0 ] || [ $src -ne 0 ]; then
	echo "perftest_pair: $tool failed: client rc=$crc, server rc=$src; server output:"
	cat "$log.server"
	[ $crc -ne 0 ] && exit $crc
	exit 1
fi

# One greppable line: the row under the header that names t_typical.
awk -v tool="$tool" '
	/t_typical/ { hdr = 1; next }
	hdr && $1 ~ /^[0-9]+$/ {
		printf "SUMMARY %s %s B: t_typical %s us, t_avg %s us, 99%% %s us (%s iterations)\n",
		       tool, $1, $5, $6, $8, $2
		found = 1; exit
	}
	END { if (!found) { print "perftest_pair: no latency row in the output"; exit 1 } }
' "$log.client"
