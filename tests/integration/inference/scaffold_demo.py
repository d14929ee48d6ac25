"""The scaffold matrix's demo policy, built as its own process (``python -m
tests.integration.inference.scaffold_demo OUT``): the suite builds it in the background while other
tests run (``tests/helpers/prebuild.py``). Four tasks captured with the teacher per agent, learnt by
heart: the policy need not generalise here, but codex's tool output carries a random chunk id and a
wall time, so it must read past them. Writes ``OUT/model``, a capture directory per agent and the
builder's record as ``OUT/record.json``."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from rlstack.modelkit.agent_demo.cli import CliAgentDemoSpec, build_cli_agent_demo

AGENTS = ("builtin", "claude-code", "codex", "opencode")
SPEC = CliAgentDemoSpec(capture_tasks=4, capture_concurrency=2, max_position_embeddings=32768, steps=300, tokenizer_prose_bytes=300_000,
                        batch_size=4, lr=3e-3, lr_end=0.1, max_seconds=3000)
"""``max_seconds`` only guards a stuck build: at nice 19 beside the suite the 300 steps take longer
than inline, and a cut-short warm start would be a weaker policy, not a faster one."""


def main(out: Path) -> None:
    captures = {agent: out / agent for agent in AGENTS}
    record = build_cli_agent_demo(out / "model", captures, SPEC, progress=False)
    (out / "record.json").write_text(json.dumps(record, default=str))


if __name__ == "__main__":
    main(Path(sys.argv[1]))
