"""The scripted teacher as vLLM's sampler: every call is answered with the teacher's turn, token by
token, so a real agent runs the teacher's tool calls while each token the proxy records is one
vLLM sampled, with its id and its logprob under the served weights.

A vLLM logits processor, loaded into the replica with ``--logits-processors
rlstack.modelkit.teacher.forcing:TeacherForcing`` (the class imports vLLM when vLLM asks for it). Its
tasks come from ``RLSTACK_TEACHER_TASKS``, a JSON list of ``TaskSpec``. It reads each call back
from its prompt in the served family's format (``formats``: ChatML, harmony, DeepSeek V3)
and answers in the tokens that family's models generate (with the teacher's reasoning where the
prompt asks the model to think), through its end of turn.

What it is for: scenarios that need given tool calls on vLLM's exact ids (claude-code's
sub-agents in the scaffold matrix) where a policy warm-started to make them would cost minutes.
Not a policy: its answers do not depend on the weights, only their logprobs do.
"""

from __future__ import annotations

import json
import os
from dataclasses import fields
from pathlib import Path
from typing import Any

import torch

from rlstack.common.model_families import family_of
from rlstack.episodes.harbor.make_tasks import TaskSpec
from rlstack.modelkit.teacher.formats import (
    FAMILY_FORMAT,
    FORMATS,
    REASONING,
    ChatML,
    PromptFormat,
    template_kwargs,
)
from rlstack.modelkit.teacher.scripted import Conversation, Teacher, next_message

__all__ = ["REASONING", "TASKS_ENV", "TURN_END", "answer_ids", "prompt_format", "read_conversation", "template_kwargs", "write_tasks"]

TASKS_ENV = "RLSTACK_TEACHER_TASKS"
TURN_END = ChatML.TURN_END


def write_tasks(specs: list[TaskSpec], path: Path) -> Path:
    """The tasks file ``RLSTACK_TEACHER_TASKS`` names."""
    path.write_text(json.dumps([{f.name: getattr(s, f.name) for f in fields(TaskSpec)} for s in specs]))
    return path


def prompt_format(model_dir: str | Path) -> PromptFormat:
    """The format the served model's family writes turns in (``formats``)."""
    family = family_of(model_dir)
    if family.name not in FAMILY_FORMAT:
        raise ValueError(f"model family {family.name!r} has no tool format the teacher can write")
    return FORMATS[FAMILY_FORMAT[family.name]]


def read_conversation(prompt: str, fmt: PromptFormat = FORMATS["chatml"]) -> Conversation:
    """The teacher's view of a call from the prompt the template rendered."""
    return fmt.read(prompt)


def answer_ids(tokenizer, teacher: Teacher, prompt_ids: list[int], fmt: PromptFormat = FORMATS["chatml"]) -> list[int]:  # noqa: ANN001 - a transformers tokenizer
    """The teacher's turn for this prompt, in the family's tokens up to its end of turn; with the
    teacher's reasoning first where the prompt asks for thinking."""
    prompt = tokenizer.decode(prompt_ids, skip_special_tokens=False)
    seen = fmt.read(prompt)
    return fmt.answer(tokenizer, next_message(teacher.find_task(seen.users), seen), prompt)


def build_logits_processor() -> type:
    """``TeacherForcing``, built on first access so this module imports without vLLM (its unit tests)."""
    from transformers import AutoTokenizer
    from vllm.v1.sample.logits_processor import AdapterLogitsProcessor

    class TeacherForcing(AdapterLogitsProcessor):
        """Forces each request's output to the teacher's answer to its prompt, then end-of-turn."""

        def __init__(self, vllm_config, device: torch.device, is_pin_memory: bool) -> None:  # noqa: ANN001 - vLLM's VllmConfig
            super().__init__(vllm_config, device, is_pin_memory)
            self.tokenizer = AutoTokenizer.from_pretrained(vllm_config.model_config.tokenizer)
            self.format = prompt_format(vllm_config.model_config.tokenizer)
            self.teacher = Teacher(read_tasks())

        def is_argmax_invariant(self) -> bool:
            return False

        def new_req_logits_processor(self, params: Any):  # noqa: ANN201 - vLLM's RequestLogitsProcessor
            forced: list[int] = []

            def force(prompt_ids: list[int], output_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
                if not forced:
                    forced.extend(answer_ids(self.tokenizer, self.teacher, prompt_ids, self.format))
                token = forced[min(len(output_ids), len(forced) - 1)]
                logits.fill_(float("-inf"))
                logits[token] = 0.0
                return logits

            return force

    TeacherForcing.__module__, TeacherForcing.__qualname__ = __name__, "TeacherForcing"
    return TeacherForcing


def read_tasks() -> list[TaskSpec]:
    path = os.environ.get(TASKS_ENV)
    return [TaskSpec(**spec) for spec in json.loads(Path(path).read_text())] if path else []


def __getattr__(name: str) -> type:
    if name == "TeacherForcing":
        globals()[name] = build_logits_processor()
        return globals()[name]
    raise AttributeError(name)
