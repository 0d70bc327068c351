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

say "BOOT uptime=$(up)"

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

# rxe0's port goes ACTIVE once eth0 has carrier; wait at most 20 s.
i=0
while :; do
	st=$(cat /sys/class/infiniband/rxe0/ports/1/state 2>/dev/null)
	case "$st" in
	*ACTIVE*)
		[ -c /dev/infiniband/rdma_cm ] && [ -c /dev/infiniband/uverbs0 ] && break
		;;
	esac
	i=$((i + 1))
	[ $i -le 100 ] || fail "rxe0 not ACTIVE after 20 s (state: $st)"
	sleep 0.2
done
say "READY uptime=$(up)"

cd "$(cat /rig/cwd)" || fail "no working directory $(cat /rig/cwd)"
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
say "DONE uptime=$(up)"
bye
