"""The arithmetic task: generated, verifiable problems with an exact-answer reward.

An infinite, seeded stream; difficulty sets operand size and the operators used. The reward is
1 for the exact integer answer, plus an optional small bonus for answering in the expected
form, so a cold policy has a gradient towards the format before it can get answers right.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterator

from pydantic import BaseModel, Field

OPERATORS = {1: "+", 2: "+-", 3: "+-*"}
ANSWER = re.compile(r"-?\d+")


class ArithmeticConfig(BaseModel):
    difficulty: int = Field(default=1, ge=1, le=3)
    """1: two-digit sums; 2: adds subtraction; 3: adds products of small numbers."""
    max_operand: int = Field(default=20, ge=1)
    format_reward: float = Field(default=0.0, ge=0, le=1)
    """Bonus when the completion is just an integer (the answer form), right or wrong."""
    seed: int = 0


class Problem(BaseModel):
    question: str
    answer: int


def problems(config: ArithmeticConfig) -> Iterator[Problem]:
    rng = random.Random(config.seed)
    ops = OPERATORS[config.difficulty]
    while True:
        op = rng.choice(ops)
        high = config.max_operand if op != "*" else max(2, config.max_operand // 2)
        a, b = rng.randint(0, high), rng.randint(0, high)
        value = a + b if op == "+" else a - b if op == "-" else a * b
        yield Problem(question=f"Compute {a} {op} {b}.", answer=value)


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
