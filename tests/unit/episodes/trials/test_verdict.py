"""An agent's own exit is judged from the trial's model calls, never from the exit code alone."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from rlstack.common.contracts.trajectory import TrajectoryRecord
from rlstack.episodes.trials.records import (
    AgentRecord,
    PhaseRecord,
    TaskRecord,
    TrialResult,
    TrialStatus,
    VerifierRecord,
)
from rlstack.episodes.trials.verdict import judge_agent_exit


def result(exit_code: int, timed_out: bool = False, rewards: dict | None = None) -> TrialResult:
    now = datetime.now(UTC)
    status = TrialStatus.AGENT_TIMEOUT if timed_out else TrialStatus.OK if exit_code == 0 else TrialStatus.AGENT_ERROR
    return TrialResult(run="r", trial="t", attempt=1, sandbox="local",
                       task=TaskRecord(name="x", path=Path("/x"), schema_version="1.1"),
                       agent=AgentRecord(name="a", command=["a"], run=PhaseRecord(
                           started_at=now, finished_at=now, exit_code=exit_code, timed_out=timed_out, timeout_sec=60)),
                       verifier=VerifierRecord(rewards=rewards), status=status,
                       reward=(rewards or {}).get("reward") if status == TrialStatus.OK else None,
                       error=None if status == TrialStatus.OK else f"agent exited with {exit_code}",
                       started_at=now, finished_at=now)


def call(status: str = "ok") -> TrajectoryRecord:
    return TrajectoryRecord(run_id="r", trial_id="t", request_id="q", api="openai", started_at=1, ended_at=2,
                            latency_seconds=1, status=status, error=None if status == "ok" else "upstream 500")


@pytest.mark.parametrize("exit_code", [1, -9, 137])
def test_a_crash_after_answered_calls_is_scored(exit_code):
    judged = judge_agent_exit(result(exit_code, rewards={"reward": 0.0}), [call(), call()])
    assert judged.status == TrialStatus.OK and judged.reward == 0.0 and judged.error is None
    assert judged.agent.run.exit_code == exit_code  # what the agent did stays on record


def test_a_failed_call_or_no_answered_call_is_not_the_policys_outcome():
    judged = judge_agent_exit(result(1, rewards={"reward": 0.0}), [call(), call("error")])
    assert judged.status == TrialStatus.AGENT_ERROR and judged.reward is None and "1 failed model call" in judged.error
    judged = judge_agent_exit(result(1, rewards={"reward": 0.0}), [])
    assert judged.status == TrialStatus.AGENT_ERROR and "no answered model call" in judged.error


def test_no_reward_timeouts_and_clean_exits_are_left_as_they_were():
    assert judge_agent_exit(result(1), [call()]).status == TrialStatus.AGENT_ERROR
    assert judge_agent_exit(result(-9, timed_out=True, rewards={"reward": 0.0}), [call()]).status == \
        TrialStatus.AGENT_TIMEOUT
    ok = result(0, rewards={"reward": 1.0})
    assert judge_agent_exit(ok, [call("error")]) is ok and ok.status == TrialStatus.OK
