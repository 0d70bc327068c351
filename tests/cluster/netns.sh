#!/usr/bin/env bash
# tests/cluster/netns.sh [BUILD_DIR [STEP...]] - coord on a cluster of "hosts"
# with real addresses: one network namespace per host, joined by a bridge.
#
# Hosts: chief (.1), w0-w3 (.10-.13), ps0-ps1 (.20-.21) on 10.78.X.0/24, X
# from this shell's pid; the bridge lives in a namespace of its own, so
# nothing here touches the machine's own network (no default route leaves).
# Every process runs in its host's namespace; every server binds its host's
# address and so needs the cluster key (B5), given to each in the
# environment.  Steps (default: all, in this order):
#
#   contract   test_coord's contract table over tcp (T_GROUPS=tcp), the test
#              binary on the chief, its coord-worker processes spread over
#              w0-w3 ($T_WORKER_HOSTS, $T_WORKER_WRAP: tests/helpers.c)
#   trainer    the example trainer: coord-ps on ps0-ps1 and coord-worker on
#              w0-w3, each started with its own TF_CONFIG naming its own task
#              (as Kubernetes' TFJob sets per pod) and `--spec tf_config`; the
#              chief runs `trainer --spec tf_config`
#   partition  the trainer again; after its first epoch w1's link goes down
#              for 5 s (longer than the 3 s heartbeat detection), then up:
#              training must complete (B2: the others go on)
#   latency    injected round-trip delay 0.1, 1 and 10 ms between the chief
#              and every other host; `tc netem` where the kernel has it, else
#              an iptables NFQUEUE rule on the chief's INPUT and a userspace
#              delayer (tests/cluster/nfq_delay.c, libnetfilter-queue); it
#              says which.
#              At each delay bench_window prints closures/s with 64 and 256
#              in flight beside the bandwidth-delay bound F / RTT.
#
# Everything it made (namespaces, links, rules, processes) goes on every exit
# path (a trap).  Needs root, iproute2; installs iptables and
# libnetfilter-queue-dev with apt-get when missing.
set -euo pipefail
cd "$(dirname "$0")/../.."
src=$PWD
build=$(realpath "${1:-build}")
shift || true
steps=${*:-contract trainer partition latency}
for b in tools/coord-worker tools/coord-ps examples/trainer examples/libtrainer_fns.so \
	tests/test_coord tests/libcoordtestfns.so bench/bench_window bench/libcoordbenchfns.so; do
	[ -e "$build/$b" ] || { echo "netns.sh: $build/$b is missing (build first)"; exit 1; }
done
[ "$(id -u)" -eq 0 ] || { echo "netns.sh: run as root (it makes network namespaces)"; exit 1; }
. .ci/deps.sh
coord_install_deps iproute2 iptables libnetfilter-queue-dev gcc

t0=$(date +%s)
id=$(($$ % 250))
pfx=cc$id
net=10.78.$id
dir=$(mktemp -d /tmp/coord-netns-XXXXXX)
declare -A ip=([chief]=$net.1 [w0]=$net.10 [w1]=$net.11 [w2]=$net.12 [w3]=$net.13
	[ps0]=$net.20 [ps1]=$net.21)
hosts=(chief w0 w1 w2 w3 ps0 ps1)
workers=(w0 w1 w2 w3)
sw=$pfx-sw
made=()
procs=()

fail() {
	echo "netns.sh: FAIL: $*"
	for f in "$dir"/*.log; do
		[ -f "$f" ] && { echo "---- $f (last 30 lines)"; tail -n 30 "$f"; }
	done
	exit 1
}
stop_procs() {
	local p
	for p in "${procs[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for _ in $(seq 50); do
		local alive=0
		for p in "${procs[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
		[ $alive -eq 0 ] && break
		sleep 0.1
	done
	for p in "${procs[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
	for p in "${procs[@]}"; do wait "$p" 2>/dev/null || true; done
	procs=()
}
cleanup() {
	local rc=$? n p
	stop_procs
	# what still runs in our namespaces (test workers), by pid
	for n in "${made[@]}"; do
		for p in $(ip netns pids "$n" 2>/dev/null); do kill -KILL "$p" 2>/dev/null || true; done
	done
	for n in "${made[@]}"; do ip netns del "$n" 2>/dev/null || true; done
	[ $rc -eq 0 ] && rm -rf "$dir" || echo "netns.sh: logs kept in $dir"
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# ---- the cluster ----------------------------------------------------------------------
ip netns add "$sw"
made+=("$sw")
ip -n "$sw" link set lo up
ip -n "$sw" link add br0 type bridge
ip -n "$sw" link set br0 up
for h in "${hosts[@]}"; do
	ns=$pfx-$h
	ip netns add "$ns"
	made+=("$ns")
	# the pair is made in the switch's namespace: no name in the machine's own
	ip -n "$sw" link add "s-$h" type veth peer name eth0 netns "$ns"
	ip -n "$sw" link set "s-$h" master br0 up
	ip -n "$ns" addr add "${ip[$h]}/24" dev eth0
	ip -n "$ns" link set eth0 up
	ip -n "$ns" link set lo up
done
# the chief reaches every host (bounded: 7 hosts, 5 s each): a refused connect to port 9
for h in "${hosts[@]}"; do
	for _ in $(seq 50); do
		case $(ip netns exec "$pfx-chief" bash -c "exec 3<>/dev/tcp/${ip[$h]}/9" 2>&1) in
		*refused*) continue 2 ;;
		esac
		sleep 0.1
	done
	fail "the chief does not reach $h (${ip[$h]}) after 5 s"
done
echo "netns.sh: ${#hosts[@]} hosts on $net.0/24 behind a bridge (namespaces $pfx-*), up in $(($(date +%s) - t0)) s"

key=$(head -c 32 /dev/urandom | od -An -tx1 | tr -d ' \n')
export COORD_CLUSTER_KEY=$key COORD_LOG=error
in_host() { # HOST CMD... : CMD in HOST's namespace (a function: not for &, whose $! would be a subshell)
	local h=$1
	shift
	ip netns exec "$pfx-$h" "$@"
}

# The cluster as TF_CONFIG's "cluster" (the chief included, as TFJob sets it).
cluster_json() { # PORT
	local p=$1
	printf '{"chief": ["%s:%s"], "worker": ["%s:%s", "%s:%s", "%s:%s", "%s:%s"], "ps": ["%s:%s", "%s:%s"]}' \
		"${ip[chief]}" "$p" "${ip[w0]}" "$p" "${ip[w1]}" "$p" "${ip[w2]}" "$p" "${ip[w3]}" "$p" \
		"${ip[ps0]}" "$p" "${ip[ps1]}" "$p"
}
tf_config() { # PORT TYPE INDEX
	printf '{"cluster": %s, "task": {"type": "%s", "index": %s}}' "$(cluster_json "$1")" "$2" "$3"
}

# Wait until @n lines of "listening on port" are in the servers' logs (10 s).
wait_listening() { # N
	local n=$1 c=0
	for _ in $(seq 100); do
		c=$(cat "$dir"/ps?.log "$dir"/w?.log 2>/dev/null | grep -c 'listening on port' || true)
		[ "$c" -ge "$n" ] && return 0
		sleep 0.1
	done
	fail "$c of $n servers listening after 10 s"
}

# coord-ps on ps0-1 and coord-worker (FNS) on w0-3, each with its own TF_CONFIG.
start_servers() { # PORT FNS
	local p=$1 fns=$2 i
	for i in 0 1; do
		ip netns exec "$pfx-ps$i" env TF_CONFIG="$(tf_config "$p" ps $i)" \
			"$build/tools/coord-ps" --spec tf_config --log error >"$dir/ps$i.log" 2>&1 &
		procs+=($!)
	done
	for i in 0 1 2 3; do
		ip netns exec "$pfx-w$i" env TF_CONFIG="$(tf_config "$p" worker $i)" \
			"$build/tools/coord-worker" --fns "$fns" --spec tf_config --log error \
			>"$dir/w$i.log" 2>&1 &
		procs+=($!)
	done
	wait_listening 6
}

acc() { sed -n 's/^after: *held-out loss [0-9.]*, accuracy \([0-9.]*\)%.*/\1/p' "$1"; }

run_trainer() { # NAME PORT EPOCHS STEPS [partition]
	local name=$1 p=$2 e=$3 s=$4 log=$dir/trainer-$1.log tpid a
	start_servers "$p" "$build/examples/libtrainer_fns.so"
	: >"$log"
	ip netns exec "$pfx-chief" env TF_CONFIG="$(tf_config "$p" chief 0)" stdbuf -oL \
		"$build/examples/trainer" --spec tf_config --epochs "$e" --steps "$s" >"$log" 2>&1 &
	tpid=$!
	if [ "${5:-}" = partition ]; then
		for _ in $(seq 600); do grep -q '^epoch 1/' "$log" && break; sleep 0.05; done
		ip -n "$sw" link set s-w1 down
		echo "netns.sh: w1's link down at $(date +%T.%N | cut -c1-12)"
		for _ in $(seq 50); do kill -0 $tpid 2>/dev/null || break; sleep 0.1; done
		ip -n "$sw" link set s-w1 up
		echo "netns.sh: w1's link up at $(date +%T.%N | cut -c1-12)"
		kill -0 $tpid 2>/dev/null || fail "trainer ended during the partition (too short)"
	fi
	wait $tpid || fail "trainer ($name) exit $?"
	a=$(acc "$log")
	[ -n "$a" ] && [ "${a%.*}" -ge 75 ] || fail "trainer ($name): accuracy '$a'"
	# per epoch: the trainer's steps/s since its start and the workers up
	echo "    epoch:steps/s(up): $(sed -n 's/^epoch \([0-9]*\)\/.* \([0-9]*\) steps\/s  workers \([0-9]*\)\/.*/\1:\2(\3)/p' "$log" | paste -sd' ')"
	grep -E '^epoch' "$log" | tail -n 1 | sed 's/^/    /'
	grep -E '^after:' "$log" | sed 's/^/    /'
	stop_procs
	rm -f "$dir"/ps?.log "$dir"/w?.log
}

# closures/s with 64 and 256 in flight at each injected RTT, beside F / RTT.
latency() {
	local d q=$((100 + id)) how out rtt r64 r256 dpid=
	start_servers 2224 "$build/bench/libcoordbenchfns.so"
	if ip netns exec "$pfx-chief" tc qdisc add dev eth0 root netem delay 0ms 2>"$dir/netem.log"; then
		how="tc netem on the chief's eth0"
	else
		how="iptables NFQUEUE (queue $q) on the chief's INPUT + tests/cluster/nfq_delay.c"
		how="$how (tc netem: $(head -n 1 "$dir/netem.log"))"
		gcc -O2 -Wall -o "$dir/nfq_delay" "$src/tests/cluster/nfq_delay.c" -lnetfilter_queue \
			-lnfnetlink || fail "building the delayer (libnetfilter-queue-dev)"
	fi
	echo "netns.sh: delay injected by $how; packets from every host to the chief wait" \
		"the whole RTT"
	printf '    %-10s %-22s %-28s %-28s\n' "RTT" "coord round trip" "64 in flight" "256 in flight"
	printf '    %-10s %-22s %-28s %-28s\n' "injected" "(median, 1 in flight)" \
		"closures/s (bound 64/RTT)" "closures/s (bound 256/RTT)"
	for d in 0 100 1000 10000; do
		if [ "$d" -gt 0 ]; then
			case $how in
			tc*) in_host chief tc qdisc change dev eth0 root netem delay "${d}us" ;;
			*)
				# on arrival: held on the sending side, a packet also holds its
				# socket's send accounting (TCP small queues, autocorking) and
				# the next one waits behind it (measured: p90 round trip 2 RTT)
				[ -n "$dpid" ] || in_host chief iptables -A INPUT -p tcp -s "$net.0/24" \
					-j NFQUEUE --queue-num $q --queue-bypass
				[ -z "$dpid" ] || { kill -TERM "$dpid"; wait "$dpid" || true; }
				ip netns exec "$pfx-chief" "$dir/nfq_delay" $q "$d" >>"$dir/nfq_delay.log" 2>&1 &
				dpid=$!
				procs+=("$dpid")
				for _ in $(seq 50); do
					[ "$(grep -c "delay $d us, ready" "$dir/nfq_delay.log")" -ge 1 ] && break
					kill -0 $dpid 2>/dev/null || fail "nfq_delay exited"
					sleep 0.1
				done
				grep -q "delay $d us, ready" "$dir/nfq_delay.log" || fail "nfq_delay not ready"
				;;
			esac
		fi
		out=$(in_host chief env TF_CONFIG="$(tf_config 2224 chief 0)" \
			"$build/bench/bench_window" --spec tf_config --inflight 64,256 --seconds 2) ||
			fail "bench_window at ${d} us"
		echo "$out" >>"$dir/bench.log"
		rtt=$(echo "$out" | sed -n 's/^rtt: median \([0-9.]*\) us.*/\1/p')
		r64=$(echo "$out" | sed -n 's/^inflight 64: \([0-9]*\) closures.*/\1/p')
		r256=$(echo "$out" | sed -n 's/^inflight 256: \([0-9]*\) closures.*/\1/p')
		awk -v d="$d" -v rtt="$rtt" -v a="$r64" -v b="$r256" 'BEGIN {
			inj = d > 0 ? sprintf("%g ms", d / 1000) : "none";
			bnd64 = d > 0 ? sprintf("%.0f", 64e6 / d) : "-";
			bnd256 = d > 0 ? sprintf("%.0f", 256e6 / d) : "-";
			printf "    %-10s %-22s %-28s %-28s\n", inj, sprintf("%.1f us", rtt),
				sprintf("%d (%s)", a, bnd64), sprintf("%d (%s)", b, bnd256) }'
	done
	[ -z "$dpid" ] || { kill -TERM "$dpid"; wait "$dpid" || true; }
	[ -z "$dpid" ] || tail -n 1 "$dir/nfq_delay.log" | sed 's/^/    /'
	stop_procs
	rm -f "$dir"/ps?.log "$dir"/w?.log
}

for step in $steps; do
	ts=$(date +%s.%N)
	case $step in
	contract)
		hostlist=$(IFS=,; for w in "${workers[@]}"; do printf '%s\n' "${ip[$w]}"; done | paste -sd,)
		# the wrapper runs a test's worker in the namespace of its --listen address
		{
			echo '#!/usr/bin/env bash'
			echo 'for a in "$@"; do case $a in'
			for w in "${workers[@]}"; do echo "${ip[$w]}:*) exec ip netns exec $pfx-$w \"\$@\" ;;"; done
			echo 'esac; done; echo "in-host: no --listen address of a host" >&2; exit 1'
		} >"$dir/in-host"
		chmod +x "$dir/in-host"
		in_host chief env T_GROUPS=tcp T_WORKER_HOSTS="$hostlist" T_WORKER_WRAP="$dir/in-host" \
			COORD_WORKER_BIN="$build/tools/coord-worker" \
			COORD_TESTFNS="$build/tests/libcoordtestfns.so" COORD_PS_BIN="$build/tools/coord-ps" \
			timeout 300 "$build/tests/test_coord" >"$dir/contract.log" 2>&1 ||
			fail "the contract table over tcp across hosts"
		echo "netns.sh: contract table over tcp, chief $net.1, workers on $hostlist:" \
			"$(grep -E '^\[  PASSED  \]' "$dir/contract.log")"
		;;
	trainer)
		run_trainer plain 2222 10 500
		;;
	partition)
		run_trainer partition 2223 30 1000 partition
		;;
	latency)
		latency
		;;
	*) fail "unknown step '$step'" ;;
	esac
	printf 'netns.sh: %s in %.1f s\n' "$step" "$(awk -v a="$ts" -v b="$(date +%s.%N)" 'BEGIN { print b - a }')"
done
echo "netns.sh: ok in $(($(date +%s) - t0)) s"
