"""The scripted teacher's answers and the claude-code corpus built from its record.

``data/claude_code_exchanges.jsonl`` is a real capture (``agent_demo.capture.capture``: the
claude-code CLI through the real proxy, two generated tasks, both solved): what LiteLLM
forwarded upstream and what the teacher answered.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from starlette.testclient import TestClient
from transformers import AutoTokenizer

from rlstack.common.contracts.atropos import MASKED
from rlstack.episodes.harbor.make_tasks import BUGS, generate
from rlstack.modelkit.agent_demo.corpus import (
    TEMPLATE,
    as_vllm_renders,
    conversations,
    encode,
    load_exchanges,
)
from rlstack.modelkit.teacher.scripted import FINAL_TEXT, Teacher, reference_commands

CAPTURE = Path(__file__).with_name("data") / "claude_code_exchanges.jsonl"


def _task(family: str, seed: int = 1000):
    return next(t for t in generate(7, seed) if t.name.startswith(family))


def test_fix_reads_the_file_before_it_edits_it():
    fix = _task("fix")
    assert reference_commands(fix, fix.instruction) == ["cat /app/calc.py", "cat /app/calc.py"]
    _, buggy, fixed, _ = next(b for b in BUGS if b[1] in fix.files["calc.py"])
    commands = reference_commands(fix, fix.instruction + fix.files["calc.py"])
    assert commands[1] == f"sed -i 's/{buggy}/{fixed}/' /app/calc.py"


def test_teacher_answers_two_tool_calls_then_the_final_text():
    task = _task("sum-numbers")
    teacher = Teacher([task])
    client = TestClient(teacher.app())
    tools = [{"type": "function", "function": {"name": "Bash", "parameters": {"type": "object"}}}]
    messages = [{"role": "system", "content": "x"}, {"role": "user", "content": [{"type": "text", "text": task.instruction}]}]
    commands = []
    for _ in range(2):
        body = client.post("/v1/chat/completions", json={"model": "policy", "messages": messages, "tools": tools}).json()
        choice = body["choices"][0]
        assert choice["finish_reason"] == "tool_calls"
        call = choice["message"]["tool_calls"][0]
        commands.append(json.loads(call["function"]["arguments"])["command"])
        messages += [choice["message"], {"role": "tool", "tool_call_id": call["id"], "content": "ok"}]
    last = client.post("/v1/chat/completions", json={"model": "policy", "messages": messages, "tools": tools}).json()
    assert last["choices"][0]["message"] == {"role": "assistant", "content": FINAL_TEXT}
    assert commands == ["cat /app/numbers.txt", task.solve.strip()]
    assert [e["task"] for e in teacher.dump()] == [task.name] * 3
    models = client.get("/v1/models").json()["data"]
    assert models[0]["id"] == "policy" and models[0]["max_model_len"] > 100_000


def test_teacher_answers_side_calls_and_refuses_a_body_without_messages():
    client = TestClient(Teacher([_task("multiply")]).app())
    ping = client.post("/v1/chat/completions", json={"model": "policy", "messages": [{"role": "user", "content": "ping"}]})
    assert ping.json()["choices"][0]["message"]["content"] == "ok"
    bad = client.post("/v1/chat/completions", json={"model": "policy"})
    assert bad.status_code == 400 and bad.json()["error"]["param"] == "messages"


def test_captured_calls_group_into_one_conversation_per_trial():
    threads = conversations(load_exchanges(CAPTURE))
    assert sorted(t[0]["task"] for t in threads) == ["fix-s1000-6", "multiply-s1000-0"]
    for thread in threads:
        assert len(thread) == 3 and thread[-1]["response"]["content"] == FINAL_TEXT
        # each call carries the last one's tool result back (claude-code ran the command)
        assert thread[1]["request"]["messages"][-1]["role"] == "tool"


def test_tool_arguments_reach_the_template_as_objects_as_in_vllm():
    message = {"role": "assistant", "tool_calls": [{"id": "c", "type": "function",
                                                    "function": {"name": "Bash", "arguments": "{\"command\":\"ls\"}"}}]}
    assert as_vllm_renders([message])[0]["tool_calls"][0]["function"]["arguments"] == {"command": "ls"}
    assert message["tool_calls"][0]["function"]["arguments"] == "{\"command\":\"ls\"}"  # the record is untouched


@pytest.fixture
def tokenizer(tiny_model):
    tok = AutoTokenizer.from_pretrained(tiny_model)
    tok.chat_template = TEMPLATE.read_text()
    return tok


def test_a_conversation_is_one_row_training_only_the_teachers_turns(tokenizer):
    fix = next(t for t in conversations(load_exchanges(CAPTURE)) if t[0]["task"].startswith("fix"))
    rows, breaks = encode(tokenizer, fix)
    assert breaks == 0 and len(rows) == 1
    ids, labels = rows[0]
    trained = tokenizer.decode([t for t, label in zip(ids, labels) if label != MASKED])
    assert trained.count("<tool_call>") == 2 and trained.endswith(f"{FINAL_TEXT}<|im_end|>")
    assert '"arguments": {"command": "cat /app/calc.py"}' in trained and "sed -i" in trained
    context = tokenizer.decode([t for t, label in zip(ids, labels) if label == MASKED])
    assert "There is a one-line bug in /app/calc.py" in context and "- Bash(command" in context


def test_text_parts_are_joined_by_newlines_like_vllms_string_format(tokenizer):
    parts = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}]}]
    joined = [{"role": "user", "content": "a\nb"}]
    assert tokenizer.apply_chat_template(parts, tokenize=False) == tokenizer.apply_chat_template(joined, tokenize=False)


def test_an_instruction_that_starts_another_does_not_take_its_task():
    short, long = generate(2, 3, ("write-greeting",))
    short.instruction, long.instruction = "Create the file: river\n", "Create the file: river apple\n"
    teacher = Teacher([short, long])
    assert teacher.find_task(long.instruction) is long
    assert teacher.find_task(short.instruction) is short


def test_the_real_capture_encodes_on_qwen3s_template_as_vllm_renders_it():
    """claude-code's calls carry content parts and tool calls with no content; Qwen3's template reads
    content as a string, which vLLM hands it joined by newlines ("" for none). Each row's prompt ids
    are Qwen3's render of the call, and the trained ids are the teacher's turn, think block first."""
    from rlstack.common.model_families import FAMILIES

    qwen3 = AutoTokenizer.from_pretrained(FAMILIES["qwen3"].tokenizer_dir())
    thread = conversations(load_exchanges(CAPTURE))[0]
    assert any(isinstance(m.get("content"), list) for m in thread[0]["request"]["messages"])
    rows, _ = encode(qwen3, thread)
    trained = qwen3.decode([t for ids, labels in rows for t, label in zip(ids, labels, strict=True) if label != MASKED],
                           skip_special_tokens=False)
    assert trained.count("<tool_call>") == sum(bool(e["response"].get("tool_calls")) for e in thread)
    assert trained.count("<think>\n\n</think>\n\n") == len(thread) and trained.count("<|im_end|>") == len(thread)
    assert '"name": "Bash"' in trained
