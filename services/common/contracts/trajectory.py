"""One line of ``litellm-trajectory.jsonl``: a model call as the trainer needs it.

Token ids and logprobs are vLLM's own (``return_token_ids``, ``logprobs``), never a
re-tokenisation of text: multi-turn RL breaks on retokenisation drift.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field


class TrajectoryChoice(BaseModel):
    index: int
    message: dict[str, Any]
    """The assistant message (content, tool_calls, reasoning) in OpenAI form."""
    finish_reason: str | None = None
    completion_token_ids: list[int] = Field(default_factory=list)
    completion_logprobs: list[float] = Field(default_factory=list)
    """One logprob per completion token, aligned with completion_token_ids."""


class TrajectoryRecord(BaseModel):
    run_id: str
    trial_id: str
    request_id: str
    api: Literal["openai", "anthropic"]
    started_at: float
    ended_at: float
    latency_seconds: float
    requested_model: str | None = None
    served_model: str | None = None
    replica_id: str | None = None
    replica_url: str | None = None
    weight_version: int | None = None
    request: dict[str, Any] = Field(default_factory=dict)
    """The client's request in its own API's shape (messages, system, tools, sampling params)."""
    prompt_token_ids: list[int] = Field(default_factory=list)
    choices: list[TrajectoryChoice] = Field(default_factory=list)
    usage: dict[str, Any] | None = None
    status: Literal["ok", "error"] = "ok"
    error: str | None = None
