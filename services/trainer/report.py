"""What a run leaves behind: one JSON line per step, summary.json and reward.png.

The summary's reward_first/reward_last are means over the first and last ten steps (the
issue's learning criterion); the plot shows reward and staleness per step.
"""

from __future__ import annotations

import json
import statistics
from pathlib import Path

from pydantic import BaseModel

from rlstack.common.contracts.trajectory import TRAJECTORY_STEM
from rlstack.trainer.mismatch import Mismatch

WINDOW = 10


class StepRecord(BaseModel):
    step: int
    weight_version: int
    loss: float
    reward_mean: float
    reward_std: float
    kl: float
    clip_fraction: float
    ratio_mean: float
    grad_norm: float
    tokens: int
    step_seconds: float
    tokens_per_second: float
    wait_seconds: float
    staleness_mean: float
    staleness_max: int
    sync_seconds: float | None = None
    mismatch: Mismatch | None = None


class EvalResult(BaseModel):
    accuracy: float
    problems: int
    weight_version: int | None = None


class Summary(BaseModel):
    steps: int
    reward_first: float | None
    reward_last: float | None
    weight_version: int
    trajectories: int
    sync_mode: str
    sync_seconds_median: float | None
    eval_before: EvalResult | None
    eval_after: EvalResult | None
    staleness_mean: float | None
    mismatch_kl_mean: float | None = None
    """Mean over steps of the training–inference mismatch KL (steps that carried a figure)."""
    mismatch_kl_max: float | None = None
    mismatch_steps: int = 0
    """Steps that carried a mismatch figure."""
    mismatch_checked_share: float | None = None
    """Trained tokens whose mismatch was checked, over all trained tokens of the run."""
    step_seconds_median: float | None
    model: str
    seconds: float


def append_record(path: Path, record: StepRecord) -> None:
    with path.open("a") as out:
        out.write(record.model_dump_json() + "\n")


def read_records(path: Path) -> list[StepRecord]:
    if not path.exists():
        return []
    return [StepRecord.model_validate_json(line) for line in path.read_text().splitlines() if line.strip()]


def count_trajectories(trials_dir: Path | None) -> int:
    """Lines in every trial's trajectory files (one per proxied call)."""
    if trials_dir is None or not trials_dir.is_dir():
        return 0
    return sum(sum(1 for line in p.open() if line.strip()) for p in trials_dir.glob(f"*/*/{TRAJECTORY_STEM}*.jsonl"))


def _mean(values: list[float]) -> float | None:
    return statistics.fmean(values) if values else None


def summarize(records: list[StepRecord], **fields) -> Summary:  # noqa: ANN003 - the Summary fields not derived from records
    rewards = [r.reward_mean for r in records]
    syncs = [r.sync_seconds for r in records if r.sync_seconds is not None]
    return Summary(
        steps=len(records),
        reward_first=_mean(rewards[:WINDOW]),
        reward_last=_mean(rewards[-WINDOW:]),
        sync_seconds_median=statistics.median(syncs) if syncs else None,
        staleness_mean=_mean([r.staleness_mean for r in records]),
        mismatch_kl_mean=_mean([r.mismatch.kl for r in records if r.mismatch is not None]),
        mismatch_kl_max=max((r.mismatch.kl for r in records if r.mismatch is not None), default=None),
        mismatch_steps=sum(r.mismatch is not None for r in records),
        mismatch_checked_share=(sum(r.mismatch.tokens for r in records if r.mismatch is not None) / max(1, sum(r.tokens for r in records))
                                if records else None),
        step_seconds_median=statistics.median([r.step_seconds for r in records]) if records else None,
        **fields,
    )


def plot(records: list[StepRecord], path: Path, title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    steps = [r.step for r in records]
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True, height_ratios=(3, 1))
    rewards = [r.reward_mean for r in records]
    top.plot(steps, rewards, color="#bbbbbb", linewidth=1, label="batch mean")
    if len(rewards) >= WINDOW:
        rolling = [statistics.fmean(rewards[i - WINDOW + 1 : i + 1]) for i in range(WINDOW - 1, len(rewards))]
        top.plot(steps[WINDOW - 1 :], rolling, color="#1f77b4", linewidth=2, label=f"mean of last {WINDOW}")
    top.set_ylabel("reward")
    top.set_title(title)
    top.legend(loc="lower right")
    top.grid(alpha=0.3)
    bottom.bar(steps, [r.staleness_mean for r in records], color="#ff7f0e")
    bottom.set_ylabel("staleness")
    bottom.set_xlabel("step")
    bottom.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_summary(path: Path, summary: Summary) -> None:
    path.write_text(json.dumps(summary.model_dump(mode="json"), indent=2) + "\n")
