"""Finished answers re-emitted as server-sent events, in the OpenAI or the Anthropic shape.

The proxy calls replicas without streaming (so vLLM's token ids and logprobs survive, and no
per-chunk work happens upstream) and streams the finished answer to clients that asked for a
stream. Events follow each API's documented sequence, so SDKs and claude-code parse them.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import orjson


def loads(payload: bytes) -> Any:
    """orjson, or the stdlib for text holding lone surrogates (a model may emit half a
    UTF-8 character; upstream JSON carries it as a \\udXXX escape, which orjson refuses)."""
    try:
        return orjson.loads(payload)
    except orjson.JSONDecodeError:
        return json.loads(payload)


def dumps(data: Any) -> bytes:
    try:
        return orjson.dumps(data)
    except TypeError:
        return json.dumps(data, separators=(",", ":")).encode()


def _event(data: Any, name: str | None = None) -> bytes:
    head = f"event: {name}\n".encode() if name else b""
    return head + b"data: " + dumps(data) + b"\n\n"


def openai_chunks(response: dict[str, Any], include_usage: bool) -> Iterator[bytes]:
    base = {"id": response.get("id"), "object": "chat.completion.chunk", "created": response.get("created"), "model": response.get("model")}
    for choice in response.get("choices", []):
        message = choice.get("message") or {}
        index = choice.get("index", 0)
        delta: dict[str, Any] = {"role": "assistant", "content": message.get("content") or ""}
        if message.get("reasoning_content"):
            delta["reasoning_content"] = message["reasoning_content"]
        extra = {k: v for k, v in choice.items() if k in ("token_ids", "provider_specific_fields")}
        yield _event({**base, "choices": [{"index": index, "delta": delta, "logprobs": choice.get("logprobs"), "finish_reason": None, **extra}]})
        for position, call in enumerate(message.get("tool_calls") or []):
            tool_delta = {"tool_calls": [{"index": position, "id": call.get("id"), "type": "function", "function": call.get("function")}]}
            yield _event({**base, "choices": [{"index": index, "delta": tool_delta, "logprobs": None, "finish_reason": None}]})
        yield _event({**base, "choices": [{"index": index, "delta": {}, "logprobs": None, "finish_reason": choice.get("finish_reason")}]})
    if include_usage:
        yield _event({**base, "choices": [], "usage": response.get("usage")})
    yield b"data: [DONE]\n\n"


def anthropic_events(message: dict[str, Any]) -> Iterator[bytes]:
    usage = message.get("usage") or {}
    start = {k: v for k, v in message.items() if k not in ("content", "stop_reason", "stop_sequence", "usage")}
    start.update(content=[], stop_reason=None, stop_sequence=None, usage={**usage, "output_tokens": 0})
    yield _event({"type": "message_start", "message": start}, "message_start")
    for index, block in enumerate(message.get("content") or []):
        kind = block.get("type")
        if kind == "text":
            yield _event({"type": "content_block_start", "index": index, "content_block": {"type": "text", "text": ""}}, "content_block_start")
            yield _event({"type": "content_block_delta", "index": index, "delta": {"type": "text_delta", "text": block.get("text", "")}}, "content_block_delta")
        elif kind == "tool_use":
            opening = {"type": "tool_use", "id": block.get("id"), "name": block.get("name"), "input": {}}
            yield _event({"type": "content_block_start", "index": index, "content_block": opening}, "content_block_start")
            partial = dumps(block.get("input") or {}).decode()
            yield _event({"type": "content_block_delta", "index": index, "delta": {"type": "input_json_delta", "partial_json": partial}}, "content_block_delta")
        elif kind == "thinking":
            yield _event({"type": "content_block_start", "index": index, "content_block": {"type": "thinking", "thinking": "", "signature": ""}}, "content_block_start")
            yield _event({"type": "content_block_delta", "index": index, "delta": {"type": "thinking_delta", "thinking": block.get("thinking", "")}}, "content_block_delta")
            if block.get("signature"):
                yield _event({"type": "content_block_delta", "index": index, "delta": {"type": "signature_delta", "signature": block["signature"]}}, "content_block_delta")
        else:  # redacted thinking and future block types: sent whole
            yield _event({"type": "content_block_start", "index": index, "content_block": block}, "content_block_start")
        yield _event({"type": "content_block_stop", "index": index}, "content_block_stop")
    delta = {"stop_reason": message.get("stop_reason"), "stop_sequence": message.get("stop_sequence")}
    yield _event({"type": "message_delta", "delta": delta, "usage": {"output_tokens": usage.get("output_tokens", 0)}}, "message_delta")
    yield _event({"type": "message_stop"}, "message_stop")
