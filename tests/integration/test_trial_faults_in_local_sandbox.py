"""Trials that go wrong, in the real local sandbox: each ends with a clear status, no made-up reward,
a result.json, and no process left behind. Also what the agent can and cannot see."""

from __future__ import annotations

import asyncio
import json

import pytest

from rlstack.episodes.harbor import HarborTask
from rlstack.episodes.sandboxes import LocalSandboxConfig
from rlstack.episodes.sandboxes.local import LocalSandbox
from rlstack.episodes.sandboxes.procgroup import live_members
from rlstack.episodes.trials import (
    AgentSpec,
    TrialExists,
    TrialResult,
    TrialSpec,
    TrialStatus,
    run_trial,
)
from tests.helpers.harbor_tasks import processes_with, sleep_marker, until, write_task
from tests.helpers.wait import wait_until

ANSWER_TEST = "#!/bin/bash\nif grep -qx 42 /app/answer.txt; then echo 1; else echo 0; fi > /logs/verifier/reward.txt\n"


@pytest.fixture
def sandbox(tmp_path):
    box = LocalSandbox(LocalSandboxConfig(environment="host", work_dir=tmp_path / "workspaces", kill_grace_sec=0.5))
    box.check()  # fails with the fix (install bubblewrap) rather than skipping
    return box


@pytest.fixture
def task(tmp_path) -> HarborTask:
    return HarborTask.load(write_task(tmp_path / "tasks" / "answer", test_sh=ANSWER_TEST, files={"hint.txt": "6*7\n"},
                                      agent_timeout_sec=60))


def trial(task: HarborTask, name: str, *command: str, **kwargs) -> TrialSpec:
    return TrialSpec(run="faults", trial=name, task=task, agent=AgentSpec(name="sh", command=list(command)), **kwargs)


def run(spec: TrialSpec, sandbox, tmp_path) -> TrialResult:
    result = asyncio.run(run_trial(spec, sandbox, tmp_path / "trials"))
    on_disk = TrialResult.model_validate_json((tmp_path / "trials" / spec.run / spec.trial / "result.json").read_text())
    assert on_disk.status == result.status and on_disk.reward == result.reward
    return result


def test_an_agent_that_solves_the_task_scores_one(task, sandbox, tmp_path):
    result = run(trial(task, "solves", "sh", "-c", "cat hint.txt && echo 42 > /app/answer.txt && echo done"), sandbox, tmp_path)
    assert result.status == TrialStatus.OK and result.reward == 1.0
    agent_dir = tmp_path / "trials" / "faults" / "solves" / "agent"
    assert (agent_dir / "stdout.txt").read_text() == "6*7\ndone\n"
    assert (agent_dir / "exit_code.txt").read_text().strip() == "0"
    assert (agent_dir / "instruction.md").read_text() == task.instruction
    assert result.agent.run.exit_code == 0 and result.verifier.rewards == {"reward": 1.0}
    assert not list((tmp_path / "workspaces").iterdir())  # the workspace went with the trial


def test_a_verifier_that_writes_no_reward_is_a_verifier_error(tmp_path, sandbox):
    task = HarborTask.load(write_task(tmp_path / "tasks" / "silent", test_sh="#!/bin/bash\necho 'all good'\n"))
    result = run(trial(task, "silent", "true"), sandbox, tmp_path)
    assert result.status == TrialStatus.VERIFIER_ERROR and result.reward is None
    assert "neither /logs/verifier/reward.txt" in result.error


def test_a_verifier_that_hangs_is_a_verifier_error(tmp_path, sandbox):
    marker = sleep_marker()
    task = HarborTask.load(write_task(tmp_path / "tasks" / "slow", test_sh=f"#!/bin/bash\nsleep {marker}\n"))
    result = run(trial(task, "slow-verifier", "true", verifier_timeout_sec=0.5), sandbox, tmp_path)
    assert result.status == TrialStatus.VERIFIER_ERROR and result.reward is None
    assert result.verifier.run.timed_out and "timed out" in result.error
    assert processes_with(marker) == []


def test_an_agent_that_hangs_is_killed_with_everything_it_started(task, sandbox, tmp_path):
    marker = sleep_marker()
    groups: list[int] = []

    async def scenario():
        # The agent starts a child that leaves the process group (setsid): the pid namespace still ends it.
        spec = trial(task, "hangs", "sh", "-c", f"setsid sleep {marker} & sleep {marker} & wait", agent_timeout_sec=1)
        running = asyncio.create_task(run_trial(spec, sandbox, tmp_path / "trials"))
        await until(lambda: sandbox.active() or running.done())
        groups.extend(sandbox.active().values())
        return await running

    result = asyncio.run(scenario())
    assert groups, "the agent never ran"
    assert result.status == TrialStatus.AGENT_TIMEOUT and result.reward is None
    assert result.agent.run.timed_out and result.error == "agent timed out"
    assert result.verifier.rewards == {"reward": 0.0}  # the verifier still looked: kept for inspection only
    wait_until(lambda: all(live_members(pgid) == [] for pgid in groups), timeout=10)
    assert processes_with(marker) == []
    assert sandbox.active() == {}


def test_an_agent_that_crashes_is_an_agent_error(task, sandbox, tmp_path):
    result = run(trial(task, "crashes", "sh", "-c", "echo 42 > /app/answer.txt; echo boom >&2; kill -SEGV $$"),
                 sandbox, tmp_path)
    assert result.status == TrialStatus.AGENT_ERROR and result.reward is None
    assert result.agent.run.exit_code != 0 and "agent exited with" in result.error
    assert (tmp_path / "trials" / "faults" / "crashes" / "agent" / "stderr.txt").read_text() == "boom\n"


def test_cancelling_a_running_trial_kills_its_processes(task, sandbox, tmp_path):
    marker = sleep_marker()
    groups: list[int] = []

    async def scenario():
        spec = trial(task, "cancelled", "sh", "-c", f"sleep {marker} & sleep {marker}; wait")
        running = asyncio.create_task(run_trial(spec, sandbox, tmp_path / "trials"))
        await until(lambda: processes_with(marker) and sandbox.active())
        groups.extend(sandbox.active().values())
        running.cancel()
        with pytest.raises(asyncio.CancelledError):
            await running

    asyncio.run(scenario())
    wait_until(lambda: all(live_members(pgid) == [] for pgid in groups), timeout=10)
    assert processes_with(marker) == []
    result = json.loads((tmp_path / "trials" / "faults" / "cancelled" / "result.json").read_text())
    assert result["status"] == "infra_error" and result["reward"] is None and "cancelled" in result["error"]
    assert not list((tmp_path / "workspaces").iterdir())


def test_no_bubblewrap_is_an_infra_error_not_a_zero(task, tmp_path):
    box = LocalSandbox(LocalSandboxConfig(environment="host", bwrap="/nonexistent/bwrap", work_dir=tmp_path / "workspaces"))
    result = run(trial(task, "no-bwrap", "true"), box, tmp_path)
    assert result.status == TrialStatus.INFRA_ERROR and result.reward is None
    assert "install bubblewrap" in result.error
    assert result.agent.run is None and result.verifier.run is None


def test_what_the_agent_sees(task, sandbox, tmp_path, monkeypatch):
    monkeypatch.setenv("RLSTACK_PROXY_TRIAL_KEY_SECRET", "host-secret")  # the env server's, never the agent's
    script = "; ".join([
        'printf "%s" "$1" > /logs/agent/argv.txt',
        'env > /logs/agent/env.txt',
        f'cat {task.path}/tests/test.sh > /logs/agent/peek.txt 2>&1 || echo hidden >> /logs/agent/peek.txt',
        "echo 1 > /logs/verifier/reward.txt 2> /dev/null || echo refused > /logs/agent/fake-reward.txt",
        "touch /etc/agent-was-here 2> /dev/null || echo refused > /logs/agent/etc.txt",
        "pwd > /logs/agent/pwd.txt",
    ])
    spec = trial(task, "sees", "sh", "-c", script, "sh", "{instruction}",
                 env={"OPENAI_BASE_URL": "http://127.0.0.1:4000/trials/faults/sees/v1", "OPENAI_API_KEY": "rlst_key"})
    result = run(spec, sandbox, tmp_path)
    agent_dir = tmp_path / "trials" / "faults" / "sees" / "agent"
    env = dict(line.split("=", 1) for line in (agent_dir / "env.txt").read_text().splitlines() if "=" in line)
    assert env["OPENAI_BASE_URL"] == "http://127.0.0.1:4000/trials/faults/sees/v1" and env["OPENAI_API_KEY"] == "rlst_key"
    assert env["RLSTACK_RUN"] == "faults" and env["RLSTACK_TRIAL"] == "sees" and env["RLSTACK_ATTEMPT"] == "1"
    assert "RLSTACK_PROXY_TRIAL_KEY_SECRET" not in env
    assert (agent_dir / "argv.txt").read_text() == task.instruction
    assert (agent_dir / "pwd.txt").read_text().strip() == "/app"
    assert "hidden" in (agent_dir / "peek.txt").read_text()  # the task's tests are covered
    assert (agent_dir / "fake-reward.txt").read_text().strip() == "refused"
    assert (agent_dir / "etc.txt").read_text().strip() == "refused"
    assert result.status == TrialStatus.OK and result.reward == 0.0  # its fake reward did not count


def test_a_trial_id_is_used_once(task, sandbox, tmp_path):
    run(trial(task, "once", "true"), sandbox, tmp_path)
    with pytest.raises(TrialExists, match="its own id"):
        run(trial(task, "once", "true", attempt=2), sandbox, tmp_path)


def test_configured_host_paths_are_covered(task, tmp_path):
    secrets = tmp_path / "home"
    secrets.mkdir()
    (secrets / "credentials").write_text("s3cret")
    box = LocalSandbox(LocalSandboxConfig(environment="host", work_dir=tmp_path / "workspaces", hide_paths=[secrets]))
    script = f"cat {secrets}/credentials > /logs/agent/peek.txt 2>&1 || echo hidden >> /logs/agent/peek.txt"
    run(trial(task, "covered", "sh", "-c", script), box, tmp_path)
    peek = (tmp_path / "trials" / "faults" / "covered" / "agent" / "peek.txt").read_text()
    assert "s3cret" not in peek and "hidden" in peek
