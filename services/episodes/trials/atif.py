"""A trial's conversation as Harbor's ATIF trajectory: ``<trial>/agent/trajectory.json``.

Our own record (``litellm-trajectory.<writer>.jsonl``) is one line per model call, in the client's API shape;
ATIF is one document per agent run, step by step, which Harbor's viewers and tools read.

Target: ATIF-v1.8, the newest ``schema_version`` of Harbor's pydantic models
``src/harbor/models/trajectories/``, read from the ``harbor`` 0.25.0 wheel on PyPI (sha256 51923ac5…c309;
it names no git commit); the RFC is ``docs/rfcs/0001-trajectory-format.md`` in laude-institute/harbor.
The models below are our own, named after the spec, with only the fields we fill; like Harbor's they
forbid unknown fields.

Mapping: the conversation is the longest ok request of the main thread (ok records with the same system
prompt and first user message as the longest request overall) plus that record's response. Each system
or user message is a step; each assistant message is an ``agent`` step, and the tool results after it
(OpenAI ``role: tool``, Anthropic ``tool_result`` blocks) are its observation. A record whose request held
``n`` messages produced message ``n`` of the conversation; that record (the last ok one, if retried)
gives the agent step its metrics. Failed records are not steps: ``extra`` counts them.
"""

from __future__ import annotations

import json
import logging
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, NamedTuple

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rlstack.common import safefs
from rlstack.common.contracts.trajectory import TrajectoryRecord, read_trajectory
from rlstack.episodes.trials.layout import TrialPaths
from rlstack.episodes.trials.records import TrialResult

log = logging.getLogger(__name__)

SCHEMA_VERSION = "ATIF-v1.8"
FILE_NAME = "trajectory.json"
"""Under the trial's ``agent/``, where Harbor's own agents leave theirs."""


class _Atif(BaseModel):
    model_config = ConfigDict(extra="forbid")


class AtifToolCall(_Atif):
    tool_call_id: str
    function_name: str
    arguments: dict[str, Any]


class AtifObservationResult(_Atif):
    source_call_id: str | None = None
    content: str | None = None
    extra: dict[str, Any] | None = None


class AtifObservation(_Atif):
    results: list[AtifObservationResult]


class AtifMetrics(_Atif):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    completion_token_ids: list[int] | None = None
    logprobs: list[float] | None = None
    """vLLM's, one per completion token. Prompt token ids are left out: every step would repeat the history."""


class AtifStep(_Atif):
    step_id: int = Field(ge=1)
    timestamp: str | None = None
    source: Literal["system", "user", "agent"]
    message: str
    reasoning_content: str | None = None
    tool_calls: list[AtifToolCall] | None = None
    observation: AtifObservation | None = None
    metrics: AtifMetrics | None = None
    llm_call_count: int | None = Field(default=None, ge=0)
    extra: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _agent_only_fields(self) -> AtifStep:
        if self.source != "agent" and (self.reasoning_content or self.tool_calls or self.metrics):
            raise ValueError(f"step {self.step_id}: reasoning, tool calls and metrics belong to agent steps")
        return self


class AtifAgent(_Atif):
    name: str
    version: str
    model_name: str | None = None


class AtifFinalMetrics(_Atif):
    total_prompt_tokens: int | None = None
    total_completion_tokens: int | None = None
    total_steps: int | None = Field(default=None, ge=0)


class AtifTrajectory(_Atif):
    schema_version: Literal["ATIF-v1.8"] = SCHEMA_VERSION
    session_id: str | None = None
    agent: AtifAgent
    steps: list[AtifStep] = Field(min_length=1)
    final_metrics: AtifFinalMetrics | None = None
    extra: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _consistent(self) -> AtifTrajectory:
        """Harbor's own checks: step ids run 1..n, and a result names a tool call of its own step."""
        for i, step in enumerate(self.steps, 1):
            if step.step_id != i:
                raise ValueError(f"steps[{i - 1}].step_id is {step.step_id}, expected {i}")
            ids = {c.tool_call_id for c in step.tool_calls or []}
            for r in step.observation.results if step.observation else []:
                if r.source_call_id is not None and r.source_call_id not in ids:
                    raise ValueError(f"step {i}: result for {r.source_call_id!r}, not one of its tool calls")
        return self


class _Turn(NamedTuple):
    role: str
    text: str
    calls: list[AtifToolCall]
    results: list[AtifObservationResult]
    reasoning: str | None


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(b.get("text", "") for b in content if isinstance(b, dict) and b.get("type") == "text")
    return ""


def _args(raw: Any) -> dict[str, Any]:
    """OpenAI sends a JSON string, Anthropic a dict; ATIF wants a dict, so unparsable text is kept as ``raw``."""
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw or "{}")
    except (TypeError, ValueError):
        return {"raw": raw}
    return value if isinstance(value, dict) else {"raw": raw}


def _turn(msg: dict[str, Any]) -> _Turn:
    """One message of either API (OpenAI messages and tool_calls, Anthropic content blocks)."""
    role, content = msg.get("role", "user"), msg.get("content")
    blocks = [b for b in content if isinstance(b, dict)] if isinstance(content, list) else []
    calls = [AtifToolCall(tool_call_id=c.get("id", ""), function_name=(c.get("function") or {}).get("name", ""),
                          arguments=_args((c.get("function") or {}).get("arguments"))) for c in msg.get("tool_calls") or []]
    calls += [AtifToolCall(tool_call_id=b.get("id", ""), function_name=b.get("name", ""), arguments=_args(b.get("input")))
              for b in blocks if b.get("type") == "tool_use"]
    results = [AtifObservationResult(source_call_id=b.get("tool_use_id"), content=_text(b.get("content")),
                                     extra={"is_error": True} if b.get("is_error") else None)
               for b in blocks if b.get("type") == "tool_result"]
    if role == "tool":
        results.append(AtifObservationResult(source_call_id=msg.get("tool_call_id"), content=_text(content)))
    thinking = "\n".join(b.get("thinking", "") for b in blocks if b.get("type") == "thinking")
    return _Turn(role, "" if role == "tool" else _text(content), calls, results, msg.get("reasoning_content") or thinking or None)


def _messages(r: TrajectoryRecord) -> list[dict[str, Any]]:
    return r.request.get("messages") or []


def _head(r: TrajectoryRecord) -> str:
    """What a thread keeps from call to call: its system prompt and messages up to the first user one."""
    head = [_text(r.request.get("system"))]
    for m in _messages(r):
        head.append(_text(m.get("content")))
        if m.get("role") == "user":
            break
    return json.dumps(head)


def _iso(ts: float | None) -> str | None:
    return None if ts is None else datetime.fromtimestamp(ts, UTC).isoformat()


def _metrics(r: TrajectoryRecord) -> AtifMetrics:
    """vLLM's token ids are the truth; usage (either API's spelling) only when they are missing."""
    choice, usage = r.choices[0], r.usage or {}
    return AtifMetrics(
        prompt_tokens=len(r.prompt_token_ids) or usage.get("prompt_tokens", usage.get("input_tokens")),
        completion_tokens=len(choice.completion_token_ids) or usage.get("completion_tokens", usage.get("output_tokens")),
        completion_token_ids=choice.completion_token_ids or None, logprobs=choice.completion_logprobs or None)


def trial_to_atif(records: list[TrajectoryRecord], result: TrialResult | None, agent_name: str,
                  agent_version: str | None = None) -> AtifTrajectory:
    ok = [r for r in records if r.status == "ok" and r.choices]
    if not ok:
        raise ValueError("no ok model call with a response: nothing to convert")
    final = max(reversed(ok), key=lambda r: len(_messages(r)))  # the latest of the longest
    thread = [r for r in ok if _head(r) == _head(final)]
    producer = {len(_messages(r)): r for r in thread}  # later records (retries) win
    conversation = [*_messages(final), final.choices[0].message]
    steps: list[AtifStep] = []

    def sent_at(i: int) -> str | None:
        return _iso(min((r.started_at for r in thread if len(_messages(r)) > i), default=None))

    def add(**fields: Any) -> None:
        steps.append(AtifStep(step_id=len(steps) + 1, **fields))

    if system := _text(final.request.get("system")):
        add(source="system", message=system, timestamp=sent_at(-1))
    for i, turn in enumerate(_turn(m) for m in conversation):
        if turn.role == "assistant":
            rec = producer.get(i)
            add(source="agent", message=turn.text, reasoning_content=turn.reasoning, tool_calls=turn.calls or None,
                timestamp=_iso(rec.ended_at) if rec else None, metrics=_metrics(rec) if rec else None,
                llm_call_count=1 if rec else None,
                extra={"request_id": rec.request_id, "weight_version": rec.weight_version,
                       "finish_reason": rec.choices[0].finish_reason} if rec else None)
            continue
        if turn.results and steps and steps[-1].source == "agent":
            last = steps[-1]
            ids = {c.tool_call_id for c in last.tool_calls or []}
            results = [r if r.source_call_id in ids else r.model_copy(update={"source_call_id": None}) for r in turn.results]
            last.observation = AtifObservation(results=[*(last.observation.results if last.observation else []), *results])
        if turn.text or not turn.results:
            add(source="system" if turn.role in ("system", "developer") else "user", message=turn.text, timestamp=sent_at(i))

    metrics = [s.metrics for s in steps if s.metrics]
    failed = sum(r.status == "error" for r in records)
    extra: dict[str, Any] = {  # other records: side calls (titles, summaries) and ok calls with no response
        "run": final.run_id, "trial": final.trial_id, "records": len(records), "failed_records": failed,
        "thread_records": len(thread), "other_records": len(records) - len(thread) - failed,
        "weight_versions": sorted({r.weight_version for r in thread if r.weight_version is not None}),
    }
    if result is not None:
        extra |= {"task": result.task.name, "attempt": result.attempt, "status": result.status.value,
                  "reward": result.reward, "rewards": result.verifier.rewards, "seconds": result.seconds}
    return AtifTrajectory(
        session_id=f"{final.run_id}/{final.trial_id}",
        agent=AtifAgent(name=agent_name, version=agent_version or "unknown",
                        model_name=final.answered_by or final.requested_model),
        steps=steps,
        final_metrics=AtifFinalMetrics(total_prompt_tokens=sum(m.prompt_tokens or 0 for m in metrics),
                                       total_completion_tokens=sum(m.completion_tokens or 0 for m in metrics),
                                       total_steps=len(steps)),
        extra=extra,
    )


def write_atif(trial_root: Path, agent_name: str, agent_version: str | None = None) -> Path | None:
    """Writes ``agent/trajectory.json`` atomically; None when the trial made no successful model call."""
    paths = TrialPaths(root=trial_root)
    records = read_trajectory(trial_root)
    if not any(r.status == "ok" and r.choices for r in records):
        return None
    result = (TrialResult.model_validate_json(safefs.read_bytes(paths.result, paths.root, limit=16 << 20))
              if safefs.is_file(paths.result, paths.root) else None)
    target = paths.agent_dir / FILE_NAME
    # The agent's directory: whatever it planted (trajectory.json or a temp name as a symlink) is
    # replaced, never written through.
    safefs.makedirs(paths.agent_dir, within=paths.root)
    safefs.write_text(target, trial_to_atif(records, result, agent_name, agent_version)
                      .model_dump_json(indent=2, exclude_none=True), within=paths.root)
    return target
