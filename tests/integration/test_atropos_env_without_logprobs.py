"""An unmodified Atropos env (atroposlib's own BaseEnv, in .venv-atropos) posts groups without
inference logprobs; rlstack's trainer trains on them on-policy (ratio 1), where it used to raise
IndexError (two or more rows) or take the ratio against zeros. Real batcher and trainer processes,
the tiny model, no replicas."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.conftest import REPO
from tests.integration.test_atropos_clients_work_unchanged import ATROPOS_PYTHON

pytestmark = pytest.mark.compat
STEPS = 2


def test_trainer_trains_on_policy_on_an_atropos_env_without_logprobs(service_factory, tiny_model, tmp_path):
    if not ATROPOS_PYTHON.exists():
        if os.environ.get("CI"):
            pytest.fail("CI must run the compatibility test: `make setup-atropos` did not run")
        pytest.skip("no .venv-atropos (run `make setup-atropos`)")
    batcher = service_factory("batcher", ["--data-dir", str(tmp_path / "wal")])
    run_dir = tmp_path / "run"
    trainer = service_factory("trainer", [
        "--model", str(tiny_model), "--batcher-url", batcher.url, "--sync-mode", "none", "--run-dir", str(run_dir),
        "--steps", str(STEPS), "--batch-size", "4", "--micro-batch-size", "4", "--lr", "1e-3", "--torch-threads", "1",
        "--exit-when-done"], ready_timeout=120)
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(
        [str(ATROPOS_PYTHON), str(REPO / "tests" / "compat" / "atropos_env_without_logprobs.py"), batcher.url, str(tmp_path),
         str(2 * STEPS)], capture_output=True, text=True, timeout=300, env=env)
    assert done.returncode == 0, done.stderr[-4000:]
    assert "Client error" not in done.stderr  # BaseEnv logs (and drops) any 4xx
    trainer.proc.wait(timeout=180)
    assert trainer.proc.returncode == 0, trainer.log()[-4000:]

    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert [r["step"] for r in records] == [1, 2]
    for r in records:
        assert r["tokens"] == 4 * 8  # four rows of 8 trained tokens
        assert r["ratio_mean"] == pytest.approx(1.0, abs=1e-5)  # against zeros it was the tokens' probability (~1e-4)
        assert r["clip_fraction"] == 0.0 and r["mismatch"] is None
        assert r["grad_norm"] > 0
