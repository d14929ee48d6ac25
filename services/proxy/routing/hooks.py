"""LiteLLM callbacks: ask vLLM for token ids and logprobs, pin trials to replicas, log every call
(chat completions, Anthropic messages, and Responses calls by way of LiteLLM's chat bridge).

``async_pre_call_hook`` edits each request before routing; the success/failure events turn
the call into a ``TrajectoryRecord`` for the writer thread and count it in the metrics.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import Any

from litellm.integrations.custom_logger import CustomLogger

from rlstack.common.contracts.trajectory import SpliceInfo, TrajectoryChoice, TrajectoryRecord
from rlstack.proxy.metrics import ProxyMetrics
from rlstack.proxy.names import (
    CALL_HEADER,
    POLICY_HEADER,
    REQUESTED_MODEL_HEADER,
    STREAMED_HEADER,
    TRIAL_HEADER,
)
from rlstack.proxy.records.writer import TrajectoryWriter
from rlstack.proxy.relay.tokenin import TokenInUpstream
from rlstack.proxy.replicas import ReplicaView
from rlstack.proxy.routing.discovery import Discovery

log = logging.getLogger(__name__)
REQUEST_KEYS = ("messages", "system", "input", "instructions", "tools", "tool_choice", "max_tokens", "max_completion_tokens",
                "max_output_tokens", "temperature", "top_p", "top_k", "n", "stop", "stop_sequences", "thinking", "reasoning", "seed")
CALL_TYPES = {"completion": "openai", "acompletion": "openai", "anthropic_messages": "anthropic",
              "responses": "responses", "aresponses": "responses"}
"""The model calls made into records, and the dialect each speaks."""
CONTEXT_TTL = 3600.0
HEALTH_RUN = "rlstack-health"  # the proxy's own pings: served, counted, not logged as trajectories


@dataclass
class CallContext:
    run: str
    trial: str
    api: str
    requested_model: str | None
    request: dict[str, Any]
    policy: str
    streamed: bool = False
    created: float = field(default_factory=time.time)


class RLStackHooks(CustomLogger):
    def __init__(self, view: ReplicaView, discovery: Discovery | None, writer: TrajectoryWriter, metrics: ProxyMetrics,
                 sticky: bool = True, token_in: TokenInUpstream | None = None) -> None:
        super().__init__()
        self.view, self.discovery, self.writer, self.metrics = view, discovery, writer, metrics
        self.token_in = token_in
        self.sticky = sticky
        self.calls: dict[str, CallContext] = {}
        self.pending: Counter[str] = Counter()
        """Per ``run/trial``, calls started here whose record is not yet with the writer."""

    async def async_pre_call_hook(self, user_api_key_dict, cache, data: dict, call_type):  # noqa: ANN001 - LiteLLM's signature
        if call_type not in CALL_TYPES:
            return data
        meta = getattr(user_api_key_dict, "metadata", None) or {}
        run, trial = meta.get("rlstack_run", "default"), meta.get("rlstack_trial", "default")
        headers = (data.get("proxy_server_request") or {}).get("headers") or {}
        api = CALL_TYPES[call_type]
        policy = str(data.get("model") or self.view.default_policy)  # the edge made it the policy's name
        if api == "responses":
            # LiteLLM would pass a Responses call to vLLM's own /v1/responses, which returns no token
            # ids; its bridge makes it a chat completion, which the relay keeps exact (and splices).
            data["use_chat_completions_api"] = True
        call_id = data.get("litellm_call_id")
        if call_id and run != HEALTH_RUN:
            self._expire_old()
            request = {k: data[k] for k in REQUEST_KEYS if k in data}
            self.calls[call_id] = CallContext(run, trial, api, headers.get(REQUESTED_MODEL_HEADER), request, policy,
                                              streamed=headers.get(STREAMED_HEADER) == "1" or bool(data.get("stream")))
            self.pending[f"{run}/{trial}"] += 1
        # vLLM's own ids and logprobs, on every upstream call.
        data["logprobs"] = True
        extra = dict(data.get("extra_body") or {})
        extra["return_token_ids"] = True
        data["extra_body"] = extra
        if self.token_in is not None and call_id and run != HEALTH_RUN:
            # Token-in keeps each trial's threads; it learns which trial (and which call) from these.
            data["extra_headers"] = {**(data.get("extra_headers") or {}), TRIAL_HEADER: f"{run}/{trial}", CALL_HEADER: call_id,
                                     POLICY_HEADER: policy}
        if self.sticky and len(self.view.of(policy)) > 1:
            replica = self.view.sticky_replica(f"{run}/{trial}", policy)
            if replica is not None:
                data["model"] = self.view.pinned_group(replica)
        return data

    def _expire_old(self) -> None:
        if len(self.calls) > 10_000:
            cutoff = time.time() - CONTEXT_TTL
            for key in [k for k, c in self.calls.items() if c.created < cutoff]:
                self._settle(self.calls.pop(key))

    async def async_log_success_event(self, kwargs, response_obj, start_time, end_time):  # noqa: ANN001
        self._record(kwargs, response_obj, start_time, end_time, error=None)

    async def async_log_failure_event(self, kwargs, response_obj, start_time, end_time):  # noqa: ANN001
        error = kwargs.get("exception") or kwargs.get("original_exception")
        self._record(kwargs, None, start_time, end_time, error=str(error) if error else "upstream call failed")
        replica = self._replica(kwargs.get("litellm_params") or {})
        if replica is not None and self.discovery is not None and _is_connection_error(error):
            self.discovery.forget(replica.id)

    def _replica(self, params: dict[str, Any]):  # noqa: ANN202 - Endpoint | None
        info = params.get("model_info") or (params.get("metadata") or {}).get("model_info") or {}
        replica_id = str(info.get("id") or "").removesuffix("@pinned")
        return self.view.endpoints.get(replica_id) or self.view.by_url(params.get("api_base"))

    def _record(self, kwargs: dict, response: Any, start_time, end_time, error: str | None) -> None:  # noqa: ANN001
        call_id = kwargs.get("litellm_call_id") or ""
        ctx = self.calls.pop(call_id, None)
        if ctx is None:
            return  # not a proxied model call (health checks, warm-up without context)
        try:
            self._write(ctx, call_id, kwargs, response, start_time, end_time, error)
        finally:
            self._settle(ctx)

    def _settle(self, ctx: CallContext) -> None:
        key = f"{ctx.run}/{ctx.trial}"
        self.pending[key] -= 1
        if self.pending[key] <= 0:
            del self.pending[key]

    async def wait_logged(self, run: str, trial: str, timeout: float) -> int:
        """Wait until every call of the trial started in this process is with the writer; the calls still pending."""
        deadline = time.monotonic() + timeout
        key = f"{run}/{trial}"
        while self.pending.get(key, 0) > 0 and time.monotonic() < deadline:
            await asyncio.sleep(0.01)
        return self.pending.get(key, 0)

    def _write(self, ctx: CallContext, call_id: str, kwargs: dict, response: Any, start_time, end_time,  # noqa: ANN001
               error: str | None) -> None:
        params = kwargs.get("litellm_params") or {}
        replica = self._replica(params)
        started, ended = _ts(start_time), _ts(end_time)
        body = _as_dict(response)
        outcome = self.token_in.outcome(call_id) if self.token_in is not None else None
        splice = outcome.splice if outcome else None
        sampled = (outcome.versions if outcome else None) or []
        choices = [_choice(c, sampled[i] if i < len(sampled) else None) for i, c in enumerate(body.get("choices", []))] if body else []
        oldest = min((c.weight_versions[0] for c in choices if c.weight_versions), default=None)
        record = TrajectoryRecord(
            run_id=ctx.run, trial_id=ctx.trial, request_id=body.get("id") or call_id, api=ctx.api,  # type: ignore[arg-type]
            started_at=started, ended_at=ended, latency_seconds=max(0.0, ended - started),
            requested_model=ctx.requested_model, answered_by=_upstream_model(kwargs) or body.get("model") or ctx.policy, policy=ctx.policy,
            replica_id=replica.id if replica else None, replica_url=str(replica.url) if replica else params.get("api_base"),
            weight_version=oldest, request=ctx.request, streamed=ctx.streamed,
            prompt_token_ids=body.get("prompt_token_ids") or [], choices=choices, usage=body.get("usage"),
            status="error" if error else "ok", error=error,
            splice=SpliceInfo(onto=splice.onto, prefix_tokens=splice.prefix_tokens, tail_tokens=splice.tail_tokens,
                              rerendered_exact=splice.rerendered_exact, retry=splice.retry) if splice else None,
            segment=outcome.segment if outcome else None,  # type: ignore[arg-type]
            thread=outcome.head.logged() if outcome and outcome.head and not error else None,
        )
        self.writer.submit(record)
        self.metrics.observe_call(record)


def _choice(c: dict[str, Any], weight_versions: list[int] | None) -> TrajectoryChoice:
    extra = c.get("provider_specific_fields") or {}
    ids = c.get("token_ids") or extra.get("token_ids") or []
    content = ((c.get("logprobs") or {}).get("content")) or []
    message = {k: v for k, v in (c.get("message") or {}).items() if v is not None and k != "provider_specific_fields"}
    return TrajectoryChoice(index=c.get("index", 0), message=message, finish_reason=c.get("finish_reason"),
                            completion_token_ids=list(ids), completion_logprobs=[t.get("logprob", 0.0) for t in content],
                            weight_versions=weight_versions)


def _as_dict(response: Any) -> dict[str, Any]:
    if response is None:
        return {}
    if isinstance(response, dict):
        return response
    dump = getattr(response, "model_dump", None)
    return dump() if callable(dump) else {}


def _ts(value: Any) -> float:
    return value.timestamp() if hasattr(value, "timestamp") else float(value or time.time())


def _is_connection_error(error: Any) -> bool:
    """Only a refused connection says the replica is gone; timeouts and resets may be load."""
    text = f"{type(error).__name__} {error}".lower()
    return any(s in text for s in ("connection refused", "cannot connect to host", "connect call failed", "connecterror"))


def _upstream_model(kwargs: dict) -> str | None:
    """The model vLLM was asked for after routing (``hosted_vllm/<name>``): with lora sync, the adapter
    that produced the tokens, where the response only repeats the group name the client asked for."""
    params = kwargs.get("litellm_params") or {}
    model = params.get("model") or kwargs.get("model")
    return str(model).removeprefix("hosted_vllm/") if model else None
