"""What the every-step mismatch check costs beside the GRPO step itself.

    python -m bench.mismatch [--model models/tiny] [--repeats 8] [--sample 8] [--stale-share 0.75]

One trainer ``Engine`` (the code the service runs), one batch whose rows were sampled by the
current version and by the two before it (``--stale-share`` of them older), steps taken
alternately without the older-row check (baseline: only current-version rows are compared, as
before) and with it (``--sample`` older rows scored under their own kept version). Prints the
median step times, their ratio, the share of trained tokens each covers, and the host memory a
kept version takes; the last line is one JSON object.
"""

from __future__ import annotations

import random
import statistics
import time
from pathlib import Path

import torch

from bench.common.cli import bench_parser
from bench.common.harness import REPO
from bench.common.result import emit
from rlstack.trainer.config import TrainerSettings
from rlstack.trainer.distributed import DistContext
from rlstack.trainer.engine import Engine

CURRENT = 3


def groups(vocab: int, count: int, size: int, prompt: int, completion: int, stale_share: float) -> list[dict]:
    rng = random.Random(0)
    out = []
    for g in range(count):
        head = [rng.randrange(vocab) for _ in range(prompt)]
        tokens = [head + [rng.randrange(vocab) for _ in range(rng.randint(completion // 2, completion))] for _ in range(size)]
        version = CURRENT if g >= round(count * stale_share) else CURRENT - 1 - g % 2
        out.append({"tokens": tokens, "masks": [[-100] * prompt + t[prompt:] for t in tokens],
                    "scores": [float(rng.random() > 0.5) for _ in tokens], "weight_version": version,
                    "inference_logprobs": [[0.0] * prompt + [-rng.random() for _ in t[prompt:]] for t in tokens]})
    return out


def main() -> None:
    parser = bench_parser(__doc__)
    parser.add_argument("--model", type=Path, default=REPO / "models" / "tiny")
    parser.add_argument("--repeats", type=int, default=8)
    parser.add_argument("--groups", type=int, default=8)
    parser.add_argument("--group-size", type=int, default=8)
    parser.add_argument("--prompt", type=int, default=64)
    parser.add_argument("--completion", type=int, default=192)
    parser.add_argument("--sample", type=int, default=8)
    parser.add_argument("--stale-share", type=float, default=0.75)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    if not (args.model / "model.safetensors").exists():
        from rlstack.modelkit.tiny import build_tiny_model

        build_tiny_model(args.model)

    settings = TrainerSettings(model=str(args.model), sync={"mode": "none"}, device="cpu", mismatch_versions=3,
                               optimisation={"lr": 1e-6}, packing={"micro_batch_size": 16}, mismatch_sample=args.sample)
    engine = Engine(settings, DistContext())
    engine.load(None)
    for version in range(CURRENT - 2, CURRENT + 1):
        engine.remember(version)  # timing only: the weights kept need not differ
    batch = groups(engine.model.config.vocab_size, args.groups, args.group_size, args.prompt, args.completion, args.stale_share)
    kinds = {"baseline": settings.model_copy(update={"mismatch_sample": 0}), "checked": settings}
    times: dict[str, list[float]] = {k: [] for k in kinds}
    shares: dict[str, float] = {}
    for repeat in range(args.repeats + 1):  # the first round warms up and is not counted
        for kind, s in kinds.items():
            engine.s = s
            start = time.perf_counter()
            stats = engine.step(batch, CURRENT)
            if repeat:
                times[kind].append(time.perf_counter() - start)
            shares[kind] = stats.mismatch.share if stats.mismatch is not None else 0.0
    trainable = [p for p in engine.policy.parameters() if p.requires_grad]
    figures = {
        "model": args.model.name, "parameters": sum(p.numel() for p in trainable), "rows": args.groups * args.group_size,
        "stale_share": args.stale_share, "sample": args.sample, "repeats": args.repeats,
        "step_s_baseline": statistics.median(times["baseline"]), "step_s_checked": statistics.median(times["checked"]),
        "checked_share_baseline": shares["baseline"], "checked_share_checked": shares["checked"],
        "host_bytes_per_version": sum(p.numel() * p.element_size() for p in trainable),
    }
    emit("mismatch", args, figures, {"checked_over_baseline": figures["step_s_checked"] / figures["step_s_baseline"]})


if __name__ == "__main__":
    main()
