"""A trial's model calls, as logged by the proxy, turned into training sequences from vLLM's ids.

An agent's calls form *threads*: call k+1 continues call k when its prompt ids start with
call k's prompt + completion ids (the chat template re-rendered the history exactly). A thread
becomes one sequence: the policy's completion tokens are trained (with vLLM's logprobs), and
everything between them (system prompt, user turns, tool results, template glue) is masked.

With the proxy's token-in (the default) a continued call's prompt *is* its thread's ids plus the
rendered tail, so threads merge by construction; the record says so (``splice``), and a
history the agent itself changed comes as a new segment (``segment``), counted here.

Nothing is re-tokenised. When a prompt does not extend any thread, it starts a new sequence;
if it does start with an earlier thread's first prompt (same conversation, but an earlier turn
came back as different tokens), that is a *thread break*, counted, and the drifted copy of
the history is only ever context, never trained on. A call whose prompt is exactly an earlier
call's prompt is a *retry* (the agent asked again after an error), a new sample of the same
turn: a sequence of its own, counted as a retry, not a break. Side calls (a title, a
sub-agent) are simply threads of their own.

Threads never cross policies: with two policies in a run (a lead and the sub-agent it delegates
to, each its own trained model), a call continues, retries or breaks only threads its own policy
served, and each sequence names its policy.

Each sequence says what kind of segment it is: ``main`` (the trial's first thread),
``sub_agent`` (a thread whose request carries the prompt an earlier call gave a sub-agent tool,
claude-code's ``Agent``/``Task``), ``after_compaction`` (the agent rewrote its history),
``retry``, ``break`` (a drifted copy of a known conversation) or ``side_call`` (anything else: a
title, a summary). Every kind is trained with the trial's reward; the counts say where a
trial's tokens came from.
"""

from __future__ import annotations

import json
from collections import Counter
from collections.abc import Iterable
from typing import Any, Literal

from pydantic import BaseModel, Field, computed_field

from rlstack.common.contracts.atropos import MASKED
from rlstack.common.contracts.trajectory import TrajectoryRecord
from rlstack.episodes.trials.records import TrajectoryStats

SegmentKind = Literal["main", "sub_agent", "side_call", "after_compaction", "retry", "break"]
SUB_AGENT_TOOLS = frozenset({"Agent", "Task"})
"""Tools whose call opens a sub-agent thread (claude-code's; ``Task`` in its older releases)."""


class AssembledSequence(BaseModel):
    tokens: list[int]
    masks: list[int]
    """MASKED except on the policy's own completion tokens, where it is the token id."""
    inference_logprobs: list[float]
    """vLLM's logprob on trained positions, 0.0 elsewhere."""
    calls: int
    kind: SegmentKind = "main"
    weight_versions: list[int] = Field(default_factory=list)
    """The versions that sampled its trained tokens, oldest first (the calls' own, from the replica)."""
    unversioned_calls: int = 0
    """Calls whose versions the proxy could not learn: the sequence's versions are then incomplete."""
    policy: str | None = None
    """The policy whose replicas sampled it (None: calls logged before policies)."""

    @property
    def sampling_versions(self) -> list[int] | None:
        """``weight_versions`` when every call's are known, else None."""
        return self.weight_versions if self.weight_versions and not self.unversioned_calls else None

    @computed_field
    @property
    def trained_tokens(self) -> int:
        return sum(m != MASKED for m in self.masks)


class Assembly(BaseModel):
    sequences: list[AssembledSequence]
    calls: int
    """Model calls that returned tokens."""
    merged_calls: int
    """Calls that continued an earlier call of their thread."""
    thread_breaks: int
    failed_calls: int
    """Calls the proxy logged as errors: the agent saw a failure, so the trial is not scored."""
    retried_calls: int = 0
    """Calls that asked exactly an earlier call's prompt again."""
    spliced_calls: int = 0
    """Calls the proxy sent on an earlier call's exact ids (token-in)."""
    edited_segments: int = 0
    """Calls whose history the agent had changed (compaction, an edited turn): new segments, not breaks."""

    @computed_field
    @property
    def segments(self) -> dict[str, int]:
        """Trained sequences by kind."""
        return dict(Counter(s.kind for s in self.sequences))

    def by_policy(self) -> dict[str | None, list[AssembledSequence]]:
        """The sequences each policy trains on, in order."""
        grouped: dict[str | None, list[AssembledSequence]] = {}
        for s in self.sequences:
            grouped.setdefault(s.policy, []).append(s)
        return grouped

    @computed_field
    @property
    def merge_share(self) -> float | None:
        """Share of calls after the first of their conversation that merged (1.0 = no drift)."""
        continued = self.merged_calls + self.thread_breaks
        return None if continued == 0 else self.merged_calls / continued

    def stats(self) -> TrajectoryStats:
        """What a trial's ``result.json`` says of its assembly."""
        counts = self.model_dump(include={"calls", "merged_calls", "thread_breaks", "failed_calls", "retried_calls",
                                          "spliced_calls", "edited_segments", "merge_share", "segments"})
        policies = dict(Counter(s.policy for s in self.sequences if s.policy is not None))
        return TrajectoryStats(**counts, sequences=len(self.sequences), trained_tokens=sum(s.trained_tokens for s in self.sequences),
                               policies=policies)

    @property
    def oldest_weight_version(self) -> int | None:
        versions = [v for s in self.sequences for v in s.weight_versions]
        return min(versions, default=None)


class _Thread:
    def __init__(self, prompt: list[int], kind: SegmentKind, policy: str | None) -> None:
        self.first_prompt = prompt
        self.kind = kind
        self.policy = policy
        self.tokens: list[int] = []
        self.masks: list[int] = []
        self.logprobs: list[float] = []
        self.calls = 0
        self.versions: set[int] = set()
        self.unversioned = 0
        self.prompts: list[list[int]] = []

    def extend(self, prompt: list[int], completion: list[int], logprobs: list[float], versions: list[int] | None) -> None:
        self.prompts.append(prompt)
        context = prompt[len(self.tokens):]
        self.tokens += context + completion
        self.masks += [MASKED] * len(context) + completion
        self.logprobs += [0.0] * len(context) + logprobs
        self.calls += 1
        if versions:
            self.versions.update(versions)
        else:
            self.unversioned += 1

    def continued_by(self, prompt: list[int]) -> bool:
        n = len(self.tokens)
        return len(prompt) >= n and prompt[:n] == self.tokens

    def sequence(self) -> AssembledSequence:
        return AssembledSequence(tokens=self.tokens, masks=self.masks, inference_logprobs=self.logprobs, calls=self.calls,
                                 kind=self.kind, weight_versions=sorted(self.versions), unversioned_calls=self.unversioned,
                                 policy=self.policy)


def assemble(records: Iterable[TrajectoryRecord]) -> Assembly:
    threads: list[_Thread] = []
    delegated: list[str] = []  # prompts handed to sub-agent tools so far
    calls = merged = breaks = failed = retried = spliced = edited = 0
    for record in sorted(records, key=lambda r: r.started_at):
        if record.status != "ok" or not record.choices:
            failed += 1
            continue
        choice = min(record.choices, key=lambda c: c.index)  # agents ask for one completion per call
        if len(choice.completion_logprobs) != len(choice.completion_token_ids) or not record.prompt_token_ids:
            failed += 1  # a call without vLLM's ids cannot be trained on; treat it as failed
            continue
        prompt = record.prompt_token_ids
        calls += 1
        spliced += record.splice is not None and not record.splice.retry
        edited += record.segment == "history_edited"
        own = [t for t in threads if t.policy == record.policy]  # another policy's ids are not this one's history
        thread = max((t for t in own if t.continued_by(prompt)), key=lambda t: len(t.tokens), default=None)
        if thread is not None:
            merged += 1
        else:
            kind: SegmentKind = "main" if not threads else "side_call"
            if any(prompt in t.prompts for t in own):
                retried += 1
                kind = "retry"
            elif record.segment == "history_edited":
                kind = "after_compaction"  # the agent's own edit: a segment of its own, not drift
            elif any(_starts_with(prompt, t.first_prompt) for t in own):
                breaks += 1
                kind = "break"
            elif threads and any(p in _request_text(record.request) for p in delegated):
                kind = "sub_agent"  # delegated by any policy's thread: the lead's Agent call opens the helper's
            thread = _Thread(prompt, kind, record.policy)
            threads.append(thread)
        thread.extend(prompt, choice.completion_token_ids, choice.completion_logprobs, choice.weight_versions)
        delegated += _sub_agent_prompts(choice.message)
    sequences = [t.sequence() for t in threads]
    return Assembly(sequences=[s for s in sequences if s.trained_tokens > 0], calls=calls, merged_calls=merged,
                    thread_breaks=breaks, failed_calls=failed, retried_calls=retried, spliced_calls=spliced,
                    edited_segments=edited)


def _sub_agent_prompts(message: dict[str, Any]) -> list[str]:
    prompts = []
    for call in message.get("tool_calls") or []:
        function = call.get("function") or {}
        if function.get("name") in SUB_AGENT_TOOLS:
            try:
                arguments = json.loads(function.get("arguments") or "{}")
            except json.JSONDecodeError:
                continue
            if isinstance(arguments, dict) and isinstance(arguments.get("prompt"), str) and arguments["prompt"].strip():
                prompts.append(arguments["prompt"].strip())
    return prompts


def _request_text(request: dict[str, Any]) -> str:
    """The user turns' text, whatever the dialect (chat and Anthropic ``messages``, Responses ``input``)."""
    turns = request.get("messages") or request.get("input") or []
    found: list[str] = []
    for turn in turns if isinstance(turns, list) else []:
        if not isinstance(turn, dict) or turn.get("role") != "user":
            continue
        content = turn.get("content")
        parts = [content] if isinstance(content, str) else content if isinstance(content, list) else []
        found += [p if isinstance(p, str) else str(p.get("text", "")) for p in parts if isinstance(p, str | dict)]
    return "\n".join(found)


def _starts_with(prompt: list[int], prefix: list[int]) -> bool:
    return len(prompt) >= len(prefix) and prompt[: len(prefix)] == prefix
