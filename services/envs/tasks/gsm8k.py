"""The gsm8k task: grade-school word problems whose reference answer ends in ``#### <number>``.

Problems come from a local JSONL (``question``/``answer`` rows, the GSM8K format), or from
Hugging Face ``datasets`` when it is installed and a cache or network is there. Nothing falls
back silently: without either, start-up fails and names the dozen hand-written samples shipped
in ``data/`` (enough for a smoke test, not for training) as a ``path`` to pass on purpose. The
reward compares numbers, not strings: ``1,200``, ``1200.0`` and ``$1200`` are the same answer.
"""

from __future__ import annotations

import json
import logging
import random
import re
from collections.abc import Iterator
from decimal import Decimal, InvalidOperation
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field

from rlstack.envs.tasks import TaskContext, register

log = logging.getLogger(__name__)
SAMPLES = Path(__file__).with_name("data") / "gsm8k_sample.jsonl"
SYSTEM_PROMPT = "Solve the problem step by step. End with a line '#### <answer>' giving the final number."
NUMBER = re.compile(r"-?\$?\d[\d,]*(?:\.\d+)?")


class Gsm8kOptions(BaseModel):
    """``--task-options`` of ``--task gsm8k``."""

    model_config = ConfigDict(extra="forbid")

    dataset_path: Path | None = None
    """A local JSONL of question/answer rows; unset loads Hugging Face datasets' openai/gsm8k (start-up fails if it cannot)."""
    split: str = "train"
    """The Hugging Face split, when ``dataset_path`` is unset."""


class GSM8KConfig(BaseModel):
    path: Path | None = None
    """Local JSONL; unset loads Hugging Face datasets' openai/gsm8k (an error when it cannot)."""
    split: str = "train"
    heldout_size: int = Field(default=0, ge=0)
    """The first rows, kept out of the stream for evaluation."""
    seed: int = 0


class GSM8KProblem(BaseModel):
    question: str
    answer: str
    """The reference's final number as written after ``####``."""


def to_number(text: str) -> Decimal | None:
    try:
        return Decimal(text.replace(",", "").replace("$", "").strip().rstrip("."))
    except InvalidOperation:
        return None


def reference_answer(solution: str) -> str:
    if "####" not in solution:
        raise ValueError("a GSM8K answer ends with '#### <number>'")
    return solution.rsplit("####", 1)[1].strip()


def extract_answer(completion: str) -> Decimal | None:
    """The number after the last ``####``, else the last number in the completion."""
    tail = completion.rsplit("####", 1)[1] if "####" in completion else completion
    numbers = NUMBER.findall(tail)
    if not numbers:
        return None
    return to_number(numbers[0] if "####" in completion else numbers[-1])


def load_rows(config: GSM8KConfig) -> list[dict]:
    if config.path is not None:
        return [json.loads(line) for line in config.path.read_text().splitlines() if line.strip()]
    try:
        from datasets import load_dataset

        return list(load_dataset("openai/gsm8k", "main", split=config.split))
    except Exception as exc:  # noqa: BLE001 - not installed, offline, no cache: all mean "say what to do"
        raise RuntimeError(f"gsm8k: no path set and Hugging Face's openai/gsm8k cannot be loaded ({type(exc).__name__}: {exc}); "
                           f"set the gsm8k task's dataset_path to a local JSONL of question/answer rows (a 12-problem smoke-test sample: {SAMPLES})") from exc


def load(config: GSM8KConfig) -> list[GSM8KProblem]:
    return [GSM8KProblem(question=row["question"], answer=reference_answer(row["answer"])) for row in load_rows(config)]


class GSM8KTask:
    def __init__(self, config: GSM8KConfig) -> None:
        self.config = config
        rows = load(config)
        if len(rows) <= config.heldout_size:
            raise ValueError(f"{len(rows)} problems cannot leave {config.heldout_size} held out")
        self._heldout, self._train = rows[: config.heldout_size], rows[config.heldout_size :]

    def heldout(self) -> list[GSM8KProblem]:
        return list(self._heldout)

    def stream(self) -> Iterator[GSM8KProblem]:
        """Endless, reshuffled every pass, seeded."""
        rng = random.Random(self.config.seed)
        while True:
            order = list(self._train)
            rng.shuffle(order)
            yield from order

    def messages(self, problem: GSM8KProblem) -> list[dict[str, str]]:
        return [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": problem.question}]

    def score(self, completion: str, problem: GSM8KProblem) -> float:
        got = extract_answer(completion)
        return 1.0 if got is not None and got == to_number(problem.answer) else 0.0


@register("gsm8k", Gsm8kOptions)
def build(options: Gsm8kOptions, context: TaskContext) -> GSM8KTask:
    return GSM8KTask(GSM8KConfig(path=options.dataset_path, split=options.split, heldout_size=context.heldout_size, seed=context.seed))
