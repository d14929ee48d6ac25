"""The env server's flat settings describe one task; fields of another task are refused by name."""

import pytest
from pydantic import ValidationError

from rlstack.envs.config import ArithmeticSpec, EnvSettings, HarborSpec


def test_each_task_is_a_typed_spec(tmp_path):
    assert EnvSettings.from_cli(["--difficulty", "2"]).task_spec == ArithmeticSpec(difficulty=2, max_operand=20, format_reward=0.0)
    spec = EnvSettings.from_cli(["--task", "harbor", "--tasks-dir", str(tmp_path), "--agent", "claude-code"]).task_spec
    assert spec == HarborSpec(tasks_dir=tmp_path, agent="claude-code", sandbox="local")


def test_a_field_of_another_task_is_named(tmp_path):
    with pytest.raises(ValidationError, match="difficulty: only for task 'arithmetic', but task is 'harbor'"):
        EnvSettings.from_cli(["--task", "harbor", "--tasks-dir", str(tmp_path), "--difficulty", "2"])
    with pytest.raises(ValidationError, match="agent_max_turns, tasks_dir: only for task 'harbor'"):
        EnvSettings.from_cli(["--tasks-dir", str(tmp_path), "--agent-max-turns", "3"])


def test_harbor_needs_its_dataset(monkeypatch):
    monkeypatch.setenv("RLSTACK_ENV_TASK", "harbor")
    with pytest.raises(ValidationError, match="tasks_dir: task 'harbor' needs"):
        EnvSettings.from_cli([])
