"""One line of a trial's trajectory file: a model call as the trainer needs it, and where those files live.

Token ids and logprobs are vLLM's own (``return_token_ids``, ``logprobs``), never a
re-tokenisation of text: multi-turn RL breaks on retokenisation drift.
"""

from __future__ import annotations

import logging
import re
from pathlib import Path
from typing import Any, Literal

from pydantic import AliasChoices, BaseModel, Field, ValidationError

from rlstack.common.names import ID_PATTERN

log = logging.getLogger(__name__)


class TrajectoryChoice(BaseModel):
    index: int
    message: dict[str, Any]
    """The assistant message (content, tool_calls, reasoning) in OpenAI form."""
    finish_reason: str | None = None
    completion_token_ids: list[int] = Field(default_factory=list)
    completion_logprobs: list[float] = Field(default_factory=list)
    """One logprob per completion token, aligned with completion_token_ids."""
    weight_versions: list[int] | None = None
    """The weight versions that sampled these tokens, oldest first, as the replica labelled them
    (``proxy.relay.versions``); None: unknown (the relay was off, or the replica had no label)."""


class SpliceInfo(BaseModel):
    """How the proxy built this call's prompt from an earlier call's exact ids (token-in)."""

    onto: str
    """request_id of the earlier call of this trial whose prompt + completion ids this prompt starts with."""
    prefix_tokens: int
    """Ids taken verbatim from that call."""
    tail_tokens: int
    """Ids rendered for what is new (tool results, the next user turn, the generation prompt)."""
    rerendered_exact: bool = True
    """Rendering the history again gave the same ids: nothing needed repairing. False = a drift token-in repaired."""
    retry: bool = False
    """The same request as ``onto``'s again: the same prompt, a new sample."""


class ThreadHead(BaseModel):
    """What token-in keeps of a call as the head of its thread, beside the record's own ids, so that
    another proxy process can continue the thread from the log (a pod that died, another worker).

    Fingerprints and keys are blake2b digests in hex: matching a later request needs only equality."""

    rendered_len: int
    rendered_fp: str
    stable_fp: str
    """The rendering less its generation prompt: what a continuation starts with."""
    stable_len: int | None = None
    """Where that ends (None in records from before: the rendering less its last id)."""
    turn_end: int | None = None
    root_len: int
    root_fp: str
    messages_len: int
    reply: str
    request_key: str
    setting: str
    tokens_fp: str
    """Of ``prompt_token_ids`` + the first choice's ``completion_token_ids``: a head whose ids did not
    reach the log as they were sent is never continued from it."""


class TrajectoryRecord(BaseModel):
    run_id: str
    trial_id: str
    request_id: str
    api: Literal["openai", "anthropic", "responses"]
    """The client's dialect: OpenAI chat completions, Anthropic messages, OpenAI responses."""
    started_at: float
    ended_at: float
    latency_seconds: float
    requested_model: str | None = None
    """The model name the agent asked for."""
    answered_by: str | None = Field(default=None, validation_alias=AliasChoices("answered_by", "served_model"))
    """The name the replica answered under: the served model, or under LoRA sync the adapter of the
    weight version that answered (records written before this name say ``served_model``)."""
    policy: str | None = None
    """The policy the proxy routed the call to (its replicas' served name); None in records from
    before policies: the run's only policy."""
    replica_id: str | None = None
    replica_url: str | None = None
    weight_version: int | None = None
    """The oldest version that sampled any of the call's completion tokens (its choices'
    ``weight_versions``); None: unknown."""
    request: dict[str, Any] = Field(default_factory=dict)
    """The client's request in its own API's shape (messages, system, tools, sampling params)."""
    streamed: bool = False
    """The client asked for an event stream (``stream`` is then not in ``request``: the proxy
    asks the replica for the whole reply and streams it back itself)."""
    prompt_token_ids: list[int] = Field(default_factory=list)
    choices: list[TrajectoryChoice] = Field(default_factory=list)
    usage: dict[str, Any] | None = None
    status: Literal["ok", "error"] = "ok"
    error: str | None = None
    splice: SpliceInfo | None = None
    """Set when the prompt continued an earlier call on its exact ids."""
    segment: Literal["history_edited", "no_turn_end"] | None = None
    """Why a call of a known conversation was not spliced and starts a new segment: the agent changed
    its history (compaction, an edited turn), or the reply it continues has no end-of-turn token."""
    thread: ThreadHead | None = None
    """Set by token-in for a call that became its thread's head."""


TRAJECTORY_STEM = "litellm-trajectory"
WRITER_ID_PATTERN = re.compile(ID_PATTERN)


def trajectory_file(trial_dir: Path, writer_id: str) -> Path:
    """``<trial>/litellm-trajectory.<writer>.jsonl``: one file per proxy process, so no two writers ever share one.

    Appends from two NFS clients to one file are not atomic; several proxy pods (and several
    worker processes per pod) each own their file instead, and readers merge them.
    """
    if not WRITER_ID_PATTERN.match(writer_id):
        raise ValueError(f"writer id {writer_id!r} must match {WRITER_ID_PATTERN.pattern}")
    return trial_dir / f"{TRAJECTORY_STEM}.{writer_id}.jsonl"


def trajectory_files(trial_dir: Path) -> list[Path]:
    """Every writer's file of one trial (``litellm-trajectory.jsonl`` of older runs included), by name."""
    return sorted(trial_dir.glob(f"{TRAJECTORY_STEM}*.jsonl"))


def trajectory_size(trial_dir: Path) -> int:
    """Bytes written so far, all writers together: a reader waits until this stops growing."""
    return sum(p.stat().st_size for p in trajectory_files(trial_dir))


def read_trajectory(trial_dir: Path) -> list[TrajectoryRecord]:
    """All calls of one trial, merged across writers in the order they started.

    A line that is not a record (a torn last line while a writer is mid-append) is skipped
    with a warning rather than losing the trial.
    """
    records: list[TrajectoryRecord] = []
    for path in trajectory_files(trial_dir):
        # Records end at "\n" alone: str.splitlines() also breaks at \x85 and \u2028, which JSON
        # strings carry unescaped, and a record whose text held one was skipped as two torn lines.
        for n, line in enumerate(path.read_text().split("\n"), 1):
            if not line.strip():
                continue
            try:
                records.append(TrajectoryRecord.model_validate_json(line))
            except ValidationError as exc:
                log.warning("%s:%d: skipped, not a trajectory record (%s)", path, n, exc.errors()[0]["msg"])
    records.sort(key=lambda r: (r.started_at, r.ended_at))
    return records
