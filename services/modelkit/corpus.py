"""Text to train the demo tokenizer on, made here: chat-formatted arithmetic, agent tool calls
and local prose.

The arithmetic and tool-call parts are what the demo tasks speak; the prose (the Python standard library's own
sources, present on every machine that runs us) gives the tokenizer English and code merges,
so agent prompts such as claude-code's system prompt tokenize to a sane length.
"""

from __future__ import annotations

import json
import random
import sysconfig
from collections.abc import Iterator
from pathlib import Path


def arithmetic_lines(count: int, seed: int = 0) -> Iterator[str]:
    rng = random.Random(seed)
    for _ in range(count):
        a, b = rng.randint(0, 999), rng.randint(0, 999)
        op = rng.choice("+-*")
        answer = a + b if op == "+" else a - b if op == "-" else a * b
        yield f"What is {a} {op} {b}? Answer: {answer}"
        yield f"<|im_start|>user\nCompute {a} {op} {b}.<|im_end|>\n<|im_start|>assistant\n{answer}<|im_end|>"


def stdlib_text(max_bytes: int) -> Iterator[str]:
    """Source files of the standard library, up to ``max_bytes`` in all."""
    root = Path(sysconfig.get_paths()["stdlib"])
    total = 0
    for path in sorted(root.glob("*.py")):
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, OSError):
            continue
        total += len(text)
        yield text
        if total >= max_bytes:
            return


def agent_lines(count: int, seed: int = 0) -> Iterator[str]:
    """The built-in agent's tool list and tool calls on generated tasks, as its prompts carry them."""
    from rlstack.agent.loop import SYSTEM_PROMPT
    from rlstack.agent.tools import tool_schemas
    from rlstack.episodes.harbor.make_tasks import generate

    yield SYSTEM_PROMPT + "\n" + "\n".join(json.dumps(tool) for tool in tool_schemas())
    for spec in generate(count, seed):
        yield spec.instruction
        for line in spec.solve.splitlines():
            yield f'<tool_call>{{"name": "bash", "arguments": {json.dumps({"command": line})}}}</tool_call>'
        yield from spec.files.values()


def training_corpus(max_prose_bytes: int = 4_000_000, arithmetic_count: int = 20_000) -> Iterator[str]:
    yield from arithmetic_lines(arithmetic_count)
    for _ in range(20):  # weight: the agent's own phrases should be single tokens
        yield from agent_lines(70)
    yield from stdlib_text(max_prose_bytes)
