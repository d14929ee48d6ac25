"""What an env server needs from a task: problems, a held-out set, prompts and a reward.

The runner only talks to this protocol, so adding a task is one module and one line in
``build_task``.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any, Protocol

from rlstack.envs import arithmetic
from rlstack.envs.config import ArithmeticSpec, EnvSettings, Gsm8kSpec


class Task(Protocol):
    def stream(self) -> Iterator[Any]: ...

    def heldout(self) -> list[Any]: ...

    def messages(self, problem: Any) -> list[dict[str, str]]: ...

    def score(self, completion: str, problem: Any) -> float: ...


class ArithmeticTask:
    def __init__(self, config: arithmetic.ArithmeticConfig) -> None:
        self.config = config

    def stream(self) -> Iterator[arithmetic.Problem]:
        return arithmetic.problems(self.config)

    def heldout(self) -> list[arithmetic.Problem]:
        return arithmetic.heldout(self.config)

    def messages(self, problem: arithmetic.Problem) -> list[dict[str, str]]:
        return arithmetic.messages(problem)

    def score(self, completion: str, problem: arithmetic.Problem) -> float:
        return arithmetic.reward(completion, problem, self.config)


def build_task(settings: EnvSettings) -> Task:
    spec = settings.task_spec
    if isinstance(spec, Gsm8kSpec):
        from rlstack.envs.gsm8k import GSM8KConfig, GSM8KTask

        return GSM8KTask(GSM8KConfig(path=spec.dataset_path, heldout_size=settings.heldout_size, seed=settings.seed))
    if isinstance(spec, ArithmeticSpec):
        return ArithmeticTask(arithmetic.ArithmeticConfig(difficulty=spec.difficulty, max_operand=spec.max_operand,
                                                          format_reward=spec.format_reward, seed=settings.seed,
                                                          heldout_size=settings.heldout_size))
    raise ValueError(f"task {spec.kind!r} has no single-turn runner (harbor runs in the agent env server)")
