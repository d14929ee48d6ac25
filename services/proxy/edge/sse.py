"""Finished answers re-emitted as server-sent events, in the OpenAI chat, OpenAI responses or
Anthropic shape.

The proxy calls replicas without streaming (so vLLM's token ids and logprobs survive, and no
per-chunk work happens upstream) and streams the finished answer to clients that asked for a
stream. Events follow each API's documented sequence, so SDKs and claude-code parse them.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from rlstack.proxy.jsonio import dumps


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


def responses_events(response: dict[str, Any]) -> Iterator[bytes]:
    """A finished Responses object as the Responses API streams one: created, each output item added,
    its text or arguments in one delta, done, then the terminal event (``response.completed``, or
    ``response.incomplete`` / ``response.failed`` as the status says)."""
    sequence = 0

    def event(kind: str, **fields: Any) -> bytes:
        nonlocal sequence
        sequence += 1
        return _event({"type": kind, "sequence_number": sequence - 1, **fields}, kind)

    opening = {**response, "status": "in_progress", "output": [], "usage": None, "incomplete_details": None}
    yield event("response.created", response=opening)
    yield event("response.in_progress", response=opening)
    for index, item in enumerate(response.get("output") or []):
        kind, item_id = item.get("type"), item.get("id")
        if kind == "message":
            yield event("response.output_item.added", output_index=index, item={**item, "status": "in_progress", "content": []})
            for part_index, part in enumerate(item.get("content") or []):
                where = {"item_id": item_id, "output_index": index, "content_index": part_index}
                if part.get("type") != "output_text":
                    yield event("response.content_part.added", **where, part=part)
                    yield event("response.content_part.done", **where, part=part)
                    continue
                yield event("response.content_part.added", **where, part={**part, "text": ""})
                yield event("response.output_text.delta", **where, delta=part.get("text", ""), logprobs=[])
                yield event("response.output_text.done", **where, text=part.get("text", ""), logprobs=[])
                yield event("response.content_part.done", **where, part=part)
        elif kind == "function_call":
            yield event("response.output_item.added", output_index=index, item={**item, "status": "in_progress", "arguments": ""})
            arguments = item.get("arguments") or ""
            yield event("response.function_call_arguments.delta", item_id=item_id, output_index=index, delta=arguments)
            yield event("response.function_call_arguments.done", item_id=item_id, output_index=index, arguments=arguments)
        else:  # reasoning and future item types: whole
            yield event("response.output_item.added", output_index=index, item=item)
        yield event("response.output_item.done", output_index=index, item=item)
    status = response.get("status")
    terminal = {"incomplete": "response.incomplete", "failed": "response.failed"}.get(str(status), "response.completed")
    yield event(terminal, response=response)
