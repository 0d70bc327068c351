#!/usr/bin/env bash
# tests/cluster/lint_container.sh [BUILD_DIR] - check examples/container/
# without a container engine (hadolint is not in Debian 12):
#
#  Dockerfile      every instruction is a known one, FROM comes first, the
#                  bases are Debian 12, COPY --from names an earlier stage,
#                  every RUN body parses (sh -n), the runtime stage installs
#                  the package of every library libcoord.so needs (readelf
#                  NEEDED of BUILD_DIR's libcoord.so, dpkg -S; the rdma ones
#                  excepted: the image is built with -Drdma=disabled), and
#                  what it copies from the build context exists;
#  wait-cluster.sh parses (sh -n) and waits for TF_CONFIG's servers, here
#                  against a closed port (bounded) and an open one;
#  tfjob.yaml      parses (python3-yaml safe_load), is a kubeflow.org/v1
#                  TFJob with 1 Chief, PS and Worker replicas whose container
#                  is named "tensorflow" (the operator sets TF_CONFIG only
#                  there), takes COORD_CLUSTER_KEY from a Secret, and runs
#                  only programs and paths the Dockerfile installs.
set -euo pipefail
cd "$(dirname "$0")/../.."
build=${1:-build}
d=examples/container
. .ci/deps.sh
coord_install_deps python3-yaml binutils
fail() {
	echo "lint_container: FAIL: $*"
	exit 1
}

# ---- Dockerfile -------------------------------------------------------------------
# logical lines: comments dropped, continuations joined
mapfile -t lines < <(sed -e '/^[[:space:]]*#/d' -e '/^[[:space:]]*$/d' "$d/Dockerfile" |
	sed -e ':a' -e '/\\$/N; s/\\\n/ /; ta')
known=" FROM RUN CMD LABEL EXPOSE ENV ADD COPY ENTRYPOINT VOLUME USER WORKDIR ARG ONBUILD STOPSIGNAL HEALTHCHECK SHELL "
stages=()
first=
for l in "${lines[@]}"; do
	ins=${l%% *}
	case $known in *" $ins "*) ;; *) fail "Dockerfile: unknown instruction '$ins'" ;; esac
	[ -n "$first" ] || { [ "$ins" = FROM ] || [ "$ins" = ARG ] || fail "Dockerfile: $ins before FROM"; }
	first=1
	case $ins in
	FROM)
		img=$(echo "$l" | awk '{print $2}')
		case $img in debian:12 | debian:12-slim | debian:bookworm*) ;; *) fail "Dockerfile: base $img is not Debian 12" ;; esac
		name=$(echo "$l" | awk 'toupper($3) == "AS" {print $4}')
		[ -n "$name" ] || fail "Dockerfile: a stage without a name ($l)"
		stages+=("$name")
		;;
	RUN)
		body=${l#RUN }
		sh -n -c "$body" 2>/dev/null || fail "Dockerfile: RUN does not parse: $body"
		;;
	COPY)
		from=$(echo "$l" | sed -n 's/.*--from=\([^ ]*\).*/\1/p')
		if [ -n "$from" ]; then
			ok=
			for s in "${stages[@]:0:${#stages[@]}-1}"; do [ "$s" = "$from" ] && ok=1; done
			[ -n "$ok" ] || fail "Dockerfile: COPY --from=$from names no earlier stage"
		else
			for f in $(echo "$l" | awk '{for (i = 2; i < NF; i++) print $i}'); do
				[ -e "$f" ] || fail "Dockerfile: COPY of $f, not in the build context"
			done
		fi
		;;
	esac
done
[ ${#stages[@]} -ge 2 ] || fail "Dockerfile: not multi-stage (${#stages[@]} stage)"
# the build stage copies these out of the build tree: they must exist there
for f in build/examples/trainer build/examples/libtrainer_fns.so examples/container/wait-cluster.sh; do
	grep -q "$f" "$d/Dockerfile" || fail "Dockerfile: does not install $f"
	[ -e "${f/#build/$build}" ] || fail "Dockerfile installs $f, which the build does not make"
done
runtime_pkgs=$(awk '/^FROM .* AS runtime/ {r = 1} r' "$d/Dockerfile" |
	sed -n '/apt-get install/,/rm -rf/p')
for lib in $(readelf -d "$build/libcoord.so" | sed -n 's/.*NEEDED.*\[\(.*\)\]/\1/p'); do
	case $lib in libc.so.* | ld-linux* | libibverbs* | librdmacm*) continue ;; esac
	pkg=$(dpkg -S "*/$lib" 2>/dev/null | head -n 1 | cut -d: -f1)
	[ -n "$pkg" ] || fail "no Debian package has $lib (dpkg -S)"
	echo "$runtime_pkgs" | grep -qw "$pkg" || fail "Dockerfile: runtime stage lacks $pkg (for $lib)"
done

# ---- wait-cluster.sh ------------------------------------------------------------------
sh -n "$d/wait-cluster.sh" || fail "wait-cluster.sh does not parse"
port=$((20000 + RANDOM % 20000))
tf='{"cluster": {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:'$port'"]}, "task": {"type": "chief", "index": 0}}'
TF_CONFIG=$tf COORD_WAIT_SECONDS=1 sh "$d/wait-cluster.sh" true 2>/dev/null &&
	fail "wait-cluster.sh did not time out on a closed port"
coproc srv { exec python3 -c 'import socket,sys,time; s=socket.socket(); s.bind(("127.0.0.1", 0)); s.listen(4); print(s.getsockname()[1], flush=True); time.sleep(20)'; }
read -r port <&"${srv[0]}"
tf='{"cluster": {"chief": ["127.0.0.1:1"], "worker": ["127.0.0.1:'$port'"], "ps": ["127.0.0.1:'$port'"]}, "task": {"type": "chief", "index": 0}}'
out=$(TF_CONFIG=$tf COORD_WAIT_SECONDS=5 sh "$d/wait-cluster.sh" echo ran) || fail "wait-cluster.sh: $out"
# shellcheck disable=SC2154 # srv_PID: set by coproc
kill "$srv_PID" 2>/dev/null || true
echo "$out" | grep -q '^ran$' || fail "wait-cluster.sh did not run its command: $out"

# ---- tfjob.yaml ----------------------------------------------------------------------
/usr/bin/python3 - "$d/tfjob.yaml" "$d/Dockerfile" <<'EOF' || fail "tfjob.yaml (above)"
import sys, yaml
path, dockerfile = sys.argv[1], open(sys.argv[2]).read()
docs = [x for x in yaml.safe_load_all(open(path)) if x]
job = [x for x in docs if x.get("kind") == "TFJob"]
assert len(job) == 1, "one TFJob"
job = job[0]
assert job["apiVersion"] == "kubeflow.org/v1", job["apiVersion"]
specs = job["spec"]["tfReplicaSpecs"]
assert set(specs) == {"Chief", "PS", "Worker"}, sorted(specs)
assert specs["Chief"]["replicas"] == 1
installed = {"coord-worker", "coord-ps", "trainer", "coord-wait-cluster"}
for role, s in specs.items():
    c = s["template"]["spec"]["containers"]
    assert len(c) == 1 and c[0]["name"] == "tensorflow", role + ": one container 'tensorflow'"
    cmd = c[0]["command"]
    assert cmd[0] in installed, "%s runs %s, not installed by the Dockerfile" % (role, cmd[0])
    assert "tf_config" in cmd, role + ": --spec tf_config"
    for a in cmd:
        if a.startswith("/"):
            assert a in dockerfile, "%s uses %s, not in the Dockerfile" % (role, a)
    env = {e["name"]: e for e in c[0].get("env", [])}
    key = env.get("COORD_CLUSTER_KEY", {}).get("valueFrom", {}).get("secretKeyRef")
    assert key and key.get("name") and key.get("key"), role + ": COORD_CLUSTER_KEY from a Secret"
    assert c[0]["ports"][0]["containerPort"] == 2222, role + ": port 2222"
print("tfjob.yaml: a TFJob of %s" % ", ".join("%d %s" % (s["replicas"], r) for r, s in specs.items()))
EOF
echo "lint_container: ok (Dockerfile: ${#lines[@]} instructions, stages ${stages[*]}; wait-cluster.sh; tfjob.yaml)"
