"""GRPO step vs a plain masked cross-entropy step on the same tokens: time, tokens/s, MFU, peak memory.

Both sides get the same model, the same batch (``--groups`` groups of ``--group-size``
sequences of ``--prompt`` + up to ``--completion`` tokens), the same micro-batching, grad
clipping and optimiser. The baseline is what a plain trainer does: the model's own loss over
full float32 logits of every position. The GRPO step projects only trained tokens, in chunks,
and can pack rows (``--pack-tokens``), so its peak memory should be well below the baseline's.

    python bench/trainer.py [--model models/tiny | --shape qwen2-1.5b] [--device cuda] [--repeats 5]

``--shape`` builds a randomly initialised Qwen2 of that size from its config (no download).
MFU counts 6 x parameters x tokens per step against ``--peak-tflops`` (H100 bf16 dense: 989; on
a CPU no peak is assumed and MFU is left out). Last line: one JSON object with every figure.
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
from rlstack.trainer.step import as_policy, grpo_step  # noqa: E402

console = Console(stderr=True)
GIB = 1024**3


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


def plain_ce_step(model, optimizer, batch: TrainBatch, micro_batch_size: int, device: torch.device) -> None:  # noqa: ANN001
    """The baseline: full logits, masked cross-entropy (the model's own loss), backward, clip, AdamW."""
    model.train()
    optimizer.zero_grad(set_to_none=True)
    autocast = device.type == "cuda"
    for lo in range(0, batch.input_ids.shape[0], micro_batch_size):
        part = slice(lo, lo + micro_batch_size)
        labels = torch.where(batch.loss_mask[part], batch.targets[part], -100).to(device)
        with torch.autocast(device.type, dtype=torch.bfloat16, enabled=autocast):
            logits = model(input_ids=batch.input_ids[part].to(device), attention_mask=batch.attention_mask[part].to(device),
                           use_cache=False).logits
        loss = torch.nn.functional.cross_entropy(logits.float().flatten(0, 1), labels.flatten(), ignore_index=-100)
        (loss * int(batch.loss_mask[part].sum()) / max(1, batch.trained_tokens)).backward()
    torch.nn.utils.clip_grad_norm_([p for p in model.parameters() if p.requires_grad], 1.0)
    optimizer.step()


def timed(fn, repeats: int, label: str, device: torch.device) -> tuple[list[float], float | None]:  # noqa: ANN001
    """Step times, and the peak GPU memory (GiB) over them; a step that runs out of memory gives ([], None)."""
    def sync() -> None:
        if device.type == "cuda":
            torch.cuda.synchronize()
    try:
        fn()  # warm-up: allocator, kernels
        sync()
        if device.type == "cuda":
            torch.cuda.reset_peak_memory_stats()
        times = []
        for _ in track(range(repeats), description=label, console=console):
            start = time.perf_counter()
            fn()
            sync()
            times.append(time.perf_counter() - start)
    except torch.OutOfMemoryError:
        console.print(f"{label}: out of memory")
        torch.cuda.empty_cache()
        return [], None
    peak = torch.cuda.max_memory_allocated() / GIB if device.type == "cuda" else None
    return times, peak


def build_model(args: argparse.Namespace, device: torch.device):  # noqa: ANN201 - a transformers model
    from transformers import AutoModelForCausalLM

    dtype = torch.bfloat16 if args.lora_rank and device.type == "cuda" else torch.float32
    if args.shape:
        from rlstack.trainer.shapes import qwen2_config

        torch.manual_seed(0)
        attn = "sdpa"
        model = AutoModelForCausalLM.from_config(qwen2_config(args.shape), dtype=dtype, attn_implementation=attn)
    else:
        if not (args.model / "model.safetensors").exists():
            from rlstack.modelkit.tiny import build_tiny_model

            build_tiny_model(args.model)
        model = AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype)
    if args.activation_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if args.lora_rank:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=args.lora_rank, lora_alpha=2 * args.lora_rank, lora_dropout=0.0, task_type="CAUSAL_LM",
                                                 target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]))
    return model.to(device)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", type=Path, default=REPO / "models" / "tiny")
    parser.add_argument("--shape", choices=["tiny", "qwen2-0.5b", "qwen2-1.5b", "qwen2-7b"], default=None,
                        help="random Qwen2 of this shape instead of --model")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=128)
    parser.add_argument("--completion", type=int, default=128)
    parser.add_argument("--micro-batch-size", type=int, default=16)
    parser.add_argument("--pack-tokens", type=int, default=None, help="GRPO side: pack rows of this many tokens")
    parser.add_argument("--activation-checkpointing", action="store_true")
    parser.add_argument("--lora-rank", type=int, default=None, help="train a LoRA adapter (bf16 base on CUDA)")
    parser.add_argument("--peak-tflops", type=float, default=None, help="device peak for MFU (989 for an H100 in bf16)")
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    device = torch.device(args.device)
    if device.type == "cuda" and args.peak_tflops is None:
        args.peak_tflops = 989.0
    model = build_model(args, device)
    batch = make_batch(model.config.vocab_size, args.groups, args.group_size, args.prompt, args.completion)
    optimizer = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=1e-6)
    config = GRPOLossConfig()
    policy = as_policy(model)
    baseline, base_peak = timed(lambda: plain_ce_step(model, optimizer, batch, args.micro_batch_size, device), args.repeats,
                                "plain CE step", device)
    grpo, grpo_peak = timed(lambda: grpo_step(policy, optimizer, batch, config, args.micro_batch_size, pack_tokens=args.pack_tokens),
                            args.repeats, "GRPO step", device)
    params = sum(p.numel() for p in model.parameters())
    tokens = int(batch.attention_mask.sum())
    base_s = statistics.median(baseline) if baseline else None
    grpo_s = statistics.median(grpo) if grpo else None
    tps = tokens / grpo_s if grpo_s else None
    mfu = 6 * params * tokens / grpo_s / (args.peak_tflops * 1e12) if grpo_s and args.peak_tflops else None
    result = {"device": str(device), "shape": args.shape or str(args.model.name), "params": params, "tokens": tokens,
              "trained_tokens": batch.trained_tokens, "pack_tokens": args.pack_tokens, "lora_rank": args.lora_rank,
              "activation_checkpointing": args.activation_checkpointing, "plain_ce_step_s": base_s, "grpo_step_s": grpo_s,
              "ratio": grpo_s / base_s if grpo_s and base_s else None, "tokens_per_s": tps, "mfu": mfu,
              "plain_ce_peak_gib": base_peak, "grpo_peak_gib": grpo_peak,
              "peak_memory_ratio": grpo_peak / base_peak if grpo_peak and base_peak else None}
    console.print(f"{params / 1e6:.1f}M params on {device}, {batch.input_ids.shape[0]} seqs, {tokens} tokens "
                  f"({batch.trained_tokens} trained): plain CE {base_s}, GRPO {grpo_s} s/step, {tps and round(tps)} tok/s")
    print(json.dumps(result))


if __name__ == "__main__":
    main()
