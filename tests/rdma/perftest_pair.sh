#!/bin/sh
# tests/rdma/perftest_pair.sh - run one perftest tool as server and client on
# one RDMA device (rxe0 in the rig: it loops back to itself) and print one
# SUMMARY line: typical latency (*_lat) or average bandwidth (*_bw).  Guest
# side of rig.sh (busybox sh); also runs natively.
#
#   sh tests/rdma/perftest_pair.sh ib_send_lat -n 1000
#   sh tests/rdma/perftest_pair.sh ib_send_bw -n 1000 -s 65536
#   RIG_DEV=mlx5_0 RIG_ADDR=192.168.1.5 RIG_GID=3 sh tests/rdma/perftest_pair.sh ib_read_lat
#   # the rig's pair mode: the server in guest B, the client here, across the wire
#   RIG_SERVER_WRAP=$RIG_PEER_EXEC RIG_DEV=rxe1 RIG_ADDR=$RIG_PEER sh tests/rdma/perftest_pair.sh ib_read_bw
#
# The server is started first; the client starts once the server's TCP
# out-of-band port is listening (bounded wait), or with -R (rdma_cm, whose
# port never shows in /proc/net/tcp) after a fixed 3 s.  With RIG_SERVER_WRAP
# (a program that runs a command on another host, e.g. the rig's
# peer-exec.sh) the server runs through it, on the host that owns RIG_ADDR
# (same RIG_DEV name there), and the client retries its connect while the
# server is not yet listening (20 s at most).  Exit: the client's status, or
# 1 if the server never listened or failed.
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

wrap=${RIG_SERVER_WRAP:-}
# shellcheck disable=SC2086 # $opts and $wrap are lists of words
$wrap "$tool" $opts "$@" >"$log.server" 2>&1 &
spid=$!

server_gone() {
	echo "perftest_pair: $tool server did not listen on port $port within $1:"
	kill $spid 2>/dev/null
	cat "$log.server"
	exit 1
}

case "$wrap: $* " in
?*:*)
	;; # remote: the client's connect is retried below
*" -R "*)
	sleep 3 # rdma_cm's port never shows in /proc/net/tcp
	kill -0 $spid 2>/dev/null || server_gone "3 s"
	;;
*)
	hexport=$(printf '%04X' "$port")
	i=0
	while ! grep -q ":$hexport [0-9A-F]*:0000 0A" /proc/net/tcp /proc/net/tcp6 2>/dev/null; do
		i=$((i + 1))
		if [ $i -gt 100 ] || ! kill -0 $spid 2>/dev/null; then
			server_gone "20 s"
		fi
		sleep 0.2
	done
	;;
esac

# shellcheck disable=SC2086
"$tool" $opts "$@" "$addr" >"$log.client" 2>&1
crc=$?
i=0
while [ -n "$wrap" ] && [ $crc -ne 0 ] && grep -q "Couldn't connect" "$log.client" &&
	[ $i -lt 40 ] && kill -0 $spid 2>/dev/null; do
	i=$((i + 1))
	sleep 0.5
	# shellcheck disable=SC2086
	"$tool" $opts "$@" "$addr" >"$log.client" 2>&1
	crc=$?
done
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

# One greppable line from the row under the results header.
awk -v tool="$tool" '
	/t_typical/ { lat = 1; next }
	/BW average/ { bw = 1; next }
	lat && $1 ~ /^[0-9]+$/ {
		printf "SUMMARY %s %s B: t_typical %s us, t_avg %s us, 99%% %s us (%s iterations)\n",
		       tool, $1, $5, $6, $8, $2
		found = 1; exit
	}
	bw && $1 ~ /^[0-9]+$/ {
		printf "SUMMARY %s %s B: BW average %s MB/s, peak %s MB/s, %s Mpps (%s iterations)\n",
		       tool, $1, $4, $3, $5, $2
		found = 1; exit
	}
	END { if (!found) { print "perftest_pair: no result row in the output"; exit 1 } }
' "$log.client"
