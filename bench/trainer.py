"""The trainer's own step (``Engine``) beside a plain training step on the same tokens: tokens/s, MFU, peak memory.

Every path runs in this one process (one rank per GPU under torchrun), one after the other,
each on a model built afresh with the same seed:

- ``plain``: what a plain trainer gets from the GPU: bf16 weights, fused AdamW, the model's own
  loss over full logits, the batch's tokens laid out as full rows (no padding, no mask);
- ``padded``: ``Engine.step`` on padded micro-batches of ``--micro-batch-size`` rows;
- ``packed``: ``Engine.step`` on rows packed up to ``--pack-tokens`` tokens, each sequence whole;
- ``shared``: the same rows with shared prefixes held once (prefix trees, ``--share-prefix``): tokens/s
  still counts every sequence's tokens, so ``shared_over_packed`` is what the trees save;
- ``packed-sdpa``: the same with ``attention=sdpa`` (transformers' dense block mask: the old path);
- ``packed-fa2``: packed, with every row on torch's varlen (flash-attention-2) kernel, long rows too
  (``attention.LONG_SEQUENCES`` otherwise sends those through cuDNN one sequence at a time);
- ``packed-bf16``: packed under ``mixed_precision=bf16`` (in a plain process: bf16 autocast over the
  float32 weights, what ``make run MODEL=smollm2`` trains with);
- ``bf16-weights``: the other way to compute in bf16, for comparison: the model held in bf16, the same
  packed step, and AdamW on float32 master copies that are cast back after each step.

``Engine`` is what the trainer Deployment runs: under torchrun it shards with FSDP2 and bf16
mixed precision over float32 master weights, as the chart's trainer does; in a plain process it
is the local trainer. Random weights in the named Qwen2 shape, built directly on the device.

    python -m bench.trainer                      # CPU, the demo model's shape (tiny)
    python -m bench.trainer --model models/agent-demo --groups-from runs/agent-<id>/batcher/batcher.wal \
        --threads 1 --micro-batch-size 32 --pack-tokens 4096 --paths padded,packed   # an agent run's own batches
    torchrun --nproc-per-node 1 bench/trainer.py --device cuda --shape qwen2-1.5b \\
        --groups 16 --group-size 8 --prompt 512 --completion 256:512 --micro-batch-size 8 --pack-tokens 16384

MFU counts 6 x parameters x tokens per step against ``--peak-tflops`` (989: H100/H200 bf16
dense); none is assumed on a CPU. Prints a table and, last, one JSON object with every figure.
"""

from __future__ import annotations

import argparse
import gc
import itertools
import json
import os
import random
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import torch
from rich.console import Console
from rich.progress import track
from rich.table import Table

from bench.common.cli import bench_parser
from bench.common.result import emit
from rlstack.trainer import attention
from rlstack.trainer.batch import to_tensors
from rlstack.trainer.config import (
    LoraSettings,
    OptimisationSettings,
    PackingSettings,
    TrainerSettings,
)
from rlstack.trainer.distributed import DistContext, init_distributed, shutdown
from rlstack.trainer.engine import Engine
from rlstack.trainer.packing import shared_tokens
from rlstack.trainer.shapes import qwen2_config

console = Console(stderr=True)
GIB = 1024**3
PATHS = ("plain", "padded", "packed", "shared", "packed-sdpa", "packed-fa2", "packed-bf16", "bf16-weights")


def make_groups(vocab: int, groups: int, group_size: int, prompt: int, completion: tuple[int, int], seed: int = 0) -> list[dict]:
    """Atropos groups (what ``Engine.step`` takes): a shared prompt, completions of uneven length."""
    rng = random.Random(seed)
    out = []
    for _ in range(groups):
        head = [rng.randrange(vocab) for _ in range(prompt)]
        tokens = [head + [rng.randrange(vocab) for _ in range(rng.randint(*completion))] for _ in range(group_size)]
        out.append({"tokens": tokens, "masks": [[-100] * prompt + t[prompt:] for t in tokens],
                    "scores": [float(rng.random() > 0.5) for _ in tokens], "weight_version": 0,
                    "inference_logprobs": [[0.0] * prompt + [-rng.random() for _ in t[prompt:]] for t in tokens]})
    return out


def groups_from_wal(path: Path) -> list[dict]:
    """Every group a batcher accepted, in order, read from a copy of its write-ahead log."""
    import shutil

    from rlstack.batcher.records import RecordKind, decode_groups, decode_keyed_groups
    from rlstack.batcher.wal import WriteAheadLog

    out: list[dict] = []
    with tempfile.TemporaryDirectory() as tmp:
        copy = Path(tmp) / "batcher.wal"
        shutil.copyfile(path, copy)  # opening a log may cut a torn tail: never the run's own
        for kind, payload in WriteAheadLog(copy, durability="flush").open():
            if kind == RecordKind.GROUPS:
                raw = decode_groups(payload)[1]
            elif kind == RecordKind.KEYED_GROUPS:
                raw = decode_keyed_groups(payload)[3]
            else:
                continue
            data = json.loads(raw)
            out.extend(data if isinstance(data, list) else [data])
    return out


def batches_of(groups: list[dict], sequences: int) -> list[list[dict]]:
    """Consecutive groups cut into batches of at least ``sequences`` sequences (the batcher's at_least fill)."""
    out, current = [], []
    for g in groups:
        current.append(g)
        if sum(len(x["tokens"]) for x in current) >= sequences:
            out.append(current)
            current = []
    return out


def build_model(args: argparse.Namespace, device: torch.device, dtype: torch.dtype, attn: str = "sdpa"):  # noqa: ANN201 - a transformers model
    """A random Qwen2 of ``--shape`` built on ``device``, or ``--model``'s weights (the same weights for every path)."""
    from transformers import AutoModelForCausalLM

    torch.manual_seed(0)
    if args.model is not None:
        return AutoModelForCausalLM.from_pretrained(args.model, dtype=dtype, attn_implementation=attn).to(device)
    with torch.device(device):
        return AutoModelForCausalLM.from_config(qwen2_config(args.shape), dtype=dtype, attn_implementation=attn)


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def release(device: torch.device) -> None:
    gc.collect()
    if device.type == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()


def timed(step: Callable[[], None], repeats: int, label: str, device: torch.device) -> tuple[list[float], float | None]:
    """Step times after one warm-up, and the peak device memory (GiB) over them; ([], None) on out-of-memory."""
    try:
        step()
        sync(device)
        times = []
        for _ in track(range(repeats), description=f"{label:12s}", console=console, transient=True):
            start = time.perf_counter()
            step()
            sync(device)
            times.append(time.perf_counter() - start)
    except torch.OutOfMemoryError:
        console.print(f"{label}: out of memory")
        return [], None
    return times, (torch.cuda.max_memory_allocated() / GIB if device.type == "cuda" else None)


def profile(step: Callable[[], None], label: str, out: Path, device: torch.device) -> dict:
    """One step under the torch profiler: the kernels' table into ``out``, and how busy the GPU was."""
    from torch.profiler import ProfilerActivity
    from torch.profiler import profile as torch_profile

    activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if device.type == "cuda" else [])
    with torch_profile(activities=activities) as prof:
        start = time.perf_counter()
        step()
        sync(device)
        wall = time.perf_counter() - start
    events = prof.key_averages()
    sort = "self_device_time_total" if device.type == "cuda" else "self_cpu_time_total"
    busy = sum(e.self_device_time_total for e in events) / 1e6 if device.type == "cuda" else None
    with out.open("a") as f:
        f.write(f"\n=== {label}: wall {wall:.3f} s, device busy {busy if busy is None else round(busy, 3)} s ===\n")
        f.write(events.table(sort_by=sort, row_limit=25, max_name_column_width=70))
    return {"profiled_wall_s": wall, "device_busy_s": busy}


def plain_step(args: argparse.Namespace, batches: list[list[dict]], ctx: DistContext) -> Callable[[], None]:
    """bf16 weights, fused AdamW, the model's own loss; this rank's share of the tokens as full rows
    (of the first batch: a replay of several batches times the Engine's paths only)."""
    groups = batches[0]
    device = ctx.device
    model = build_model(args, device, torch.bfloat16 if device.type == "cuda" else torch.float32)
    if args.activation_checkpointing:
        model.gradient_checkpointing_enable(gradient_checkpointing_kwargs={"use_reentrant": False})
    if args.lora_rank:
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=args.lora_rank, lora_alpha=2 * args.lora_rank, lora_dropout=0.0, task_type="CAUSAL_LM",
                                                 target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"]))
    trainable = [p for p in model.parameters() if p.requires_grad]
    optimizer = torch.optim.AdamW(trainable, lr=1e-6, fused=device.type == "cuda")
    sequences = [t for g in groups for t in g["tokens"]][ctx.rank::ctx.world_size]
    width = sum(map(len, sequences)) // len(sequences)
    flat = torch.tensor([tok for t in sequences for tok in t][: width * len(sequences)]).view(len(sequences), width)
    rows_per_micro = args.micro_batch_size if args.pack_tokens is None else max(1, args.pack_tokens // width)
    parts = [flat[lo:lo + rows_per_micro].to(device) for lo in range(0, len(sequences), rows_per_micro)]

    def step() -> None:
        model.train()
        optimizer.zero_grad(set_to_none=True)
        for ids in parts:
            with torch.autocast(device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
                loss = model(input_ids=ids, labels=ids, use_cache=False).loss
            (loss * ids.shape[0] / len(sequences)).backward()
        torch.nn.utils.clip_grad_norm_(trainable, 1.0)
        optimizer.step()

    return step


class MasterAdamW:
    """AdamW on float32 master copies of bf16 parameters: gradients are copied up before the update
    and the weights cast back down after it (what ``bf16-weights`` times beside autocast)."""

    def __init__(self, parameters: list[torch.nn.Parameter], lr: float) -> None:
        self.parameters = parameters
        self.masters = [p.detach().float().clone().requires_grad_() for p in parameters]
        self.inner = torch.optim.AdamW(self.masters, lr=lr)

    def zero_grad(self, set_to_none: bool = True) -> None:
        for p in self.parameters:
            p.grad = None

    def step(self) -> None:
        for master, p in zip(self.masters, self.parameters, strict=True):
            master.grad = None if p.grad is None else p.grad.float()
        self.inner.step()
        with torch.no_grad():
            for master, p in zip(self.masters, self.parameters, strict=True):
                p.copy_(master)


def engine_path(args: argparse.Namespace, path: str, ctx: DistContext, run_dir: Path) -> Engine:
    """The trainer's ``Engine`` with this path's settings, loaded on every rank."""
    packing = PackingSettings(micro_batch_size=args.micro_batch_size, row_tokens=None if path == "padded" else args.pack_tokens,
                              share_prefix=args.share_prefix if path == "shared" else None,
                              attention="sdpa" if path == "packed-sdpa" else args.attention)
    optimisation = OptimisationSettings(lr=1e-6, activation_checkpointing=args.activation_checkpointing,
                                        mixed_precision="bf16" if path == "packed-bf16" else "auto")
    settings = TrainerSettings(model=str(args.model or "random"), sync={"mode": "none"}, run_dir=run_dir, device=ctx.device.type,
                               packing=packing, optimisation=optimisation, mismatch_versions=0,
                               lora=LoraSettings(rank=args.lora_rank, alpha=2 * (args.lora_rank or 16)))
    engine = Engine(settings, ctx)
    dtype = torch.float32 if args.lora_rank is None or ctx.device.type != "cuda" else torch.bfloat16
    if path == "bf16-weights":
        dtype = torch.bfloat16
    engine.load(None, base=build_model(args, ctx.device, dtype) if path == "bf16-weights" or not args.model else None)
    if path == "bf16-weights":
        engine.optimizer = MasterAdamW([p for p in engine.policy.parameters() if p.requires_grad], lr=settings.optimisation.lr)
    return engine


def run_path(args: argparse.Namespace, path: str, batches: list[list[dict]], ctx: DistContext, run_dir: Path) -> dict:
    device = ctx.device
    release(device)
    turn = itertools.count()
    if path == "plain":
        step = plain_step(args, batches, ctx)
        engine = None
    else:
        engine = engine_path(args, path, ctx, run_dir)
        if not ctx.is_main:  # followers run what rank 0 sends, then leave
            engine.serve()
            return {}

        long_from = 1 << 30 if path == "packed-fa2" else attention.LONG_SEQUENCES

        def step() -> None:
            saved, attention.LONG_SEQUENCES = attention.LONG_SEQUENCES, long_from
            try:
                engine.call("step", batches[next(turn) % len(batches)], 0)
            finally:
                attention.LONG_SEQUENCES = saved

    times, peak = timed(step, args.repeats, path, device)
    result = {"step_s": statistics.median(times) if times else None, "peak_gib": peak, "steps": len(times)}
    if args.profile and times and path != "packed-sdpa":
        try:
            result.update(profile(step, path, args.profile, device))
        except Exception as exc:  # noqa: BLE001 - a profiler failure must not lose the timings
            console.print(f"{path}: profiler failed: {exc!r}")
    if engine is not None:
        engine.call("stop")
    return result


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--shape", choices=["tiny", "qwen2-0.5b", "qwen2-1.5b", "qwen2-7b"], default="tiny",
                        help="random Qwen2 of this shape (tiny: the demo model's)")
    parser.add_argument("--model", type=Path, default=None, help="a model directory instead of a random --shape")
    parser.add_argument("--groups-from", type=Path, default=None,
                        help="a batcher's write-ahead log: replay its groups (one batch of --batch-size sequences a step)")
    parser.add_argument("--batch-size", type=int, default=32, help="sequences a step, with --groups-from")
    parser.add_argument("--device", choices=["cpu", "cuda"], default="cpu")
    parser.add_argument("--paths", default="plain,padded,packed", help=f"comma-separated, of {', '.join(PATHS)}")
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--completion", default="32:192", help="completion tokens, min:max (uniform)")
    parser.add_argument("--micro-batch-size", type=int, default=8, help="padded rows per micro-batch")
    parser.add_argument("--pack-tokens", type=int, default=4096, help="tokens per packed row")
    parser.add_argument("--share-prefix", type=int, default=PackingSettings.model_fields["share_prefix"].default,
                        help="the shared path's least prefix to share (tokens)")
    parser.add_argument("--attention", choices=["varlen", "sdpa"], default="varlen", help="the Engine's kernel on packed/padded")
    parser.add_argument("--activation-checkpointing", action="store_true")
    parser.add_argument("--lora-rank", type=int, default=None, help="train a LoRA adapter over a bf16 base (on CUDA)")
    parser.add_argument("--peak-tflops", type=float, default=None, help="device peak for MFU (default 989 on CUDA)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads")
    parser.add_argument("--profile", type=Path, default=None, help="append one profiled step per path to this file")
    args = parser.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    low, _, high = args.completion.partition(":")
    completion = (int(low), int(high or low))
    paths = [p for p in args.paths.split(",") if p]
    unknown = set(paths) - set(PATHS)
    if unknown:
        parser.error(f"--paths: unknown {sorted(unknown)}; choose from {PATHS}")
    if "bf16-weights" in paths and (args.lora_rank or "WORLD_SIZE" in os.environ):
        parser.error("--paths: bf16-weights is a plain process's full fine-tuning (no LoRA, no torchrun)")
    if args.groups_from and "plain" in paths:
        parser.error("--paths: plain times one synthetic batch; with --groups-from time the Engine's paths (padded, packed)")
    ctx = init_distributed(args.device)
    device = ctx.device
    peak_tflops = args.peak_tflops or (989.0 if device.type == "cuda" else None)
    from transformers import AutoConfig, AutoModelForCausalLM

    config = AutoConfig.from_pretrained(args.model) if args.model else qwen2_config(args.shape)
    if args.groups_from:
        batches = batches_of(groups_from_wal(args.groups_from), args.batch_size)
        if not batches:
            parser.error(f"--groups-from: no batch of {args.batch_size} sequences in {args.groups_from}")
        args.repeats = min(args.repeats, len(batches) - 1) or 1
        console.print(f"replaying {len(batches)} batches from {args.groups_from}; timing {args.repeats} after a warm-up")
    else:
        batches = [make_groups(config.vocab_size, args.groups, args.group_size, args.prompt, completion)]
    timed_batches = [batches[i % len(batches)] for i in range(1, args.repeats + 1)] if len(batches) > 1 else batches
    tokens = statistics.mean(sum(len(t) - 1 for g in b for t in g["tokens"]) for b in timed_batches)  # inputs a step
    kept, unshared = map(sum, zip(*(shared_tokens(to_tensors(b), args.pack_tokens, args.share_prefix) for b in timed_batches)))
    with torch.device("meta"):
        params = sum(p.numel() for p in AutoModelForCausalLM.from_config(config).parameters())
    results = {}
    with tempfile.TemporaryDirectory() as tmp:
        for path in paths:
            results[path] = run_path(args, path, batches, ctx, Path(tmp) / path)
    if not ctx.is_main:
        shutdown(ctx)
        return
    world = ctx.world_size
    for r in results.values():
        s = r.get("step_s")
        r["tokens_per_s"] = tokens / s if s else None
        r["mfu"] = 6 * params * tokens / s / (peak_tflops * 1e12 * world) if s and peak_tflops else None
    plain = results.get("plain", {})

    def ratio(a: str, b: str, key: str) -> float | None:
        x, y = results.get(a, {}).get(key), results.get(b, {}).get(key)
        return x / y if x and y else None

    ratios = {"packed/padded": ratio("packed", "padded", "tokens_per_s"), "packed/plain": ratio("packed", "plain", "tokens_per_s"),
              "padded/plain": ratio("padded", "plain", "tokens_per_s"), "packed/packed-sdpa": ratio("packed", "packed-sdpa", "tokens_per_s"),
              "packed/packed-fa2": ratio("packed", "packed-fa2", "tokens_per_s"), "shared/packed": ratio("shared", "packed", "tokens_per_s"),
              "packed-bf16/packed": ratio("packed-bf16", "packed", "tokens_per_s"),
              "bf16-weights/packed-bf16": ratio("bf16-weights", "packed-bf16", "tokens_per_s"),
              "shared_memory/packed": ratio("shared", "packed", "peak_gib"),
              "packed_memory/plain": ratio("packed", "plain", "peak_gib"), "padded_memory/plain": ratio("padded", "plain", "peak_gib")}
    gpu = torch.cuda.get_device_name(device) if device.type == "cuda" else os.uname().machine
    table = Table(title=f"{args.model or args.shape}, {params / 1e9:.2f}B params, {tokens:.0f} tokens/step, {world} x {gpu}")
    for col in ("path", "s/step", "tokens/s", "MFU", "peak GiB", "tokens/s vs plain"):
        table.add_column(col, justify="right")
    for name, r in results.items():
        vs = ratio(name, "plain", "tokens_per_s")
        table.add_row(name, f"{r['step_s']:.3f}" if r.get("step_s") else "OOM", f"{r['tokens_per_s']:,.0f}" if r.get("tokens_per_s") else "-",
                      f"{r['mfu']:.1%}" if r.get("mfu") else "-", f"{r['peak_gib']:.1f}" if r.get("peak_gib") else "-",
                      f"{vs:.2f}x" if vs else "-")
    console.print(table)
    console.print("  ".join(f"{k} {v:.2f}x" for k, v in ratios.items() if v))
    console.print(f"prefix trees (--share-prefix {args.share_prefix}) remove {1 - kept / unshared:.1%} of the {unshared / len(timed_batches):,.0f} tokens a step")
    figures = {"shape": str(args.model) if args.model else args.shape, "groups_from": str(args.groups_from or ""), "device": gpu, "world_size": world, "launched": ctx.launched, "params": params,
                   "tokens": tokens, "groups": args.groups, "group_size": args.group_size, "prompt": args.prompt,
                   "completion": list(completion), "micro_batch_size": args.micro_batch_size, "pack_tokens": args.pack_tokens,
                   "activation_checkpointing": args.activation_checkpointing, "lora_rank": args.lora_rank,
                   "torch": torch.__version__, "varlen_kernel": attention._varlen_kernel() is not None, "paths": results, "ratios": ratios, "plain_tokens_per_s": plain.get("tokens_per_s"),
                   "share_prefix": args.share_prefix, "shared_over_packed": ratios["shared/packed"],
               "tokens_removed_share": 1 - kept / unshared}
    emit("trainer", args, figures, {k.replace("/", "_over_"): v for k, v in ratios.items() if v})
    shutdown(ctx)


if __name__ == "__main__":
    main()
