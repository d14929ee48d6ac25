"""A trainer of one of two policies (issue 53): the real trainer process (tiny model, no replicas)
started as the launcher starts the helper's (``--served-model-name helper --batcher-policy helper``)
against a real batcher of two queues trains on the helper's groups only, leaves the lead's queue as
it was, and names its policy in ``/status``, ``/metrics`` and ``summary.json``."""

from __future__ import annotations

import json

import httpx

from rlstack.common.contracts.atropos import GROUP_NAME_KEY
from tests.helpers.groups import env_registration, make_group, trainer_registration


def test_the_helpers_trainer_takes_the_helpers_groups_and_says_so(service_factory, tiny_model, tmp_path):
    batcher = service_factory("batcher", ["--data-dir", str(tmp_path / "batcher"), "--policies", '["lead", "helper"]'])
    # the lead's trainer is only a registration here: the env waits for every policy's trainer
    httpx.post(f"{batcher.url}/register", json=trainer_registration(batch_size=4, policy="lead")).raise_for_status()
    run_dir = tmp_path / "policies" / "helper"
    trainer = service_factory("trainer", ["--model", str(tiny_model), "--batcher-url", batcher.url, "--sync-mode", "none",
                                          "--served-model-name", "helper", "--batcher-policy", "helper", "--run-dir", str(run_dir),
                                          "--steps", "1", "--batch-size", "4", "--micro-batch-size", "4", "--torch-threads", "1",
                                          "--exit-when-done"], ready_timeout=180)
    status = httpx.get(f"{trainer.url}/status", timeout=5).json()
    assert status["policy"] == "helper" and status["step"] == 0
    assert 'rlstack_trainer_info{policy="helper"} 1.0' in httpx.get(f"{trainer.url}/metrics", timeout=5).text
    env = httpx.post(f"{batcher.url}/register-env", json=env_registration(group_size=4)).json()["env_id"]
    body = []
    for seed, policy in ((1, "lead"), (2, "helper")):
        group = make_group(size=4, length=12, env_id=env, seed=seed, prompt_len=4, vocab=4000)
        group.update(scores=[1.0, 0.0, 0.5, 0.0], trials=[0, 1, 2, 3], policy=policy, group_overrides={GROUP_NAME_KEY: "g0"})
        body.append(group)
    httpx.post(f"{batcher.url}/scored_data_list", json=body, headers={"Idempotency-Key": "g0"}, timeout=10).raise_for_status()
    assert trainer.proc.wait(timeout=300) == 0, trainer.log()

    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["policy"] == "helper" and summary["steps"] == 1
    assert [json.loads(line)["groups"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()] == [["g0"]]
    assert httpx.get(f"{batcher.url}/status", params={"policy": "lead"}).json() == {"current_step": 0, "queue_size": 1}
    assert httpx.get(f"{batcher.url}/status", params={"policy": "helper"}).json()["current_step"] == 1
    batcher_metrics = httpx.get(f"{batcher.url}/metrics").text
    assert 'rlstack_batcher_batches_served_total{policy="helper"} 1.0' in batcher_metrics
    assert 'rlstack_batcher_batches_served_total{policy="lead"} 0.0' in batcher_metrics
