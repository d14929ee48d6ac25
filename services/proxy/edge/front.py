"""The ASGI layer in front of LiteLLM: trial path prefixes, model names, max_tokens clamping,
count_tokens, and streaming by way of one non-streaming upstream call, for the three dialects
(OpenAI chat completions, Anthropic messages, OpenAI responses).

Everything that needs the request body in the client's own format happens here, once: a model
call's trial key is checked before its body is read (count_tokens, answered here, never reaches
LiteLLM's auth), and its body's shape before LiteLLM translates it (``bodies``). Routing,
Anthropic<->OpenAI translation, retries and logging stay LiteLLM's; LiteLLM checks the key again.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Any

import httpx
import orjson
from starlette.datastructures import MutableHeaders
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from rlstack.common.auth import bearer
from rlstack.common.policies import Dialect, PolicyTable, single
from rlstack.common.trial_keys import TRIAL_PATH
from rlstack.proxy.edge.bodies import problem
from rlstack.proxy.edge.sse import anthropic_events, openai_chunks, responses_events
from rlstack.proxy.jsonio import loads
from rlstack.proxy.names import POLICY_HEADER, REQUESTED_MODEL_HEADER, STREAMED_HEADER, TRIAL_HEADER

log = logging.getLogger(__name__)

CHAT_PATHS = {"/v1/chat/completions", "/chat/completions"}
MESSAGES_PATHS = {"/v1/messages", "/messages"}
COUNT_PATHS = {"/v1/messages/count_tokens", "/messages/count_tokens"}
RESPONSES_PATHS = {"/v1/responses", "/responses"}
OTHER_ROUTES = frozenset({("GET", "/v1/models"), ("GET", "/models"), ("GET", "/health/liveliness"), ("GET", "/health/liveness")})
"""LiteLLM's routes let through besides the model calls. The rest (hundreds) are closed: with a
trial key an agent reached /v1/completions (each failure cooled the replica's
deployment down for every trial), provider pass-throughs (/anthropic/... dialled api.anthropic.com)
and management routes (500s); and /engines/<model>/... aliases skipped this layer's checks."""
KEY_HEADERS = ("authorization", "x-api-key", "x-litellm-api-key", "api-key")
"""Where clients put a key (OpenAI SDKs, Anthropic SDKs and claude-code, LiteLLM's own, Azure's)."""


class Refused(Exception):
    """What ``authorize`` raises for a key that may not make this call (401) or not on this path (403)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status, self.message = status, message


class FrontError(Exception):
    def __init__(self, status: int, message: str, param: str | None, anthropic: bool) -> None:
        super().__init__(message)
        self.status, self.message, self.param, self.anthropic = status, message, param, anthropic

    def body(self) -> bytes:
        if self.anthropic:
            kind = {400: "invalid_request_error", 401: "authentication_error", 403: "permission_error",
                    404: "not_found_error"}.get(self.status, "api_error")
            return orjson.dumps({"type": "error", "error": {"type": kind, "message": self.message}})
        return orjson.dumps({"error": {"message": self.message, "type": "invalid_request_error", "param": self.param, "code": self.status}})


REPLICA_POLL_SECONDS = 0.1
"""How often a call waiting for a ready replica looks again (the view is in this process's memory)."""


class FrontMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        policies: PolicyTable | str,
        replica_urls: Callable[[str], list[str]],
        max_context: Callable[[str], int],
        min_completion_tokens: int,
        replica_api_key: str | None,
        max_tokens_cap: int | None = None,
        stream_shim: bool = True,
        authorize: Callable[[str, str | None], None] | None = None,
        exact_downstream: bool = False,
        replica_wait_seconds: float = 0.0,
    ) -> None:
        self.replica_wait_seconds = replica_wait_seconds
        """How long a call that finds no ready replica waits for one before its 503."""
        self.exact_downstream = exact_downstream
        """Token-in's relay fits every call's output limit to its exact prompt (Responses calls included)."""
        self.authorize = authorize
        """(key, ``run/trial`` of the path prefix or None) -> None, or raises ``Refused``."""
        self.max_tokens_cap = max_tokens_cap
        self.stream_shim = stream_shim
        self.app = app
        self.policies = single(policies) if isinstance(policies, str) else policies
        """Which policy answers each model name; a name none claims is a 404."""
        self.replica_urls = replica_urls
        """A policy's ready replicas' URLs."""
        self.max_context = max_context
        """A policy's context length (the least of its replicas')."""
        self.min_completion_tokens = min_completion_tokens
        self.replica_headers = bearer(replica_api_key)
        self.client = httpx.AsyncClient(timeout=httpx.Timeout(30.0, connect=3.0))

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "websocket":  # LiteLLM's realtime routes: closed like the rest
            await send({"type": "websocket.close", "code": 1008})
            return
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        scope = dict(scope)
        headers = MutableHeaders(scope=scope)
        for own in (TRIAL_HEADER, STREAMED_HEADER, REQUESTED_MODEL_HEADER, POLICY_HEADER):
            if own in headers:
                del headers[own]  # identity and call facts come from the edge, never a client header
        match = TRIAL_PATH.match(scope["path"])
        if match:
            headers[TRIAL_HEADER] = f"{match['run']}/{match['trial']}"
            scope["path"] = match["rest"]
            scope["raw_path"] = match["rest"].encode()
        path = scope["path"]
        if scope["method"] != "POST" or path not in CHAT_PATHS | MESSAGES_PATHS | COUNT_PATHS | RESPONSES_PATHS:
            if (scope["method"], path) in OTHER_ROUTES:
                await self.app(scope, receive, send)
            else:
                message = (f"{scope['method']} {path[:200]}: not served here; the proxy serves POST /v1/chat/completions, "
                           "/v1/responses, /v1/messages and /v1/messages/count_tokens (also under /trials/<run>/<trial>) "
                           "and GET /v1/models")
                await _respond(send, 404, FrontError(404, message, None, path.startswith(("/v1/messages", "/messages"))).body())
            return
        anthropic = path in MESSAGES_PATHS | COUNT_PATHS
        kind = ("chat" if path in CHAT_PATHS else "responses" if path in RESPONSES_PATHS
                else "count_tokens" if path in COUNT_PATHS else "messages")
        try:
            self._authorize(headers, anthropic)
            raw = await _read_body(receive)
            body, policy = self._parse(raw, kind)
            requested = body["model"]
            body["model"] = policy
            headers[REQUESTED_MODEL_HEADER] = requested[:200]
            headers[POLICY_HEADER] = policy
            if path in COUNT_PATHS:
                await self._count_tokens(body, policy, send)
                return
            await self._ready_replicas(policy, anthropic)
            await self._clamp(body, raw, kind, policy)
        except FrontError as exc:
            await _respond(send, exc.status, exc.body())
            return

        stream = bool(body.get("stream", False)) and self.stream_shim
        if stream:
            body.pop("stream")
            headers[STREAMED_HEADER] = "1"
        stream_options = (body.pop("stream_options", None) or {}) if stream else {}
        new_body = orjson.dumps(body)
        headers["content-length"] = str(len(new_body))
        if "content-encoding" in headers:
            del headers["content-encoding"]
        inner_receive = _replay(new_body, receive)
        if not stream:
            await self.app(scope, inner_receive, send)
            return
        if "accept-encoding" in headers:
            del headers["accept-encoding"]  # the answer is read here: plain JSON, not gzip
        status, response_headers, payload = await _capture(self.app, scope, inner_receive)
        if status != 200:
            await _respond(send, status, payload, response_headers)
            return
        answer = loads(payload)
        events = (anthropic_events(answer) if anthropic else responses_events(answer) if kind == "responses"
                  else openai_chunks(answer, bool(stream_options.get("include_usage"))))
        sse_headers = [(b"content-type", b"text/event-stream"), (b"cache-control", b"no-cache")]
        sse_headers += [(k, v) for k, v in response_headers if k.lower().startswith(b"x-")]
        await send({"type": "http.response.start", "status": 200, "headers": sse_headers})
        for event in events:
            await send({"type": "http.response.body", "body": event, "more_body": True})
        await send({"type": "http.response.body", "body": b"", "more_body": False})

    def _authorize(self, headers: MutableHeaders, anthropic: bool) -> None:
        """Any key header that names this trial will do (LiteLLM, checking again, picks its own)."""
        if self.authorize is None:
            return
        keys = [headers[h] for h in KEY_HEADERS if headers.get(h)] or [""]
        refusals = []
        for key in keys:
            try:
                self.authorize(key, headers.get(TRIAL_HEADER))
                return
            except Refused as exc:
                refusals.append(exc)
        worst = max(refusals, key=lambda r: r.status)  # another trial's path (403) says more than a bad key
        raise FrontError(worst.status, worst.message, "authorization", anthropic)

    def _parse(self, raw: bytes, kind: Dialect) -> tuple[dict[str, Any], str]:
        """The body, checked, and the policy that answers the model it names."""
        anthropic = kind in ("messages", "count_tokens")
        try:
            body = orjson.loads(raw)
        except orjson.JSONDecodeError as exc:
            raise FrontError(400, f"body: not valid JSON ({exc})", None, anthropic) from None
        if not isinstance(body, dict):
            raise FrontError(400, "body: expected a JSON object", None, anthropic)
        model = body.get("model")
        if not isinstance(model, str) or not model:
            raise FrontError(400, "model: required (a string)", "model", anthropic)
        policy = self.policies.route(model, kind)
        if policy is None:
            served = "; ".join(f"{name}: {', '.join(claims)}" for name, claims in self.policies.served(kind).items())
            raise FrontError(404, f"model: {model!r} is not served here; served models, by policy: {served}", "model", anthropic)
        bad = problem(body, kind)
        if bad is not None:
            raise FrontError(400, bad[1], bad[0], anthropic)
        return body, policy

    async def _ready_replicas(self, policy: str, anthropic: bool) -> list[str]:
        """The policy's ready replicas' URLs, waiting up to ``replica_wait_seconds`` for one: a gap in
        routing (a replica re-registering, or out for missed probes) costs the call seconds, not a
        503 that can fail a whole trial. Never another policy's replica."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + self.replica_wait_seconds
        while not (urls := self.replica_urls(policy)):
            if loop.time() >= deadline:
                raise FrontError(503, f"no inference replica is ready for policy {policy!r}; retry shortly", None, anthropic)
            await asyncio.sleep(REPLICA_POLL_SECONDS)
        return urls

    async def _prompt_tokens(self, body: dict[str, Any], policy: str, anthropic: bool) -> int:
        """Counted by one of the policy's own replicas: its tokenizer is the one the call meets."""
        urls = await self._ready_replicas(policy, anthropic)
        if anthropic:
            keys = ("model", "messages", "system", "tools", "tool_choice", "thinking")
            request = {k: body[k] for k in keys if k in body}
            reply = await self._replica_post(f"{urls[0]}/v1/messages/count_tokens", request, anthropic)
            if reply.status_code != 200:
                raise FrontError(reply.status_code if reply.status_code < 500 else 502, f"count_tokens: {reply.text[:300]}", None, anthropic)
            return int(reply.json()["input_tokens"])
        request = {k: body[k] for k in ("model", "messages", "tools", "chat_template_kwargs") if k in body}
        reply = await self._replica_post(f"{urls[0]}/tokenize", {**request, "add_generation_prompt": True}, anthropic)
        if reply.status_code != 200:
            raise FrontError(reply.status_code if reply.status_code < 500 else 502, f"tokenize: {reply.text[:300]}", "messages", anthropic)
        return int(reply.json()["count"])

    async def _replica_post(self, url: str, request: dict[str, Any], anthropic: bool) -> httpx.Response:
        try:
            return await self.client.post(url, json=request, headers=self.replica_headers)
        except httpx.TransportError as exc:  # gone since discovery last looked: like no replica at all
            raise FrontError(503, f"no inference replica answered ({type(exc).__name__}); retry shortly", None, anthropic) from None

    async def _clamp(self, body: dict[str, Any], raw: bytes, kind: str, policy: str) -> None:
        """Shrink max_tokens to what the context leaves after the prompt, instead of a vLLM 400."""
        anthropic = kind in ("messages", "count_tokens")
        field = ("max_output_tokens" if kind == "responses" else
                 "max_tokens" if anthropic or "max_completion_tokens" not in body else "max_completion_tokens")
        requested = body.get(field)
        context = self.max_context(policy)
        if requested is None and self.max_tokens_cap is not None:
            body[field] = requested = self.max_tokens_cap  # the cap bounds calls that name no limit too
        if not isinstance(requested, int):
            return
        if self.max_tokens_cap is not None and requested > self.max_tokens_cap:
            body[field] = requested = self.max_tokens_cap
        if requested + len(raw) + 256 <= context:
            return  # a prompt has fewer tokens than bytes (+ template): cannot overflow
        if kind == "responses":
            # Input items become chat messages only inside LiteLLM's bridge; counting them here would
            # redo it. Token-in's relay counts every call exactly; without it, bound the call by its bytes.
            if not self.exact_downstream:
                body[field] = min(requested, max(self.min_completion_tokens, context - len(raw) - 256))
            return
        prompt = await self._prompt_tokens(body, policy, anthropic)
        room = context - prompt
        if room < self.min_completion_tokens:
            raise FrontError(400, f"messages: prompt is {prompt} tokens; the context holds {context}", "messages", anthropic)
        if requested > room:
            body[field] = room

    async def _count_tokens(self, body: dict[str, Any], policy: str, send: Send) -> None:
        count = await self._prompt_tokens(body, policy, anthropic=True)
        await _respond(send, 200, orjson.dumps({"input_tokens": count}))


async def _read_body(receive: Receive) -> bytes:
    chunks = []
    while True:
        message = await receive()
        chunks.append(message.get("body", b""))
        if not message.get("more_body", False):
            return b"".join(chunks)


def _replay(body: bytes, receive: Receive) -> Receive:
    sent = False

    async def inner() -> Message:
        nonlocal sent
        if not sent:
            sent = True
            return {"type": "http.request", "body": body, "more_body": False}
        return await receive()

    return inner


async def _capture(app: ASGIApp, scope: Scope, receive: Receive) -> tuple[int, list[tuple[bytes, bytes]], bytes]:
    status, headers, chunks = 500, [], []

    async def send(message: Message) -> None:
        nonlocal status, headers
        if message["type"] == "http.response.start":
            status, headers = message["status"], list(message.get("headers", []))
        elif message["type"] == "http.response.body":
            chunks.append(message.get("body", b""))

    await app(scope, receive, send)
    return status, headers, b"".join(chunks)


async def _respond(send: Send, status: int, body: bytes, headers: list[tuple[bytes, bytes]] | None = None) -> None:
    keep = [(k, v) for k, v in (headers or []) if k.lower() not in (b"content-length", b"content-type", b"transfer-encoding")]
    if status == 503:
        keep.append((b"retry-after", b"2"))
    await send({"type": "http.response.start", "status": status,
                "headers": [(b"content-type", b"application/json"), (b"content-length", str(len(body)).encode()), *keep]})
    await send({"type": "http.response.body", "body": body, "more_body": False})
