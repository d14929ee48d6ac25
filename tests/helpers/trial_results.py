"""``result.json`` files as ``run_trial`` writes them, for tests of what reads trial directories."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from rlstack.episodes.trials.records import (
    AgentRecord,
    TaskRecord,
    TrajectoryStats,
    TrialResult,
    TrialStatus,
    VerifierRecord,
)


def write_result(trials: Path, run: str, trial: str, status: TrialStatus = TrialStatus.OK, reward: float | None = 1.0,
                 policies: dict[str, int] | None = None) -> Path:
    """``policies``: the trial's trained sequences by policy, as the agent env's assembly counts them."""
    now = datetime.now(UTC)
    trajectory = None
    if policies is not None:
        sequences = sum(policies.values())
        trajectory = TrajectoryStats(calls=sequences, merged_calls=0, thread_breaks=0, failed_calls=0, sequences=sequences,
                                     trained_tokens=8 * sequences, policies=policies)
    result = TrialResult(run=run, trial=trial, attempt=1, sandbox="local", task=TaskRecord(name="x", path=Path("/x"), schema_version="1.1"),
                         agent=AgentRecord(name="a", command=["a"]), verifier=VerifierRecord(), status=status,
                         reward=reward if status == TrialStatus.OK else None, started_at=now, finished_at=now,
                         trajectory=trajectory)
    root = trials / run / trial
    root.mkdir(parents=True)
    (root / "result.json").write_text(result.model_dump_json())
    return root
