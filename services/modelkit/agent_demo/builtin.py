"""A short supervised warm start on tool-call transcripts, so the agent demo's RL has signal.

A random tiny model never emits a well-formed ``<tool_call>``, and GRPO learns nothing from
groups that all score 0. The transcripts are what the built-in agent would send and receive
on generated tasks (``make_tasks.generate``), solved the way a careful agent would: read
what it must, run one command that only *copies* from the instruction or an observation,
then ``submit``. Each assistant turn is rendered by the model's own chat template exactly as
vLLM will render the agent's history, so the warm-started policy's calls chain into single
sequences. The step budget is small on purpose: a policy that is right some of the time.
"""

from __future__ import annotations

import json
import logging
import random
import re
import time
from pathlib import Path

import torch
from pydantic import BaseModel, Field

from rlstack.agent.loop import SYSTEM_PROMPT
from rlstack.agent.tools import tool_schemas
from rlstack.common.contracts.atropos import MASKED
from rlstack.episodes.harbor.make_tasks import BUGS, TaskSpec, generate
from rlstack.modelkit.warm_start import sft_steps

log = logging.getLogger(__name__)


class AgentWarmStartSpec(BaseModel):
    tasks: int = Field(default=700, ge=1)
    """Generated tasks whose transcripts are the training set."""
    task_seed: int = 1000
    """Disjoint from the seeds the demo trains and evaluates on."""
    steps: int = Field(default=60, ge=0)
    batch_size: int = Field(default=16, ge=1)
    lr: float = Field(default=1e-3, gt=0)
    max_seconds: float = Field(default=1800, gt=0)
    """A stuck-machine guard only: the step count defines the policy, whatever the machine's load."""
    seed: int = 0


def _call(name: str, arguments: dict, index: int) -> dict:
    return {"id": f"call_{index}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(arguments, ensure_ascii=False)}}


def solution_commands(spec: TaskSpec) -> list[str]:
    """The bash commands a careful agent runs, in order; the last one solves the task."""
    family = spec.name.rsplit("-s", 1)[0]
    if family == "multiply":
        a, b = re.search(r"Compute (\d+) \* (\d+)", spec.instruction).groups()
        return [f"echo $(({a} * {b})) > /app/answer.txt"]
    if family == "fix":
        buggy, fixed = next((b, f) for _, b, f, _ in BUGS if b in spec.files["calc.py"])
        return ["cat /app/calc.py", f"sed -i 's/{buggy}/{fixed}/' /app/calc.py"]
    return [spec.solve.strip()]


def transcript(spec: TaskSpec) -> list[dict]:
    """The whole conversation: system, instruction, one assistant turn per command, then submit."""
    messages: list[dict] = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": spec.instruction}]
    commands = solution_commands(spec)
    for i, command in enumerate(commands):
        call = _call("bash", {"command": command}, i)
        messages.append({"role": "assistant", "content": None, "tool_calls": [call]})
        output = spec.files["calc.py"] if command == "cat /app/calc.py" else ""
        messages.append({"role": "tool", "tool_call_id": call["id"], "content": f"exit code 0\n{output}"})
    messages.append({"role": "assistant", "content": None, "tool_calls": [_call("submit", {}, len(commands))]})
    return messages


def encode(tokenizer, messages: list[dict]) -> tuple[list[int], list[int]]:  # noqa: ANN001 - a HF tokenizer
    """Token ids and labels of one transcript, built turn by turn as the agent's calls are.

    Each prompt is the template's rendering of the history so far; each assistant turn is its
    canonical tokenisation plus end-of-turn. Labels are MASKED except on assistant turns.
    """
    tools = tool_schemas()
    ids: list[int] = []
    labels: list[int] = []
    for i, message in enumerate(messages):
        if message["role"] != "assistant":
            continue
        prompt_text = tokenizer.apply_chat_template(messages[:i], tools=tools, add_generation_prompt=True, tokenize=False)
        prompt = tokenizer(prompt_text, add_special_tokens=False)["input_ids"]
        if prompt[: len(ids)] != ids:
            raise ValueError("the chat template does not re-render earlier turns as they were generated")
        full_text = tokenizer.apply_chat_template(messages[: i + 1], tools=tools, tokenize=False)
        turn_text = full_text[len(prompt_text):].rstrip("\n")  # up to and including <|im_end|>
        turn = tokenizer(turn_text, add_special_tokens=False)["input_ids"]
        labels += [MASKED] * (len(prompt) - len(ids)) + turn
        ids = prompt + turn
    return ids, labels


def _batch(rows: list[tuple[list[int], list[int]]], pad: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    width = max(len(ids) for ids, _ in rows)
    input_ids = torch.full((len(rows), width), pad, dtype=torch.long)
    labels = torch.full((len(rows), width), MASKED, dtype=torch.long)
    attention = torch.zeros((len(rows), width), dtype=torch.long)
    for i, (ids, lab) in enumerate(rows):
        input_ids[i, : len(ids)] = torch.tensor(ids)
        labels[i, : len(lab)] = torch.tensor(lab)
        attention[i, : len(ids)] = 1
    return input_ids, labels, attention


def agent_warm_start(model_dir: Path, spec: AgentWarmStartSpec, progress: bool = True) -> dict[str, float]:
    """Fine-tune ``model_dir`` in place on transcripts; returns steps, final loss and seconds."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    torch.manual_seed(spec.seed)
    rng = random.Random(spec.seed)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    rows = [encode(tokenizer, transcript(t)) for t in generate(spec.tasks, spec.task_seed)]
    start = time.monotonic()
    steps, loss_value = sft_steps(model, lambda: _batch(rng.sample(rows, min(spec.batch_size, len(rows))),
                                                        tokenizer.pad_token_id),
                                  spec.steps, spec.lr, spec.max_seconds, "agent warm start", progress)
    model.save_pretrained(model_dir, safe_serialization=True)
    result = {"steps": steps, "loss": loss_value, "transcripts": len(rows), "seconds": time.monotonic() - start,
              "mean_tokens": sum(len(r[0]) for r in rows) / len(rows)}
    (model_dir / "rlstack-agent-warm-start.json").write_text(json.dumps({"spec": spec.model_dump(), **result}, indent=2))
    log.info("agent warm start: %s", result)
    return result
