"""Each member's own part of a lead-and-worker team's trials, read from a finished run (docs/policies.md).

The trial's reward credits the lead and the worker alike; their parts differ. The lead's is to hand
the worker the task: its ``Agent`` call's prompt holds the task's instruction word for word. The
worker's is to solve a task so handed over. Read over the training trials (in quarters, by when each
began) and at each held-out evaluation, these tell which policy learnt what. Reads only.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

from pydantic import BaseModel, ValidationError

from rlstack.common.contracts.trajectory import TrajectoryRecord, read_trajectory
from rlstack.episodes.trials.records import TrialResult, TrialStatus

HAND_OVER_TOOL = "Agent"
"""claude-code's tool that starts a sub-agent; its ``prompt`` argument is what the worker is told."""
EVAL_ROUND = re.compile(r"-eval-[0-9a-f]+-e(\d+)-t\d+$")
"""Held-out trials are named ``<env>-eval-<id>-e<round>-t<n>`` (``envs.harbor_runner``)."""


class TeamTrial(BaseModel):
    """One finished trial, as each member played it."""

    began: float
    reward: float
    delegated: bool
    """The lead called the hand-over tool at least once."""
    handed_over: bool
    """Some hand-over's prompt holds the task's instruction word for word."""
    worker_calls: int
    """Calls the worker's policy answered."""


class RoleFigures(BaseModel):
    """A set of trials: the team's pass rate and each member's own part."""

    trials: int
    team: float
    """Mean reward of the trials: what both members are credited."""
    delegated: float
    handed_over: float
    """The lead's part: the share of trials whose task reached the worker word for word."""
    handed_over_trials: int
    worker_solved: float | None
    """The worker's part: the mean reward of the trials whose task reached it word for word (None: none did)."""
    paraphrased_trials: int
    paraphrased_solved: float | None
    """The mean reward of the trials in which the worker was told the task in other words (None: none was)."""


class TeamRoles(BaseModel):
    lead: str
    worker: str
    training: list[RoleFigures]
    """The training trials in equal parts, in the order they began."""
    heldout: dict[int, RoleFigures]
    """Each held-out evaluation round (0: before the first step)."""


def _hands_over(call: TrajectoryRecord, instruction: str) -> tuple[bool, bool]:
    delegated = exact = False
    for choice in call.choices:
        for tool_call in (choice.message or {}).get("tool_calls") or []:
            function = tool_call.get("function") or {}
            if function.get("name") != HAND_OVER_TOOL:
                continue
            delegated = True
            arguments = function.get("arguments") or "{}"
            try:
                arguments = json.loads(arguments) if isinstance(arguments, str) else arguments
                prompt = arguments.get("prompt", "")
            except (json.JSONDecodeError, AttributeError):
                continue
            exact |= isinstance(prompt, str) and instruction in prompt
    return delegated, exact


def read_trial(trial_dir: Path, lead: str, worker: str) -> TeamTrial | None:
    """None for a trial that did not end ``ok`` with a reward (an infrastructure failure is nobody's part)."""
    try:
        result = TrialResult.model_validate_json((trial_dir / "result.json").read_text())
        instruction = (trial_dir / "agent" / "instruction.md").read_text().strip()
    except (OSError, ValidationError):
        return None
    if result.status != TrialStatus.OK or result.reward is None:
        return None
    calls = sorted(read_trajectory(trial_dir), key=lambda c: c.started_at)
    parts = [_hands_over(c, instruction) for c in calls if c.policy == lead]
    return TeamTrial(began=calls[0].started_at if calls else result.started_at.timestamp(), reward=result.reward,
                     delegated=any(d for d, _ in parts), handed_over=any(e for _, e in parts),
                     worker_calls=sum(c.policy == worker for c in calls))


def figures(trials: list[TeamTrial]) -> RoleFigures:
    n = len(trials)
    given = [t for t in trials if t.handed_over and t.worker_calls]
    paraphrased = [t for t in trials if not t.handed_over and t.worker_calls]
    return RoleFigures(trials=n, team=sum(t.reward for t in trials) / n, delegated=sum(t.delegated for t in trials) / n,
                       handed_over=sum(t.handed_over for t in trials) / n, handed_over_trials=len(given),
                       worker_solved=_mean([t.reward for t in given]), paraphrased_trials=len(paraphrased),
                       paraphrased_solved=_mean([t.reward for t in paraphrased]))


def _mean(values: list[float]) -> float | None:
    return sum(values) / len(values) if values else None


def team_roles(trials_dir: Path, lead: str, worker: str, parts: int = 4) -> TeamRoles:
    """Every trial under ``trials_dir`` (``<run>/<trial>/``): training ones in ``parts``, held-out ones by round."""
    training: list[TeamTrial] = []
    rounds: dict[int, list[TeamTrial]] = {}
    for trial_dir in sorted(p for p in trials_dir.glob("*/*") if p.is_dir()):
        trial = read_trial(trial_dir, lead, worker)
        if trial is None:
            continue
        if m := EVAL_ROUND.search(trial_dir.name):
            rounds.setdefault(int(m[1]), []).append(trial)
        else:
            training.append(trial)
    training.sort(key=lambda t: t.began)
    size = -(-len(training) // parts) if training else 0
    chunks = [training[i:i + size] for i in range(0, len(training), size)] if size else []
    return TeamRoles(lead=lead, worker=worker, training=[figures(c) for c in chunks],
                     heldout={k: figures(v) for k, v in sorted(rounds.items())})


def _or_nan(value: float | None) -> float:
    return float("nan") if value is None else value


def plot(report: TeamRoles, path: Path, title: str) -> None:
    """Two panels, the training trials by part and the held-out rounds: the team's pass rate, how often
    the lead hands the task over, and how often a task handed over is solved, told word for word or not."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, 2, figsize=(11, 4), sharey=True)
    panels = [(axes[0], report.training, [f"{i + 1}" for i in range(len(report.training))], "part of the training trials"),
              (axes[1], list(report.heldout.values()), [str(k) for k in report.heldout], "held-out evaluation round")]
    for ax, rows, ticks, xlabel in panels:
        x = range(len(rows))
        ax.plot(x, [r.team for r in rows], "o-", color="black", label="team pass rate (both credited)")
        ax.plot(x, [r.delegated for r in rows], "s--", label=f"{report.lead}: hands the task to the worker")
        ax.plot(x, [_or_nan(r.worker_solved) for r in rows], "^--", label=f"{report.worker}: solves it, told word for word")
        ax.plot(x, [_or_nan(r.paraphrased_solved) for r in rows], "v:", label="solved, the lead's own words")
        ax.set_xticks(list(x), ticks)
        ax.set_xlabel(xlabel)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("share of trials")
    axes[0].set_ylim(0, 1)
    axes[1].legend(fontsize=8, loc="upper left")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
