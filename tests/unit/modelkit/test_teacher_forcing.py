"""The teacher read back from a rendered prompt answers as the teacher reading the messages does:
claude-code's sub-agent preset, turn by turn, in the tiny model's template."""

from __future__ import annotations

import json

from transformers import AutoTokenizer

from rlstack.episodes.agents import SUB_AGENT
from rlstack.episodes.harbor.make_tasks import generate
from rlstack.modelkit.teacher.forcing import (
    TURN_END,
    answer_ids,
    read_conversation,
    read_tasks,
    write_tasks,
)
from rlstack.modelkit.teacher.scripted import FINAL_TEXT, SUB_TASK, Teacher, reference_commands


def tool(name: str) -> dict:
    return {"type": "function", "function": {"name": name, "description": f"{name}.", "parameters": {"type": "object"}}}


def forced(tokenizer, teacher: Teacher, messages: list[dict], tools: list[dict]) -> dict:  # noqa: ANN001
    """What the forcing processor makes vLLM sample, parsed back as vLLM's hermes parser would."""
    prompt = tokenizer.apply_chat_template(messages, tools=tools, add_generation_prompt=True)
    prompt = prompt["input_ids"] if isinstance(prompt, dict) else prompt
    text = tokenizer.decode(answer_ids(tokenizer, teacher, prompt), skip_special_tokens=False)
    assert text.endswith(TURN_END)
    body = text.removesuffix(TURN_END)
    if body.startswith("<tool_call>"):
        call = json.loads(body.removeprefix("<tool_call>").removesuffix("</tool_call>"))
        return {"tool": call["name"], "arguments": call["arguments"]}
    return {"content": body}


def as_seen(message: dict) -> dict:
    if message.get("tool_calls"):
        function = message["tool_calls"][0]["function"]
        return {"tool": function["name"], "arguments": json.loads(function["arguments"])}
    return {"content": message["content"]}


def test_forced_turns_are_the_teachers_through_a_sub_agent_trial(tiny_model, tmp_path, monkeypatch):
    spec = next(t for t in generate(7, seed=1000) if t.name.startswith("sum-numbers"))
    monkeypatch.setenv("RLSTACK_TEACHER_TASKS", str(write_tasks([spec], tmp_path / "tasks.json")))
    teacher = Teacher(read_tasks())
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    reminder = f"Available agent types:\n- {SUB_AGENT}: Runs a sub-task.\n"
    main = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": reminder + spec.instruction}]
    main_tools = [tool("Bash"), tool("Agent")]

    def both(messages: list[dict], tools: list[dict]) -> dict:
        ours = forced(tokenizer, teacher, messages, tools)
        assert ours == as_seen(teacher.answer({"messages": messages, "tools": tools}))
        return ours

    delegation = both(main, main_tools)
    assert delegation["tool"] == "Agent" and delegation["arguments"]["subagent_type"] == SUB_AGENT
    assert delegation["arguments"]["prompt"] == SUB_TASK + spec.instruction.strip()

    sub = [{"role": "system", "content": "You are a worker."}, {"role": "user", "content": delegation["arguments"]["prompt"]}]
    commands = reference_commands(spec, "")
    for n, command in enumerate(commands):
        call = both(sub, [tool("Bash")])
        assert call == {"tool": "Bash", "arguments": {"command": command}}
        sub += [{"role": "assistant", "content": None, "tool_calls": [
                    {"id": f"c{n}", "type": "function", "function": {"name": "Bash", "arguments": json.dumps(call["arguments"])}}]},
                {"role": "tool", "tool_call_id": f"c{n}", "content": f"output {n}"}]
    assert both(sub, [tool("Bash")]) == {"content": FINAL_TEXT}

    main += [{"role": "assistant", "content": None, "tool_calls": [
                 {"id": "a0", "type": "function", "function": {"name": "Agent", "arguments": json.dumps(delegation["arguments"])}}]},
             {"role": "tool", "tool_call_id": "a0", "content": "the sum is 42"}]
    assert both(main, main_tools) == {"content": FINAL_TEXT}
    assert both([{"role": "user", "content": "Write a title"}], []) == {"content": "ok"}  # a side call


def test_a_prompt_reads_back_as_its_turns(tiny_model):
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    messages = [{"role": "system", "content": "S"}, {"role": "user", "content": "U1"},
                {"role": "assistant", "content": None, "tool_calls": [
                    {"id": "x", "type": "function", "function": {"name": "Bash", "arguments": "{}"}}]},
                {"role": "tool", "tool_call_id": "x", "content": "T"}, {"role": "user", "content": "U2"}]
    text = tokenizer.apply_chat_template(messages, tools=[tool("Bash"), tool("Read")], add_generation_prompt=True, tokenize=False)
    seen = read_conversation(text)
    assert seen.offered == {"Bash", "Read"} and seen.tool_calls_made == 1
    assert seen.users == "U1\nU2" and "T" in seen.transcript.split("\n")
