"""`rlstack trial TASK_DIR`: one trial of one task from the command line, a readable summary and
one JSON line last. The reference solution and doing nothing call no model, so no service is
started for them; the runs through a real proxy and vLLM are in tests/integration/inference/."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from rlstack.launcher.service_settings import resolve, stand_in_addresses
from rlstack.ops.trial import TrialRequest, stack_config
from tests.conftest import REPO

TASK = REPO / "examples" / "tasks" / "sum-numbers-1"


def rlstack_trial(*args: str, cwd: Path = REPO) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "rlstack.cli", "trial", *args, "--environment", "host"], cwd=cwd, capture_output=True, text=True,
                          timeout=300)


def test_the_reference_solution_scores_one_and_doing_nothing_zero(tmp_path):
    for agent, reward in (("oracle", 1.0), ("nop", 0.0)):
        done = rlstack_trial(str(TASK), "--agent", agent, "--trials-dir", str(tmp_path / "trials"), "--runs-dir", str(tmp_path))
        assert done.returncode == 0, done.stderr[-2000:]
        *summary, last = done.stdout.strip().splitlines()
        report = json.loads(last)
        assert report["status"] == "ok" and report["reward"] == reward and report["agent"] == agent
        assert report["calls"] == report["continued_calls"] == report["spliced_calls"] == report["thread_breaks"] == 0
        result = json.loads((Path(report["trial_dir"]) / "result.json").read_text())
        assert result["status"] == "ok" and result["reward"] == reward and result["agent"]["name"] == agent
        assert any(line.startswith("status    ok") for line in summary) and report["logs"] is None  # nothing started
    assert not list(tmp_path.glob("trial-*"))  # no service logs: no stack was started


def test_flags_that_cannot_work_are_named(tmp_path):
    done = rlstack_trial(str(tmp_path), "--agent", "oracle")
    assert done.returncode == 2 and "TASK_DIR" in done.stderr and "no task.toml" in done.stderr
    done = rlstack_trial(str(TASK), "--proxy-url", "http://127.0.0.1:4000")
    assert done.returncode == 2 and "--trials-dir: with --proxy-url" in done.stderr
    done = rlstack_trial(str(TASK), "--model", str(tmp_path / "nothing"))
    assert done.returncode == 2 and "--model" in done.stderr and "holds no model" in done.stderr
    done = rlstack_trial(str(TASK), "--agent", "nop", "--agent-command", "true")
    assert done.returncode == 2 and "--agent-command: runs instead of --agent nop" in done.stderr


def test_without_a_proxy_the_trial_gets_a_registry_a_replica_and_a_proxy_of_its_own(tmp_path):
    config = stack_config(TrialRequest(task_dir=TASK, model=Path("models/m")), tmp_path / "trials", tmp_path / "run")
    services = {s.name: s for s in config.services}
    assert list(services) == ["registry", "inference", "proxy"]  # each waits for the one before
    proxy = services["proxy"].args
    assert resolve(services["inference"], stand_in_addresses(config.services)).model == Path("models/m").as_posix()
    assert proxy[proxy.index("--trials-dir") + 1] == str((tmp_path / "trials").resolve())  # where the trial's calls land
    assert services["inference"].python.endswith(".venv-vllm/bin/python") and services["proxy"].python.endswith(".venv-proxy/bin/python")
