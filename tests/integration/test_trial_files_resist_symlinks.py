"""An agent (and a verifier) in a real bubblewrap sandbox plants symlinks under every name the
trial machinery later writes, reads or removes; nothing outside the trial changes and no
planted file is read as a reward or an outcome.

Before ``safefs``, ``exit_code.txt`` linked to the batcher's log cut it to 2 bytes, and
``.trajectory.json.tmp`` linked to ``../result.json`` replaced the trial's result.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlstack.common import safefs
from rlstack.episodes.harbor import HarborTask
from rlstack.episodes.sandboxes import LocalSandboxConfig
from rlstack.episodes.sandboxes.kubernetes import _outcome
from rlstack.episodes.sandboxes.local import LocalSandbox
from rlstack.episodes.trials import AgentSpec, TrialResult, TrialSpec, TrialStatus, run_trial
from rlstack.episodes.trials.atif import write_atif
from tests.helpers.harbor_tasks import write_task

AGENT_NAMES = ["exit_code.txt", "stdout.txt", "stderr.txt", "instruction.md", ".trajectory.json.tmp",
               "trajectory.json", "phase.json", ".phase.json.tmp", "result.json", "result.json.tmp", "reward.txt"]


@pytest.fixture
def outside(tmp_path) -> Path:
    """What a planted link points at: a canary file, as writable to the env server as the batcher's log."""
    directory = tmp_path / "outside"
    directory.mkdir()
    (directory / "canary.txt").write_text("1\n")  # also a valid reward: reading it through a link would score
    (directory / "canary.json").write_text('{"reward": 1.0}')
    return directory


def snapshot(directory: Path) -> dict[str, str]:
    return {str(p.relative_to(directory)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
            for p in sorted(directory.rglob("*"))}


def plant(names: list[str], directory: str, outside: Path) -> str:
    """Shell that links each name (absolute and relative targets, and a directory target) out of the trial."""
    lines = []
    for i, name in enumerate(names):
        target = (f"{outside}/canary.txt", "../../../../outside/canary.txt", str(outside))[i % 3]
        lines.append(f'rm -rf "{directory}/{name}"; ln -s "{target}" "{directory}/{name}"')
    return "\n".join(lines)


def sandbox(tmp_path) -> LocalSandbox:
    box = LocalSandbox(LocalSandboxConfig(environment="host", work_dir=tmp_path / "workspaces", kill_grace_sec=0.5))
    box.check()
    return box


def test_links_planted_by_the_agent_change_nothing_outside_the_trial(tmp_path, outside):
    task = HarborTask.load(write_task(tmp_path / "tasks" / "t", test_sh="#!/bin/bash\necho 0 > /logs/verifier/reward.txt\n"))
    before = snapshot(outside)
    script = plant(AGENT_NAMES, "/logs/agent", outside) + "\nls -la /logs/agent >&2\nexit 3\n"
    spec = TrialSpec(run="links", trial="agent", task=task, agent=AgentSpec(name="sh", command=["sh", "-c", script]))
    trials = tmp_path / "trials"
    result = asyncio.run(run_trial(spec, sandbox(tmp_path), trials))
    root = trials / "links" / "agent"
    assert all((root / "agent" / n).is_symlink() for n in AGENT_NAMES if n != "exit_code.txt")
    # The exit code replaced the link (not written through it); the result is the trial's own.
    assert not (root / "agent" / "exit_code.txt").is_symlink()
    assert (root / "agent" / "exit_code.txt").read_text() == "3\n"
    assert TrialResult.model_validate_json((root / "result.json").read_text()).agent.run.exit_code == 3
    assert result.status == TrialStatus.AGENT_ERROR and result.reward is None

    # The ATIF export writes agent/trajectory.json and its temp file where the links sit.
    record = {"run_id": "links", "trial_id": "agent", "request_id": "r1", "api": "openai", "started_at": 1.0,
              "ended_at": 2.0, "latency_seconds": 1.0, "prompt_token_ids": [1, 2],
              "request": {"messages": [{"role": "user", "content": "hi"}]},
              "choices": [{"index": 0, "message": {"role": "assistant", "content": "ok"}, "finish_reason": "stop",
                           "completion_token_ids": [3], "completion_logprobs": [-0.5]}]}
    (root / "litellm-trajectory.w0.jsonl").write_text(json.dumps(record) + "\n")
    written = write_atif(root, "sh")
    assert written == root / "agent" / "trajectory.json" and not written.is_symlink()
    assert json.loads(written.read_text())["session_id"] == "links/agent"
    assert TrialResult.model_validate_json((root / "result.json").read_text()).trial == "agent"
    assert snapshot(outside) == before


def test_links_planted_by_the_verifier_are_not_rewards(tmp_path, outside):
    before = snapshot(outside)
    test_sh = "#!/bin/bash\n" + plant(["reward.txt"], "/logs/verifier", outside).replace(
        "../../../../outside/canary.txt", f"{outside}/canary.txt") + "\n" + \
        f'ln -s "{outside}/canary.json" /logs/verifier/reward.json\n'
    task = HarborTask.load(write_task(tmp_path / "tasks" / "v", test_sh=test_sh))
    spec = TrialSpec(run="links", trial="verifier", task=task, agent=AgentSpec(name="sh", command=["true"]))
    result = asyncio.run(run_trial(spec, sandbox(tmp_path), tmp_path / "trials"))
    assert result.status == TrialStatus.VERIFIER_ERROR and result.reward is None and "symlink" in result.error
    assert snapshot(outside) == before


def test_the_pod_phase_runner_and_the_env_never_follow_links_in_the_log_directory(tmp_path, outside):
    """The kubernetes backend: the agent runs under the phase runner in its container, with its
    log directory on the shared trials volume, and plants links under every name the runner and
    the env server touch afterwards."""
    before = snapshot(outside)
    trial_dir = tmp_path / "trials" / "run" / "trial"
    out_dir = trial_dir / "agent"
    out_dir.mkdir(parents=True)
    script = plant(["phase.json", ".phase.json.tmp", "exit_code.txt", "stderr.txt"], str(out_dir), outside)
    done = subprocess.run([sys.executable, "-m", "rlstack.episodes.sandboxes.phase", "--out-dir", str(out_dir),
                           "--timeout", "30", "--stdout", "stdout.txt", "--stderr", "stderr.txt", "--exit-code-file",
                           "--", "sh", "-c", script], capture_output=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert not (out_dir / "phase.json").is_symlink() and (out_dir / "exit_code.txt").read_text() == "0\n"
    assert _outcome(out_dir, trial_dir).exit_code == 0
    # A link left as phase.json (the agent's last word, after the runner) is no outcome at all.
    (out_dir / "phase.json").unlink()
    os.symlink(outside / "canary.json", out_dir / "phase.json")
    assert _outcome(out_dir, trial_dir) is None
    with pytest.raises(safefs.UnsafePath):
        safefs.read_text(out_dir / "phase.json", trial_dir)
    assert snapshot(outside) == before
