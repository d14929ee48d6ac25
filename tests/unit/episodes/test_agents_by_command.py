"""Any scaffold by command line: how ``--agent.command`` is checked, split and named."""

from __future__ import annotations

from pathlib import Path

import pytest
from pydantic import ValidationError

from rlstack.envs.config import EnvSettings
from rlstack.episodes.agents import command_agent, trial_env
from tests.conftest import REPO
from tests.unit.envs.test_agent_trials import runner

TASKS = REPO / "examples" / "tasks"


def harbor(*flags: str) -> EnvSettings:
    return EnvSettings.from_cli(["--task", "harbor", "--tasks-dir", str(TASKS), *flags])


def test_an_agent_command_makes_the_agent_a_command():
    s = harbor("--agent-command", "mini -y -t {instruction} -m openai/policy")
    assert s.agent.name == "command" and s.task_spec.agent_command == "mini -y -t {instruction} -m openai/policy"
    assert harbor("--agent", "command", "--agent-command", "x {instruction}").agent.name == "command"


@pytest.mark.parametrize(("flags", "message"), [
    (["--agent", "builtin", "--agent-command", "x {instruction}"], "agent.command: runs instead of agent 'builtin'"),
    (["--agent", "command"], "agent.command: agent.name command needs the command line"),
    (["--agent-command", "mini -t 'unclosed"], "agent_command: No closing quotation"),
    (["--agent-command", "sh -c 'mini -t {instruction}'"], "agent_command: {instruction} must be a word of its own"),
    (["--agent-command", "   "], "agent_command: empty command"),
])
def test_a_command_that_cannot_work_is_refused_by_name(flags, message):
    with pytest.raises(ValidationError, match=message.replace("{", r"\{").replace("}", r"\}")):
        harbor(*flags)


def test_an_agent_command_is_only_for_harbor():
    with pytest.raises(ValidationError, match="agent.command: only for task 'harbor'"):
        EnvSettings.from_cli(["--agent-command", "x {instruction}"])


def test_the_command_is_split_as_a_shell_would_and_named_after_its_program(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    agent = command_agent("env MSWEA_COST_TRACKING=ignore_errors .venv-mini/bin/mini -y -t {instruction} -c 'a b'")
    assert agent.name == "mini"
    assert agent.command == ["env", "MSWEA_COST_TRACKING=ignore_errors", ".venv-mini/bin/mini", "-y", "-t", "{instruction}",
                             "-c", "a b"]
    relative = command_agent("./bin/agent {instruction}")  # runs in /app: a path relative to here is made absolute
    assert relative.command[0] == str(tmp_path / "bin" / "agent") and Path(relative.command[0]).is_absolute()
    assert command_agent("codex exec {instruction}").command[0] == "codex"  # a bare name is looked up on PATH


def test_a_command_agent_finds_the_proxy_in_both_dialects():
    env = trial_env(command_agent("mini {instruction}"), "http://127.0.0.1:4000", "run", "t1", "key", "policy")
    assert env["OPENAI_BASE_URL"] == "http://127.0.0.1:4000/trials/run/t1/v1" and env["OPENAI_API_KEY"] == "key"
    assert env["ANTHROPIC_BASE_URL"] == "http://127.0.0.1:4000/trials/run/t1" and env["ANTHROPIC_API_KEY"] == "key"
    assert env["OPENAI_MODEL"] == "policy" and env["ANTHROPIC_MODEL"].startswith("claude-")


def test_the_env_server_runs_the_command():
    r = runner(agent_command="true {instruction}")
    assert r.agent.name == "true" and r.agent.command == ["true", "{instruction}"]


def test_evaluation_samples_the_builtin_agent_at_its_own_temperature():
    assert runner().eval_agent().env["RLSTACK_AGENT_TEMPERATURE"] == "0.0"  # greedy unless asked
    assert runner(eval_temperature=1.0, temperature=0.7).eval_agent().env["RLSTACK_AGENT_TEMPERATURE"] == "1.0"
    assert runner(agent_command="true {instruction}").eval_agent().name == "true"  # other agents as they train
