"""The scripted teacher as vLLM's sampler: every call is answered with the teacher's turn, token by
token, so a real agent runs the teacher's tool calls while each token the proxy records is one
vLLM sampled, with its id and its logprob under the served weights.

A vLLM logits processor, loaded into the replica with ``--logits-processors
rlstack.modelkit.teacher_forcing:TeacherForcing`` (the class imports vLLM when vLLM asks for it). Its
tasks come from ``RLSTACK_TEACHER_TASKS``, a JSON list of ``TaskSpec``. It reads each call back
from its prompt, so the served template must render turns as ``<|im_start|>role`` blocks and the
offered tools as one JSON object per line inside ``<tools>``: the tiny and demo models' template,
and Qwen3's (``model_families``). The answer is rendered by the same template (with the teacher's
reasoning where the prompt asks the model to think) and ends with its end-of-turn token.

What it is for: scenarios that need given tool calls on vLLM's exact ids (claude-code's
sub-agents in the scaffold matrix) where a policy warm-started to make them would cost minutes.
Not a policy: its answers do not depend on the weights, only their logprobs do.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import fields
from pathlib import Path
from typing import Any

import torch

from rlstack.episodes.harbor.make_tasks import TaskSpec
from rlstack.modelkit.teacher import Conversation, Teacher, next_message

TASKS_ENV = "RLSTACK_TEACHER_TASKS"
TURN_START, TURN_END = "<|im_start|>", "<|im_end|>"
TOOLS = re.compile(r"<tools>\n(.*?)</tools>", re.S)


def write_tasks(specs: list[TaskSpec], path: Path) -> Path:
    """The tasks file ``RLSTACK_TEACHER_TASKS`` names."""
    path.write_text(json.dumps([{f.name: getattr(s, f.name) for f in fields(TaskSpec)} for s in specs]))
    return path


def read_conversation(prompt: str) -> Conversation:
    """The teacher's view of a call from the prompt the template rendered."""
    turns = []
    for block in prompt.split(TURN_START)[1:]:
        role, _, body = block.partition("\n")
        turns.append((role, body.split(TURN_END)[0]))
    tools = TOOLS.search(turns[0][1]) if turns and turns[0][0] == "system" else None
    offered = {json.loads(line).get("function", {}).get("name") for line in tools.group(1).splitlines() if line.strip()} if tools else set()
    return Conversation(users="\n".join(text for role, text in turns if role == "user"),
                        transcript="\n".join(text for _, text in turns), offered=offered,
                        tool_calls_made=sum(1 for role, text in turns if role == "assistant" and "<tool_call>" in text))


REASONING = "The task needs a shell command; I run it, then look at what it printed."
"""The teacher's thinking, where the prompt asks the model to think (a family whose template takes
``enable_thinking``, served with it on): it rides through each dialect's reasoning field and back."""


def template_kwargs(tokenizer, prompt: str) -> dict[str, bool]:  # noqa: ANN001 - a transformers tokenizer
    """The chat-template switches the prompt was rendered with, told from its generation prompt:
    a template that takes ``enable_thinking`` ends a no-thinking prompt with an empty think block."""
    candidates: list[dict[str, bool]] = [{}]
    if "enable_thinking" in (tokenizer.chat_template or ""):
        candidates.append({"enable_thinking": False})
    head = [{"role": "user", "content": "."}]

    def generation_prompt(kwargs: dict[str, bool]) -> str:
        full = tokenizer.apply_chat_template(head, add_generation_prompt=True, tokenize=False, **kwargs)
        return full[len(tokenizer.apply_chat_template(head, tokenize=False, **kwargs)):]

    matching = [k for k in candidates if prompt.endswith(generation_prompt(k))]
    return max(matching, key=lambda k: len(generation_prompt(k)), default={})


def answer_ids(tokenizer, teacher: Teacher, prompt_ids: list[int]) -> list[int]:  # noqa: ANN001 - a transformers tokenizer
    """The teacher's turn for this prompt, in the template's tokens up to its end-of-turn; with the
    teacher's reasoning first where the prompt asks for thinking."""
    prompt = tokenizer.decode(prompt_ids, skip_special_tokens=False)
    seen = read_conversation(prompt)
    message = next_message(teacher.find_task(seen.users), seen)
    message = {**message, "content": message.get("content") or ""}  # Qwen3's template reads a call's content as a string
    kwargs = template_kwargs(tokenizer, prompt)
    if "enable_thinking" in (tokenizer.chat_template or "") and not kwargs:
        message = {**message, "reasoning_content": REASONING}
    head = [{"role": "user", "content": "."}]
    before = tokenizer.apply_chat_template(head, add_generation_prompt=True, tokenize=False, **kwargs)
    turn = tokenizer.apply_chat_template([*head, message], tokenize=False, **kwargs)[len(before):]
    return tokenizer(turn[:turn.index(TURN_END) + len(TURN_END)], add_special_tokens=False)["input_ids"]


def build_logits_processor() -> type:
    """``TeacherForcing``, built on first access so this module imports without vLLM (its unit tests)."""
    from transformers import AutoTokenizer
    from vllm.v1.sample.logits_processor import AdapterLogitsProcessor

    class TeacherForcing(AdapterLogitsProcessor):
        """Forces each request's output to the teacher's answer to its prompt, then end-of-turn."""

        def __init__(self, vllm_config, device: torch.device, is_pin_memory: bool) -> None:  # noqa: ANN001 - vLLM's VllmConfig
            super().__init__(vllm_config, device, is_pin_memory)
            self.tokenizer = AutoTokenizer.from_pretrained(vllm_config.model_config.tokenizer)
            self.teacher = Teacher(read_tasks())

        def is_argmax_invariant(self) -> bool:
            return False

        def new_req_logits_processor(self, params: Any):  # noqa: ANN201 - vLLM's RequestLogitsProcessor
            forced: list[int] = []

            def force(prompt_ids: list[int], output_ids: list[int], logits: torch.Tensor) -> torch.Tensor:
                if not forced:
                    forced.extend(answer_ids(self.tokenizer, self.teacher, prompt_ids))
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
