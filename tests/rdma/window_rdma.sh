#!/bin/sh
# tests/rdma/window_rdma.sh - coord over rdma as a program linked with
# libcoord.so sees it: the coordinator of bench_window and a coord-worker,
# both reaching rdma through the provider libcoord.so dlopen()s
# ($COORD_RDMA_PROVIDER; transport/rdma_provider.h).  Guest side of rig.sh
# (busybox sh, tests/rdma/suite.txt); also runs natively on an RDMA host.
#
#   COORD_RDMA_PROVIDER=build/libcoord-rdma.so sh tests/rdma/window_rdma.sh \
#       build/tools/coord-worker build/bench/libcoordbenchfns.so build/bench/bench_window
#
# The worker listens on $RDMA_TEST_ADDR (default 10.0.2.15) with a cluster key
# made here (off loopback coord requires one); bench_window runs one short
# round at a few windows.  Exit: bench_window's status (speed is printed,
# never asserted), or 1 if the worker never listened.
set -u
[ $# -eq 3 ] || {
	echo "usage: window_rdma.sh COORD_WORKER BENCHFNS_SO BENCH_WINDOW" >&2
	exit 2
}
worker=$1 fns=$2 bench=$3
addr=${RDMA_TEST_ADDR:-10.0.2.15}
log=${TMPDIR:-/tmp}/window_rdma.$$
COORD_CLUSTER_KEY=$(od -An -tx1 -N32 /dev/urandom | tr -d ' \n')
export COORD_CLUSTER_KEY

"$worker" --fns "$fns" --listen "$addr:0" --transport rdma --log info >"$log.worker" 2>&1 &
wpid=$!
port=
i=0
while [ -z "$port" ]; do # up to 20 s
	port=$(sed -n 's/.*listening on port \([0-9]*\).*/\1/p' "$log.worker" 2>/dev/null | head -n 1)
	[ -n "$port" ] && break
	i=$((i + 1))
	if [ $i -gt 100 ] || ! kill -0 $wpid 2>/dev/null; then
		echo "window_rdma: coord-worker --transport rdma did not listen within 20 s:"
		cat "$log.worker"
		kill $wpid 2>/dev/null
		rm -f "$log.worker"
		exit 1
	fi
	sleep 0.2
done

"$bench" --spec "{\"worker\": [\"$addr:$port\"]}" --transport rdma --inflight 1,16 --seconds 1
rc=$?
kill $wpid 2>/dev/null
wait $wpid 2>/dev/null
if [ $rc -ne 0 ]; then
	echo "window_rdma: bench_window --transport rdma failed (rc $rc); the worker said:"
	cat "$log.worker"
fi
rm -f "$log.worker"
exit $rc
