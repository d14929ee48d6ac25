"""The env server's settings describe one task: harbor's flat fields, or a registered task's own options."""

from pathlib import Path

import pytest
from pydantic import ValidationError

from rlstack.envs.config import EnvSettings, HarborSpec
from rlstack.envs.tasks.arithmetic import ArithmeticOptions
from rlstack.envs.tasks.gsm8k import Gsm8kOptions


def test_each_task_is_a_typed_spec(tmp_path):
    assert EnvSettings.from_cli(["--task-options", '{"difficulty": 2}']).task_spec == ArithmeticOptions(difficulty=2)
    assert EnvSettings.from_cli(["--task", "gsm8k", "--task-options", '{"dataset_path": "x.jsonl"}']).task_spec == Gsm8kOptions(
        dataset_path=Path("x.jsonl"))
    spec = EnvSettings.from_cli(["--task", "harbor", "--tasks-dir", str(tmp_path), "--agent", "claude-code"]).task_spec
    assert spec == HarborSpec(tasks_dir=tmp_path, agent="claude-code", sandbox="local")


def test_task_options_come_from_the_environment_too(monkeypatch):
    monkeypatch.setenv("RLSTACK_ENV_TASK_OPTIONS", '{"max_operand": 7, "format_reward": 0.1}')
    assert EnvSettings.from_cli([]).task_spec == ArithmeticOptions(max_operand=7, format_reward=0.1)


def test_a_bad_or_unknown_option_is_named():
    with pytest.raises(ValidationError, match=r"task_options.difficulty: Input should be less than or equal to 3"):
        EnvSettings.from_cli(["--task-options", '{"difficulty": 9}'])
    with pytest.raises(ValidationError, match=r"task_options.dificulty: Extra inputs are not permitted \(task 'arithmetic'\)"):
        EnvSettings.from_cli(["--task-options", '{"dificulty": 2}'])


def test_an_unregistered_task_names_the_known_ones():
    with pytest.raises(ValidationError, match=r"task: task 'chess' is not registered \(known: arithmetic, gsm8k"):
        EnvSettings.from_cli(["--task", "chess"])


def test_a_field_of_another_task_is_named(tmp_path):
    with pytest.raises(ValidationError, match="task_options: task 'harbor' is set by its own fields"):
        EnvSettings.from_cli(["--task", "harbor", "--tasks-dir", str(tmp_path), "--task-options", '{"difficulty": 2}'])
    with pytest.raises(ValidationError, match="agent.max_turns, tasks_dir: only for task 'harbor'"):
        EnvSettings.from_cli(["--tasks-dir", str(tmp_path), "--agent-max-turns", "3"])


def test_harbor_needs_its_dataset(monkeypatch):
    monkeypatch.setenv("RLSTACK_ENV_TASK", "harbor")
    with pytest.raises(ValidationError, match="tasks_dir: task 'harbor' needs"):
        EnvSettings.from_cli([])
