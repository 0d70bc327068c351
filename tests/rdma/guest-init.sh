#!/bin/sh
# tests/rdma/guest-init.sh - /init of the soft-RoCE rig's guest (busybox sh, PID 1).
#
# rig.sh copies this file to /init in the initramfs, next to /rig/:
#   modules   the .ko files to insmod, one a line, dependencies first
#   cwd       the host's working directory (mirrored into the initramfs)
#   timeout   per-command limit in seconds
#   ncmds     number of commands; cmd.1 .. cmd.N hold one shell command each
# Everything for the host goes to ttyS1 (a file on the host), between marker
# lines the host parses:
#   @@RIG READY uptime=U         rxe0 is ACTIVE, /dev/infiniband/rdma_cm exists
#   @@RIG SETUP-FAILED why       then the tail of dmesg, then poweroff
#   @@RIG BEGIN n / @@RIG END n rc=X secs=Y
#   @@RIG DONE
# Pair mode (rig.sh pair; `rig.role=a` or `rig.role=b` on the kernel command
# line): a second NIC, eth1, is a wire to the other guest (qemu's UDP socket
# netdev), with 10.0.3.15 (A) or 10.0.3.16 (B) and its own soft-RoCE device
# rxe1; eth0/rxe0 stay as above.  An ivshmem device both guests map is
# exported as RIG_SHM (its BAR's sysfs resource file, the same path in both).
#   B: starts /rig/bcmd.* in the background, serves tests/rdma/peer-serve.sh
#      (busybox nc -ll, port 7000), says @@RIG SERVING, and waits for
#      /tmp/rig-stop (A creates it at the end) or the host's kill.
#   A: waits (bounded, /rig/pairwait s) until B's server answers, says
#      @@RIG PEER-UP, runs its commands as above with RIG_SELF, RIG_PEER,
#      RIG_SHM, RIG_PEER_EXEC (tests/rdma/peer-exec.sh) and
#      COORD_TEST_SHM=$RIG_SHM exported, then stops B.
# The kernel console (ttyS0) stays separate, so kernel messages never mix
# with test output.
export PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/root TMPDIR=/tmp LANG=C

mount -t proc proc /proc
mount -t sysfs sysfs /sys
# CONFIG_DEVTMPFS_MOUNT is off in Debian's kernel: mount it ourselves.
mount -t devtmpfs devtmpfs /dev
mkdir -p /dev/pts /dev/shm
mount -t devpts devpts /dev/pts
mount -t tmpfs tmpfs /dev/shm
# No tmpfs on /tmp: the initramfs is writable already, and host files under
# /tmp (a build dir there, say) are in it at their own paths.

# ttyS1: no output post-processing (\n stays \n), no echo.
stty -F /dev/ttyS1 raw -echo 2>/dev/null
exec 3>/dev/ttyS1

say() {
	echo "@@RIG $*" >&3
}

up() {
	read -r u _ </proc/uptime
	echo "$u"
}

bye() {
	sync
	poweroff -f
	sleep 10 # poweroff -f does not return; if it did, panic=-1 reboots = qemu exits
	exit 1
}

fail() {
	say "SETUP-FAILED $* (uptime $(up))"
	dmesg | tail -n 40 >&3
	bye
}

# rxe_wait DEV: its port ACTIVE and the rdma_cm/uverbs nodes there, 20 s at most.
rxe_wait() {
	i=0
	while :; do
		st=$(cat "/sys/class/infiniband/$1/ports/1/state" 2>/dev/null)
		case "$st" in
		*ACTIVE*)
			[ -c /dev/infiniband/rdma_cm ] && [ -c /dev/infiniband/uverbs0 ] && break
			;;
		esac
		i=$((i + 1))
		[ $i -le 100 ] || fail "$1 not ACTIVE after 20 s (state: $st)"
		sleep 0.2
	done
}

say "BOOT uptime=$(up)"

role=
read -r cmdline </proc/cmdline
for w in $cmdline; do
	case $w in
	rig.role=*) role=${w#rig.role=} ;;
	esac
done

while read -r m; do
	insmod "$m" || fail "insmod $m"
done </rig/modules

ip link set lo up || fail "ip link set lo up"
# eth0 is normally there once insmod virtio_net returns; should the probe be
# deferred, wait for it, 10 s at most.
i=0
while [ ! -e /sys/class/net/eth0 ]; do
	i=$((i + 1))
	[ $i -le 100 ] || fail "no eth0 10 s after insmod virtio_net"
	sleep 0.1
done
ip link set eth0 up || fail "ip link set eth0 up"
ip addr add 10.0.2.15/24 dev eth0 || fail "ip addr add 10.0.2.15/24 dev eth0"
echo "127.0.0.1 localhost" >/etc/hosts
echo "10.0.2.15 guest" >>/etc/hosts
rdma link add rxe0 type rxe netdev eth0 || fail "rdma link add rxe0 type rxe netdev eth0"
# rxe0's port goes ACTIVE once eth0 has carrier.
rxe_wait rxe0

if [ -n "$role" ]; then
	RIG_SELF=10.0.3.15 RIG_PEER=10.0.3.16
	[ "$role" = b ] && RIG_SELF=10.0.3.16 RIG_PEER=10.0.3.15
	i=0
	while [ ! -e /sys/class/net/eth1 ]; do
		i=$((i + 1))
		[ $i -le 100 ] || fail "no eth1 (the wire) 10 s after insmod virtio_net"
		sleep 0.1
	done
	ip link set eth1 up || fail "ip link set eth1 up"
	ip addr add $RIG_SELF/24 dev eth1 || fail "ip addr add $RIG_SELF/24 dev eth1"
	echo "$RIG_PEER peer" >>/etc/hosts
	rdma link add rxe1 type rxe netdev eth1 || fail "rdma link add rxe1 type rxe netdev eth1"
	rxe_wait rxe1
	# ivshmem-plain (1af4:1110): its BAR 2 is the shared memory; no driver,
	# so enable the device and map the sysfs resource file.
	RIG_SHM=
	for d in /sys/bus/pci/devices/*; do
		if [ "$(cat "$d/vendor")" != 0x1af4 ] || [ "$(cat "$d/device")" != 0x1110 ]; then
			continue
		fi
		echo 1 >"$d/enable" 2>/dev/null
		RIG_SHM=$d/resource2
	done
	[ -n "$RIG_SHM" ] || fail "no ivshmem device"
	export RIG_SELF RIG_PEER RIG_SHM RIG_PEER_EXEC=/rig/peer-exec.sh
fi
say "READY uptime=$(up)"

cd "$(cat /rig/cwd)" || fail "no working directory $(cat /rig/cwd)"

if [ "$role" = b ]; then
	n=$(cat /rig/nbcmds)
	i=1
	while [ $i -le "$n" ]; do
		setsid sh /rig/bcmd.$i </dev/null >&3 2>&3 &
		i=$((i + 1))
	done
	nc -ll -p 7000 -e sh /rig/peer-serve.sh </dev/null >&3 2>&3 &
	say "SERVING uptime=$(up) addr=$RIG_SELF"
	# Bounded by the host, which kills this VM once A is done.
	while [ ! -e /tmp/rig-stop ]; do
		sleep 0.5
	done
	say "DONE uptime=$(up)"
	bye
fi

# peer_ping: B's peer-serve.sh runs a command for us (4 s at most).
peer_ping() {
	(
		echo 'echo PEER-UP'
		sleep 2
	) | nc -w 2 "$RIG_PEER" 7000 2>/dev/null | grep -q PEER-UP
}

if [ "$role" = a ]; then
	t=$(cat /rig/pairwait)
	t0=$(up)
	until peer_ping; do
		awk "BEGIN { exit !($(up) - $t0 > $t) }" && fail "the peer guest did not answer on $RIG_PEER:7000 within $t s"
		sleep 1
	done
	say "PEER-UP uptime=$(up) self=$RIG_SELF peer=$RIG_PEER shm=$RIG_SHM"
	# The tests' counters in memory both guests see (tests/helpers.c):
	# the test here and the servers it starts in B count into it.
	export COORD_TEST_SHM="$RIG_SHM"
fi
n=$(cat /rig/ncmds)
limit=$(cat /rig/timeout)
i=1
while [ $i -le "$n" ]; do
	say "BEGIN $i"
	t0=$(up)
	# busybox timeout execs the command in its own pid and kills it with
	# SIGKILL after $limit s (rc 137); setsid makes that pid a process group,
	# so whatever the command left running in the background dies with it.
	timeout -s KILL "$limit" setsid sh /rig/cmd.$i </dev/null >&3 2>&3 &
	pid=$!
	wait $pid
	rc=$?
	kill -KILL -- "-$pid" 2>/dev/null
	t1=$(up)
	say "END $i rc=$rc secs=$(awk "BEGIN { printf \"%.2f\", $t1 - $t0 }")"
	i=$((i + 1))
done
if [ "$role" = a ]; then
	(
		echo 'touch /tmp/rig-stop'
		sleep 1
	) | nc -w 2 "$RIG_PEER" 7000 >/dev/null 2>&1
fi
say "DONE uptime=$(up)"
bye
