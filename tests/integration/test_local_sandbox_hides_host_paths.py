"""What the local sandbox hides by default, seen from inside a real one: home directories, the
checkout's runs/ and data/, the example tasks' tests and solutions; the agent's own runtime (this
Python, rlstack) still works. And the env server's ``--sandbox-hide-paths`` replaces the default."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from prometheus_client import CollectorRegistry

from rlstack.envs.config import EnvSettings
from rlstack.envs.harbor_metrics import HarborMetrics
from rlstack.envs.harbor_runner import HarborEnvRunner
from rlstack.envs.runner import EnvMetrics
from rlstack.episodes.harbor import HarborTask
from rlstack.episodes.sandboxes import LocalSandboxConfig
from rlstack.episodes.sandboxes.local import LocalSandbox
from rlstack.episodes.trials import AgentSpec, TrialSpec, TrialStatus, run_trial
from tests.conftest import REPO, free_port
from tests.helpers.harbor_tasks import write_task

LOOK = r'''
import json, os, sys
paths = json.loads(sys.argv[1])
seen = {p: sorted(os.listdir(p)) if os.path.isdir(p) else None for p in paths}
import rlstack.common.safefs  # the runtime is visible
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
    result = asyncio.run(run_trial(spec, LocalSandbox(LocalSandboxConfig(environment="host", work_dir=tmp_path / "ws")), tmp_path / "trials"))
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
    settings = dict(task="harbor", sandbox_environment="host", tasks_dir=REPO / "examples" / "tasks", group_size=2)
    registry = CollectorRegistry()
    chosen = HarborEnvRunner(EnvSettings(**settings, sandbox_hide_paths=[tmp_path]), EnvMetrics(registry),
                            HarborMetrics(registry))
    assert chosen.sandbox.config.hide_paths == [tmp_path]
    registry = CollectorRegistry()
    default = HarborEnvRunner(EnvSettings(**settings), EnvMetrics(registry), HarborMetrics(registry))
    assert Path("/home") in default.sandbox.config.hide_paths and REPO / "runs" in default.sandbox.config.hide_paths


FORGE = r'''
import json, os, sys
journal = sys.argv[1]
seen = sorted(os.listdir(journal)) if os.path.isdir(journal) else None
forged = {"kind": "ready", "group": "forged", "key": "k" * 32, "body": {"tokens": [[1]], "masks": [[1]], "scores": [1.0]}}
try:
    with open(os.path.join(journal, "r-agent-env.dead.jsonl"), "a") as f:
        f.write(json.dumps(forged) + "\n")
    wrote = True
except OSError:
    wrote = False
open("/logs/agent/forge.json", "w").write(json.dumps({"seen": seen, "wrote": wrote}))
'''


def test_an_agent_cannot_read_or_forge_the_env_servers_trial_journal(tmp_path):
    """The journal is what a restarted env posts to the trainer: a ``ready`` line an agent could write
    would train the policy on a group of the agent's making. A real trial of the env server's own
    ``_trial`` (its private paths), the agent trying both, and the journal unchanged outside."""
    from tests.helpers.harbor_tasks import write_task as write

    write(tmp_path / "tasks" / "forge", files={"forge.py": FORGE})
    # In the checkout, which the sandbox shows (its runtime lives there): /tmp is covered anyway
    journal = REPO / ".cache" / f"journal-attack-{tmp_path.name}-{__import__('os').getpid()}"
    try:
        attack(tmp_path, journal, write)
    finally:
        __import__("shutil").rmtree(journal, ignore_errors=True)


def attack(tmp_path: Path, journal: Path, write) -> None:  # noqa: ANN001
    settings = EnvSettings(task="harbor", sandbox_environment="host", tasks_dir=tmp_path / "tasks", run_id="r", name="agent-env", journal_dir=journal,
                           trials_dir=tmp_path / "trials", agent="command",
                           agent_command=f"{sys.executable} /app/forge.py {journal}", proxy_url=f"http://127.0.0.1:{free_port()}")
    registry = CollectorRegistry()
    runner = HarborEnvRunner(settings, EnvMetrics(registry), HarborMetrics(registry))
    assert runner.journal.hold()  # as the env server does before its first trial
    runner.journal.trial(__import__("rlstack.envs.journal", fromlist=["TrialEntry"]).TrialEntry(
        group="g0", trial="t0", task="forge", status="ok", reward=1.0, trial_dir="/x"))
    before = {p.name: p.read_bytes() for p in journal.iterdir()}
    [task] = runner.task.dataset.tasks
    asyncio.run(runner._trial(task, "forge-t0", 1))
    report = json.loads((tmp_path / "trials" / "r" / "forge-t0" / "agent" / "forge.json").read_text())
    assert report["seen"] in ([], None)  # covered: empty, or not there at all
    assert {p.name: p.read_bytes() for p in journal.iterdir()} == before  # nothing written outside
    assert runner.journal.orphans() == []
