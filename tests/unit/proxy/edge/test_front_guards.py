"""What the front layer refuses before LiteLLM sees a call: requests the proxy fuzz found turning
into 500s (wrong shapes LiteLLM's translation raised on), calls without a trial key (count_tokens
answered them), calls with no max_tokens under a cap (generated to the full context), a replica
gone mid-call. On a stand-in app: no LiteLLM, no replica."""

from __future__ import annotations

import asyncio
import json

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from rlstack.common.trial_keys import InvalidTrialKey, mint, verify
from rlstack.proxy.edge.bodies import problem
from rlstack.proxy.edge.front import FrontMiddleware, Refused

MESSAGES = [{"role": "user", "content": "hi"}]
CHAT = {"model": "policy", "messages": MESSAGES, "max_tokens": 8}
ANTHROPIC = {"model": "claude-sonnet-4-5", "messages": MESSAGES, "max_tokens": 8}


async def echo(request: Request) -> JSONResponse:
    """Stands in for LiteLLM: echoes what the front layer passed on."""
    return JSONResponse({"seen": json.loads(await request.body())})


def call(path: str, body: dict | bytes, headers: dict | None = None, cap: int | None = None,
         authorize=None, replicas=("http://127.0.0.1:9",), wait: float = 0.0) -> httpx.Response:  # noqa: ANN001
    inner = Starlette(routes=[Route(p, echo, methods=["POST"]) for p in ("/v1/chat/completions", "/v1/messages", "/v1/responses")])
    urls = replicas if callable(replicas) else lambda _policy: list(replicas)
    app = FrontMiddleware(inner, "policy", urls, lambda _policy: 32768, 16, None, max_tokens_cap=cap, authorize=authorize,
                          replica_wait_seconds=wait)

    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://front") as client:
            content = body if isinstance(body, bytes) else json.dumps(body).encode()
            return await client.post(path, content=content, headers={"content-type": "application/json", **(headers or {})})

    return asyncio.run(go())


# Each of these came back from LiteLLM as a 500 in the proxy fuzz.
FOUND = [
    ("/v1/chat/completions", {**CHAT, "messages": [{"role": "user", "content": 5e-324}]}, "messages.0.content"),
    ("/v1/chat/completions", {**CHAT, "stop": [[1], {}]}, "stop.0"),
    ("/v1/chat/completions", {**CHAT, "stream": True, "stream_options": "yes"}, "stream_options"),  # raised in the front layer itself
    ("/v1/messages", {**ANTHROPIC, "messages": [None]}, "messages.0"),
    ("/v1/messages", {**ANTHROPIC, "messages": [[[]]]}, "messages.0"),
    ("/v1/messages", {**ANTHROPIC, "tools": [[None]]}, "tools.0"),
    ("/v1/messages", {**ANTHROPIC, "tools": "1e999"}, "tools"),
    ("/v1/messages", {**ANTHROPIC, "tool_choice": {"name": "bash"}}, "tool_choice.type"),
]


@pytest.mark.parametrize(("path", "body", "field"), FOUND)
def test_wrong_shapes_are_a_400_naming_the_field(path, body, field):
    r = call(path, body)
    assert r.status_code == 400, r.text
    if path == "/v1/messages":
        assert r.json()["type"] == "error" and r.json()["error"]["message"].startswith(f"{field}:")
    else:
        assert r.json()["error"]["param"] == field and r.json()["error"]["message"].startswith(f"{field}:")


@pytest.mark.parametrize(("body", "kind"), [
    ({"model": "p", "messages": [{"role": "assistant", "content": None, "tool_calls": [
        {"id": "c1", "type": "function", "function": {"name": "bash", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": [{"type": "text", "text": "ok"}]}], "future_field": {"x": 1}}, "chat"),
    ({"model": "claude-x", "max_tokens": 8, "system": [{"type": "text", "text": "s", "cache_control": {"type": "ephemeral"}}],
      "messages": [{"role": "user", "content": [{"type": "text", "text": "q"}]},
                   {"role": "assistant", "content": [{"type": "thinking", "thinking": "t", "signature": "s"},
                                                     {"type": "tool_use", "id": "t1", "name": "bash", "input": {}}]},
                   {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "t1", "content": "ok"},
                                                {"type": "some_future_block"}]}],
      "tools": [{"name": "bash", "input_schema": {"type": "object"}}, {"type": "web_search_20250305", "name": "web_search"}],
      "tool_choice": {"type": "auto"}, "thinking": {"type": "enabled", "budget_tokens": 1024}, "context_management": {}}, "messages"),
    ({"model": "claude-x", "messages": [{"role": "user", "content": "q"}]}, "count_tokens"),
])
def test_what_clients_send_passes(body, kind):
    assert problem(body, kind) is None


def test_a_call_without_max_tokens_gets_the_cap():
    """It was sent on without one: vLLM generated up to the whole context (the fuzz's hang)."""
    assert call("/v1/chat/completions", {"model": "policy", "messages": MESSAGES}, cap=64).json()["seen"]["max_tokens"] == 64
    assert "max_tokens" not in call("/v1/chat/completions", {"model": "policy", "messages": MESSAGES}).json()["seen"]


def authorize(key: str, path_trial: str | None) -> None:
    secret = "s"
    try:
        identity = verify(secret, key.removeprefix("Bearer ").strip())
    except InvalidTrialKey as exc:
        raise Refused(401, f"api key: {exc}") from None
    if path_trial and path_trial != f"{identity.run}/{identity.trial}":
        raise Refused(403, "path names another trial")


@pytest.mark.parametrize("path", ["/v1/chat/completions", "/v1/messages", "/v1/messages/count_tokens"])
def test_model_calls_need_a_trial_key_before_anything_is_read(path):
    body = CHAT if path.endswith("completions") else ANTHROPIC
    assert call(path, body, authorize=authorize).status_code == 401
    assert call(path, b"{not json", {"authorization": "Bearer rlst_x.y"}, authorize=authorize).status_code == 401
    assert call(f"/trials/r/other{path}", body, {"x-api-key": mint("s", "r", "t")}, authorize=authorize).status_code == 403
    good = call(f"/trials/r/t{path}", body, {"authorization": "Bearer junk", "x-api-key": mint("s", "r", "t")}, authorize=authorize)
    assert good.status_code != 401 and good.status_code != 403  # count_tokens: 503, its replica is a closed port


def test_no_replica_ready_is_the_one_documented_5xx():
    for path, body in (("/v1/chat/completions", CHAT), ("/v1/messages", ANTHROPIC), ("/v1/messages/count_tokens", ANTHROPIC)):
        r = call(path, body, replicas=())
        assert r.status_code == 503 and r.headers["retry-after"] == "2" and "no inference replica is ready" in r.text


def test_a_call_waits_out_a_gap_in_routing_and_only_then_is_a_503():
    """A replica back in routing within ``replica_wait_seconds`` serves the waiting call; none is a 503."""
    looks = 0

    def back_on_the_fifth_look(policy: str) -> list[str]:
        nonlocal looks
        looks += 1
        return ["http://127.0.0.1:9"] if looks >= 5 else []

    for path, body in (("/v1/chat/completions", CHAT), ("/v1/messages", ANTHROPIC)):
        looks = 0
        r = call(path, body, replicas=back_on_the_fifth_look, wait=30)
        assert r.status_code == 200 and r.json()["seen"]["max_tokens"] == 8, r.text
        assert looks >= 5
    r = call("/v1/chat/completions", CHAT, replicas=(), wait=0.3)
    assert r.status_code == 503 and "no inference replica is ready" in r.text


def test_a_replica_gone_while_counting_tokens_is_a_503_not_a_500():
    r = call("/v1/messages/count_tokens", ANTHROPIC)  # the only replica is a closed port
    assert r.status_code == 503 and r.headers["retry-after"] == "2"
    r = call("/v1/chat/completions", {**CHAT, "max_tokens": 32760})  # past the context: the prompt is counted first
    assert r.status_code == 503 and "no inference replica answered" in r.json()["error"]["message"]


def test_a_key_with_non_ascii_characters_is_invalid_not_an_error():
    key = mint("s", "r", "t")
    for bad in (key + "\u00e9", key.replace(".", "\u00ff.")):
        with pytest.raises(InvalidTrialKey):
            verify("s", bad)


@pytest.mark.parametrize(("method", "path"), [
    ("POST", "/v1/completions"), ("POST", "/v1/embeddings"), ("POST", "/engines/policy/chat/completions"),
    ("POST", "/openai/deployments/policy/chat/completions"), ("POST", "/anthropic/v1/messages"), ("POST", "/key/generate"),
    ("GET", "/model/info"), ("GET", "/health"), ("GET", "/openapi.json"), ("GET", "/v1/chat/completions"),
    ("POST", "/trials/r/t/v1/completions"), ("POST", "/trials/r/t/anthropic/v1/messages"),
])
def test_litellm_routes_beyond_the_model_calls_are_closed(method, path):
    """With a trial key these reached LiteLLM: untracked generation, a replica's deployment cooled
    down for every trial by one failing call, pass-throughs to provider APIs, management routes."""
    reached = []
    inner = Starlette(routes=[Route(path.removeprefix("/trials/r/t"), lambda request: reached.append(1) or JSONResponse({}),
                                    methods=[method])])
    app = FrontMiddleware(inner, "policy", lambda _policy: ["http://127.0.0.1:9"], lambda _policy: 32768, 16, None)

    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://front") as client:
            return await client.request(method, path, json=CHAT if method == "POST" else None)

    r = asyncio.run(go())
    assert r.status_code == 404 and "not served here" in r.text and not reached


RESPONSES = {"model": "gpt-5-codex", "input": [{"role": "user", "content": [{"type": "input_text", "text": "hi"}]}]}


@pytest.mark.parametrize(("body", "field"), [
    ({**RESPONSES, "input": [{"type": "web_search_call", "id": "w1"}]}, "input.0.type"),
    ({**RESPONSES, "input": [*RESPONSES["input"], {"type": "function_call", "call_id": "c1", "name": "shell"}]}, "input.1"),
    ({**RESPONSES, "input": [{"role": "robot", "content": "hi"}]}, "input.0.role"),
    ({**RESPONSES, "previous_response_id": "resp_1"}, "previous_response_id"),
    ({**RESPONSES, "input": []}, "input"),
    ({**RESPONSES, "max_output_tokens": 0}, "max_output_tokens"),
    ({**RESPONSES, "tools": [{"type": "function"}]}, "tools.0"),
])
def test_a_responses_call_of_the_wrong_shape_is_a_400_naming_the_field(body, field):
    r = call("/v1/responses", body)
    assert r.status_code == 400, r.text
    assert r.json()["error"]["param"] == field and r.json()["error"]["message"].startswith(f"{field}:")


def test_what_codex_sends_passes_and_reaches_litellm_as_the_served_model_under_the_cap():
    body = {**RESPONSES, "instructions": "You are codex.", "store": False, "stream": False, "include": ["reasoning.encrypted_content"],
            "reasoning": {"effort": "medium", "summary": "auto"}, "parallel_tool_calls": False, "tool_choice": "auto",
            "tools": [{"type": "function", "name": "shell", "parameters": {"type": "object"}, "strict": False},
                      {"type": "custom", "name": "apply_patch", "format": {"type": "grammar"}}],
            "input": [*RESPONSES["input"],
                      {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": None},
                      {"type": "function_call", "call_id": "c1", "name": "shell", "arguments": "{\"command\":[\"ls\"]}"},
                      {"type": "function_call_output", "call_id": "c1", "output": "a.txt"},
                      {"type": "custom_tool_call", "call_id": "c2", "name": "apply_patch", "input": "*** Begin Patch"},
                      {"type": "custom_tool_call_output", "call_id": "c2", "output": "Done"},
                      {"type": "message", "role": "assistant", "content": [{"type": "output_text", "text": "ok"}]}]}
    seen = call("/v1/responses", body, cap=64).json()["seen"]
    assert seen["model"] == "policy" and seen["max_output_tokens"] == 64 and seen["input"] == body["input"]
    r = call("/v1/responses", {**RESPONSES, "model": "llama-3"})
    assert r.status_code == 404 and "gpt-*" in r.json()["error"]["message"]
    assert call("/v1/chat/completions", {**CHAT, "model": "gpt-5"}).status_code == 404  # OpenAI names: the Responses route only
