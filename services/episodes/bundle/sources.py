"""Where each agent's CLI is installed on this host, at its pinned release: what host mode runs and
what the agent bundle is built from (``make setup-claude-code setup-codex setup-opencode``)."""

from __future__ import annotations

from pathlib import Path

CLAUDE_CODE_VERSION = "2.1.330"
"""The pinned @anthropic-ai/claude-code release (DESIGN.md measured its requests)."""
CLAUDE_CODE_BIN = Path(".cache/claude-code/node_modules/.bin/claude")

CODEX_VERSION = "0.171.0"
"""The pinned @openai/codex release (a Rust binary in the npm package; its requests measured in docs/agent-trials.md)."""
CODEX_BIN = Path(".cache/codex/node_modules/.bin/codex")

OPENCODE_VERSION = "1.18.33"
"""The pinned opencode-ai release (a compiled Bun binary in the npm package; its requests measured in docs/agent-trials.md)."""
OPENCODE_BIN = Path(".cache/opencode/node_modules/.bin/opencode")
