"""``result.json`` files as ``run_trial`` writes them, for tests of what reads trial directories."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

from rlstack.episodes.trials.records import (
    AgentRecord,
    TaskRecord,
    TrialResult,
    TrialStatus,
    VerifierRecord,
)


def write_result(trials: Path, run: str, trial: str, status: TrialStatus = TrialStatus.OK, reward: float | None = 1.0) -> Path:
    now = datetime.now(UTC)
    result = TrialResult(run=run, trial=trial, attempt=1, sandbox="local", task=TaskRecord(name="x", path=Path("/x"), schema_version="1.1"),
                         agent=AgentRecord(name="a", command=["a"]), verifier=VerifierRecord(), status=status,
                         reward=reward if status == TrialStatus.OK else None, started_at=now, finished_at=now)
    root = trials / run / trial
    root.mkdir(parents=True)
    (root / "result.json").write_text(result.model_dump_json())
    return root
