"""The proxy's records as Harbor's ATIF trajectory: steps, tool calls and their results, token metrics."""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from rlstack.common.contracts.trajectory import TrajectoryChoice, TrajectoryRecord
from rlstack.episodes.trials.atif import AtifTrajectory, trial_to_atif, write_atif
from rlstack.episodes.trials.records import (
    AgentRecord,
    TaskRecord,
    TrialResult,
    TrialStatus,
    VerifierRecord,
)

SCHEMA = Path(__file__).parent / "data" / "atif-v1.8.schema.json"
T0 = 1_760_000_000.0
SYSTEM, TASK = "You are a terminal agent.", "Create /app/hello.txt containing hi."


def record(n: int, request: dict[str, Any], message: dict[str, Any], *, api: str = "openai",
           status: str = "ok", prompt: int = 0, completion: int = 0) -> TrajectoryRecord:
    choices = [] if status == "error" else [TrajectoryChoice(
        index=0, message=message, finish_reason="tool_calls" if message.get("tool_calls") else "stop",
        completion_token_ids=list(range(completion)), completion_logprobs=[-0.5] * completion)]
    return TrajectoryRecord(
        run_id="run1", trial_id="t1", request_id=f"req-{n}", api=api, started_at=T0 + 10 * n, ended_at=T0 + 10 * n + 2,
        latency_seconds=2.0, answered_by="tiny", weight_version=n // 2, request=request,
        prompt_token_ids=list(range(prompt)), choices=choices, status=status, error="boom" if status == "error" else None)


def oa_call(call_id: str, name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"id": call_id, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}


OA_TURNS = [
    {"role": "assistant", "content": "Let me look.", "tool_calls": [oa_call("c1", "bash", {"cmd": "ls /app"})]},
    {"role": "tool", "tool_call_id": "c1", "content": "README.md\n"},
    {"role": "assistant", "content": None, "tool_calls": [oa_call("c2", "bash", {"cmd": "echo hi > /app/hello.txt"}),
                                                          oa_call("c3", "bash", {"cmd": "cat /app/hello.txt"})]},
    {"role": "tool", "tool_call_id": "c3", "content": "hi\n"},
    {"role": "tool", "tool_call_id": "c2", "content": ""},
    {"role": "assistant", "content": "Done.", "tool_calls": [oa_call("c4", "submit", {})]},
]


def openai_records() -> list[TrajectoryRecord]:
    base = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": TASK}]
    return [record(k, {"messages": base + OA_TURNS[:n], "tools": []}, OA_TURNS[n], prompt=100 + n, completion=5 + k)
            for k, n in enumerate((0, 2, 5))]


def result() -> TrialResult:
    at = datetime.fromtimestamp(T0, UTC)
    return TrialResult(run="run1", trial="t1", attempt=1, sandbox="docker", task=TaskRecord(name="hello", path=Path("/t"), schema_version="1.0"),
                       agent=AgentRecord(name="mini", command=["mini"]), verifier=VerifierRecord(rewards={"reward": 1.0}),
                       status=TrialStatus.OK, reward=1.0, started_at=at, finished_at=at)


def check_schema(doc: dict[str, Any]) -> None:
    """Validates against Harbor's own JSON schema (see the file's $comment for where it came from)."""
    jsonschema.Draft202012Validator(json.loads(SCHEMA.read_text())).validate(doc)


def test_openai_tool_calling_conversation():
    traj = trial_to_atif(openai_records(), result(), "mini", "1.2")
    assert [s.source for s in traj.steps] == ["system", "user", "agent", "agent", "agent"]
    assert [s.step_id for s in traj.steps] == [1, 2, 3, 4, 5]
    assert (traj.steps[0].message, traj.steps[1].message) == (SYSTEM, TASK)
    first, second, last = traj.steps[2:]
    assert first.message == "Let me look."
    assert [(c.tool_call_id, c.function_name, c.arguments) for c in first.tool_calls] == [("c1", "bash", {"cmd": "ls /app"})]
    assert [(r.source_call_id, r.content) for r in first.observation.results] == [("c1", "README.md\n")]
    assert second.message == "" and [c.tool_call_id for c in second.tool_calls] == ["c2", "c3"]
    assert {r.source_call_id: r.content for r in second.observation.results} == {"c2": "", "c3": "hi\n"}
    assert last.message == "Done." and last.tool_calls[0].function_name == "submit" and last.observation is None
    # record k (request of n messages) produced conversation message n: its tokens are that step's
    assert [(s.metrics.prompt_tokens, s.metrics.completion_tokens) for s in traj.steps[2:]] == [(100, 5), (102, 6), (105, 7)]
    assert last.metrics.completion_token_ids == [0, 1, 2, 3, 4, 5, 6] and last.metrics.logprobs == [-0.5] * 7
    assert [s.extra["request_id"] for s in traj.steps[2:]] == ["req-0", "req-1", "req-2"]
    assert first.timestamp == datetime.fromtimestamp(T0 + 2, UTC).isoformat()
    assert traj.final_metrics.model_dump() == {"total_prompt_tokens": 307, "total_completion_tokens": 18, "total_steps": 5}
    assert (traj.agent.name, traj.agent.version, traj.agent.model_name) == ("mini", "1.2", "tiny")
    assert traj.session_id == "run1/t1" and traj.schema_version == "ATIF-v1.8"
    assert traj.extra == {
        "run": "run1", "trial": "t1", "records": 3, "failed_records": 0, "thread_records": 3, "other_records": 0,
        "weight_versions": [0, 1], "task": "hello", "attempt": 1, "status": "ok", "reward": 1.0, "rewards": {"reward": 1.0},
        "seconds": 0.0}
    check_schema(traj.model_dump(mode="json", exclude_none=True))


def test_anthropic_content_blocks():
    turns = [
        {"role": "user", "content": [{"type": "text", "text": TASK}]},
        {"role": "assistant", "content": [{"type": "thinking", "thinking": "list first"}, {"type": "text", "text": "Looking."},
                                          {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}}]},
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_1", "is_error": True,
                                      "content": [{"type": "text", "text": "ls: denied"}]},
                                     {"type": "text", "text": "Keep going."}]},
    ]
    system = [{"type": "text", "text": SYSTEM, "cache_control": {"type": "ephemeral"}}]
    answer = {"role": "assistant", "content": "Finished."}
    records = [
        record(0, {"system": system, "messages": turns[:1]}, {"role": "assistant", "content": "Looking.", "tool_calls": [
            {"id": "toolu_1", "type": "function", "function": {"name": "Bash", "arguments": '{"command": "ls"}'}}]},
            api="anthropic", completion=3),
        record(1, {"system": "Write a title.", "messages": [{"role": "user", "content": TASK}]}, {"content": "Hello"}, api="anthropic"),
        record(2, {"system": system, "messages": turns}, answer, api="anthropic"),
    ]
    records[2].usage = {"input_tokens": 40, "output_tokens": 2}
    traj = trial_to_atif(records, None, "claude-code")
    assert [s.source for s in traj.steps] == ["system", "user", "agent", "user", "agent"]
    assert traj.steps[0].message == SYSTEM and traj.steps[1].message == TASK
    tool_step = traj.steps[2]
    assert tool_step.message == "Looking." and tool_step.reasoning_content == "list first"
    assert [(c.tool_call_id, c.function_name, c.arguments) for c in tool_step.tool_calls] == [("toolu_1", "Bash", {"command": "ls"})]
    assert tool_step.observation.results[0].model_dump() == {"source_call_id": "toolu_1", "content": "ls: denied", "extra": {"is_error": True}}
    assert tool_step.metrics.completion_tokens == 3 and tool_step.extra["request_id"] == "req-0"
    assert traj.steps[3].message == "Keep going."
    assert traj.steps[4].message == "Finished." and traj.steps[4].metrics.model_dump(exclude_none=True) == {"prompt_tokens": 40, "completion_tokens": 2}
    assert traj.agent.version == "unknown" and "reward" not in traj.extra
    assert (traj.extra["thread_records"], traj.extra["other_records"]) == (2, 1)  # the title call is not the agent's thread
    check_schema(traj.model_dump(mode="json", exclude_none=True))


def test_failed_record_is_not_a_step():
    records = openai_records()
    failed = record(9, records[1].request, {}, status="error")
    traj = trial_to_atif([records[0], records[1], failed, records[2]], None, "mini")
    assert len(traj.steps) == 5 and [s.extra["request_id"] for s in traj.steps[2:]] == ["req-0", "req-1", "req-2"]
    assert traj.extra["failed_records"] == 1 and traj.extra["records"] == 4
    with pytest.raises(ValueError, match="nothing to convert"):
        trial_to_atif([failed], None, "mini")


def test_retried_call_gives_the_later_metrics_and_unmatched_turns_have_none():
    records = openai_records()
    retry = records[1].model_copy(update={"request_id": "req-1b"})
    traj = trial_to_atif([records[1], retry, records[2]], None, "mini")  # the first call's record is missing
    assert traj.steps[2].metrics is None and traj.steps[2].timestamp is None
    assert traj.steps[3].extra["request_id"] == "req-1b"


def test_models_enforce_harbor_rules():
    doc = trial_to_atif(openai_records(), None, "mini").model_dump(mode="json", exclude_none=True)
    bad_ids = json.loads(json.dumps(doc))
    bad_ids["steps"][1]["step_id"] = 7
    bad_ref = json.loads(json.dumps(doc))
    bad_ref["steps"][2]["observation"]["results"][0]["source_call_id"] = "nope"
    bad_source = json.loads(json.dumps(doc))
    bad_source["steps"][2]["source"] = "user"
    for bad, match in ((bad_ids, "step_id"), (bad_ref, "not one of its tool calls"), (bad_source, "belong to agent steps")):
        with pytest.raises(ValueError, match=match):
            AtifTrajectory.model_validate(bad)


def test_write_atif(tmp_path):
    assert write_atif(tmp_path, "mini") is None  # no trajectory file
    lines = [r.model_dump_json() for r in openai_records()]
    (tmp_path / "litellm-trajectory.proxy-a.jsonl").write_text("\n".join(lines[:2]) + "\n")  # two writers
    (tmp_path / "litellm-trajectory.proxy-b.jsonl").write_text("\n".join(lines[2:]) + "\n" + lines[0][:40])  # torn last line
    (tmp_path / "result.json").write_text(result().model_dump_json())
    path = write_atif(tmp_path, "mini", "1.2")
    assert path == tmp_path / "agent" / "trajectory.json" and sorted(p.name for p in path.parent.iterdir()) == ["trajectory.json"]
    doc = json.loads(path.read_text())
    check_schema(doc)
    assert {"schema_version", "session_id", "agent", "steps", "final_metrics", "extra"} <= doc.keys()
    assert AtifTrajectory.model_validate(doc) == trial_to_atif(openai_records(), result(), "mini", "1.2")
    assert doc["extra"]["reward"] == 1.0 and doc["final_metrics"]["total_steps"] == 5


def test_write_atif_without_ok_records(tmp_path):
    failed = openai_records()[0].model_copy(update={"status": "error", "choices": []})
    (tmp_path / "litellm-trajectory.proxy-a.jsonl").write_text(failed.model_dump_json() + "\n")
    assert write_atif(tmp_path, "mini") is None and not (tmp_path / "agent").exists()
