"""What claude-code sent the teacher, turned into training rows for the claude-code demo policy.

The teacher recorded each call in the OpenAI form LiteLLM forwards upstream (``teacher.py``).
Calls are followed as conversations (a call continues one whose messages plus answer start its
own messages), and each call is rendered by the demo model's chat template the way vLLM renders
claude-code's requests: tool-call arguments become objects (vLLM parses them before rendering),
text parts are joined with newlines in both of vLLM's content formats. A call whose prompt does
not start with the tokens so far starts a new row, as the env's assembly would.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from rlstack.common.contracts.atropos import MASKED
from rlstack.modelkit.teacher.scripted import message_text

TEMPLATE = Path(__file__).with_name("cli_template.jinja")
"""The claude-code demo's chat template: the agent demo's, except that (1) text parts are joined by
a newline, which is what vLLM's "string" content format does, so both of vLLM's content formats
render one text, and (2) each tool is one line, ``- Name(param, ...): description``, not its
JSON schema: claude-code's three schemas are ~1,100 of a ~1,250-token first prompt, and a 3.6M
policy needs the names only (first prompt ~170 tokens; docs/agent-trials.md)."""


def load_exchanges(path: Path) -> list[dict[str, Any]]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def _key(message: dict[str, Any]) -> tuple:
    calls = tuple((c["function"]["name"], json.dumps(_arguments(c["function"].get("arguments")), sort_keys=True))
                  for c in message.get("tool_calls") or [])
    return message.get("role"), message_text(message), calls


def _arguments(arguments: Any) -> Any:
    if isinstance(arguments, str):
        try:
            return json.loads(arguments)
        except json.JSONDecodeError:
            return arguments
    return arguments


def conversations(exchanges: list[dict[str, Any]]) -> list[list[dict[str, Any]]]:
    """The task calls grouped by conversation, in order (side calls with no task are left out)."""
    threads: list[list[dict[str, Any]]] = []
    for exchange in exchanges:
        if exchange.get("task") is None:
            continue
        messages = exchange["request"]["messages"]
        for thread in threads:
            last = thread[-1]
            expected = [*last["request"]["messages"], last["response"]]
            if len(messages) > len(expected) and [_key(m) for m in messages[: len(expected)]] == [_key(m) for m in expected]:
                thread.append(exchange)
                break
        else:
            threads.append([exchange])
    return threads


def as_vllm_renders(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """Tool-call arguments as objects, and content parts as one text joined by newlines (no content:
    ""), as vLLM hands them to a template that reads content as a string (Qwen3's; the demo's reads
    both alike)."""
    out = []
    for message in messages:
        content = message.get("content")
        if isinstance(content, list) or content is None:  # None: "" (vLLM's too)
            texts = [str(p.get("text", "")) for p in content or [] if isinstance(p, dict) and p.get("type") == "text"]
            message = {**message, "content": "\n".join(texts)}
        if message.get("tool_calls"):
            calls = [{**c, "function": {**c["function"], "arguments": _arguments(c["function"].get("arguments"))}}
                     for c in message["tool_calls"]]
            message = {**message, "tool_calls": calls}
        out.append(message)
    return out


def render_prompt(tokenizer, request: dict[str, Any]) -> str:  # noqa: ANN001 - a HF tokenizer
    return tokenizer.apply_chat_template(as_vllm_renders(request["messages"]), tools=request.get("tools") or None,
                                         add_generation_prompt=True, tokenize=False)


def encode(tokenizer, thread: list[dict[str, Any]]) -> tuple[list[tuple[list[int], list[int]]], int]:  # noqa: ANN001
    """Rows of (ids, labels) for one conversation, and how many calls broke the thread."""
    rows: list[tuple[list[int], list[int]]] = []
    ids: list[int] = []
    labels: list[int] = []
    breaks = 0
    for exchange in thread:
        request = exchange["request"]
        prompt_text = render_prompt(tokenizer, request)
        prompt = tokenizer(prompt_text, add_special_tokens=False)["input_ids"]
        if ids and prompt[: len(ids)] != ids:
            rows.append((ids, labels))
            ids, labels, breaks = [], [], breaks + 1
        full = tokenizer.apply_chat_template(as_vllm_renders([*request["messages"], exchange["response"]]),
                                             tools=request.get("tools") or None, tokenize=False)
        turn = tokenizer(full[len(prompt_text):].rstrip("\n"), add_special_tokens=False)["input_ids"]  # to <|im_end|>
        labels = labels + [MASKED] * (len(prompt) - len(ids)) + turn
        ids = prompt + turn
    rows.append((ids, labels))
    return rows, breaks


def tokenizer_text(exchanges: list[dict[str, Any]], template: Path = TEMPLATE) -> Iterator[str]:
    """claude-code's requests as the template renders them (for the tokenizer's merges), no tokenizer needed."""
    from jinja2.sandbox import ImmutableSandboxedEnvironment

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True)
    env.filters["tojson"] = lambda x, **kw: json.dumps(x, ensure_ascii=False)
    compiled = env.from_string(template.read_text())
    for exchange in exchanges:
        if exchange.get("task") is None:
            continue
        request = exchange["request"]
        messages = as_vllm_renders([*request["messages"], exchange["response"]])
        yield compiled.render(messages=messages, tools=request.get("tools"), add_generation_prompt=False)
