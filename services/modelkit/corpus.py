"""Text to train the demo tokenizer on, made here: chat-formatted arithmetic and local prose.

The arithmetic part is what the demo task speaks; the prose (the Python standard library's own
sources, present on every machine that runs us) gives the tokenizer English and code merges,
so agent prompts such as claude-code's system prompt tokenize to a sane length.
"""

from __future__ import annotations

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


def training_corpus(max_prose_bytes: int = 4_000_000, arithmetic_count: int = 20_000) -> Iterator[str]:
    yield from arithmetic_lines(arithmetic_count)
    yield from stdlib_text(max_prose_bytes)
