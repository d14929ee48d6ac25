"""A new task is one file: a module that registers itself, found through an installed entry point,
then configured, validated and run by the env server's own runner with nothing else edited."""

import sys
import textwrap

import pytest
from prometheus_client import CollectorRegistry
from pydantic import ValidationError

from rlstack.envs import tasks
from rlstack.envs.config import EnvSettings
from rlstack.envs.runner import EnvMetrics, EnvRunner

ECHO = '''
"""Repeat a word: the smallest task there is."""
from collections.abc import Iterator
from itertools import count

from pydantic import BaseModel, ConfigDict

from rlstack.envs.tasks import TaskContext, register


class EchoOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")
    word: str = "hi"


class Echo:
    def __init__(self, options: EchoOptions, context: TaskContext) -> None:
        self.word, self.held = options.word, context.heldout_size

    def stream(self) -> Iterator[str]:
        return (f"{self.word}{i}" for i in count(self.held))

    def heldout(self) -> list[str]:
        return [f"{self.word}{i}" for i in range(self.held)]

    def messages(self, problem: str) -> list[dict[str, str]]:
        return [{"role": "user", "content": f"Say {problem}."}]

    def score(self, completion: str, problem: str) -> float:
        return float(completion.strip() == problem)


@register("echo", EchoOptions)
def build(options: EchoOptions, context: TaskContext) -> Echo:
    return Echo(options, context)
'''


@pytest.fixture
def installed_echo(tmp_path, monkeypatch):
    """A distribution on sys.path whose only content is one task module and its entry point."""
    builtins = dict(tasks.registered())  # discovered before the distribution exists: nothing of it leaks out
    (tmp_path / "echo_task.py").write_text(textwrap.dedent(ECHO))
    info = tmp_path / "echo_task-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: echo-task\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[{tasks.ENTRY_POINT_GROUP}]\necho = echo_task\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(tasks, "_registered", builtins)  # the built-ins, already imported
    monkeypatch.setattr(tasks, "_discovered", False)
    yield
    sys.modules.pop("echo_task", None)  # the next test imports it afresh, so its @register runs again


def test_an_installed_module_adds_a_task_the_env_server_runs(installed_echo):
    assert {"arithmetic", "gsm8k", "echo"} <= set(tasks.registered())
    settings = EnvSettings.from_cli(["--task", "echo", "--task-options", '{"word": "yo"}', "--heldout-size", "2", "--name", "echo"])
    runner = EnvRunner(settings, EnvMetrics(CollectorRegistry()))
    assert runner.task.heldout() == ["yo0", "yo1"]
    problem = next(runner.problems)
    assert problem == "yo2" and runner.task.messages(problem) == [{"role": "user", "content": "Say yo2."}]
    assert runner.task.score(" yo2\n", problem) == 1.0 and runner.task.score("yo3", problem) == 0.0


def test_its_options_are_checked_by_its_own_model(installed_echo):
    with pytest.raises(ValidationError, match=r"task_options.words: Extra inputs are not permitted \(task 'echo'\)"):
        EnvSettings.from_cli(["--task", "echo", "--task-options", '{"words": "yo"}'])


def test_options_that_would_swallow_typos_are_refused_at_registration():
    from pydantic import BaseModel

    class Loose(BaseModel):
        word: str = "hi"

    with pytest.raises(TypeError, match="Loose must set model_config = ConfigDict"):
        tasks.register("loose", Loose)


def test_two_modules_claiming_one_name_is_an_error(monkeypatch):
    monkeypatch.setattr(tasks, "_registered", dict(tasks.registered()))
    from rlstack.envs.tasks.arithmetic import ArithmeticOptions

    def build(options, context):
        raise AssertionError("never built")

    build.__module__ = "somebody_else"
    with pytest.raises(ValueError, match="task 'arithmetic' is registered twice: by rlstack.envs.tasks.arithmetic and by somebody_else"):
        tasks.register("arithmetic", ArithmeticOptions)(build)
