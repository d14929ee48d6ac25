"""``rlstack team-roles``: each member's own part of a team's trials, read from the files a run leaves (the
trial's result.json and instruction, the proxy's call records)."""

from __future__ import annotations

import json
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path

from rlstack.common.contracts.trajectory import TrajectoryChoice, TrajectoryRecord, trajectory_file
from rlstack.episodes.trials.records import (
    AgentRecord,
    TaskRecord,
    TrialResult,
    TrialStatus,
    VerifierRecord,
)
from rlstack.ops.team_roles import team_roles

RLSTACK = str(Path(sys.executable).with_name("rlstack"))
TASK = "Count the lines of /app/words.txt and write the count to /app/answer.txt."


def call(trial: str, policy: str, began: float, hand_over: str | None = None) -> TrajectoryRecord:
    tool_calls = [] if hand_over is None else [
        {"id": "c0", "type": "function", "function": {"name": "Agent", "arguments": json.dumps({"prompt": hand_over})}}]
    return TrajectoryRecord(run_id="agent", trial_id=trial, request_id=f"{trial}-{policy}-{began}", api="anthropic",
                            started_at=began, ended_at=began + 1, latency_seconds=1.0, policy=policy,
                            choices=[TrajectoryChoice(index=0, message={"role": "assistant", "content": "", "tool_calls": tool_calls})])


def trial(trials: Path, name: str, began: float, reward: float | None, hand_over: str | None, worker: bool,
          status: TrialStatus = TrialStatus.OK) -> None:
    root = trials / "agent" / name
    (root / "agent").mkdir(parents=True)
    (root / "agent" / "instruction.md").write_text(TASK + "\n")
    now = datetime.now(UTC)
    result = TrialResult(run="agent", trial=name, attempt=0, sandbox="local", task=TaskRecord(name="t", path=root, schema_version="1.0"),
                         agent=AgentRecord(name="claude-code", command=["claude"]), verifier=VerifierRecord(), status=status,
                         reward=reward, started_at=now, finished_at=now)
    (root / "result.json").write_text(result.model_dump_json())
    calls = [call(name, "lead", began, hand_over)] + ([call(name, "helper", began + 2)] if worker else [])
    trajectory_file(root, "w0").write_text("".join(c.model_dump_json() + "\n" for c in calls))


def test_each_members_part_is_told_apart_in_training_and_held_out(tmp_path):
    trials = tmp_path / "run" / "trials"
    # training, in the order begun: first half word for word and failing, second half word for word and solved
    trial(trials, "team-0-g0-t0", 10, 0.0, f"Do this: {TASK}", worker=True)
    trial(trials, "team-0-g0-t1", 11, 0.0, "count words", worker=True)  # in other words
    trial(trials, "team-0-g1-t0", 20, 1.0, TASK, worker=True)
    trial(trials, "team-0-g1-t1", 21, 0.0, None, worker=False)  # never delegated
    trial(trials, "team-0-g1-t2", 22, None, TASK, worker=True, status=TrialStatus.INFRA_ERROR)  # nobody's part
    trial(trials, "team-eval-ab12-e0-t0", 5, 0.0, "count words", worker=True)
    trial(trials, "team-eval-ab12-e1-t0", 30, 1.0, TASK, worker=True)
    report = team_roles(trials, "lead", "helper", parts=2)
    first, second = report.training
    assert (first.trials, first.team, first.handed_over, first.worker_solved, first.paraphrased_solved) == (2, 0.0, 0.5, 0.0, 0.0)
    assert (second.trials, second.team, second.delegated, second.handed_over, second.worker_solved) == (2, 0.5, 0.5, 0.5, 1.0)
    assert second.paraphrased_trials == 0 and second.paraphrased_solved is None
    assert list(report.heldout) == [0, 1]
    assert (report.heldout[0].handed_over, report.heldout[0].worker_solved) == (0.0, None)
    assert (report.heldout[1].team, report.heldout[1].worker_solved) == (1.0, 1.0)


def test_the_cli_prints_the_report_and_draws_it(tmp_path):
    trials = tmp_path / "run" / "trials"
    trial(trials, "team-0-g0-t0", 10, 1.0, TASK, worker=True)
    done = subprocess.run([RLSTACK, "team-roles", str(tmp_path / "run"), "--plot", str(tmp_path / "roles.png")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["training"][0]["worker_solved"] == 1.0
    assert (tmp_path / "roles.png").read_bytes()[:4] == b"\x89PNG"
    empty = subprocess.run([RLSTACK, "team-roles", str(tmp_path / "nothing")], capture_output=True, text=True)
    assert empty.returncode == 2 and "nothing" in empty.stderr
