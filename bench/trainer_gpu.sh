#!/usr/bin/env bash
# The trainer's GPU figures (docs/trainer.md#gpu): the -m gpu suite, then bench/trainer.py under
# torchrun on the shapes of issue 29, one after another, each bounded in time. Every figure goes
# to $RESULTS (one JSON line per shape) and the log; kernel tables to $PROFILE.
#   OUT=/some/dir bash bench/trainer_gpu.sh [case ...]
# cases: tests 1.5b 1.5b-profile 1.5b-process 1.5b-sdpa 0.5b-32k 7b-lora-32k shared shared-agent shared-fsdp shared-wal
# (shared-wal replays WAL=<a batcher.wal> on the 1.5B shape)
set -uo pipefail
cd "$(dirname "$0")/.." || exit
OUT=${OUT:-runs/bench-gpu}
mkdir -p "$OUT"
RESULTS=$OUT/trainer.jsonl
PROFILE=$OUT/profile.txt
export PYTHONUNBUFFERED=1
cases=("$@")
[ ${#cases[@]} -gt 0 ] || cases=(1.5b tests 0.5b-32k 7b-lora-32k)
bench() { timeout "$1" torchrun --nproc-per-node 1 -m bench.trainer --device cuda --json-out "$RESULTS" "${@:2}"; echo "exit $?"; }
# A one-GPU trainer pod runs one plain process (no torchrun): the Engine with bf16 autocast over float32 weights.
process() { timeout "$1" python3 -m bench.trainer --device cuda --json-out "$RESULTS" "${@:2}"; echo "exit $?"; }
for c in "${cases[@]}"; do
  echo "=== $c $(date +%T)"
  case $c in
    tests) timeout 90 python3 -m pytest -m gpu tests/gpu -s -q -p no:cacheprovider --noconftest; echo "exit $?" ;;
    # 128 sequences: 512-token prompts, 256-512 completion tokens (the batch of issue 29)
    1.5b) bench 240 --shape qwen2-1.5b --groups 16 --group-size 8 --prompt 512 --completion 256:512 \
            --micro-batch-size 8 --pack-tokens 16384 --paths plain,padded,packed ;;
    # one profiled packed step (the profiler's tables take a minute or more to build per path)
    1.5b-profile) bench 180 --shape qwen2-1.5b --groups 16 --group-size 8 --prompt 512 --completion 256:512 \
            --micro-batch-size 8 --pack-tokens 16384 --paths packed --repeats 1 --profile "$PROFILE" ;;
    1.5b-process) process 100 --shape qwen2-1.5b --groups 16 --group-size 8 --prompt 512 --completion 256:512 \
            --micro-batch-size 8 --pack-tokens 16384 --paths padded,packed ;;
    1.5b-sdpa) bench 120 --shape qwen2-1.5b --groups 16 --group-size 8 --prompt 512 --completion 256:512 \
            --pack-tokens 16384 --paths packed-sdpa --repeats 2 ;;
    # 8 rows of 20-32k tokens, activation checkpointing
    0.5b-32k) bench 130 --shape qwen2-0.5b --groups 1 --group-size 8 --prompt 512 --completion 19968:32000 \
            --pack-tokens 32768 --activation-checkpointing --paths plain,packed,packed-fa2 --repeats 2 ;;
    # 7B LoRA rank 16 over a bf16 base, 2 rows of 20-32k tokens, activation checkpointing
    7b-lora-32k) bench 140 --shape qwen2-7b --lora-rank 16 --groups 1 --group-size 2 --prompt 512 --completion 19968:32000 \
            --pack-tokens 32768 --activation-checkpointing --paths plain,packed ;;
    # prefix trees on the batch of issue 29 (each group's 512-token prompt held once), one process as a one-GPU pod
    shared) process 150 --shape qwen2-1.5b --groups 16 --group-size 8 --prompt 512 --completion 256:512 \
            --pack-tokens 16384 --paths packed,shared ;;
    # an agent's shape: groups of 8 over a 7,680-token prompt (claude-code's first call), 512-2048 tokens each
    shared-agent) process 150 --shape qwen2-1.5b --groups 2 --group-size 8 --prompt 7680 --completion 512:2048 \
            --pack-tokens 16384 --paths packed,shared --repeats 2 ;;
    # the same under torchrun: FSDP2, bf16 mixed precision over float32 master weights
    shared-fsdp) bench 200 --shape qwen2-1.5b --groups 16 --group-size 8 --prompt 512 --completion 256:512 \
            --pack-tokens 16384 --paths packed,shared ;;
    # a run's own batches (make run-agent's batcher.wal), 256 sequences a step
    shared-wal) process 200 --shape qwen2-1.5b --groups-from "$WAL" --batch-size 256 --pack-tokens 16384 --paths packed,shared ;;
    *) echo "unknown case $c" ;;
  esac
done
