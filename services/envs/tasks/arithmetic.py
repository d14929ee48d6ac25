"""The arithmetic task: generated, verifiable problems with an exact-answer reward.

An infinite, seeded stream; difficulty sets operand size and the operators used. The reward is
1 for the exact integer answer, plus an optional small bonus for answering in the expected
form, so a cold policy has a gradient towards the format before it can get answers right.

A fixed held-out set (its own seed) is left out of the training stream and of the supervised
warm start, so ``eval_before``/``eval_after`` measure problems the policy never trained on.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator

from pydantic import BaseModel, ConfigDict, Field

from rlstack.envs.tasks import TaskContext, register

OPERATORS = {1: "+", 2: "+-", 3: "+-*"}
ANSWER = re.compile(r"-?\d+")
SYSTEM_PROMPT = "Answer with the number only."


class ArithmeticOptions(BaseModel):
    """``--task-options`` of ``--task arithmetic``."""

    model_config = ConfigDict(extra="forbid")

    difficulty: int = Field(default=1, ge=1, le=3)
    """1: two-operand sums; 2: adds subtraction; 3: adds products of small numbers."""
    max_operand: int = Field(default=20, ge=1)
    format_reward: float = Field(default=0.0, ge=0, le=1)
    """Bonus when the completion is just an integer (the answer form), right or wrong."""


class ArithmeticConfig(ArithmeticOptions):
    seed: int = 0
    heldout_size: int = Field(default=0, ge=0)
    """Problems of the held-out set (drawn with ``heldout_seed``) that the stream never yields."""
    heldout_seed: int = 1_000_003


class Problem(BaseModel):
    question: str
    answer: int


def _draw(rng: random.Random, config: ArithmeticConfig) -> Problem:
    op = rng.choice(OPERATORS[config.difficulty])
    high = config.max_operand if op != "*" else max(2, config.max_operand // 2)
    a, b = rng.randint(0, high), rng.randint(0, high)
    value = a + b if op == "+" else a - b if op == "-" else a * b
    return Problem(question=f"Compute {a} {op} {b}.", answer=value)


def heldout(config: ArithmeticConfig) -> list[Problem]:
    """The fixed evaluation set: ``heldout_size`` distinct problems, the same for every seed."""
    rng = random.Random(config.heldout_seed)
    chosen: dict[str, Problem] = {}
    for _ in range(100 * max(1, config.heldout_size)):
        if len(chosen) >= config.heldout_size:
            break
        problem = _draw(rng, config)
        chosen.setdefault(problem.question, problem)
    return list(chosen.values())


def problems(config: ArithmeticConfig) -> Iterator[Problem]:
    rng = random.Random(config.seed)
    excluded = {p.question for p in heldout(config)}
    while True:
        problem = _draw(rng, config)
        if problem.question not in excluded:
            yield problem


def messages(problem: Problem) -> list[dict[str, str]]:
    """The chat prompt both the env server and the warm start use."""
    return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": problem.question}]


def parse_answer(completion: str) -> int | None:
    """The first integer in the completion (the policy is asked to answer with just the number)."""
    match = ANSWER.search(completion)
    return int(match.group()) if match else None


def reward(completion: str, problem: Problem, config: ArithmeticConfig) -> float:
    value = parse_answer(completion)
    score = 1.0 if value == problem.answer else 0.0
    if config.format_reward and re.fullmatch(r"\s*-?\d+\s*", completion):
        score += config.format_reward
    return score


class ArithmeticTask:
    def __init__(self, config: ArithmeticConfig) -> None:
        self.config = config

    def stream(self) -> Iterator[Problem]:
        return problems(self.config)

    def heldout(self) -> list[Problem]:
        return heldout(self.config)

    def messages(self, problem: Problem) -> list[dict[str, str]]:
        return messages(problem)

    def score(self, completion: str, problem: Problem) -> float:
        return reward(completion, problem, self.config)


@register("arithmetic", ArithmeticOptions)
def build(options: ArithmeticOptions, context: TaskContext) -> ArithmeticTask:
    return ArithmeticTask(ArithmeticConfig(**options.model_dump(), seed=context.seed, heldout_size=context.heldout_size))
