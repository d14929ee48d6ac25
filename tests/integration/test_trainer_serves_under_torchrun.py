"""The trainer service under ``torchrun --nproc-per-node 2`` (gloo): rank 0 serves HTTP, pulls
batches and checkpoints with the other rank; the run ends with every step recorded, a sharded
checkpoint, and both ranks exiting 0. Real batcher and torchrun processes, the tiny model."""

from __future__ import annotations

import json
import sys
import time

import pytest

from tests.conftest import REPO, free_port, start_process
from tests.helpers.groups import feed_trainer

STEPS = 3
pytestmark = pytest.mark.slow


def test_trainer_runs_its_steps_on_two_ranks(service_factory, tiny_model, tmp_path):
    batcher = service_factory("batcher", ["--data-dir", str(tmp_path / "batcher")])
    run_dir, port = tmp_path / "run", free_port()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "rlstack.trainer",
           "--port", str(port), "--model", str(tiny_model), "--batcher-url", batcher.url, "--sync-mode", "none",
           "--run-dir", str(run_dir), "--steps", str(STEPS), "--batch-size", "4", "--pack-tokens", "32", "--checkpoint-every", "2",
           "--lr", "1e-3", "--torch-threads", "1", "--exit-when-done"]
    trainer = start_process("trainer", cmd, port, tmp_path / "trainer.log", cwd=REPO)
    try:
        trainer.wait_ready(timeout=180)
        feed_trainer(batcher.url, STEPS)
        deadline = time.monotonic() + 240
        while trainer.proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.5)
        assert trainer.proc.returncode == 0, trainer.log()
    finally:
        trainer.terminate()
    steps = [json.loads(line)["step"] for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert steps == list(range(1, STEPS + 1))
    assert (run_dir / "checkpoints" / f"step-{STEPS:06d}" / "dcp" / ".metadata").exists()
    assert json.loads((run_dir / "summary.json").read_text())["steps"] == STEPS
