"""The forced teacher answers in a real family's template: Qwen3's, with thinking on (the teacher's
reasoning in a think block first) and off (the prompt's empty think block is not repeated)."""

from __future__ import annotations

import json

import pytest
from transformers import AutoTokenizer

from rlstack.common.model_families import FAMILIES
from rlstack.episodes.harbor.make_tasks import generate
from rlstack.modelkit.teacher.forcing import REASONING, TURN_END, answer_ids, template_kwargs
from rlstack.modelkit.teacher.scripted import Teacher, reference_commands


@pytest.fixture(scope="module")
def qwen3():
    return AutoTokenizer.from_pretrained(FAMILIES["qwen3"].tokenizer_dir())


BASH = {"type": "function", "function": {"name": "Bash", "description": "Run a command.",
                                         "parameters": {"type": "object", "properties": {"command": {"type": "string"}}}}}


@pytest.mark.parametrize("thinking", [True, False])
def test_the_teachers_turns_in_qwen3s_template(qwen3, thinking):
    spec = next(t for t in generate(7, seed=1000) if t.name.startswith("sum-numbers"))
    teacher = Teacher([spec])
    messages = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": spec.instruction}]
    commands = reference_commands(spec, "")
    for turn in range(2):
        prompt = qwen3.apply_chat_template(messages, tools=[BASH], add_generation_prompt=True, tokenize=False,
                                           enable_thinking=thinking)
        assert template_kwargs(qwen3, prompt) == ({} if thinking else {"enable_thinking": False})
        ids = answer_ids(qwen3, teacher, qwen3(prompt, add_special_tokens=False)["input_ids"])
        text = qwen3.decode(ids, skip_special_tokens=False)
        assert text.endswith(TURN_END)
        think, _, call = text.removesuffix(TURN_END).rpartition("</think>\n\n")
        assert (think == f"<think>\n{REASONING}\n") if thinking else (think == "" and "<think>" not in text)
        assert call.startswith("<tool_call>\n") and call.endswith("\n</tool_call>")
        body = json.loads(call.removeprefix("<tool_call>\n").removesuffix("\n</tool_call>"))
        assert body == {"name": "Bash", "arguments": {"command": commands[turn]}}
        messages += [{"role": "assistant", "content": "", "tool_calls": [
                          {"id": f"c{turn}", "type": "function", "function": {"name": "Bash", "arguments": body["arguments"]}}]},
                     {"role": "tool", "tool_call_id": f"c{turn}", "content": "12"}]
