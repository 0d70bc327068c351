#!/usr/bin/env bash
# tests/rdma/rig.sh - the soft-RoCE rig: run RDMA tests in a qemu guest that
# has rdma_rxe, on a machine whose own kernel has no RDMA and no KVM.
#
#   bash tests/rdma/rig.sh selftest                 # verbs_smoke + ib_send_lat + ib_read_lat
#   bash tests/rdma/rig.sh selftest -f suite.txt    # the same, then more, in one boot
#   bash tests/rdma/rig.sh run -- ./build/tests/rdma/verbs_smoke -n 100
#   bash tests/rdma/rig.sh run -c 'CMD1' -c 'CMD2'   # each a busybox-sh command line
#   bash tests/rdma/rig.sh run -f cmds.txt           # one command a line, # comments
#   bash tests/rdma/rig.sh pair -a 'CMD IN A' -b 'CMD IN B' [-f FILE]  # two guests, a wire
#   bash tests/rdma/rig.sh deps | kernel | help
#
# run (and selftest) options: -c 'LINE' and -f FILE add commands (busybox sh
# lines; no bash, no python in the guest); -- CMD [ARG...] adds one, quoted,
# and ends the options; --file PATH copies more into the guest (a directory:
# all of it; e.g. a coord-worker or a .so a test finds through an environment
# variable); --timeout SECS is the per-command limit.  Host programs that
# busybox also has (ip, ls, ...) are used only when named by their path.
#
# pair: two guests from the same initramfs, joined by a second NIC each
# (eth1, qemu's UDP socket netdev on 127.0.0.1: RoCEv2 frames really cross
# a link) with its own soft-RoCE device rxe1: guest A 10.0.3.15, guest B
# 10.0.3.16 (eth0/rxe0 10.0.2.15 as in run, in each).  -a / -f / -- add
# commands for A, run in order as in run; -b adds commands B starts in the
# background at boot.  B then serves tests/rdma/peer-serve.sh: in A,
# $RIG_PEER_EXEC CMD (tests/rdma/peer-exec.sh) runs CMD in B for as long as
# it lives, so tests started with T_SPAWN_WRAP=$RIG_PEER_EXEC put their
# coord-worker / coord-ps in B; $RIG_SHM is an ivshmem region both guests
# map (COORD_TEST_SHM: the tests' counters).  A runs its first command only
# once B answers (bounded: $RIG_PAIR_WAIT, 120 s; else exit 3) and stops B
# when done.  B's output is streamed with a "B| " prefix.  tests/rdma/pair.txt
# is the suite over the wire: bash tests/rdma/rig.sh pair -f tests/rdma/pair.txt
#
# How it works
#  1. deps: apt-get installs what is missing of coord_rig_deps (.ci/deps.sh):
#     qemu-system-x86 busybox-static cpio kmod iproute2 ibverbs-utils
#     ibverbs-providers rdmacm-utils perftest; nothing when all are there.
#  2. kernel: Debian's own kernel (the package linux-image-amd64 depends on
#     today, or $RIG_KPKG) is fetched with `apt-get download`, unpacked with
#     dpkg -x and depmod -b into $RIG_CACHE (default /var/cache/coord-rig),
#     once; nothing is installed into the host's /boot or /lib/modules.
#  3. initramfs: busybox-static, the modules rdma_rxe and rdma_ucm need (the
#     order from modprobe --show-depends: virtio NIC, crc32_generic, udp
#     tunnels, ib_core, ib_uverbs, rdma_rxe, rdma_cm, rdma_ucm, ib_umad), the
#     `rdma` tool, ibv_devinfo, the rxe provider and its .driver file, and
#     every program or file the commands name (words that are host files,
#     also after NAME= or --opt=, or host programs that are not busybox
#     applets), each ELF with its ldd
#     closure plus libgcc_s (which glibc dlopen()s).  Files keep their host
#     paths and the guest starts in the host's working directory, so relative
#     and absolute paths mean the same inside; --file adds more.
#  4. boot: qemu-system-x86_64 under TCG, 2 vCPUs, 2 GiB, user-mode NIC with
#     restrict=on (nothing leaves the VM); no_timer_check on the kernel's
#     command line (on a starved host TCG's timer check failed: "IO-APIC +
#     timer doesn't work!", a panic at boot).  The guest's /init
#     (guest-init.sh) loads the modules, sets eth0 to 10.0.2.15, runs
#     `rdma link add rxe0 type rxe netdev eth0`, waits for the port to be
#     ACTIVE, then runs each command under a per-command limit.
#  5. results: the commands' stdout+stderr go to the guest's ttyS1, which qemu
#     writes to a host file that is streamed live; marker lines (@@RIG BEGIN n,
#     @@RIG END n rc=X secs=Y, @@RIG DONE) carry the exit codes.  The kernel
#     console (ttyS0) is kept apart and shown when something goes wrong.
#
# Exit status: 0 every command passed; 1 a command failed or timed out
# (rc 137); 2 usage; 3 the rig failed (guest did not come up, rxe setup failed,
# kernel oops, VM timeout).  Every wait is bounded: boot ($RIG_BOOT_TIMEOUT,
# 120 s), each command ($RIG_TIMEOUT or --timeout, 300 s), the whole VM
# (boot + commands x limit + 30 s).
#
# Time here (2 vCPUs, no KVM, the host shared with other jobs, load 4-9):
# 0.5-2 s before qemu starts; qemu start to rxe0 ACTIVE 9.5-25 s (about 6.5 s
# on a quiet machine); a trivial run 10-24 s; selftest 16-40 s.  The first
# run on a fresh machine adds the apt install (14 s here) and the kernel
# (70 MB download, unpack, depmod: 8-10 s; 400 MB in the cache).
#
# Natively (no rig): on a host with an RDMA NIC, or a kernel with rdma_rxe
# (`modprobe rdma_rxe rdma_ucm; rdma link add rxe0 type rxe netdev eth0`), run
# the same binaries directly: `meson test -C build --suite rdma`, or
# build/tests/rdma/verbs_smoke [-d DEV] [-a ADDR]; tests/rdma/perftest_pair.sh
# takes RIG_DEV, RIG_ADDR and RIG_GID.  See tests/rdma/README.md.
#
# Environment: RIG_CACHE, RIG_KPKG (pin a kernel package), RIG_SMP (2),
# RIG_MEM (MiB, 2048), RIG_TIMEOUT, RIG_BOOT_TIMEOUT, RIG_VM_TIMEOUT,
# RIG_KEEP=1 (keep the work dir), BUILD_DIR (selftest; default build),
# RIG_PAIR_WAIT (pair: A's wait for B, 120 s).
set -euo pipefail
export LC_ALL=C # $EPOCHREALTIME and awk's numbers with a '.', whatever the locale

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
repo=$(cd "$here/../.." && pwd)
PATH=$PATH:/usr/sbin:/sbin
prog=rig

say() {
	printf '%s: %s\n' "$prog" "$*" >&2
}

die() {
	say "$*"
	exit 3
}

usage() {
	sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
	exit 2
}

now() {
	echo "$EPOCHREALTIME"
}

# elapsed T0 [T1]: seconds between two $EPOCHREALTIME stamps, 1 decimal.
elapsed() {
	awk -v a="$1" -v b="${2:-$EPOCHREALTIME}" 'BEGIN { printf "%.1f", b - a }'
}

# ---- 1. host packages

rig_deps() {
	# shellcheck source=SCRIPTDIR/../../.ci/deps.sh
	. "$repo/.ci/deps.sh"
	coord_install_deps "${coord_rig_deps[@]}"
	local t
	for t in qemu-system-x86_64 busybox cpio depmod modprobe gzip rdma ibv_devinfo; do
		command -v "$t" >/dev/null || die "$t not found after installing: ${coord_rig_deps[*]}"
	done
	# busybox-static's /bin/busybox: a dynamic one would need its libs too.
	local out
	out=$(ldd "$(command -v busybox)" 2>&1 || true)
	[[ $out == *"not a dynamic executable"* ]] || die "busybox is not static (install busybox-static)"
}

# ---- 2. the guest kernel

cache=${RIG_CACHE:-/var/cache/coord-rig}

# The kernel package linux-image-amd64 depends on today (the ABI number drifts).
kpkg_resolve() {
	apt-cache depends linux-image-amd64 2>/dev/null |
		awk '$1 == "Depends:" && $2 ~ /^linux-image-[0-9]/ { print $2; exit }' || true
}

# Sets kver and kdir; fetches and unpacks the kernel when not yet cached.
rig_kernel() {
	local kpkg=${RIG_KPKG:-} tmp deb lockfd
	if ! mkdir -p "$cache" 2>/dev/null || [ ! -w "$cache" ]; then
		cache=${XDG_CACHE_HOME:-$HOME/.cache}/coord-rig # not root
		mkdir -p "$cache"
	fi
	# apt-cache takes 0.7-2 s: reuse the last answer while apt's lists are unchanged.
	if [ -z "$kpkg" ] && [ -f "$cache/.kpkg" ] && [ "$cache/.kpkg" -nt /var/lib/apt/lists ]; then
		kpkg=$(<"$cache/.kpkg")
	fi
	[ -n "$kpkg" ] || kpkg=$(kpkg_resolve)
	if [ -z "$kpkg" ]; then
		say "apt-cache cannot resolve linux-image-amd64; apt-get update"
		apt-get update -qq || true
		kpkg=$(kpkg_resolve)
	fi
	if [ -z "$kpkg" ]; then
		# Offline, no lists: the newest kernel already unpacked.
		kdir=$(printf '%s\n' "$cache"/*/.ready | sort -V | tail -n 1)
		kdir=${kdir%/.ready}
		[ -f "$kdir/.ready" ] || die "cannot resolve linux-image-amd64 (apt-cache) and no kernel in $cache"
		kver=${kdir##*/}
		say "apt cannot resolve linux-image-amd64; using the cached $kver"
		return 0
	fi
	kver=${kpkg#linux-image-}
	kdir=$cache/$kver
	[ -n "${RIG_KPKG:-}" ] || echo "$kpkg" >"$cache/.kpkg"
	[ -f "$kdir/.ready" ] && return 0

	# One unpacker at a time; a concurrent run waits (10 min at most).
	exec {lockfd}>"$cache/.lock"
	flock -w 600 "$lockfd" || die "$cache/.lock held for 10 min"
	if [ ! -f "$kdir/.ready" ]; then
		local t0
		t0=$(now)
		tmp=$cache/.tmp.$$
		# Under the lock, any other .tmp.* is what a killed run left.
		rm -rf "$cache"/.tmp.* "$kdir"
		mkdir -p "$tmp/deb"
		if ! (cd "$tmp/deb" && apt-get download -q -o APT::Sandbox::User=root "$kpkg"); then
			say "apt-get download $kpkg failed; apt-get update and resolve again"
			apt-get update -qq || true
			[ -n "${RIG_KPKG:-}" ] || kpkg=$(kpkg_resolve)
			[ -n "$kpkg" ] || die "cannot resolve linux-image-amd64"
			kver=${kpkg#linux-image-}
			kdir=$cache/$kver
			[ -n "${RIG_KPKG:-}" ] || echo "$kpkg" >"$cache/.kpkg"
			if [ -f "$kdir/.ready" ]; then
				rm -rf "$tmp"
				exec {lockfd}>&-
				return 0
			fi
			(cd "$tmp/deb" && apt-get download -q -o APT::Sandbox::User=root "$kpkg") ||
				die "apt-get download $kpkg failed"
		fi
		deb=$(find "$tmp/deb" -name '*.deb' | head -n 1)
		dpkg-deb -x "$deb" "$tmp/root"
		[ -f "$tmp/root/boot/vmlinuz-$kver" ] || die "$deb has no boot/vmlinuz-$kver"
		# The .deb ships no modules.dep: depmod normally runs at install.
		depmod -b "$tmp/root" "$kver"
		rm -rf "$tmp/deb" "$kdir"
		mv "$tmp/root" "$kdir"
		rmdir "$tmp"
		touch "$kdir/.ready"
		say "kernel $kver unpacked into $kdir in $(elapsed "$t0") s"
	fi
	exec {lockfd}>&-
}

# ---- 3. the initramfs

# Modules to load, dependencies first (modprobe --show-depends on the
# unpacked tree).  Everything else they need is built into Debian's kernel.
rig_modules=(virtio_pci virtio_net crc32_generic udp_tunnel ip6_udp_tunnel ib_core ib_uverbs
	rdma_rxe configfs ib_cm iw_cm rdma_cm rdma_ucm ib_umad)

declare -A applet=() added=()
root=

# add_file HOSTPATH GUESTPATH [lib]: copy (dereferenced) unless already
# there; an ELF file brings its ldd closure (not for "lib": ldd's list of a
# program is already transitive).
add_file() {
	local src=$1 dst=$2 kind=${3:-}
	[ -z "${added[$dst]:-}" ] || return 0
	added[$dst]=1
	local magic=
	mkdir -p "$root${dst%/*}"
	cp -L "$src" "$root$dst"
	[ -n "$kind" ] || [ ! -f "$src" ] || LC_ALL=C read -r -N 4 magic <"$src" || true
	[ "$magic" != $'\177ELF' ] || add_libs "$src"
}

# add_libs ELF: every library ldd lists (the dynamic loader included).
add_libs() {
	local out lib
	out=$(ldd "$1" 2>&1 || true)
	[[ $out != *"not found"* ]] || die "$1: missing libraries: $(grep 'not found' <<<"$out" | tr -s ' \t' ' ')"
	while read -r lib; do
		[ -z "$lib" ] || add_file "$lib" "$lib" lib
	done < <(awk '$2 == "=>" && $3 ~ /^\// { print $3 } $1 ~ /^\// { print $1 }' <<<"$out")
}

# add_word WORD: a command's word that names a host file (relative to the
# working directory or absolute; also after NAME= or --opt=, as in
# COORD_WORKER_BIN=/path/coord-worker) or a host program that busybox lacks.
add_word() {
	local w=$1 p
	case $w in
	*=*/*)
		add_word "${w#*=}"
		;;
	*/*)
		[ -f "$w" ] || return 0
		case $w in
		/*) add_file "$w" "$w" ;;
		*) add_file "$w" "$PWD/$w" ;;
		esac
		;;
	-* | *=*) ;;
	*)
		[ -z "${applet[$w]:-}" ] || return 0
		p=$(type -P "$w" || true)
		[ -z "$p" ] || add_file "$p" "/usr/bin/$w"
		;;
	esac
}

# add_tree PATH: a file or a whole directory, at the same path in the guest.
add_tree() {
	local p f
	p=$(realpath -s "$1")
	[ -e "$p" ] || die "--file $1: no such file or directory"
	if [ -d "$p" ]; then
		while IFS= read -r -d '' f; do
			add_file "$f" "$f"
		done < <(find "$p" -type f -print0)
	else
		add_file "$p" "$p"
	fi
}

# rig_initramfs WORKDIR: builds WORKDIR/initrd.gz from cmds[] and files[].
rig_initramfs() {
	local w=$1 a line i m words ko
	root=$w/root
	mkdir -p "$root"/{bin,sbin,etc,dev,proc,sys,tmp,run,root,rig} "$root"/usr/{bin,sbin,lib64}
	mkdir -p "$root/usr/lib/x86_64-linux-gnu"
	# Merged /usr as on bookworm: ldd prints /lib/x86_64-linux-gnu/... and /lib64/ld-linux...
	ln -s usr/lib "$root/lib"
	ln -s usr/lib64 "$root/lib64"

	# busybox --install links to where the binary finds itself
	# (/proc/self/exe), so the guest gets the binary at that same path.
	a=$(readlink -f "$(command -v busybox)")
	add_file "$a" "$a"
	busybox --install -s "$root/bin"
	while read -r a; do
		applet[$a]=1
	done < <(busybox --list)
	ln -s ../bin/modprobe "$root/sbin/modprobe" # the kernel's request_module() runs it

	# Modules, in load order, at their paths; depmod on the initramfs itself.
	# -a: without it modprobe reads the names after the first as its parameters.
	: >"$root/rig/modules"
	while read -r line; do
		[[ $line == insmod\ * ]] || continue
		ko=${line#insmod }
		ko=${ko%% *}
		m=${ko#"$kdir"}
		[ -z "${added[$m]:-}" ] || continue
		added[$m]=1
		mkdir -p "$root${m%/*}"
		cp "$ko" "$root$m"
		echo "$m" >>"$root/rig/modules"
	done < <(modprobe -a -d "$kdir" -S "$kver" --show-depends "${rig_modules[@]}")
	cp "$kdir/lib/modules/$kver"/modules.{order,builtin,builtin.modinfo} "$root/lib/modules/$kver/"
	depmod -b "$root" "$kver"

	# The rdma tool creates rxe0 (6.1 has no rdma_rxe "add" parameter); the
	# rxe provider and its .driver file are dlopen()ed / read at run time, and
	# glibc dlopen()s libgcc_s for pthread_exit: ldd lists none of them.
	add_file "$(type -P rdma)" /usr/bin/rdma
	add_file "$(type -P ibv_devinfo)" /usr/bin/ibv_devinfo
	add_file /usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so \
		/usr/lib/x86_64-linux-gnu/libibverbs/librxe-rdmav34.so
	add_file /etc/libibverbs.d/rxe.driver /etc/libibverbs.d/rxe.driver
	add_file /lib/x86_64-linux-gnu/libgcc_s.so.1 /lib/x86_64-linux-gnu/libgcc_s.so.1
	# perftest's tools, which benchmarks run through perftest_pair.sh
	# without naming them on a command line
	for a in ib_send_lat ib_read_lat ib_send_bw ib_read_bw ib_write_bw; do
		add_file "$(type -P "$a")" "/usr/bin/$a"
	done
	printf 'root:x:0:0:root:/root:/bin/sh\n' >"$root/etc/passwd"
	printf 'root:x:0:\n' >"$root/etc/group"

	for a in "${files[@]}"; do
		add_tree "$a"
	done
	i=0
	for line in "${cmds[@]}"; do
		i=$((i + 1))
		printf '%s\n' "$line" >"$root/rig/cmd.$i"
		read -ra words <<<"${line//[;&|()<>\`]/ }"
		for a in "${words[@]}"; do
			add_word "${a//[\"\']/}"
		done
	done
	echo "$i" >"$root/rig/ncmds"
	i=0
	for line in ${bcmds[@]+"${bcmds[@]}"}; do
		i=$((i + 1))
		printf '%s\n' "$line" >"$root/rig/bcmd.$i"
		read -ra words <<<"${line//[;&|()<>\`]/ }"
		for a in "${words[@]}"; do
			add_word "${a//[\"\']/}"
		done
	done
	echo "$i" >"$root/rig/nbcmds"
	echo "${RIG_PAIR_WAIT:-120}" >"$root/rig/pairwait"
	cp "$here/peer-exec.sh" "$here/peer-serve.sh" "$root/rig/"
	chmod 755 "$root/rig/peer-exec.sh" "$root/rig/peer-serve.sh"
	echo "$cmd_timeout" >"$root/rig/timeout"
	mkdir -p "$root$PWD"
	echo "$PWD" >"$root/rig/cwd"
	cp "$here/guest-init.sh" "$root/init"
	chmod 755 "$root/init"

	(cd "$root" && find . -print0 | cpio --null -o -H newc --quiet) | gzip -1 >"$w/initrd.gz"
}

# ---- 4 + 5. boot, stream, collect

# rig_boot WORKDIR: runs qemu; sets t_ready (seconds from qemu start to
# READY, empty if never) and boot_failed (a reason, empty if it came up).
rig_boot() {
	local w=$1 qpid spid t0 deadline out st i
	: >"$w/out.log"
	: >"$w/console.log"
	t0=$(now)
	local pre=() # pair: guest A's wire socket (udp_exec)
	[ -z "$pair" ] || pre=(perl -e "$udp_exec" "$pair_pa" "$pair_pb")
	timeout -k 5 "$vm_timeout" ${pre[@]+"${pre[@]}"} \
		qemu-system-x86_64 -machine pc -accel tcg,thread=multi \
		-cpu max -smp "${RIG_SMP:-2}" -m "${RIG_MEM:-2048}" \
		-display none -no-reboot -nodefaults \
		-chardev "file,id=con,path=$w/console.log" -serial chardev:con \
		-chardev "file,id=out,path=$w/out.log" -serial chardev:out \
		-netdev user,id=n0,restrict=on -device virtio-net-pci,netdev=n0,mac=52:54:0a:00:02:0f \
		${pair_a[@]+"${pair_a[@]}"} \
		-kernel "$kdir/boot/vmlinuz-$kver" -initrd "$w/initrd.gz" \
		-append "console=ttyS0 panic=-1 quiet loglevel=4 tsc=reliable no_timer_check${pair:+ rig.role=a}" \
		</dev/null >"$w/qemu.log" 2>&1 &
	qpid=$!
	running+=("$qpid")
	# Live output; tail --pid polls once a second unless -s says otherwise.
	tail -n +1 -s 0.2 -F --pid="$qpid" "$w/out.log" 2>/dev/null | sed -u 's/\r$//' &
	spid=$!
	running+=("$spid")

	t_ready=
	boot_failed=
	deadline=$(awk -v t="$t0" -v b="$boot_timeout" 'BEGIN { printf "%.3f", t + b }')
	st=running
	# Bounded: the boot deadline, then qemu's own timeout (vm_timeout + 5 s).
	while kill -0 "$qpid" 2>/dev/null; do
		if [ -z "$t_ready" ] && [ $st = running ]; then
			out=$(<"$w/out.log")
			if [[ $out == *"@@RIG READY"* ]]; then
				t_ready=$(elapsed "$t0")
			elif [[ $out == *"@@RIG SETUP-FAILED"* ]]; then
				st=setup-failed # the guest powers off by itself
			elif awk -v d="$deadline" -v n="$EPOCHREALTIME" 'BEGIN { exit !(n > d) }'; then
				boot_failed="no RDMA-ready guest within $boot_timeout s"
				kill "$qpid" 2>/dev/null || true
				break
			fi
		fi
		sleep 0.1
	done
	wait "$qpid" && qrc=0 || qrc=$?
	for i in $(seq 30); do
		kill -0 "$spid" 2>/dev/null || break
		[ "$i" -lt 30 ] || kill "$spid" 2>/dev/null || true
		sleep 0.1
	done
	wait "$spid" 2>/dev/null || true
	t_qemu=$(elapsed "$t0")
	[ "$qrc" -ne 124 ] || boot_failed="${boot_failed:-the VM hit its ${vm_timeout} s limit}"
	if [ -z "$boot_failed" ] && [ "$qrc" -ne 0 ] && [ "$qrc" -ne 124 ] && [ -z "$t_ready" ]; then
		boot_failed="qemu exited with $qrc: $(tail -n 5 "$w/qemu.log")"
	fi
}

# pair_args ROLE WORKDIR: qemu arguments of a pair guest: the wire (eth1,
# a connected UDP socket on 127.0.0.1 that udp_exec passes as fd @FD@) and
# the shared ivshmem region.
pair_args() {
	local mac=52:54:0a:00:03:0f
	[ "$1" = a ] || mac=52:54:0a:00:03:10
	printf '%s\n' -netdev "dgram,id=n1,local.type=fd,local.str=@FD@" \
		-device "virtio-net-pci,netdev=n1,mac=$mac" \
		-object "memory-backend-file,id=shm,share=on,mem-path=$2/shm,size=4M" \
		-device ivshmem-plain,memdev=shm
}

# udp_exec: a command prefix, `perl -e "$udp_exec" PORT_SELF PORT_PEER CMD
# ARGS...`: execs CMD with a UDP socket bound to 127.0.0.1:PORT_SELF and
# connected to 127.0.0.1:PORT_PEER as fd @FD@ in its arguments, with 16 MiB
# socket buffers (SO_RCVBUFFORCE as root, else up to net.core.rmem_max):
# with the default 208 KiB, one 1 MiB RDMA message (a burst of 1024 of
# rxe's frames) overflows qemu's socket and rxe's go-back-N retries crawl.
# Perl (perl-base) for setsockopt.
# shellcheck disable=SC2016 # perl's variables
udp_exec='
	use Socket;
	$^F = 1023; # the socket survives exec
	my ($self, $peer, @cmd) = @ARGV;
	socket(my $s, PF_INET, SOCK_DGRAM, 0) or die "socket: $!";
	for my $o ([33, 8], [32, 7]) { # SO_{RCV,SND}BUFFORCE, else SO_{RCV,SND}BUF
		setsockopt($s, SOL_SOCKET, $o->[0], pack("i", 16 << 20)) or
			setsockopt($s, SOL_SOCKET, $o->[1], pack("i", 16 << 20));
	}
	bind($s, pack_sockaddr_in($self, inet_aton("127.0.0.1"))) or die "bind $self: $!";
	connect($s, pack_sockaddr_in($peer, inet_aton("127.0.0.1"))) or die "connect: $!";
	my $fd = fileno($s);
	s/\@FD\@/$fd/g for @cmd;
	exec { $cmd[0] } @cmd or die "exec $cmd[0]: $!";
'

# rig_boot_peer WORKDIR: starts guest B (qemu in the background, its output
# streamed with a "B| " prefix); rig_peer_end stops it once A is done.
rig_boot_peer() {
	local w=$1
	: >"$w/b-out.log"
	: >"$w/b-console.log"
	timeout -k 5 "$((vm_timeout + 60))" perl -e "$udp_exec" "$pair_pb" "$pair_pa" \
		qemu-system-x86_64 -machine pc -accel tcg,thread=multi \
		-cpu max -smp "${RIG_SMP:-2}" -m "${RIG_MEM:-2048}" \
		-display none -no-reboot -nodefaults \
		-chardev "file,id=con,path=$w/b-console.log" -serial chardev:con \
		-chardev "file,id=out,path=$w/b-out.log" -serial chardev:out \
		-netdev user,id=n0,restrict=on -device virtio-net-pci,netdev=n0,mac=52:54:0a:00:02:0f \
		"${pair_b[@]}" \
		-kernel "$kdir/boot/vmlinuz-$kver" -initrd "$w/initrd.gz" \
		-append "console=ttyS0 panic=-1 quiet loglevel=4 tsc=reliable no_timer_check rig.role=b" \
		</dev/null >"$w/b-qemu.log" 2>&1 &
	bpid=$!
	running+=("$bpid")
	tail -n +1 -s 0.2 -F --pid="$bpid" "$w/b-out.log" 2>/dev/null | sed -u 's/\r$//; s/^/B| /' &
	bspid=$!
	running+=("$bspid")
}

# rig_peer_end: B stops by itself once A has told it to (10 s), else is killed.
rig_peer_end() {
	local i
	for i in $(seq 100); do
		kill -0 "$bpid" 2>/dev/null || break
		[ "$i" -lt 100 ] || kill "$bpid" 2>/dev/null || true
		sleep 0.1
	done
	wait "$bpid" 2>/dev/null || true
	for i in $(seq 30); do
		kill -0 "$bspid" 2>/dev/null || break
		[ "$i" -lt 30 ] || kill "$bspid" 2>/dev/null || true
		sleep 0.1
	done
	wait "$bspid" 2>/dev/null || true
}

# rig_report WORKDIR: the verdict from the markers; returns the exit status.
rig_report() {
	local w=$1 out line i rc secs fail=0 rigfail=0 ready
	out=$(sed 's/\r$//' "$w/out.log")
	ready=$(grep -m1 '^@@RIG READY' <<<"$out" || true)
	echo
	say "---- summary (work dir $w)"
	if [ -n "$boot_failed" ] || [ -z "$ready" ]; then
		rigfail=1
		line=$(grep -m1 '^@@RIG SETUP-FAILED' <<<"$out" || true)
		say "FAIL: the guest did not come up: ${line#@@RIG }${boot_failed:+$boot_failed}"
	else
		say "RDMA ready ${t_ready} s after qemu started (guest uptime ${ready#*uptime=} s)"
	fi
	for ((i = 1; i <= ${#cmds[@]}; i++)); do
		# Anywhere in a line: the command's last line may lack its newline.
		line=$(grep -m1 -o "@@RIG END $i rc=[0-9]* secs=[0-9.]*" <<<"$out" || true)
		if [ -z "$line" ]; then
			say "  [$i] did not finish      ${cmds[i - 1]}"
			fail=1
			continue
		fi
		rc=${line#*rc=}
		rc=${rc%% *}
		secs=${line#*secs=}
		printf '%s:   [%d] rc=%-3s %6s s  %s\n' "$prog" "$i" "$rc" "$secs" "${cmds[i - 1]}" >&2
		[ "$rc" = 0 ] || fail=1
		[ "$rc" != 137 ] || say "      (137: killed at the ${cmd_timeout} s limit, or SIGKILL)"
	done
	# Benchmarks' one-line results (perftest_pair.sh prints them), once more.
	while IFS= read -r line; do
		say "  $line"
	done < <(grep '^SUMMARY ' <<<"$out" || true)
	if [ $rigfail = 0 ]; then
		grep -q '@@RIG DONE' <<<"$out" || {
			say "FAIL: the guest stopped before running every command"
			rigfail=1
		}
	fi
	if [ -n "$pair" ]; then
		line=$(grep -m1 '^B| @@RIG SERVING' <<<"$(sed 's/\r$//; s/^/B| /' "$w/b-out.log")" || true)
		if [ -n "$line" ]; then
			say "guest B: ${line#B| @@RIG }"
		else
			say "FAIL: guest B never served: $(grep -m1 '@@RIG SETUP-FAILED' "$w/b-out.log" || echo "no SERVING line")"
			rigfail=1
		fi
		line=$(grep -m1 '^@@RIG PEER-UP' <<<"$out" || true)
		[ -z "$line" ] || say "guest A: ${line#@@RIG }"
		if grep -qE 'Kernel panic|BUG:|Oops|general protection fault|WARNING: CPU' "$w/b-console.log"; then
			say "FAIL: guest B's kernel reported a bug ($w/b-console.log):"
			tail -n 25 "$w/b-console.log" | sed 's/\r$//; s/^/    /' >&2
			rigfail=1
		fi
	fi
	if grep -qE 'Kernel panic|BUG:|Oops|general protection fault|WARNING: CPU' "$w/console.log"; then
		say "FAIL: the guest kernel reported a bug:"
		rigfail=1
	fi
	if [ $rigfail = 1 ]; then
		say "last lines of the guest console ($w/console.log):"
		tail -n 25 "$w/console.log" | sed 's/\r$//; s/^/    /' >&2
	fi
	say "qemu ran ${t_qemu} s; whole run $(elapsed "$t_start") s"
	if [ $rigfail = 1 ]; then
		return 3
	elif [ $fail = 1 ]; then
		say "FAIL: a command failed"
		return 1
	fi
	say "PASS: ${#cmds[@]} command(s)"
	return 0
}

rig_run() {
	local w status
	[ ${#cmds[@]} -gt 0 ] || {
		say "run: no command (-- CMD..., -c CMD or -f FILE)"
		exit 2
	}
	cmd_timeout=${cmd_timeout:-${RIG_TIMEOUT:-300}}
	boot_timeout=${RIG_BOOT_TIMEOUT:-120}
	vm_timeout=${RIG_VM_TIMEOUT:-$((boot_timeout + ${#cmds[@]} * cmd_timeout + 30))}
	[ -z "$pair" ] || [ -n "${RIG_VM_TIMEOUT:-}" ] || vm_timeout=$((vm_timeout + ${RIG_PAIR_WAIT:-120}))
	local t1 t2 t3
	[ "$(uname -m)" = x86_64 ] || die "x86_64 hosts only (the guest runs the host's binaries)"
	rig_deps
	t1=$(now)
	rig_kernel
	t2=$(now)
	w=$(mktemp -d "${TMPDIR:-/tmp}/coord-rig.XXXXXX")
	rig_initramfs "$w"
	t3=$(now)
	say "kernel $kver; initramfs $(du -k "$w/initrd.gz" | cut -f1) KiB; before boot: deps $(elapsed "$t_start" "$t1") s, kernel $(elapsed "$t1" "$t2") s, initramfs $(elapsed "$t2" "$t3") s"
	say "booting; limits: boot ${boot_timeout} s, each command ${cmd_timeout} s, VM ${vm_timeout} s"
	local i
	for ((i = 1; i <= ${#cmds[@]}; i++)); do
		say "  [$i] ${cmds[i - 1]}"
	done
	if [ -n "$pair" ]; then
		# Two UDP ports on 127.0.0.1, by pid (runs at once use others).
		pair_pa=$((20000 + ($$ * 2) % 20000))
		pair_pb=$((pair_pa + 1))
		mapfile -t pair_a < <(pair_args a "$w")
		mapfile -t pair_b < <(pair_args b "$w")
		for ((i = 1; i <= ${#bcmds[@]}; i++)); do
			say "  [B$i] ${bcmds[i - 1]} (background)"
		done
		say "pair: guest A 10.0.3.15 (udp 127.0.0.1:$pair_pa), guest B 10.0.3.16 (udp 127.0.0.1:$pair_pb)"
		rig_boot_peer "$w"
	fi
	rig_boot "$w"
	[ -z "$pair" ] || rig_peer_end
	rig_report "$w" && status=0 || status=$?
	if [ $status = 0 ] && [ -z "${RIG_KEEP:-}" ]; then
		rm -rf "$w"
	else
		say "work dir kept: $w (console.log, out.log, root/)"
	fi
	return $status
}

# Quote one word for the guest's busybox sh.
shquote() {
	local s=$1
	printf "'%s'" "${s//\'/\'\\\'\'}"
}

parse_run_args() {
	local q a
	while [ $# -gt 0 ]; do
		case $1 in
		-c | -a)
			[ $# -ge 2 ] || usage
			[ "$1" = -c ] || [ -n "$pair" ] || usage
			cmds+=("$2")
			shift 2
			;;
		-b)
			{ [ $# -ge 2 ] && [ -n "$pair" ]; } || usage
			bcmds+=("$2")
			shift 2
			;;
		-f)
			[ $# -ge 2 ] || usage
			[ -f "$2" ] || die "-f $2: no such file"
			while IFS= read -r a || [ -n "$a" ]; do
				[[ $a =~ ^[[:space:]]*(#|$) ]] || cmds+=("$a")
			done <"$2"
			shift 2
			;;
		--file)
			[ $# -ge 2 ] || usage
			files+=("$2")
			shift 2
			;;
		--timeout)
			[ $# -ge 2 ] || usage
			cmd_timeout=$2
			shift 2
			;;
		--)
			shift
			[ $# -gt 0 ] || usage
			q=
			for a in "$@"; do
				q+="${q:+ }$(shquote "$a")"
			done
			cmds+=("$q")
			break
			;;
		*) usage ;;
		esac
	done
}

# ---- selftest

rig_selftest() {
	local build=${BUILD_DIR:-build}
	if [ ! -f "$build/build.ninja" ]; then
		# shellcheck source=SCRIPTDIR/../../.ci/deps.sh
		. .ci/deps.sh
		coord_install_deps
		# shellcheck disable=SC2086 # MESON_ARGS is a list of words
		meson setup "$build" ${MESON_ARGS:-}
	fi
	ninja -C "$build" tests/rdma/verbs_smoke >/dev/null
	# The rig's own checks first, then any commands given (same boot).
	cmds=(
		"ibv_devinfo -d rxe0"
		"$build/tests/rdma/verbs_smoke -a 10.0.2.15 -n 1000"
		"sh tests/rdma/perftest_pair.sh ib_send_lat -n 1000"
		"sh tests/rdma/perftest_pair.sh ib_read_lat -n 1000"
		${cmds[@]+"${cmds[@]}"}
	)
	rig_run
}

# On any exit (^C included) qemu and the log streamer go too.
running=()
cleanup() {
	local p
	for p in "${running[@]}"; do
		kill "$p" 2>/dev/null || true
	done
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

t_start=$(now)
cmds=()
bcmds=()
files=()
cmd_timeout=
pair=
pair_a=()
pair_b=()
case ${1:-help} in
deps) rig_deps ;;
kernel)
	rig_deps
	rig_kernel
	echo "$kdir/boot/vmlinuz-$kver"
	;;
run)
	shift
	parse_run_args "$@"
	rig_run
	;;
pair)
	shift
	cd "$repo" # like selftest: tests/rdma/pair.txt names paths from the repo's root
	pair=1
	parse_run_args "$@"
	rig_run
	;;
selftest)
	shift
	cd "$repo" # the selftest and any commands added to it run from the repo's root
	parse_run_args "$@"
	rig_selftest
	;;
help | -h | --help) usage ;;
*) usage ;;
esac
