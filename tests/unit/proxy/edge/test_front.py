"""The front layer's request handling on a stand-in app (no LiteLLM, no replica needed)."""

import json

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from rlstack.proxy.edge.front import FrontMiddleware

MESSAGES = [{"role": "user", "content": "hi"}]


async def echo(request: Request) -> JSONResponse:
    """Fake upstream (stands in for LiteLLM): echoes what the front layer passed on."""
    body = json.loads(await request.body())
    return JSONResponse({"seen": body, "trial": request.headers.get("x-rlstack-trial"),
                         "requested": request.headers.get("x-rlstack-requested-model"), "path": request.url.path,
                         "streamed": request.headers.get("x-rlstack-streamed")})


def client(cap=None) -> httpx.AsyncClient:
    inner = Starlette(routes=[Route("/v1/chat/completions", echo, methods=["POST"]), Route("/v1/messages", echo, methods=["POST"])])
    app = FrontMiddleware(inner, "policy", lambda _policy: ["http://127.0.0.1:9"], lambda _policy: 32768, 16, None, max_tokens_cap=cap)
    return httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://front")




@pytest.mark.parametrize("requested", ["policy", "hosted_vllm/policy", "claude-sonnet-4-5", "anthropic/claude-3-5-haiku"])
def test_every_alias_reaches_upstream_as_the_served_name(requested):
    import asyncio

    async def go():
        async with client() as c:
            return await c.post("/v1/chat/completions", json={"model": requested, "messages": MESSAGES, "max_tokens": 8})

    r = asyncio.run(go())
    assert r.json()["seen"]["model"] == "policy" and r.json()["requested"] == requested


def test_trial_prefix_is_stripped_and_spoofed_header_dropped():
    import asyncio

    async def go():
        async with client() as c:
            a = await c.post("/trials/run-a/t-1/v1/messages", json={"model": "claude-x", "messages": MESSAGES, "max_tokens": 8})
            b = await c.post("/v1/messages", json={"model": "claude-x", "messages": MESSAGES, "max_tokens": 8}, headers={"x-rlstack-trial": "evil/x"})
            return a, b

    a, b = asyncio.run(go())
    assert a.json()["path"] == "/v1/messages" and a.json()["trial"] == "run-a/t-1"
    assert b.json()["trial"] is None


def test_the_edge_alone_says_a_call_was_streamed():
    import asyncio

    async def go():
        async with client() as c:
            body = {"model": "policy", "messages": MESSAGES, "max_tokens": 8}
            plain = await c.post("/v1/chat/completions", json=body, headers={"x-rlstack-streamed": "1"})
            streamed = await c.post("/v1/chat/completions", json={**body, "stream": True})
            return plain, streamed

    plain, streamed = asyncio.run(go())
    assert plain.json()["streamed"] is None  # a client's own claim is dropped
    assert streamed.headers["content-type"].startswith("text/event-stream")


def test_cap_applies_without_a_tokenizer_round_trip():
    import asyncio

    async def go():
        async with client(cap=64) as c:
            return await c.post("/v1/chat/completions", json={"model": "policy", "messages": MESSAGES, "max_tokens": 32000})

    assert asyncio.run(go()).json()["seen"]["max_tokens"] == 64
