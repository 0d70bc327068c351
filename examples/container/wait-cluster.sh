#!/bin/sh
# examples/container/wait-cluster.sh CMD... - wait until every "worker" and
# "ps" address in $TF_CONFIG accepts a TCP connection, then exec CMD.
#
# The chief's coord_create() fails at once when a server is not listening
# yet, and a TFJob starts its pods in any order: the chief pod runs its
# program through this.  Bounded: $COORD_WAIT_SECONDS (default 300), then
# exit 1 naming the address that never answered.  POSIX sh + bash's
# /dev/tcp (Debian's bash is in the image).
set -eu
: "${TF_CONFIG:?TF_CONFIG is not set}"
limit=${COORD_WAIT_SECONDS:-300}
# "worker": [...] and "ps": [...] of TF_CONFIG's cluster, one host:port a line
addrs=$(printf '%s' "$TF_CONFIG" | tr -d ' \n' |
	grep -o '"\(worker\|ps\)":\[[^]]*\]' | grep -o '[A-Za-z0-9._-]*:[0-9][0-9]*' || true)
[ -n "$addrs" ] || { echo "wait-cluster: no worker or ps address in TF_CONFIG" >&2; exit 1; }
start=$(date +%s)
for a in $addrs; do
	until bash -c "exec 3<>/dev/tcp/${a%:*}/${a##*:}" 2>/dev/null; do
		if [ $(($(date +%s) - start)) -ge "$limit" ]; then
			echo "wait-cluster: $a did not accept a connection in ${limit}s" >&2
			exit 1
		fi
		sleep 1
	done
done
echo "wait-cluster: $(echo "$addrs" | wc -l) servers up after $(($(date +%s) - start))s"
exec "$@"
