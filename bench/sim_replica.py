"""Simulated vLLM replicas for the control-plane benchmarks: real HTTP servers that answer every route
the proxy, the registry and the trainer's weight sync call on a replica, with token ids and logprobs,
a set time to first token and per token, and prompts as long as the caller sends.

Not a model and never used by the suite's correctness tests: it lets one machine put tens of
replicas and a thousand trials in front of the real proxy, registry and env server, which one CPU
vLLM cannot. ``tests/integration/inference/test_sim_replica_speaks_vllm.py`` holds it to the real
replica's answers on every route the proxy reads, so a benchmark cannot drift from the real hop.

What it models:

- **Tokens.** A chat template of its own with special ids (``<|im_start|>`` 1, ``<|im_end|>`` 2, a
  newline 3, one id per role), each message's text cut into 4-byte pieces, each piece one id
  (a crc32 into a 32k vocabulary): prompts are about as many ids as a real tokenizer gives, a
  history renders to the same ids every time (the proxy's token-in splices on that), and a reply
  ends on ``<|im_end|>``, the template's end of turn.
- **Time.** ``ttft_ms`` before the first token, ``tpot_ms`` per token after it, each call on its own
  (a replica with room for every call: the benchmark measures the control plane, not a GPU).
- **Weights.** A version that ``/update_weight_version`` and the sync's RPCs set, reported by
  ``/weight_info`` and per token in ``generate``'s ``weight_versions``.
- **The sidecar.** Each replica registers itself with the registry and heartbeats, as
  ``rlstack.inference`` does for a real vLLM.

    python -m bench.sim_replica --count 8 --registry-url http://127.0.0.1:8100 [--ttft-ms 50 --tpot-ms 10]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import logging
import random
import time
import uuid
import zlib
from collections.abc import Iterator
from typing import Any

import httpx
import orjson
import uvicorn
from pydantic import BaseModel, Field
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

log = logging.getLogger("sim_replica")

IM_START, IM_END, NEWLINE = 1, 2, 3
ROLES = {"system": 4, "developer": 4, "user": 5, "assistant": 6, "tool": 7}
FIRST_TEXT_ID = 16
VOCAB = 32_000
BYTES_PER_TOKEN = 4


class SimSettings(BaseModel):
    served_model_name: str = "policy"
    max_model_len: int = Field(default=131_072, ge=16)
    ttft_ms: float = Field(default=50.0, ge=0)
    tpot_ms: float = Field(default=10.0, ge=0)
    completion_tokens: int = Field(default=64, ge=1)
    """Tokens a reply runs to before its end of turn (fewer when ``max_tokens`` cuts it)."""
    dtype: str = "bfloat16"
    seed: int = 0


# -- the tokenizer ---------------------------------------------------------------------------------
def encode(text: str) -> list[int]:
    return list(_encode(text))


@functools.lru_cache(maxsize=65_536)
def _encode(text: str) -> tuple[int, ...]:
    """Cached: an agent resends its history every call, and the proxy has it rendered again (render,
    tokenize); without the cache one core of replicas would spend itself hashing old turns."""
    data = text.encode()
    return tuple(FIRST_TEXT_ID + zlib.crc32(data[i:i + BYTES_PER_TOKEN]) % (VOCAB - FIRST_TEXT_ID)
            for i in range(0, len(data), BYTES_PER_TOKEN))


def decode(ids: list[int]) -> str:
    """Text of generated ids: four characters an id (``<|im_end|>`` is not text)."""
    return "".join(format(i % 0xFFFF, "04x") for i in ids if i >= FIRST_TEXT_ID)


def _text(message: dict[str, Any]) -> str:
    content = message.get("content")
    if isinstance(content, list):
        content = "".join(part.get("text", "") if isinstance(part, dict) else str(part) for part in content)
    text = content if isinstance(content, str) else ""
    if message.get("tool_calls"):
        text += json.dumps(message["tool_calls"], sort_keys=True)
    return text


def render(messages: list[dict[str, Any]], tools: Any = None, add_generation_prompt: bool = True) -> list[int]:
    """The template: an optional tools block, then ``<|im_start|>role\\n text <|im_end|>\\n`` per message."""
    ids: list[int] = []
    if tools:
        ids += [IM_START, ROLES["system"], NEWLINE, *encode(json.dumps(tools, sort_keys=True)), IM_END, NEWLINE]
    for m in messages:
        ids += [IM_START, ROLES.get(m.get("role", "user"), ROLES["user"]), NEWLINE, *encode(_text(m)), IM_END, NEWLINE]
    if add_generation_prompt:
        ids += [IM_START, ROLES["assistant"], NEWLINE]
    return ids


# -- one replica ------------------------------------------------------------------------------------
class SimReplica:
    def __init__(self, settings: SimSettings, port: int, replica_id: str) -> None:
        self.s = settings
        self.port = port
        self.replica_id = replica_id
        self.version = 0
        self.paused = False
        self.rng = random.Random(settings.seed * 1_000_003 + port)
        self.calls: dict[str, int] = {}
        """Requests per route (the benchmark reads what each proxy call cost the replica)."""
        self.app = Starlette(routes=self._routes())

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def _routes(self) -> list[Route]:
        post = [("/v1/chat/completions", self.chat), ("/v1/chat/completions/render", self.render),
                ("/inference/v1/generate", self.generate), ("/v1/chat/completions/derender", self.derender),
                ("/tokenize", self.tokenize), ("/v1/messages/count_tokens", self.count_tokens),
                ("/update_weight_version", self.update_weight_version), ("/collective_rpc", self.collective_rpc),
                ("/pause", self.pause), ("/resume", self.resume), ("/reset_prefix_cache", self.success),
                ("/v1/completions", self.completions)]
        get = [("/v1/models", self.models), ("/weight_info", self.weight_info), ("/health", self.health), ("/metrics", self.metrics)]
        return [Route(p, self._counted(p, f), methods=["POST"]) for p, f in post] + [Route(p, self._counted(p, f), methods=["GET"]) for p, f in get]

    def _counted(self, path: str, handler):  # noqa: ANN001, ANN202 - a Starlette endpoint
        async def endpoint(request: Request) -> Response:
            self.calls[path] = self.calls.get(path, 0) + 1
            return await handler(request)

        return endpoint

    # -- generation --------------------------------------------------------------------------------
    def _sample(self, prompt_len: int, max_tokens: int | None) -> tuple[list[int], str]:
        """A reply of ``completion_tokens`` ending on the end of turn, or cut at the limit (``length``)."""
        room = max(1, self.s.max_model_len - prompt_len)
        limit = min(max_tokens or room, room)
        if limit < self.s.completion_tokens:
            return [self.rng.randrange(FIRST_TEXT_ID, VOCAB) for _ in range(limit)], "length"
        return [self.rng.randrange(FIRST_TEXT_ID, VOCAB) for _ in range(self.s.completion_tokens - 1)] + [IM_END], "stop"

    async def _wait(self, tokens: int) -> None:
        while self.paused:
            await asyncio.sleep(0.005)
        await asyncio.sleep((self.s.ttft_ms + self.s.tpot_ms * max(0, tokens - 1)) / 1000)

    def _logprobs(self, ids: list[int]) -> list[float]:
        return [-self.rng.random() * 2 for _ in ids]

    def _choice_message(self, ids: list[int], finish: str, logprobs: list[float], index: int = 0) -> dict[str, Any]:
        return {"index": index, "message": {"role": "assistant", "content": decode(ids), "tool_calls": [], "reasoning": None},
                "logprobs": {"content": [{"token": decode([i]) or "<|im_end|>", "logprob": lp, "bytes": None, "top_logprobs": []}
                                         for i, lp in zip(ids, logprobs, strict=True)]},
                "finish_reason": finish, "stop_reason": None, "token_ids": ids}

    async def chat(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        prompt = render(body.get("messages") or [], body.get("tools"))
        n = int(body.get("n") or 1)
        samples = [self._sample(len(prompt), body.get("max_completion_tokens") or body.get("max_tokens")) for _ in range(n)]
        await self._wait(max(len(ids) for ids, _ in samples))
        if body.get("stream"):
            return StreamingResponse(self._stream(body, samples), media_type="text/event-stream")
        choices = [self._choice_message(ids, finish, self._logprobs(ids), i) for i, (ids, finish) in enumerate(samples)]
        completion = sum(len(ids) for ids, _ in samples)
        return _json({"id": f"chatcmpl-{uuid.uuid4().hex}", "object": "chat.completion", "created": int(time.time()),
                      "model": body.get("model", self.s.served_model_name), "choices": choices, "prompt_token_ids": prompt,
                      "usage": {"prompt_tokens": len(prompt), "completion_tokens": completion, "total_tokens": len(prompt) + completion}})

    def _stream(self, body: dict[str, Any], samples: list[tuple[list[int], str]]) -> Iterator[bytes]:
        cid, created, model = f"chatcmpl-{uuid.uuid4().hex}", int(time.time()), body.get("model", self.s.served_model_name)
        for index, (ids, finish) in enumerate(samples):
            for k, token in enumerate(ids):
                delta = {"role": "assistant", "content": decode([token])} if k == 0 else {"content": decode([token])}
                last = k == len(ids) - 1
                chunk = {"id": cid, "object": "chat.completion.chunk", "created": created, "model": model,
                         "choices": [{"index": index, "delta": delta, "logprobs": None, "finish_reason": finish if last else None,
                                      "token_ids": [token]}]}
                yield b"data: " + orjson.dumps(chunk) + b"\n\n"
        yield b"data: [DONE]\n\n"

    async def render(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        ids = render(body.get("messages") or [], body.get("tools"), body.get("add_generation_prompt", True))
        sampling = {"max_tokens": body.get("max_completion_tokens") or body.get("max_tokens"), "temperature": body.get("temperature", 1.0),
                    "logprobs": 0 if body.get("logprobs") else None, "n": body.get("n") or 1}
        return _json({"request_id": f"chatcmpl-{uuid.uuid4().hex}", "token_ids": ids, "features": None, "sampling_params": sampling,
                      "model": body.get("model", self.s.served_model_name), "stream": False, "cache_salt": None, "priority": 0})

    async def generate(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        prompt = body.get("token_ids") or []
        sampling = body.get("sampling_params") or {}
        ids, finish = self._sample(len(prompt), sampling.get("max_tokens"))
        version = self.version
        await self._wait(len(ids))
        logprobs = self._logprobs(ids)
        return _json({"request_id": body.get("request_id") or uuid.uuid4().hex, "prompt_token_ids": prompt,
                      "choices": [{"index": 0, "finish_reason": finish, "stop_reason": None, "token_ids": ids,
                                   "logprobs": {"content": [{"token_id": i, "logprob": lp, "rank": 1, "top_logprobs": []}
                                                            for i, lp in zip(ids, logprobs, strict=True)]},
                                   "weight_versions": [{"version": str(version), "start": 0, "end": len(ids)}]}],
                      "usage": {"prompt_tokens": len(prompt), "completion_tokens": len(ids), "total_tokens": len(prompt) + len(ids)}})

    async def derender(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        generated = body.get("generate_response") or {}
        choices = []
        for choice in generated.get("choices") or []:
            ids = choice.get("token_ids") or []
            lps = [e.get("logprob", 0.0) for e in (choice.get("logprobs") or {}).get("content") or []]
            entry = self._choice_message(ids, choice.get("finish_reason") or "stop", (lps + [0.0] * len(ids))[: len(ids)], choice.get("index", 0))
            if len(lps) > len(ids):
                # vLLM's derender passes the generate answer's logprobs through as given (``online_derenderer``):
                # the proxy cuts the end of turn from the ids for the text only, and its record keeps every
                # generated id with its logprob. Cut here too, the record had one logprob fewer than ids and
                # the env counted each spliced call as failed (found by bench/env_scale.py).
                entry["logprobs"]["content"] += [{"token": "<|im_end|>", "logprob": lp, "bytes": None, "top_logprobs": []}
                                                 for lp in lps[len(ids):]]
            entry["stop_reason"] = choice.get("stop_reason")
            choices.append(entry)
        completion = sum(len(c["token_ids"]) for c in choices)
        return _json({"id": generated.get("request_id") or uuid.uuid4().hex, "object": "chat.completion", "created": int(time.time()),
                      "model": body.get("model", self.s.served_model_name), "choices": choices,
                      "usage": {"prompt_tokens": 0, "completion_tokens": completion, "total_tokens": completion}})

    async def completions(self, request: Request) -> Response:
        """The served-weights probe (``prompt_logprobs``): logprobs of the prompt's own ids."""
        body = orjson.loads(await request.body())
        prompt = body.get("prompt") or []
        prompt = prompt if isinstance(prompt, list) else encode(str(prompt))
        per_token = [None] + [{str(i): {"logprob": -1.0, "rank": 1, "decoded_token": decode([i])}} for i in prompt[1:]]
        return _json({"id": uuid.uuid4().hex, "object": "text_completion", "model": body.get("model"),
                      "choices": [{"index": 0, "text": "", "finish_reason": "length", "prompt_logprobs": per_token}]})

    async def tokenize(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        ids = render(body["messages"], body.get("tools"), body.get("add_generation_prompt", True)) if "messages" in body \
            else encode(str(body.get("prompt", "")))
        return _json({"count": len(ids), "max_model_len": self.s.max_model_len, "tokens": ids})

    async def count_tokens(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        system = body.get("system")
        messages = ([{"role": "system", "content": system}] if system else []) + list(body.get("messages") or [])
        return _json({"input_tokens": len(render(messages, body.get("tools")))})

    # -- weights -----------------------------------------------------------------------------------
    async def weight_info(self, request: Request) -> Response:
        return _json({"weight_version": str(self.version)})

    async def update_weight_version(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        self.version = int(body.get("new_version", self.version))
        return _json({"weight_version": str(self.version)})

    async def collective_rpc(self, request: Request) -> Response:
        body = orjson.loads(await request.body())
        method, kwargs = body.get("method"), body.get("kwargs") or {}
        if method == "rlstack_weight_state":
            result: Any = {"version": self.version, "adapter": None, "dtype": self.s.dtype}
        elif method == "rlstack_set_weight_version":
            self.version = result = int(kwargs["version"])
        else:  # rlstack_reload_weights and the rest: done at once
            result = 0
        return _json({"results": [result]})

    async def pause(self, request: Request) -> Response:
        self.paused = True
        return _json({"status": "paused"})

    async def resume(self, request: Request) -> Response:
        self.paused = False
        return _json({"status": "resumed"})

    async def success(self, request: Request) -> Response:
        return _json({"success": True})

    # -- the rest ----------------------------------------------------------------------------------
    async def models(self, request: Request) -> Response:
        return _json({"object": "list", "data": [{"id": self.s.served_model_name, "object": "model", "owned_by": "sim",
                                                  "root": self.s.served_model_name, "max_model_len": self.s.max_model_len}]})

    async def health(self, request: Request) -> Response:
        return Response(status_code=200)

    async def metrics(self, request: Request) -> Response:
        lines = [f'sim_requests_total{{route="{path}"}} {count}' for path, count in sorted(self.calls.items())]
        return PlainTextResponse("\n".join(lines) + "\n")

    # -- the sidecar -------------------------------------------------------------------------------
    async def heartbeat(self, registry_url: str, every_s: float, token: str | None = None) -> None:
        """Register and heartbeat as ``rlstack.inference`` does for a real replica, until cancelled."""
        body = {"url": self.url, "model": self.s.served_model_name, "weight_version": self.version, "labels": {"device": "sim"},
                "ttl_seconds": 3 * every_s, "instance_id": uuid.uuid4().hex}
        headers = {"authorization": f"Bearer {token}"} if token else {}
        async with httpx.AsyncClient(base_url=registry_url, headers=headers, timeout=10) as client:
            try:
                while True:
                    body["weight_version"] = self.version
                    try:
                        (await client.put(f"/v1/endpoints/{self.replica_id}", json=body)).raise_for_status()
                    except httpx.HTTPError as exc:
                        log.warning("%s: heartbeat failed: %r", self.replica_id, exc)
                    await asyncio.sleep(every_s)
            finally:
                with contextlib.suppress(httpx.HTTPError, asyncio.CancelledError):
                    await client.delete(f"/v1/endpoints/{self.replica_id}")


def _json(data: dict[str, Any]) -> Response:
    return Response(orjson.dumps(data), media_type="application/json")


async def serve(replicas: list[SimReplica], registry_url: str | None, heartbeat_s: float, ready: asyncio.Event | None = None) -> None:
    """Every replica's server on its own port in this one loop, each heartbeating into the registry."""
    servers = [uvicorn.Server(uvicorn.Config(r.app, host="127.0.0.1", port=r.port, log_level="warning", access_log=False,
                                             lifespan="off")) for r in replicas]
    for server in servers:
        server.install_signal_handlers = lambda: None  # one process, many servers: the caller stops them
    tasks = [asyncio.create_task(s.serve()) for s in servers]
    while not all(s.started for s in servers):
        await asyncio.sleep(0.05)
    beats = [asyncio.create_task(r.heartbeat(registry_url, heartbeat_s)) for r in replicas] if registry_url else []
    if ready is not None:
        ready.set()
    try:
        await asyncio.gather(*tasks)
    finally:
        for beat in beats:
            beat.cancel()
        await asyncio.gather(*beats, return_exceptions=True)


def main() -> None:
    import signal

    from rlstack.common.ports import free_port

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--count", type=int, default=1)
    parser.add_argument("--ports", default=None, help="comma-separated ports (default: free ones), one per replica")
    parser.add_argument("--registry-url", default=None)
    parser.add_argument("--heartbeat-seconds", type=float, default=5.0)
    parser.add_argument("--replica-prefix", default="sim")
    for name, field in SimSettings.model_fields.items():
        parser.add_argument(f"--{name.replace('_', '-')}", type=type(field.default), default=field.default)
    args = parser.parse_args()
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    settings = SimSettings(**{k: getattr(args, k) for k in SimSettings.model_fields})
    ports = [int(p) for p in args.ports.split(",")] if args.ports else [free_port() for _ in range(args.count)]
    replicas = [SimReplica(settings, port, f"{args.replica_prefix}-{i}") for i, port in enumerate(ports)]
    for r in replicas:
        print(json.dumps({"replica": r.replica_id, "url": r.url}), flush=True)

    async def run() -> None:
        task = asyncio.create_task(serve(replicas, args.registry_url, args.heartbeat_seconds))
        loop = asyncio.get_running_loop()
        for sig in (signal.SIGTERM, signal.SIGINT):
            loop.add_signal_handler(sig, task.cancel)
        try:
            await task
        except asyncio.CancelledError:
            pass

    asyncio.run(run())


if __name__ == "__main__":
    main()
