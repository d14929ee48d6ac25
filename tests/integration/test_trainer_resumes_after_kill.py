"""The trainer killed with SIGKILL mid-run resumes from its last checkpoint: the step, the
optimiser state and the per-step records continue where the checkpoint left them, and the run
ends with every step recorded exactly once, a kill before the first checkpoint too. The batch of a
step lost with the process is served again to the resumed trainer: every group it took is trained
once, none lost with its weights. Real batcher and trainer processes, the tiny
model, no replicas (sync_mode none)."""

from __future__ import annotations

import json

import httpx
from safetensors.torch import load_file

from rlstack.common.contracts.atropos import GROUP_NAME_KEY
from tests.helpers.groups import env_registration, make_group
from tests.helpers.wait import wait_until

STEPS = 6


def trainer_args(batcher_url: str, model, run_dir) -> list[str]:  # noqa: ANN001
    return ["--model", str(model), "--batcher-url", batcher_url, "--sync-mode", "none", "--run-dir", str(run_dir),
            "--steps", str(STEPS), "--batch-size", "4", "--micro-batch-size", "4", "--checkpoint-every", "2", "--lr", "1e-3",
            "--torch-threads", "1", "--exit-when-done"]


def status(trainer) -> dict:  # noqa: ANN001
    return httpx.get(f"{trainer.url}/status", timeout=5).json()


def test_trainer_resumes_from_its_last_checkpoint(service_factory, tiny_model, tmp_path):
    batcher = service_factory("batcher", ["--data-dir", str(tmp_path / "batcher")])
    run_dir = tmp_path / "run"
    trainer = service_factory("trainer", trainer_args(batcher.url, tiny_model, run_dir), ready_timeout=120)
    env = httpx.post(f"{batcher.url}/register-env", json=env_registration(group_size=4)).json()["env_id"]

    def post(seed: int) -> None:
        group = make_group(size=4, length=12, env_id=env, seed=seed, prompt_len=4, vocab=4000)
        group["scores"] = [1.0, 0.0, 0.5, 0.0]
        group["group_overrides"] = {GROUP_NAME_KEY: f"g{seed}"}
        httpx.post(f"{batcher.url}/scored_data", json=group, timeout=10).raise_for_status()

    post(0)
    wait_until(lambda: status(trainer)["step"] == 1, timeout=120)
    trainer.kill()  # before its first checkpoint: step 1 is lost, and so must be its record

    trainer = service_factory("trainer", trainer_args(batcher.url, tiny_model, run_dir), ready_timeout=120)
    for seed in range(1, 3):
        post(seed)
    wait_until(lambda: status(trainer)["step"] == 3, timeout=120)
    assert (run_dir / "checkpoints" / "step-000002" / "optimizer.pt").exists()
    trainer.kill()  # step 3 was taken but never checkpointed: it is lost with the process

    trainer = service_factory("trainer", trainer_args(batcher.url, tiny_model, run_dir), ready_timeout=120)
    assert "step-000002 at step 2" in trainer.log()  # resumed there (it may have retrained step 3 already: its batch is served again)
    for seed in range(3, 3 + STEPS - 2):
        post(seed)
    trainer.proc.wait(timeout=180)
    assert trainer.proc.returncode == 0, trainer.log()

    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == list(range(1, STEPS + 1))
    # g2, taken for the lost step 3, is step 3 again; g6 waits in the queue for a longer run
    assert [r["groups"] for r in records] == [[f"g{seed}"] for seed in range(STEPS)]
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == STEPS and summary["weight_version"] == STEPS
    assert (run_dir / "reward.png").stat().st_size > 0
    assert "resumed from" in trainer.log()
    final = load_file(run_dir / "checkpoints" / f"step-{STEPS:06d}" / "model.safetensors")
    start = load_file(tiny_model / "model.safetensors")
    assert any(not final[k].equal(start[k]) for k in start)
