#!/usr/bin/env bash
# make e2e: a kind cluster (GPU nodes, or CPU=1 without), the three images built and loaded,
# the chart installed (its model Job provides the model), the trainer Job run to completion,
# `helm test` (rlstack doctor), a sandbox pod reaching the policy through the proxy, an agent
# trial, logs collected on failure, the cluster deleted. Needs docker, kind, kubectl and helm on
# PATH; for GPUs, the host's NVIDIA driver and container toolkit set up as k8s/kind-gpu.yaml
# describes. DRY_RUN=1 prints every command in order instead of running it (tests check that
# order); GPUS=<n> overrides the host's GPU count; KEEP=1 keeps the cluster.
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
cpu="${CPU:-0}"
keep="${KEEP:-0}"
dry="${DRY_RUN:-0}"
namespace="${NAMESPACE:-rlstack}"
release="${RELEASE:-rl}"
full="${release}-rlstack"   # the chart's object prefix for a release name without "rlstack"
cluster="rlstack"
models=/tmp/rlstack-models   # mounted at /models in the kind nodes (k8s/kind-gpu.yaml)
logs="${repo}/runs/e2e-logs"
chart="$repo/charts/rlstack"

# run CMD...: run it, or print it under DRY_RUN=1.
run() {
  if [[ "$dry" == "1" ]]; then printf '+ %s\n' "$*"; else "$@"; fi
}
# capture PLACEHOLDER CMD...: the command's output, or (DRY_RUN=1) print it and answer PLACEHOLDER.
capture() {
  local placeholder="$1"
  shift
  if [[ "$dry" == "1" ]]; then printf '+ %s\n' "$*" >&2; printf '%s\n' "$placeholder"; else "$@"; fi
}
pause() { [[ "$dry" == "1" ]] || sleep "$1"; }
log() { printf '\n== %s\n' "$*"; }

if [[ "$cpu" == "1" ]]; then
  kind_config="$here/kind-cpu.yaml"
  values="$chart/values-cpu.yaml"
  vllm_image="rlstack/vllm-cpu:dev"
else
  kind_config="$here/kind-gpu.yaml"
  values="$chart/values-kind-gpu.yaml"
  vllm_image="rlstack/vllm:dev"
fi
install_flags=()

collect_logs() {
  log "collecting logs into $logs"
  mkdir -p "$logs"
  kubectl -n "$namespace" get pods,jobs -o wide >"$logs/pods.txt" 2>&1 || true
  kubectl -n "$namespace" get events --sort-by=.lastTimestamp >"$logs/events.txt" 2>&1 || true
  local pod
  for pod in $(kubectl -n "$namespace" get pods -o name 2>/dev/null); do
    kubectl -n "$namespace" logs "$pod" --all-containers >"$logs/${pod#pod/}.log" 2>&1 || true
  done
}

teardown() {
  local code=$?
  if [[ $code -ne 0 && "$dry" != "1" ]]; then collect_logs; fi
  if [[ "$keep" != "1" ]]; then run kind delete cluster --name "$cluster" || true; fi
  exit "$code"
}
trap teardown EXIT

# GPUs the GPU values request: one per replica plus the trainer's.
gpus_needed() {
  local replicas trainer
  replicas="$(sed -n '/^inference:/,/^[a-z]/s/^  replicas: *\([0-9]*\).*/\1/p' "$values")"
  trainer="$(sed -n '/^trainer:/,/^[a-z]/s/^  gpus: *\([0-9]*\).*/\1/p' "$values")"
  echo $(( ${replicas:-1} + ${trainer:-1} ))
}

# Wait until the GPU nodes advertise at least $1 GPUs in total (any count per node).
wait_for_gpus() {
  local want="$1" have counts n _
  for _ in $(seq 1 60); do
    counts="$(capture "$want" kubectl get nodes -l nvidia.com/gpu.present=true \
      -o 'jsonpath={range .items[*]}{.status.allocatable.nvidia\.com/gpu}{" "}{end}')"
    have=0
    for n in $counts; do have=$(( have + n )); done
    echo "allocatable GPUs: $have (need $want)"
    (( have >= want )) && return 0
    pause 10
  done
  return 1
}

if [[ "$cpu" != "1" ]]; then   # CPU: values-cpu.yaml's model Job builds the demo model in the cluster
  log "the host's model directory (kind mounts $models at /models)"
  run mkdir -p "$models"
fi

log "cluster ($kind_config)"
run kind create cluster --config "$kind_config" --wait 120s

if [[ "$cpu" != "1" ]]; then
  need="$(gpus_needed)"
  host_gpus="${GPUS:-$(capture 1 sh -c 'nvidia-smi -L | wc -l')}"
  log "GPU operator: $host_gpus GPU(s) on the host, $need requested"
  # kind's node image lacks the ldconfig.real the NVIDIA toolkit calls (NVIDIA's kind notes).
  for node in $(capture "$cluster-worker" kind get nodes --name "$cluster"); do
    run docker exec "$node" ln -sf /sbin/ldconfig /sbin/ldconfig.real
  done
  operator_flags=(--set driver.enabled=false)   # the host's driver; the operator's toolkit configures the node's containerd
  if (( host_gpus < need )); then
    # One GPU for the replica and the trainer: time-slice it, and leave the trainer room in memory.
    run kubectl create namespace gpu-operator
    run kubectl apply -f "$here/gpu-time-slicing.yaml"
    operator_flags+=(--set devicePlugin.config.name=time-slicing --set devicePlugin.config.default=any)
    install_flags+=(--set-string inference.env.RLSTACK_INFERENCE_GPU_MEMORY_UTILIZATION=0.35)
    need=$(( host_gpus * 2 ))
  fi
  run helm repo add nvidia https://helm.ngc.nvidia.com/nvidia --force-update
  run helm upgrade --install gpu-operator nvidia/gpu-operator -n gpu-operator --create-namespace \
    "${operator_flags[@]}" --wait --timeout 15m
  wait_for_gpus "$need"
fi

log "images"
CPU="$cpu" TAG=dev DRY_RUN="$dry" bash "$here/images.sh"
for image in rlstack/trainer:dev rlstack/proxy:dev "$vllm_image"; do
  run kind load docker-image "$image" --name "$cluster"
done
# The agent bundle and the example tasks' images live in podman's store: loaded as archives.
task_images="$(capture localhost/rlstack-task/x:1 python3 -c 'import json, sys; print(" ".join(sorted({e["ref"] for e in json.load(open(sys.argv[1]))["images"].values()})))' "$repo/examples/tasks/images.lock.json")"
for image in rlstack/agent-bundle:dev $task_images; do
  run sh -c "podman save '$image' | kind load image-archive /dev/stdin --name '$cluster'"
done

log "install (the model Job puts the model on the volume; replicas and trainer wait for it)"
run helm upgrade --install "$release" "$chart" -n "$namespace" --create-namespace -f "$values" "${install_flags[@]}" \
  --wait --timeout 30m

log "training run: the trainer Job to completion"
state=""
for _ in $(seq 1 360); do
  state="$(capture Complete kubectl -n "$namespace" get job -l app.kubernetes.io/component=trainer \
    -o 'jsonpath={.items[0].status.conditions[?(@.status=="True")].type}')"
  echo "trainer job: ${state:-running}"
  [[ "$state" == *Complete* || "$state" == *Failed* ]] && break
  pause 10
done
[[ "$state" == *Complete* ]]

log "health chain: helm test runs rlstack doctor with a minted trial key"
run helm test "$release" -n "$namespace" --logs --timeout 10m
# The batcher pod runs the trainer image and mounts the shared volume: a shell for the checks below.
tools_pod="$(capture "$full-batcher-0" kubectl -n "$namespace" get pod -l app.kubernetes.io/component=batcher \
  -o 'jsonpath={.items[0].metadata.name}')"
run kubectl -n "$namespace" exec "$tools_pod" -- cat "/data/runs/${release}/summary.json"

log "an agent sandbox reaches the policy through the proxy (its NetworkPolicy allows nothing else)"
served="$(capture policy sh -c "helm get values '$release' -n '$namespace' --all -o json | python3 -c 'import json, sys; print(json.load(sys.stdin)[\"model\"][\"servedName\"])'")"
secret_b64="$(capture c2VjcmV0 kubectl -n "$namespace" get secret "${full}-auth" -o 'jsonpath={.data.trial-key-secret}')"
trial_secret="$(printf '%s' "$secret_b64" | base64 -d)"
ping_agent='import os, httpx
r = httpx.post(os.environ["OPENAI_BASE_URL"] + "/chat/completions", timeout=300,
               headers={"Authorization": "Bearer " + os.environ["OPENAI_API_KEY"]},
               json={"model": os.environ["SERVED"], "messages": [{"role": "user", "content": "1+1="}], "max_tokens": 4})
r.raise_for_status()
print("sandbox got:", r.json()["choices"][0]["message"]["content"])'
run "$repo/.venv/bin/rlstack" sandbox e2e ping --namespace "$namespace" --image rlstack/trainer:dev \
  --proxy-url "http://${full}-proxy:4000" --secret "$trial_secret" --timeout 600 -- \
  env "SERVED=$served" python3 -c "$ping_agent"

log "an agent trial: the built-in agent in its own sandbox pod, through the proxy, then the verifier"
run helm upgrade "$release" "$chart" -n "$namespace" --reuse-values -f "$chart/values-agent.yaml" --wait --timeout 15m
result=""
for _ in $(seq 1 90); do
  run kubectl -n "$namespace" get pods -l "harbor-run=${release}" -L harbor-trial --no-headers || true
  result="$(capture "/data/trials/${release}/t0/result.json" kubectl -n "$namespace" exec "$tools_pod" -- sh -c \
    "ls /data/trials/${release}/*/result.json 2>/dev/null | head -1")"
  [[ -n "$result" ]] && break
  pause 10
done
[[ -n "$result" ]]
run kubectl -n "$namespace" exec "$tools_pod" -- python3 -c "import json, sys
r = json.load(open(sys.argv[1]))
print(r['trial'], r['status'], r['reward'], r.get('trajectory'))
assert r['status'] in ('ok', 'agent_error', 'agent_timeout'), r" "$result"
log "e2e passed"
