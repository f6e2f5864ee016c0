#!/usr/bin/env bash
# A real multi-host run on one machine: the coordinator and three workers each live in their own
# network namespace with their own address, joined by veth pairs to a bridge in a hub namespace.
#
#   hub netns:   br0  <- vc, v0, v1, v2 (veth ends)
#   coordinator: eth0 10.213.0.1/24     (also runs the zpipe CLI)
#   worker w0:   eth0 10.213.0.10/24    (--host 10.213.0.10; its TCP streams bind and advertise it)
#   worker w1:   eth0 10.213.0.11/24
#   worker w2:   eth0 10.213.0.12/24
#
# 1. trains a small GPT job with p=3 (one pipeline rank per worker namespace) over the TCP streams and checks
#    it SUCCEEDED with falling loss and ranks on three different hosts;
# 2. starts a long synthetic p=3 job, waits until iterations progress, takes the hub side of the
#    veth of the worker holding pipeline rank 1 down, and checks the job goes FAILED with a reason
#    naming that worker or rank within a bound, and that the other two workers return to IDLE.
#
# Only addresses assigned here, inside these namespaces, are used; the root namespace is never
# touched (both veth ends are created directly inside the namespaces). Everything is torn down on
# exit, also on failure; namespaces left by an aborted earlier run (same prefix, owner pid gone)
# are removed first. Needs root and iproute2 (`ip netns`); exits 77 (ctest SKIP) without them.
#
# usage: multihost.sh COORDINATOR_BIN WORKER_BIN ZPIPE_BIN
set -euo pipefail

readonly SKIP=77
readonly PREFIX=zpnt
readonly RUN="${PREFIX}$$"
readonly HUB="${RUN}-hub" COORD_NS="${RUN}-c"
readonly WORKER_NS=("${RUN}-w0" "${RUN}-w1" "${RUN}-w2")
readonly WORKER_IP=(10.213.0.10 10.213.0.11 10.213.0.12)
readonly COORD_IP=10.213.0.1
readonly COORD_ADDR="${COORD_IP}:50051"
readonly FAIL_BOUND_S=20  # link down -> job FAILED
readonly IDLE_BOUND_S=20  # job FAILED -> survivors IDLE
readonly REJOIN_BOUND_S=30  # link up again -> the cut-off worker IDLE again

log() { printf '[netns %(%H:%M:%S)T] %s\n' -1 "$*"; }
skip() {
  echo "SKIP: $*"
  exit "$SKIP"
}
die() {
  echo "FAIL: $*" >&2
  exit 1
}

if (($# != 3)); then
  echo "usage: $0 COORDINATOR_BIN WORKER_BIN ZPIPE_BIN" >&2
  exit 2
fi
COORD_BIN=$1 WORKER_BIN=$2 ZPIPE_BIN=$3
for bin in "$COORD_BIN" "$WORKER_BIN" "$ZPIPE_BIN"; do
  [[ -x $bin ]] || die "binary not found: $bin"
done

((EUID == 0)) || skip "needs root to create network namespaces (euid $EUID)"
command -v ip >/dev/null || skip "iproute2 'ip' not installed (scripts/setup installs it)"
ip netns list >/dev/null 2>&1 || skip "'ip netns' unavailable: $(ip netns list 2>&1 | head -1)"
command -v jq >/dev/null || die "jq not installed (run scripts/setup)"

# gRPC must not send namespace-local addresses to a proxy from the environment.
unset http_proxy https_proxy HTTP_PROXY HTTPS_PROXY grpc_proxy all_proxy ALL_PROXY no_grpc_proxy

# ---------------------------------------------------------------------------------------------
# Teardown (trap EXIT) and removal of what aborted earlier runs left behind.

WORK=""
PIDS=()
CLEANED=0

kill_netns_pids() {  # every process still inside namespace $1 (only ours live there)
  local pid
  for pid in $(ip netns pids "$1" 2>/dev/null); do kill -KILL "$pid" 2>/dev/null || true; done
}

delete_run() {  # all namespaces of run $1 (prefix + pid); the hub last, which takes the veths
  local run=$1 ns
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^${run}-" || true); do
    kill_netns_pids "$ns"
  done
  for ns in $(ip netns list 2>/dev/null | awk '{print $1}' | grep "^${run}-" | sort -r || true); do
    ip netns del "$ns" 2>/dev/null || true
  done
}

cleanup() {
  local rc=$?
  ((CLEANED)) && return
  CLEANED=1
  set +e
  local pid
  for pid in "${PIDS[@]}"; do kill -TERM "$pid" 2>/dev/null; done
  for _ in $(seq 30); do
    local alive=0
    for pid in "${PIDS[@]}"; do kill -0 "$pid" 2>/dev/null && alive=1; done
    ((alive)) || break
    sleep 0.1
  done
  for pid in "${PIDS[@]}"; do
    kill -0 "$pid" 2>/dev/null || continue
    log "teardown: $(ps -o args= -p "$pid" | cut -c1-80) did not stop within 3s of SIGTERM; SIGKILL"
    kill -KILL "$pid" 2>/dev/null
  done
  delete_run "$RUN"
  if ip netns list 2>/dev/null | grep -q "^${RUN}-"; then
    echo "teardown: namespaces left: $(ip netns list | grep "^${RUN}-" | tr '\n' ' ')" >&2
    ((rc == 0)) && rc=1
  fi
  if [[ -n $WORK && -d $WORK ]]; then
    if ((rc != 0 && rc != SKIP)); then
      local f
      for f in "$WORK"/*.log; do
        echo "----- tail of $(basename "$f") -----" >&2
        tail -n 25 "$f" >&2
      done
      echo "logs kept in $WORK" >&2
    else
      rm -rf "$WORK"
    fi
  fi
  log "torn down (exit $rc)"
  exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

for owner in $(ip netns list 2>/dev/null | awk '{print $1}' | sed -nE "s/^${PREFIX}([0-9]+)-.*/\1/p" | sort -u); do
  if [[ $owner != "$$" ]] && ! kill -0 "$owner" 2>/dev/null; then
    log "removing stale namespaces of aborted run ${PREFIX}${owner}"
    delete_run "${PREFIX}${owner}"
  fi
done

WORK=$(mktemp -d "${TMPDIR:-/tmp}/zpipe-netns.XXXXXX")
CLIENT_TOKEN=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')
WORKER_TOKEN=$(od -An -tx1 -N16 /dev/urandom | tr -d ' \n')

# ---------------------------------------------------------------------------------------------
# Topology.

T0=$SECONDS
if ! ip netns add "$HUB" 2>"$WORK/netns.err"; then
  skip "cannot create a network namespace: $(cat "$WORK/netns.err")"
fi
ip -n "$HUB" link set lo up
if ! ip -n "$HUB" link add br0 type bridge 2>"$WORK/bridge.err"; then
  skip "cannot create a bridge in a namespace: $(cat "$WORK/bridge.err")"
fi
ip -n "$HUB" link set br0 up

# attach NS IP VETH: NS gets eth0 with IP; the other end is VETH on the hub's bridge.
attach() {
  local ns=$1 addr=$2 veth=$3
  ip netns add "$ns"
  ip -n "$ns" link set lo up
  ip -n "$HUB" link add "$veth" type veth peer name eth0 netns "$ns"
  ip -n "$HUB" link set "$veth" master br0
  ip -n "$HUB" link set "$veth" up
  ip -n "$ns" addr add "$addr/24" dev eth0
  ip -n "$ns" link set eth0 up
}
attach "$COORD_NS" "$COORD_IP" vc
for i in 0 1 2; do attach "${WORKER_NS[$i]}" "${WORKER_IP[$i]}" "v$i"; done
log "namespaces up: $HUB $COORD_NS ${WORKER_NS[*]}"

# The veth ends start in NO-CARRIER/tentative for a moment; wait until every eth0 is UP.
for ns in "$COORD_NS" "${WORKER_NS[@]}"; do
  for _ in $(seq 50); do
    ip -n "$ns" -br link show eth0 | grep -q ' UP ' && break
    sleep 0.1
  done
  ip -n "$ns" -br link show eth0 | grep -q ' UP ' || die "eth0 in $ns did not come up"
done

# ---------------------------------------------------------------------------------------------
# Processes. The coordinator's heartbeat timeout (3s) is well under the workers' communication
# timeout (10s), so a cut-off worker is declared lost by the coordinator (a reason naming it)
# before its peers' receives give up (a reason naming only the stage they waited for). A cancel
# interrupts those receives at once, so the survivors do not wait out the 10s.

# The coordinator serves on its namespace address (not loopback) for the other namespaces: token
# files for every role, and the workers and the CLI carry theirs.
printf 'cli:%s\n' "$CLIENT_TOKEN" >"$WORK/client.tokens"
printf 'workers:%s\n' "$WORKER_TOKEN" >"$WORK/worker.tokens"
printf '%s\n' "$WORKER_TOKEN" >"$WORK/worker.token"
chmod 600 "$WORK"/*.tokens "$WORK/worker.token"
ip netns exec "$COORD_NS" "$COORD_BIN" --listen "$COORD_ADDR" --metrics-listen '' --db :memory: \
  --client-tokens "$WORK/client.tokens" --worker-tokens "$WORK/worker.tokens" \
  --heartbeat-timeout 3s >"$WORK/coordinator.log" 2>&1 &
PIDS+=($!)
for i in 0 1 2; do
  ip netns exec "${WORKER_NS[$i]}" "$WORKER_BIN" --coordinator "$COORD_ADDR" --name "w$i" \
    --device cpu:0 --host "${WORKER_IP[$i]}" --comm-timeout 10 --token-file "$WORK/worker.token" \
    >"$WORK/worker-w$i.log" 2>&1 &
  PIDS+=($!)
done

# The daemons never exit on their own here; one that does ends the test at once.
declare -A DAEMONS=([${PIDS[0]}]=coordinator [${PIDS[1]}]=w0 [${PIDS[2]}]=w1 [${PIDS[3]}]=w2)
daemons_alive() {
  local pid
  for pid in "${!DAEMONS[@]}"; do
    kill -0 "$pid" 2>/dev/null || die "${DAEMONS[$pid]} exited (see its log)"
  done
}

# The CLI runs in the coordinator's namespace and reaches it on its namespace address.
zpipe() {
  ip netns exec "$COORD_NS" env ZPIPE_TOKEN="$CLIENT_TOKEN" "$ZPIPE_BIN" --coordinator "$COORD_ADDR" "$@"
}

workers_json() { zpipe -o json workers 2>/dev/null || echo '{}'; }

# wait_for SECONDS DESCRIPTION COMMAND...: polls COMMAND every 0.2 s.
wait_for() {
  local bound=$1 what=$2
  shift 2
  local deadline=$((SECONDS + bound))
  until "$@"; do
    daemons_alive
    ((SECONDS < deadline)) || die "timed out after ${bound}s waiting for $what"
    sleep 0.2
  done
}

idle_count_is() {  # idle_count_is N [NAME...]: exactly these names (or any N workers) are IDLE
  local want=$1
  shift
  local names
  names=$(workers_json | jq -r '[.workers[]? | select(.state == "idle") | .name] | sort | join(" ")')
  if (($# > 0)); then
    [[ $names == "$(printf '%s\n' "$@" | sort | paste -sd' ')" ]]
  else
    [[ -n $names ]] && (($(wc -w <<<"$names") == want))
  fi
}

wait_for 60 "three IDLE workers" idle_count_is 3 w0 w1 w2
log "coordinator ${COORD_ADDR} sees workers: $(workers_json | jq -c '[.workers[] | {name, host}]')"

# ---------------------------------------------------------------------------------------------
# 1. GPT across three namespaces.

cat >"$WORK/gpt.yaml" <<'EOF'
name: netns-gpt
model:
  gpt: {layers: 6, hidden: 32, heads: 2, seq_len: 16, vocab: 64}
parallel: {pipeline: 3, data: 1}
schedule: {kind: zb-v}
batch: {microbatches: 6, microbatch_size: 4}
train: {iterations: 30, optimizer: adamw, lr: 3.0e-3, seed: 1}
EOF

rx_bytes() { ip netns exec "$1" cat /sys/class/net/eth0/statistics/rx_bytes; }
declare -a RX0 RXD
for i in 0 1 2; do RX0[i]=$(rx_bytes "${WORKER_NS[$i]}"); done

t=$SECONDS
# In the background with `wait`, so that a signal to this script is handled at once.
timeout 90 ip netns exec "$COORD_NS" env ZPIPE_TOKEN="$CLIENT_TOKEN" "$ZPIPE_BIN" --coordinator "$COORD_ADDR" -o json \
  submit "$WORK/gpt.yaml" --id netns-gpt --follow >"$WORK/gpt-events.jsonl" 2>"$WORK/gpt-submit.log" &
PIDS+=($!)
rc=0
wait $! || rc=$?
status=$(zpipe -o json status netns-gpt)
state=$(jq -r .state <<<"$status")
if ((rc != 0)) || [[ $state != succeeded ]]; then
  die "GPT job: submit exit $rc, state $state, reason: $(jq -r .reason <<<"$status")"
fi
mapfile -t losses < <(jq -r 'select(.iteration != null) | .iteration.loss // empty' "$WORK/gpt-events.jsonl")
done_iters=$(jq -r .progress.iterations_done <<<"$status")
((done_iters == 30)) || die "GPT job: iterations_done $done_iters, want 30"
((${#losses[@]} == 30)) || die "GPT job: ${#losses[@]} iteration losses streamed, want 30"
first=${losses[0]} last=${losses[29]}
awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a - 0.5) }' ||
  die "GPT job: loss did not fall enough: $first -> $last"
hosts=$(jq -r '[.ranks[].host] | sort | unique | join(" ")' <<<"$status")
[[ $hosts == "${WORKER_IP[*]}" ]] || die "GPT job: ranks on hosts '$hosts', want '${WORKER_IP[*]}'"
for i in 0 1 2; do
  rx=$(($(rx_bytes "${WORKER_NS[$i]}") - RX0[i]))
  ((rx > 100000)) || die "worker w$i received only $rx bytes on its veth during the GPT job"
  RXD[i]=$rx
done
log "GPT p=3 zb-v SUCCEEDED in $((SECONDS - t))s across ${hosts}: loss $first -> $last;" \
  "veth rx bytes w0=${RXD[0]} w1=${RXD[1]} w2=${RXD[2]}"

# ---------------------------------------------------------------------------------------------
# 2. Link down mid-job.

wait_for 20 "three IDLE workers after the GPT job" idle_count_is 3 w0 w1 w2
cat >"$WORK/long.yaml" <<'EOF'
name: netns-link-down
model:
  synthetic: {forward_ms: 5, backward_ms: 5, weight_ms: 3, activation_kb: 16}
parallel: {pipeline: 3, data: 1}
schedule: {kind: zb-h1}
batch: {microbatches: 6, microbatch_size: 1}
train: {iterations: 100000, lr: 1.0e-3}
EOF
zpipe submit "$WORK/long.yaml" --id netns-long >/dev/null

iterations_done() { zpipe -o json status netns-long | jq -r '.progress.iterations_done // 0'; }
running_with_progress() {
  local s
  s=$(zpipe -o json status netns-long) || return 1
  [[ $(jq -r .state <<<"$s") == running ]] && (($(jq -r '.progress.iterations_done // 0' <<<"$s") >= 3))
}
wait_for 30 "the long job to run 3 iterations" running_with_progress
before=$(iterations_done)
sleep 1
after=$(iterations_done)
((after > before)) || die "long job not progressing ($before -> $after iterations in 1s)"

status=$(zpipe -o json status netns-long)
victim=$(jq -r '.ranks[] | select(.pipeline_rank == 1) | .worker_name' <<<"$status")
[[ $victim =~ ^w[0-2]$ ]] || die "no worker holds pipeline rank 1: $(jq -c .ranks <<<"$status")"
vi=${victim#w}
survivors=()
for i in 0 1 2; do ((i == vi)) || survivors+=("w$i"); done
log "long job running ($before -> $after iterations in 1s); taking ${victim}'s link" \
  "(${WORKER_IP[$vi]}, pipeline rank 1) down"

ip -n "$HUB" link set "v$vi" down
t_down=$SECONDS
is_terminal() {
  status=$(zpipe -o json status netns-long) || return 1
  [[ $(jq -r .state <<<"$status") =~ ^(succeeded|failed|cancelled)$ ]]
}
wait_for "$FAIL_BOUND_S" "the job to end after the link went down" is_terminal
t_failed=$((SECONDS - t_down))
state=$(jq -r .state <<<"$status")
reason=$(jq -r .reason <<<"$status")
log "job $state ${t_failed}s after the link went down; reason: $reason"
[[ $state == failed ]] || die "job ended $state, want failed"
[[ $reason == *"$victim"* || $reason == *"rank 1"* || $reason == *"${WORKER_IP[$vi]}"* ]] ||
  die "failure reason names neither $victim, rank 1 nor ${WORKER_IP[$vi]}: $reason"

t=$SECONDS
wait_for "$IDLE_BOUND_S" "survivors ${survivors[*]} to return to IDLE" idle_count_is 2 "${survivors[@]}"
log "survivors ${survivors[*]} IDLE $((SECONDS - t))s after the failure;" \
  "workers: $(workers_json | jq -c '[.workers[] | {name, state}]')"
cut_off=$(zpipe -o json workers --all | jq -r --arg n "$victim" '.workers[] | select(.name == $n) | .state + ": " + .reason')
log "$victim as the coordinator sees it: $cut_off"
[[ $cut_off == dead* ]] || die "$victim should be DEAD while its link is down: $cut_off"

# ---------------------------------------------------------------------------------------------
# 3. Link back up: the cut-off worker re-registers and the whole cluster runs the next job.

ip -n "$HUB" link set "v$vi" up
t=$SECONDS
wait_for "$REJOIN_BOUND_S" "$victim to re-register as IDLE after its link came back" idle_count_is 3 w0 w1 w2
log "$victim back IDLE $((SECONDS - t))s after its link came back"
sed -e 's/iterations: 30/iterations: 3/' -e 's/name: netns-gpt/name: netns-after/' "$WORK/gpt.yaml" >"$WORK/after.yaml"
t=$SECONDS
zpipe submit "$WORK/after.yaml" --id netns-after --wait >/dev/null ||
  die "job after the link came back: $(zpipe -o json status netns-after | jq -r '.state + ": " + .reason')"
log "next p=3 GPT job SUCCEEDED in $((SECONDS - t))s"
log "PASS in $((SECONDS - T0))s"
