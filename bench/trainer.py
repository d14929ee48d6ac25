"""GRPO step time vs a bare forward + backward + AdamW step on the same tokens.

Both sides get the same model, the same padded batch (``--groups`` groups of ``--group-size``
sequences of ``--prompt`` + ``--completion`` tokens), the same micro-batching, grad clipping
and optimiser; the baseline's loss is plain masked cross-entropy. The ratio is what GRPO's
extras cost (float32 log-softmax gather, ratio and clipping, per-step statistics); target < 1.15.

    python bench/trainer.py [--model models/tiny] [--repeats 5]

Last line: one JSON object with both median step times and their ratio.
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import sys
import time
from pathlib import Path

import torch
from rich.console import Console
from rich.progress import track

sys.path.insert(0, str(Path(__file__).resolve().parent))
from _harness import REPO  # noqa: E402

from rlstack.trainer.batch import TrainBatch, to_tensors  # noqa: E402
from rlstack.trainer.loss import GRPOLossConfig  # noqa: E402
from rlstack.trainer.step import grpo_step, policy_logprobs  # noqa: E402

console = Console(stderr=True)


def make_batch(vocab: int, groups: int, group_size: int, prompt: int, completion: int) -> TrainBatch:
    rng = random.Random(0)
    scored = []
    for _ in range(groups):
        head = [rng.randrange(vocab) for _ in range(prompt)]
        tokens = [head + [rng.randrange(vocab) for _ in range(rng.randint(completion // 2, completion))] for _ in range(group_size)]
        scored.append({"tokens": tokens, "masks": [[-100] * prompt + t[prompt:] for t in tokens],
                       "scores": [float(rng.random() > 0.5) for _ in tokens],
                       "inference_logprobs": [[0.0] * prompt + [-rng.random() for _ in t[prompt:]] for t in tokens]})
    return to_tensors(scored)


def bare_step(model, optimizer, batch: TrainBatch, micro_batch_size: int) -> None:  # noqa: ANN001
    """The floor: forward (projecting the same trained positions), masked NLL, backward, clip, AdamW."""
    model.train()
    optimizer.zero_grad(set_to_none=True)
    total = max(1, batch.trained_tokens)
    for lo in range(0, batch.input_ids.shape[0], micro_batch_size):
        part = slice(lo, lo + micro_batch_size)
        mask = batch.loss_mask[part]
        logprobs = policy_logprobs(model, batch.input_ids[part], batch.attention_mask[part], batch.targets[part], mask)
        (-(logprobs * mask).sum() / total).backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
    optimizer.step()


def timed(fn, repeats: int, label: str) -> list[float]:  # noqa: ANN001
    fn()  # warm-up: allocator, kernels
    times = []
    for _ in track(range(repeats), description=label, console=console):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=REPO / "models" / "tiny")
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--completion", type=int, default=128)
    parser.add_argument("--micro-batch-size", type=int, default=16)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    from transformers import AutoModelForCausalLM

    if not (args.model / "model.safetensors").exists():
        from rlstack.modelkit.tiny import build_tiny_model

        build_tiny_model(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)
    batch = make_batch(model.config.vocab_size, args.groups, args.group_size, args.prompt, args.completion)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-6)
    config = GRPOLossConfig()
    baseline = timed(lambda: bare_step(model, optimizer, batch, args.micro_batch_size), args.repeats, "bare fwd+bwd")
    grpo = timed(lambda: grpo_step(model, optimizer, batch, config, args.micro_batch_size), args.repeats, "GRPO step")
    base_s, grpo_s = statistics.median(baseline), statistics.median(grpo)
    params = sum(p.numel() for p in model.parameters())
    console.print(f"{params / 1e6:.1f}M params, {batch.input_ids.shape[0]} seqs x {batch.input_ids.shape[1]} tokens, "
                  f"{batch.trained_tokens} trained tokens: bare {base_s:.3f}s, GRPO {grpo_s:.3f}s, overhead {grpo_s / base_s - 1:+.1%}")
    print(json.dumps({"params": params, "trained_tokens": batch.trained_tokens, "bare_step_s": base_s, "grpo_step_s": grpo_s,
                      "ratio": grpo_s / base_s}))


if __name__ == "__main__":
    main()
