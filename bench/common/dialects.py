"""Agent conversations in the proxy's three dialects, for the load benchmarks: a history of a set
length in ids, the request a client sends for it, and the answer read back (plain or streamed) into
the next turn's history exactly as an SDK would keep it, so the proxy's token-in sees continued calls.

Text is ASCII words, about four bytes a token, as in English text under a BPE tokenizer and as in
``sim_replica``'s template, so a history of ``n`` ids is about ``4 n`` bytes of JSON.
"""

from __future__ import annotations

import random
from dataclasses import dataclass, field
from typing import Any, Literal

import orjson

Dialect = Literal["chat", "anthropic", "responses"]
PATHS: dict[str, str] = {"chat": "/v1/chat/completions", "anthropic": "/v1/messages", "responses": "/v1/responses"}
MODELS: dict[str, str] = {"chat": "policy", "anthropic": "claude-sonnet-4-5", "responses": "policy"}
WORDS = ("ls", "cat", "grep", "file", "test", "error", "line", "pass", "fail", "diff", "patch", "src", "main", "def",
         "return", "import", "value", "self", "None", "True", "args", "path", "open", "read", "write", "check")
TURN_IDS = 256
"""Ids per synthetic past turn (a tool observation or an assistant step)."""


def text_of(ids: int, rng: random.Random) -> str:
    words: list[str] = []
    size = 0
    while size < 4 * ids:
        word = rng.choice(WORDS)
        words.append(word)
        size += len(word) + 1
    return " ".join(words)


@dataclass
class Conversation:
    """One trial's conversation in one dialect; ``request`` is its next call, ``take`` reads the answer in."""

    dialect: Dialect
    stream: bool
    system: str
    messages: list[dict[str, Any]]
    max_tokens: int = 64
    turns: int = 0
    extra: dict[str, Any] = field(default_factory=dict)

    @classmethod
    def with_history(cls, dialect: Dialect, stream: bool, history_ids: int, seed: int, max_tokens: int = 64) -> Conversation:
        """A system prompt and past turns summing to about ``history_ids``, ending on a user turn."""
        rng = random.Random(seed)
        system = f"You are coding agent {seed}. " + text_of(min(512, history_ids // 4), rng)
        messages: list[dict[str, Any]] = []
        left = history_ids - min(512, history_ids // 4)
        while left > TURN_IDS:
            messages.append({"role": "user", "content": text_of(TURN_IDS, rng)})
            messages.append({"role": "assistant", "content": text_of(TURN_IDS // 4, rng)})
            left -= TURN_IDS + TURN_IDS // 4
        messages.append({"role": "user", "content": text_of(max(8, left), rng)})
        return cls(dialect, stream, system, messages, max_tokens)

    def request(self) -> bytes:
        if self.dialect == "chat":
            body: dict[str, Any] = {"model": MODELS["chat"], "messages": [{"role": "system", "content": self.system}, *self.messages],
                                    "max_tokens": self.max_tokens, "temperature": 1.0}
            if self.stream:
                body["stream_options"] = {"include_usage": True}
        elif self.dialect == "anthropic":
            body = {"model": MODELS["anthropic"], "system": self.system, "messages": self.messages, "max_tokens": self.max_tokens}
        else:
            body = {"model": MODELS["responses"], "instructions": self.system, "input": self.messages,
                    "max_output_tokens": self.max_tokens, "store": False}
        if self.stream:
            body["stream"] = True
        return orjson.dumps(body)

    def take(self, payload: bytes, observation: str) -> None:
        """The answer into the history, then the next user turn (a tool's output)."""
        reply = self._reply(payload)
        if self.dialect == "responses":
            self.messages += [*reply, {"role": "user", "content": observation}]
        else:
            self.messages += [reply, {"role": "user", "content": observation}]
        self.turns += 1

    def _reply(self, payload: bytes) -> Any:
        if not self.stream:
            answer = orjson.loads(payload)
            if self.dialect == "chat":
                return {"role": "assistant", "content": answer["choices"][0]["message"].get("content") or ""}
            if self.dialect == "anthropic":
                return {"role": "assistant", "content": answer["content"]}
            return answer["output"]
        events = [orjson.loads(line[6:]) for line in payload.split(b"\n") if line.startswith(b"data: {")]
        if self.dialect == "chat":
            text = "".join((c.get("delta") or {}).get("content") or "" for e in events for c in e.get("choices") or [])
            return {"role": "assistant", "content": text}
        if self.dialect == "anthropic":
            blocks: dict[int, dict[str, Any]] = {}
            for e in events:
                if e.get("type") == "content_block_start":
                    blocks[e["index"]] = dict(e["content_block"])
                elif e.get("type") == "content_block_delta" and e["delta"].get("type") == "text_delta":
                    blocks[e["index"]]["text"] = blocks[e["index"]].get("text", "") + e["delta"]["text"]
            return {"role": "assistant", "content": [blocks[i] for i in sorted(blocks)]}
        for e in events:
            if e.get("type") == "response.completed":
                return e["response"]["output"]
        raise ValueError("stream ended without response.completed")
