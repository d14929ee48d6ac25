"""The optional W&B tracker, run by the real wandb client in offline mode (no account, no network)."""

from __future__ import annotations

import json

import pytest

from rlstack.trainer.config import TrainerSettings
from rlstack.trainer.report import EvalResult, StepRecord, summarize
from tests.helpers.wait import wait_until
from tests.helpers.wandb_log import history, read_records, summary


def record(step: int, reward: float) -> StepRecord:
    return StepRecord(step=step, weight_version=step, loss=0.1, reward_mean=reward, reward_std=0.2, kl=0.0, clip_fraction=0.0,
                      ratio_mean=1.0, grad_norm=0.5, tokens=100, step_seconds=0.1, tokens_per_second=1000.0,
                      wait_seconds=0.0, staleness_mean=0.0, staleness_max=0)


@pytest.mark.slow
def test_steps_evals_and_summary_reach_an_offline_wandb_run_that_a_restart_resumes(tmp_path, monkeypatch):
    from rlstack.trainer.tracking import WandbTracker

    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    settings = TrainerSettings(model="models/x", run_dir=tmp_path, wandb_project="rlstack-test", batcher_token="s3cret")
    records = [record(i, 0.1 * i) for i in range(1, 4)]
    first = WandbTracker(settings, tmp_path)
    run_id = first.run.id
    first.evaluation("before", EvalResult(accuracy=0.25, problems=8), 0)
    for r in records:
        first.step(r)
    first.finish(summarize(records, weight_version=3, trajectories=3, sync_mode="filesystem", eval_before=None,
                           eval_after=None, model="models/x", seconds=1.0))

    run_files = list((tmp_path / "wandb").glob(f"offline-run-*-{run_id}/run-{run_id}.wandb"))
    assert len(run_files) == 1
    # wandb-core may still be writing the file when finish() returns: read it once the run's exit record is in.
    wait_until(lambda: any(r.WhichOneof("record_type") == "exit" for r in read_records(run_files[0])), timeout=60)
    steps = history(run_files[0])
    assert [json.loads(h["_step"]) for h in steps] == [0, 1, 2, 3]
    assert steps[0]["eval/before_accuracy"] == "0.25"
    assert [json.loads(h["train/reward_mean"]) for h in steps[1:]] == pytest.approx([0.1, 0.2, 0.3])
    final = summary(run_files[0])
    assert json.loads(final["reward_last"]) == pytest.approx(0.2) and json.loads(final["steps"]) == 3
    config = "".join(str(r.run.config) for r in read_records(run_files[0]) if r.WhichOneof("record_type") == "run")
    assert "wandb_project" in config and "s3cret" not in config and "batcher_token" not in config

    second = WandbTracker(settings, tmp_path)  # the trainer restarted after a kill
    assert second.run.id == run_id
    second.run.finish()
