"""The real opencode CLI, the real registry and proxy (LiteLLM) and the local sandbox, with the
scripted teacher where a vLLM replica would be: opencode runs the teacher's ``bash`` calls, the
verifier scores the trial, and what opencode sent is the preset's small request, not its default.
"""

from __future__ import annotations

import json
from pathlib import Path

from rlstack.episodes.agents import CLAUDE_CODE_SYSTEM_PROMPT
from rlstack.episodes.harbor.make_tasks import generate
from rlstack.modelkit.agent_demo.capture import CaptureSpec, capture
from rlstack.modelkit.agent_demo.corpus import conversations, load_exchanges
from rlstack.modelkit.teacher.scripted import message_text

DEFAULT_FIRST_REQUEST_BYTES = 30_692
"""opencode 1.18.33's first request with no config (10 tools, its 9.7 kB system prompt), measured."""


def test_opencode_runs_the_teachers_tool_calls_through_the_proxy(opencode_bin, tmp_path):
    tasks = [t for t in generate(7, seed=1000) if t.name.startswith(("sum-numbers", "fix"))]
    result = capture(tasks, tmp_path, CaptureSpec(concurrency=2, agent="opencode", agent_bin=Path(opencode_bin)))
    assert result.ok == 2 and result.solved == 2, result.statuses

    threads = conversations(load_exchanges(tmp_path / "exchanges.jsonl"))
    assert sorted(t[0]["task"] for t in threads) == sorted(t.name for t in tasks)  # no title call, no other side call
    for thread in threads:
        assert len(thread) == 3  # two tool calls, then the final answer
        first = thread[0]["request"]
        assert sorted(t["function"]["name"] for t in first["tools"]) == ["bash", "read"]
        system, user = first["messages"][0], first["messages"][1]
        assert message_text(system).startswith(CLAUDE_CODE_SYSTEM_PROMPT)
        task = next(t for t in tasks if t.name == thread[0]["task"])
        assert message_text(user).strip() == task.instruction.strip()  # on stdin: not quoted as an argument would be
        assert len(json.dumps(first)) < DEFAULT_FIRST_REQUEST_BYTES / 3
        # each tool call came back as a tool result carrying what the command printed
        last = thread[-1]["request"]["messages"]
        calls = [m for m in last if m.get("tool_calls")]
        results = [m for m in last if m["role"] == "tool"]
        assert [c["tool_calls"][0]["id"] for c in calls] == [r["tool_call_id"] for r in results]
        look = json.loads(calls[0]["tool_calls"][0]["function"]["arguments"])["command"]
        assert task.files[look.removeprefix("cat /app/")].strip() in message_text(results[0])
        # nothing rewrites an earlier turn (no pruning, no compaction): each request extends the one before
        for before, after in zip(thread, thread[1:]):
            assert after["request"]["messages"][:len(before["request"]["messages"])] == before["request"]["messages"]
