"""``python -m rlstack.<service> --help`` answers from the settings alone: no ML framework, LLM
client or web framework is imported before the flags are parsed (that is what keeps it under a
second, and ``--dry-run`` in a pod's shell cheap)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

SERVICES = ["registry", "batcher", "proxy", "inference", "trainer", "envs", "agent"]
HEAVY = {"torch", "transformers", "vllm", "litellm", "fastapi", "numpy"}


@pytest.mark.parametrize("service", SERVICES)
def test_help_imports_nothing_heavy(service):
    done = subprocess.run([sys.executable, "-X", "importtime", "-m", f"rlstack.{service}", "--help"],
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr[-2000:]
    assert "usage:" in done.stdout
    imported = {m.group(1).split(".")[0] for m in re.finditer(r"^import time:.*\|\s+(\S+)$", done.stderr, re.M)}
    assert imported & HEAVY == set()
