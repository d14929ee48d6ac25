"""What the local sandbox hides by default, seen from inside a real one: home directories, the
checkout's runs/ and data/, the example tasks' tests and solutions; the agent's own runtime (this
Python, rlstack) still works. And the env server's ``--sandbox-hide-paths`` replaces the default."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from prometheus_client import CollectorRegistry

from rlstack.envs.agent_trials import AgentEnvRunner, AgentMetrics
from rlstack.envs.config import EnvSettings
from rlstack.envs.runner import EnvMetrics
from rlstack.episodes.harbor import HarborTask
from rlstack.episodes.sandboxes import LocalSandboxConfig
from rlstack.episodes.sandboxes.local import LocalSandbox
from rlstack.episodes.trials import AgentSpec, TrialSpec, TrialStatus, run_trial
from tests.conftest import REPO
from tests.helpers.harbor_tasks import write_task

LOOK = r'''
import json, os, sys
paths = json.loads(sys.argv[1])
seen = {p: sorted(os.listdir(p)) if os.path.isdir(p) else None for p in paths}
import rlstack.episodes.sandboxes.safefs  # the runtime is visible
open("/logs/agent/seen.json", "w").write(json.dumps(seen))
'''


def test_home_runs_and_example_answers_are_hidden_by_default(tmp_path):
    tasks = REPO / "examples" / "tasks"
    example = next(p for p in sorted(tasks.iterdir()) if (p / "tests").is_dir() and (p / "solution").is_dir())
    (REPO / "runs").mkdir(exist_ok=True)
    probe = [str(Path.home()), "/home", "/root", str(REPO / "runs"), str(example / "tests"), str(example / "solution")]
    task = HarborTask.load(write_task(tmp_path / "tasks" / "look", files={"look.py": LOOK}))
    spec = TrialSpec(run="hide", trial="default", task=task,
                     agent=AgentSpec(name="look", command=[sys.executable, "/app/look.py", json.dumps(probe)]))
    result = asyncio.run(run_trial(spec, LocalSandbox(LocalSandboxConfig(work_dir=tmp_path / "ws")), tmp_path / "trials"))
    assert result.status == TrialStatus.OK, result.error
    seen = json.loads((tmp_path / "trials" / "hide" / "default" / "agent" / "seen.json").read_text())
    assert seen[str(example / "tests")] == [] and seen[str(example / "solution")] == []
    assert seen[str(REPO / "runs")] == []
    for home in (str(Path.home()), "/home", "/root"):
        visible = set(seen[home] or [])
        # Only the way down to the agent's runtime (a checkout or venv inside a home) may show.
        assert visible <= {Path(p).relative_to(home).parts[0] for p in (sys.prefix, sys.base_prefix, REPO)
                            if Path(p).is_relative_to(home)}


def test_the_env_servers_setting_replaces_the_default(tmp_path):
    settings = dict(task="harbor", tasks_dir=REPO / "examples" / "tasks", group_size=2)
    registry = CollectorRegistry()
    chosen = AgentEnvRunner(EnvSettings(**settings, sandbox_hide_paths=[tmp_path]), EnvMetrics(registry),
                            AgentMetrics(registry))
    assert chosen.sandbox.config.hide_paths == [tmp_path]
    registry = CollectorRegistry()
    default = AgentEnvRunner(EnvSettings(**settings), EnvMetrics(registry), AgentMetrics(registry))
    assert Path("/home") in default.sandbox.config.hide_paths and REPO / "runs" in default.sandbox.config.hide_paths
