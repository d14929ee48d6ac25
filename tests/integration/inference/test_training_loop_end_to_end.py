"""`make run`'s loop in miniature: the shipped example config, started by `rlstack up` as real
processes (registry, batcher, vLLM replica, LiteLLM proxy, trainer, env server), a few steps on
the tiny model, and the run directory it promises."""

from __future__ import annotations

import json
import subprocess
import sys

import yaml

from tests.conftest import REPO

STEPS = 3


def set_flag(args: list[str], flag: str, value: str) -> None:
    args[args.index(flag) + 1] = value


def test_rlstack_up_runs_the_example_to_a_summary(tiny_model, tmp_path):
    config = yaml.safe_load((REPO / "examples" / "local-arithmetic.yaml").read_text())
    config["runs_dir"] = str(tmp_path / "runs")
    services = {s["name"]: s for s in config["services"]}
    for name in ("inference", "trainer"):
        set_flag(services[name]["args"], "--model", str(tiny_model))
    set_flag(services["trainer"]["args"], "--steps", str(STEPS))
    set_flag(services["trainer"]["args"], "--batch-size", "16")
    set_flag(services["env"]["args"], "--heldout-size", "4")
    services["trainer"]["args"] += ["--eval-every", "2"]
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config))

    done = subprocess.run([sys.executable, "-m", "rlstack.cli", "up", str(path)], cwd=REPO, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]

    run_dir = (tmp_path / "runs" / "latest").resolve()
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["steps"] == STEPS and summary["weight_version"] == STEPS
    assert summary["sync_mode"] == "filesystem" and summary["sync_seconds_median"] > 0
    assert summary["eval_before"]["problems"] == 4 and summary["eval_before"]["weight_version"] == 0
    assert summary["eval_after"]["weight_version"] == STEPS
    # before, during (every 2 steps: step 2, on the weights published there) and after, in order
    assert [(e["phase"], e["step"], e["weight_version"]) for e in summary["evals"]] == [
        ("before", 0, 0), ("during", 2, 2), ("after", STEPS, STEPS)]
    assert len((run_dir / "evals.jsonl").read_text().splitlines()) == 3
    assert summary["trajectories"] >= STEPS * 2  # 16 sequences per step = two groups of 8, one call each
    assert (run_dir / "reward.png").stat().st_size > 0
    # Every sync passed the served-weights check (a failure would have quarantined the only replica
    # and failed the run), and vLLM's logprobs match the trainer's under the same weights.
    records = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert records[0]["mismatch"]["tokens"] > 0  # the first batch was sampled by version 0, the weights step 1 trains
    assert summary["mismatch_kl_mean"] is not None and summary["mismatch_kl_max"] < 0.05
    assert (run_dir / "checkpoints" / f"step-{STEPS:06d}" / "model.safetensors").exists()
    logs = {p.stem for p in (run_dir / "logs").glob("*.log")}
    assert logs == {"registry", "batcher", "inference", "proxy", "trainer", "env"}
    assert "stopped: env=0, trainer=0, proxy=0, inference=0, batcher=0, registry=0" in done.stderr + done.stdout
