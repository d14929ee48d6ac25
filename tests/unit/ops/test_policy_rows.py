"""``rlstack policy-rows``: each policy's trained rows are its own calls' exact ids, read from files the real
writers leave (the batcher's log written by a batcher of two queues, the proxy's call records)."""

from __future__ import annotations

import asyncio
import subprocess
import sys
from pathlib import Path

import orjson

from rlstack.batcher.config import BatcherSettings
from rlstack.batcher.service import BatcherService
from rlstack.batcher.wal import WriteAheadLog
from rlstack.common.contracts.atropos import EnvRegistration, TrainerRegistration
from rlstack.common.contracts.trajectory import TrajectoryChoice, TrajectoryRecord, trajectory_file
from rlstack.ops.policy_rows import audit_rows
from tests.helpers.groups import env_registration, trainer_registration

RLSTACK = str(Path(sys.executable).with_name("rlstack"))
LEAD_CALL, HELPER_CALL = ([5, 6, 7], [8, 9]), ([5, 6, 7], [1, 2])  # the same prompt ids: only the policy tells them apart


def record(trial: str, policy: str, call: tuple[list[int], list[int]]) -> TrajectoryRecord:
    prompt, completion = call
    return TrajectoryRecord(run_id="r", trial_id=trial, request_id=f"{trial}-{policy}", api="anthropic", started_at=0.0,
                            ended_at=1.0, latency_seconds=1.0, policy=policy, prompt_token_ids=prompt,
                            choices=[TrajectoryChoice(index=0, message={"role": "assistant", "content": ""},
                                                      completion_token_ids=completion)])


def run_dir(tmp_path: Path, helper_rows: list[list[int]]) -> Path:
    run = tmp_path / "run"
    for trial in ("t0", "t1"):
        path = trajectory_file(run / "trials" / "r" / trial, "w0")
        path.parent.mkdir(parents=True)
        path.write_text("".join(record(trial, p, c).model_dump_json() + "\n"
                                for p, c in (("lead", LEAD_CALL), ("helper", HELPER_CALL))))

    async def batcher() -> None:
        svc = BatcherService(BatcherSettings(data_dir=run / "batcher", policies=["lead", "helper"]),
                             WriteAheadLog(run / "batcher" / "batcher.wal", "fsync"))
        svc.replay()
        for policy in ("lead", "helper"):
            await svc.register_trainer(TrainerRegistration.model_validate(trainer_registration(batch_size=2, policy=policy)))
        await svc.register_env(EnvRegistration.model_validate(env_registration(group_size=2)))
        lead = sum(LEAD_CALL, [])
        body = [{"tokens": [lead, lead], "masks": [lead, lead], "scores": [1.0, 0.0], "env_id": 0, "policy": "lead"},
                {"tokens": helper_rows, "masks": helper_rows, "scores": [1.0, 0.0], "env_id": 0, "policy": "helper"}]
        await svc.post_groups(orjson.dumps(body), as_list=True, key="g0")
        svc.wal.close()

    asyncio.run(batcher())
    return run


def test_rows_of_each_policys_own_calls_pass(tmp_path):
    helper = sum(HELPER_CALL, [])
    report = audit_rows(run_dir(tmp_path, [helper, helper]), "lead")
    assert report.ok and report.calls == {"lead": 2, "helper": 2}
    assert report.policies["helper"].rows == report.policies["helper"].own_threads == 2


def test_a_row_of_the_other_policys_call_is_found_and_fails_the_run(tmp_path):
    lead = sum(LEAD_CALL, [])
    run = run_dir(tmp_path, [sum(HELPER_CALL, []), lead])  # the helper's queue got one of the lead's threads
    report = audit_rows(run, "lead")
    assert not report.ok
    assert report.policies["helper"].others_calls == 1 and report.policies["helper"].own_threads == 1
    assert report.policies["lead"].others_calls == 0
    done = subprocess.run([RLSTACK, "policy-rows", str(run), "--first-policy", "lead"], capture_output=True, text=True)
    assert done.returncode == 1 and '"ok": false' in done.stdout


def test_a_run_with_no_rows_proves_nothing_and_fails(tmp_path):
    (tmp_path / "batcher").mkdir()
    (tmp_path / "trials").mkdir()
    assert not audit_rows(tmp_path, "lead").ok
    done = subprocess.run([RLSTACK, "policy-rows", str(tmp_path)], capture_output=True, text=True)
    assert done.returncode == 1
    missing = subprocess.run([RLSTACK, "policy-rows", str(tmp_path / "nothing")], capture_output=True, text=True)
    assert missing.returncode == 2 and "no such" in missing.stderr


def test_the_charts_shared_volume_is_read_by_run_id(tmp_path):
    """On the chart's volume the batcher keeps ``batcher/<run>/`` and the proxy ``trials/<run>/``, beside
    other runs' files: ``--run-id`` reads that run's, and the volume's root alone holds no log to read."""
    helper = sum(HELPER_CALL, [])
    run = run_dir(tmp_path, [helper, helper])
    (run / "batcher" / "r").mkdir()
    (run / "batcher" / "batcher.wal").rename(run / "batcher" / "r" / "batcher.wal")
    other = trajectory_file(run / "trials" / "other-run" / "t9", "w0")  # another run's calls on the same volume
    other.parent.mkdir(parents=True)
    other.write_text(record("t9", "helper", ([1], [2])).model_dump_json() + "\n")
    report = audit_rows(run, "lead", run="r")
    assert report.ok and report.calls == {"lead": 2, "helper": 2}
    done = subprocess.run([RLSTACK, "policy-rows", str(run), "--run-id", "r", "--first-policy", "lead"], capture_output=True, text=True)
    assert done.returncode == 0 and '"ok": true' in done.stdout
    assert subprocess.run([RLSTACK, "policy-rows", str(run), "--first-policy", "lead"], capture_output=True).returncode == 1
