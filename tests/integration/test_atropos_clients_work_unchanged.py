"""atroposlib 0.4.0's own env and trainer clients against our batcher (in .venv-atropos)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest

from tests.conftest import REPO

ATROPOS_PYTHON = REPO / ".venv-atropos" / "bin" / "python"

pytestmark = pytest.mark.compat


@pytest.fixture
def atropos_python():
    if not ATROPOS_PYTHON.exists():
        if os.environ.get("CI"):
            pytest.fail("CI must run the compatibility test: `make setup-atropos` did not run")
        pytest.skip("no .venv-atropos (run `make setup-atropos`)")
    return ATROPOS_PYTHON


def test_base_env_and_example_trainer_work_unchanged(service_factory, tmp_path, atropos_python):
    batcher = service_factory("batcher", ["--data-dir", str(tmp_path / "wal")])
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "WANDB_MODE": "disabled", "TOKENIZERS_PARALLELISM": "false"}
    done = subprocess.run(
        [str(atropos_python), str(REPO / "tests" / "compat" / "atropos_clients.py"), batcher.url, str(tmp_path)],
        capture_output=True, text=True, timeout=300, env=env,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    result = json.loads(done.stdout.strip().splitlines()[-1])

    assert result["env"]["env_id"] == 0
    assert result["env"]["batch_size"] == 4  # read from /info as BaseEnv does
    assert result["env"]["status"]["current_step"] == 0
    assert result["env"]["status_after"]["self_queue_size"] == 4  # all four groups accepted
    first = result["expected_first_tokens"]
    assert result["batches"] == [[first[0], first[1]], [first[2], first[3]], None]
    assert {"tokens", "masks", "scores", "inference_logprobs", "env_id"} <= set(result["batch_keys"])
    assert "Client error" not in done.stderr  # BaseEnv logs (and drops) any 4xx
