"""Bars of tokens/s (and peak memory) per path from ``python -m bench.trainer --json-out`` lines.

    python -m bench.trainer_plot docs/data/trainer-gpu-2026-11-26.jsonl --out docs/img/trainer-gpu.png

One panel per line (shape, launch mode), one bar per path; later lines of the same shape and
mode replace earlier ones' paths of the same name (a rerun wins).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from bench.common.result import stored_figures


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args()
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    panels: dict[str, dict[str, dict]] = {}
    lines = stored_figures(args.results)
    for d in lines:
        mode = "torchrun (FSDP2)" if d["launched"] else "one process"
        title = f"{d['shape']}{' LoRA r' + str(d['lora_rank']) if d.get('lora_rank') else ''}, {mode}\n{d['tokens']:,} tokens/step"
        panels.setdefault(title, {}).update({k: v for k, v in d["paths"].items() if v.get("tokens_per_s")})
    fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 4), squeeze=False)
    for ax, (title, paths) in zip(axes[0], panels.items()):
        names = list(paths)
        values = [paths[n]["tokens_per_s"] / 1000 for n in names]
        bars = ax.bar(names, values, color=["#888" if n == "plain" else "#c44" if "sdpa" in n else "#36a" for n in names])
        for bar, n in zip(bars, names):
            peak = paths[n].get("peak_gib")
            ax.annotate(f"{peak:.0f} GiB" if peak else "", (bar.get_x() + bar.get_width() / 2, bar.get_height()),
                        ha="center", va="bottom", fontsize=8)
        ax.set_title(title, fontsize=9)
        ax.set_ylabel("thousand tokens/s")
        ax.tick_params(axis="x", labelsize=8)
    device = lines[-1]["device"]
    fig.suptitle(f"Trainer step on one {device} (bench/trainer.py; label: peak memory)", fontsize=10)
    fig.tight_layout()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(args.out, dpi=110)
    print(args.out)


if __name__ == "__main__":
    main()
