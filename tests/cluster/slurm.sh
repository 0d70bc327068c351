#!/usr/bin/env bash
# tests/cluster/slurm.sh [BUILD_DIR] - the example trainer as a real Slurm job.
#
# Starts a single-node Slurm from Debian's packages (munge, slurmctld, slurmd
# from slurm-wlm; installed with apt-get when missing) with a slurm.conf
# generated in a temporary directory, then submits two batch jobs of 6 tasks:
#
#   one `srun -n 6 --multi-prog` step runs 2 coord-ps and 4 coord-worker
#   tasks, each with `--spec slurm:port=P,ps=2,worker=4`: its address and its
#   task come only from the environment srun sets (SLURM_JOB_NODELIST,
#   SLURM_NTASKS, SLURM_PROCID, SLURM_TASKS_PER_NODE);
#   the chief runs the trainer in the batch script with the same --spec: it
#   derives the same cluster from the batch environment Slurm sets (the
#   allocation's node list and 6 tasks).
#
# The second job SIGKILLs one worker task (a kill of that task's pid, found
# by its command line) after the first of 10 epochs, the trainer running;
# training must complete with the other three (contract S10: the closure goes
# back on the ring, the others go on).  Prints each job's wall time and the
# trainer's held-out accuracy.  Every daemon started here is stopped on every
# exit path (a trap).  A daemon that cannot run here (kernel, container) fails
# the script with its log, never a silent skip.
#
# Ports: slurmctld/slurmd and the coord tasks use free ports picked at start.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=$(realpath "${1:-build}")
for b in tools/coord-worker tools/coord-ps examples/trainer examples/libtrainer_fns.so; do
	[ -e "$build/$b" ] || { echo "slurm.sh: $build/$b is missing (build first)"; exit 1; }
done
[ "$(id -u)" -eq 0 ] || { echo "slurm.sh: run as root (it starts slurmd and munged)"; exit 1; }

. .ci/deps.sh
coord_install_deps munge slurm-wlm slurm-client

t0=$(date +%s)
dir=$(mktemp -d /tmp/coord-slurm-XXXXXX)
chmod 0755 "$dir"
pids=()
fail() {
	echo "slurm.sh: FAIL: $*"
	for f in "$dir"/*.log "$dir"/job-*.out; do
		[ -f "$f" ] && { echo "---- $f (last 40 lines)"; tail -n 40 "$f"; }
	done
	exit 1
}
cleanup() {
	local rc=$?
	if [ -n "${SLURM_CONF:-}" ] && [ -f "$SLURM_CONF" ]; then
		scancel --quiet --full -u root 2>/dev/null || true
	fi
	# Every daemon started here, by pid, TERM then KILL after 5 s.
	for p in "${pids[@]}"; do kill -TERM "$p" 2>/dev/null || true; done
	for _ in $(seq 50); do
		local alive=0
		for p in "${pids[@]}"; do kill -0 "$p" 2>/dev/null && alive=1; done
		[ $alive -eq 0 ] && break
		sleep 0.1
	done
	for p in "${pids[@]}"; do kill -KILL "$p" 2>/dev/null || true; done
	# What our slurmd started and outlived it (slurmstepd and its tasks):
	# each by pid, found by our SLURM_CONF in its environment.
	for p in $(pgrep -x 'slurmstepd|coord-worker|coord-ps|trainer|srun' 2>/dev/null); do
		grep -qaF "SLURM_CONF=$dir/slurm.conf" "/proc/$p/environ" 2>/dev/null &&
			kill -KILL "$p" 2>/dev/null
	done
	[ $rc -eq 0 ] && rm -rf "$dir" || echo "slurm.sh: logs kept in $dir"
	exit $rc
}
trap cleanup EXIT
trap 'exit 130' INT TERM

# A free TCP port on 127.0.0.1 (bash's /dev/tcp: a refused connect is free).
free_port() {
	local p
	for _ in $(seq 200); do
		p=$((20000 + RANDOM % 30000))
		(exec 3<>"/dev/tcp/127.0.0.1/$p") 2>/dev/null || { echo "$p"; return; }
	done
	echo "slurm.sh: no free port" >&2
	return 1
}

# ---- munge ------------------------------------------------------------------
mkdir -m 0711 "$dir/munge" # searchable: clients reach the socket in it
dd if=/dev/urandom of="$dir/munge/munge.key" bs=1 count=1024 status=none
chmod 0400 "$dir/munge/munge.key"
sock=$dir/munge/munge.sock
munged --force --socket="$sock" --key-file="$dir/munge/munge.key" \
	--pid-file="$dir/munge/munged.pid" --log-file="$dir/munged.log" \
	--seed-file="$dir/munge/seed" >"$dir/munged.out.log" 2>&1 ||
	fail "munged did not start (exit $?)"
pids+=("$(cat "$dir/munge/munged.pid")")
echo hello | munge --socket="$sock" | unmunge --socket="$sock" >/dev/null ||
	fail "munge round trip through $sock"

# ---- slurm.conf ---------------------------------------------------------------
host=$(hostname -s)
ctld_port=$(free_port)
slurmd_port=$(free_port)
mkdir -p "$dir/state" "$dir/spool"
export SLURM_CONF=$dir/slurm.conf
# One node, 8 CPUs as configured (config_overrides: the machine may have
# fewer cores; the tasks here mostly wait on the network).  No cgroups:
# linuxproc tracking, no task plugin, nothing that needs systemd.
cat >"$SLURM_CONF" <<EOF
ClusterName=coordtest
SlurmctldHost=$host(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
SlurmUser=root
SlurmdUser=root
AuthType=auth/munge
AuthInfo=socket=$sock
CredType=cred/munge
StateSaveLocation=$dir/state
SlurmdSpoolDir=$dir/spool/%n
SlurmctldPidFile=$dir/slurmctld.pid
SlurmdPidFile=$dir/slurmd.pid
SlurmctldLogFile=$dir/slurmctld.log
SlurmdLogFile=$dir/slurmd.log
SlurmctldDebug=info
SlurmdDebug=info
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
JobCompType=jobcomp/none
MpiDefault=none
MailProg=/bin/true
SwitchType=switch/none
SchedulerType=sched/builtin
SelectType=select/cons_tres
SelectTypeParameters=CR_CPU
SlurmdParameters=config_overrides
ReturnToService=2
KillOnBadExit=0
InactiveLimit=0
KillWait=5
MinJobAge=300
SlurmdTimeout=60
NodeName=$host NodeAddr=127.0.0.1 CPUs=8 RealMemory=1000 State=UNKNOWN
PartitionName=debug Nodes=$host Default=YES MaxTime=10 State=UP OverSubscribe=YES
EOF

# ---- slurmctld, slurmd ----------------------------------------------------------
slurmctld -D -i >"$dir/slurmctld.out.log" 2>&1 &
ctld_pid=$!
pids+=("$ctld_pid")
slurmd -D -N "$host" >"$dir/slurmd.out.log" 2>&1 &
slurmd_pid=$!
pids+=("$slurmd_pid")
ok=
for _ in $(seq 150); do
	kill -0 $ctld_pid 2>/dev/null || fail "slurmctld exited at start (its log: $dir/slurmctld.log, below)"
	kill -0 $slurmd_pid 2>/dev/null || fail "slurmd exited at start (its log: $dir/slurmd.log, below)"
	st=$(sinfo -h -n "$host" -o %t 2>/dev/null || true)
	case $st in idle*) ok=1; break ;; esac
	sleep 0.2
done
[ -n "$ok" ] || fail "node $host not idle after 30 s (sinfo: '${st:-no answer}')"
echo "slurm.sh: munged, slurmctld and slurmd up on $host (ctld port $ctld_port) in $(($(date +%s) - t0)) s"

# ---- the job ------------------------------------------------------------------------
key=$dir/cluster.key
head -c 32 /dev/urandom >"$key"
chmod 0600 "$key"
# Workers and ps in one step, one command line per rank range (multi-prog).
# Their ranks follow the resolver: jobs sorted by name, so ps first.
cat >"$dir/job.sh" <<'EOF'
#!/usr/bin/env bash
# the batch script: $1 = "kill" to SIGKILL one worker task mid-run
set -eu
spec="slurm:port=$COORD_PORT_BASE,ps=2,worker=4"
conf=$COORD_DIR/multi-$SLURM_JOB_ID.conf
cat >"$conf" <<EOC
0-1 $COORD_BUILD/tools/coord-ps --spec $spec --log error
2-5 $COORD_BUILD/tools/coord-worker --fns $COORD_BUILD/examples/libtrainer_fns.so --spec $spec --log error
EOC
out=$COORD_DIR/step-$SLURM_JOB_ID.out
srun -n 6 --overlap --kill-on-bad-exit=0 --multi-prog "$conf" >"$out" 2>&1 &
srun_pid=$!
for _ in $(seq 300); do
	[ "$(grep -c 'listening on port' "$out")" -ge 6 ] && break
	kill -0 $srun_pid 2>/dev/null || { cat "$out"; echo "job: the step ended early"; exit 1; }
	sleep 0.1
done
[ "$(grep -c 'listening on port' "$out")" -ge 6 ] || { cat "$out"; echo "job: tasks not up"; exit 1; }
echo "job: 2 coord-ps and 4 coord-worker tasks listening ($(grep -c 'listening on port' "$out") lines)"
log=$COORD_DIR/trainer-$SLURM_JOB_ID.log
: >"$log"
t=$(date +%s.%N)
# line-buffered, so the killer below sees the epochs as they end
stdbuf -oL "$COORD_BUILD/examples/trainer" --spec "$spec" --epochs "$COORD_EPOCHS" \
	--steps "$COORD_STEPS" >"$log" 2>&1 &
tpid=$!
if [ "${1:-}" = kill ]; then
	(
		# after the first epoch, while the trainer runs: one worker task's pid
		for _ in $(seq 600); do
			grep -q '^epoch 1/' "$log" && break
			sleep 0.05
		done
		victim=$(pgrep -f -n "coord-worker --fns .*port=$COORD_PORT_BASE,") || true
		[ -n "$victim" ] || { echo "job: no worker task to kill"; exit 1; }
		kill -KILL "$victim"
		if kill -0 $tpid 2>/dev/null; then
			echo "job: SIGKILLed worker task pid $victim after epoch 1, the trainer running"
		else
			echo "job: killed worker task pid $victim only after the trainer ended"
		fi
	) &
fi
rc=0
wait $tpid || rc=$?
cat "$log"
echo "job: trainer exit $rc after $(awk -v a="$t" -v b="$(date +%s.%N)" 'BEGIN { printf "%.1f", b - a }') s"
wait_bg=$(jobs -p | grep -vx "$srun_pid" || true)
[ -z "$wait_bg" ] || wait $wait_bg || true
scancel --signal=TERM "$SLURM_JOB_ID.0" 2>/dev/null || kill -TERM $srun_pid 2>/dev/null || true
wait $srun_pid 2>/dev/null || true
exit $rc
EOF
chmod +x "$dir/job.sh"

acc() { sed -n 's/^after: *held-out loss [0-9.]*, accuracy \([0-9.]*\)%.*/\1/p' "$1"; }

run_job() { # NAME [kill]
	local name=$1 id st ts te out=$dir/job-$1.out
	ts=$(date +%s.%N)
	id=$(COORD_BUILD=$build COORD_DIR=$dir COORD_PORT_BASE=$(free_port) COORD_EPOCHS=10 \
		COORD_STEPS=500 COORD_CLUSTER_KEY_FILE=$key \
		sbatch --parsable -J "coord-$name" -n 6 -N 1 -o "$out" --export=ALL \
		"$dir/job.sh" ${2:-}) || fail "sbatch refused job $name"
	for _ in $(seq 1200); do
		st=$(scontrol show job "$id" 2>/dev/null | sed -n 's/.*JobState=\([A-Z_]*\).*/\1/p')
		case $st in COMPLETED|FAILED|CANCELLED|TIMEOUT|NODE_FAIL|OUT_OF_MEMORY|BOOT_FAIL|DEADLINE|PREEMPTED) break ;; esac
		sleep 0.1
	done
	te=$(date +%s.%N)
	wall=$(awk -v a="$ts" -v b="$te" 'BEGIN { printf "%.1f", b - a }')
	[ "$st" = COMPLETED ] || fail "job $name ($id) ended $st"
	a=$(acc "$out")
	[ -n "$a" ] && [ "${a%.*}" -ge 75 ] || fail "job $name: accuracy '$a' (want >= 75%)"
	printf 'slurm.sh: job %-8s id %s: wall %.1f s (sbatch to COMPLETED), accuracy %s%%\n' \
		"$name" "$id" "$wall" "$a"
	grep -E '^(job:|after:|epoch 10/)' "$out" | sed 's/^/    /'
}

run_job plain
run_job kill kill
grep -q "SIGKILLed worker task .* the trainer running" "$dir/job-kill.out" ||
	fail "job kill: no worker was killed while the trainer ran"
# the coordinator saw it: the last epoch's line counts a worker lost, 3 of 4 up
grep -q "^epoch 10/10 .*workers 3/4 up (1 lost" "$dir/job-kill.out" ||
	fail "job kill: the trainer did not see one worker lost"
echo "slurm.sh: ok in $(($(date +%s) - t0)) s"
