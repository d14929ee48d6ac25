"""The real claude-code CLI, the real registry and proxy (LiteLLM) and the local sandbox, with the
scripted teacher where a vLLM replica would be: claude-code executes the teacher's tool calls,
the verifier scores the trial, and what claude-code sent (the warm-start corpus) is small.
"""

from __future__ import annotations

import json
from pathlib import Path

from transformers import AutoTokenizer

from rlstack.episodes.agents import CLAUDE_CODE_SYSTEM_PROMPT, SUB_AGENT, SUB_AGENTS
from rlstack.episodes.harbor.make_tasks import generate
from rlstack.modelkit.agent_demo.capture import CaptureSpec, capture
from rlstack.modelkit.agent_demo.corpus import (
    TEMPLATE,
    conversations,
    load_exchanges,
    render_prompt,
)
from rlstack.modelkit.teacher.scripted import message_text

DEFAULT_FIRST_PROMPT_TOKENS = 26_885
"""claude-code 2.1.330's first request with no flags, in the demo tokenizer (measured with this capture)."""


def test_claude_code_runs_the_teachers_tool_calls_through_the_proxy(claude_bin, tiny_model, tmp_path):
    tasks = [t for t in generate(7, seed=1000) if t.name.startswith(("sum-numbers", "fix"))]
    result = capture(tasks, tmp_path, CaptureSpec(concurrency=2, agent_bin=Path(claude_bin)))
    assert result.ok == 2 and result.solved == 2, result.statuses

    threads = conversations(load_exchanges(tmp_path / "exchanges.jsonl"))
    assert sorted(t[0]["task"] for t in threads) == sorted(t.name for t in tasks)
    for thread in threads:
        assert len(thread) == 3  # two tool calls, then the final answer
        first = thread[0]["request"]
        assert sorted(t["function"]["name"] for t in first["tools"]) == ["Bash", "Edit", "Read"]
        system = json.dumps(first["messages"][0])
        assert CLAUDE_CODE_SYSTEM_PROMPT in system and "billing" not in system
        # tool_use -> tool_result: claude-code ran the teacher's call and sent back its output
        last = thread[-1]["request"]["messages"]
        calls = [m for m in last if m.get("tool_calls")]
        results = [m for m in last if m["role"] == "tool"]
        assert [c["tool_calls"][0]["id"] for c in calls] == [r["tool_call_id"] for r in results]
        look = json.loads(calls[0]["tool_calls"][0]["function"]["arguments"])["command"]
        task = next(t for t in tasks if t.name == thread[0]["task"])
        shown = task.files[look.removeprefix("cat /app/")]
        assert shown.strip() in message_text(results[0])

    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    tokenizer.chat_template = TEMPLATE.read_text()
    prompt = tokenizer(render_prompt(tokenizer, threads[0][0]["request"]), add_special_tokens=False)["input_ids"]
    assert len(prompt) < 400 < DEFAULT_FIRST_PROMPT_TOKENS


def test_claude_codes_sub_agent_runs_the_teachers_tool_calls_in_a_thread_of_its_own(claude_bin, tmp_path):
    """The sub-agent preset (``--tools Bash,Read,Edit,Agent``): the main thread hands the task to a
    sub-agent with claude-code's ``Agent`` tool, the sub-agent's own thread runs the two ``Bash``
    calls, and the main thread ends once the sub-agent's result is back."""
    tasks = [t for t in generate(7, seed=1000) if t.name.startswith("sum-numbers")][:1]
    result = capture(tasks, tmp_path, CaptureSpec(concurrency=1, agent="claude-code-subagents", agent_bin=Path(claude_bin)))
    assert result.ok == 1 and result.solved == 1, result.statuses

    threads = conversations(load_exchanges(tmp_path / "exchanges.jsonl"))
    calls_by_thread = [[tc["function"]["name"] for e in t for tc in e["response"].get("tool_calls") or []] for t in threads]
    assert ["Agent"] in calls_by_thread and ["Bash", "Bash"] in calls_by_thread, calls_by_thread
    main = threads[calls_by_thread.index(["Agent"])]
    sub = threads[calls_by_thread.index(["Bash", "Bash"])]
    arguments = json.loads(main[0]["response"]["tool_calls"][0]["function"]["arguments"])
    assert arguments["subagent_type"] == SUB_AGENT  # the preset's own type: one line of prompt, Bash alone
    assert arguments["prompt"] in "\n".join(message_text(m) for m in sub[0]["request"]["messages"] if m["role"] == "user")
    assert [t["function"]["name"] for t in sub[0]["request"]["tools"]] == ["Bash"]
    assert SUB_AGENTS[SUB_AGENT]["prompt"] in json.dumps(sub[0]["request"]["messages"][0])
    assert main[-1]["response"]["content"] == "Done." and len(main) == 2  # after the sub-agent's result came back
