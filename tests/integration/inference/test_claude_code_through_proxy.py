"""The real claude-code CLI (npm @anthropic-ai/claude-code) talking to the policy through the proxy.

claude-code keeps the path of ANTHROPIC_BASE_URL, so the trial travels in the
``/trials/<run>/<trial>`` prefix, and sends the trial key as ``x-api-key``.
"""

from __future__ import annotations

import os
import shutil
import subprocess

import pytest

from tests.conftest import REPO

CLAUDE_CODE_VERSION = "2.1.330"
CACHE = REPO / ".cache" / "claude-code"


@pytest.fixture(scope="session")
def claude_bin() -> str:
    binary = CACHE / "node_modules" / ".bin" / "claude"
    if not binary.exists():
        if shutil.which("npm") is None:
            pytest.fail("npm is needed to install @anthropic-ai/claude-code")
        CACHE.mkdir(parents=True, exist_ok=True)
        subprocess.run(["npm", "install", "--no-fund", "--no-audit", "--prefix", str(CACHE),
                        f"@anthropic-ai/claude-code@{CLAUDE_CODE_VERSION}"], check=True, capture_output=True, timeout=600)
    return str(binary)


def test_claude_code_calls_land_in_the_trial_jsonl(proxy, claude_bin, tmp_path):
    env = {
        "PATH": os.environ["PATH"], "HOME": str(tmp_path),
        "ANTHROPIC_BASE_URL": f"{proxy.url}/trials/agents/cc-1",
        "ANTHROPIC_API_KEY": proxy.key("agents", "cc-1"),
        "ANTHROPIC_MODEL": "claude-sonnet-4-5",
        "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
        "DISABLE_AUTOUPDATER": "1",
    }
    done = subprocess.run([claude_bin, "-p", "List the files here."], env=env, cwd=tmp_path, stdin=subprocess.DEVNULL,
                          capture_output=True, text=True, timeout=600)
    output = done.stdout + done.stderr
    # The tiny random policy never says end_turn, so claude-code may complain about output
    # length; what must never appear is a gateway failure.
    assert "API Error: 5" not in output and "API Error: 4" not in output, output[-2000:]

    lines = proxy.lines("agents", "cc-1", expect=1, timeout=60)
    first = lines[0]
    assert first["api"] == "anthropic" and first["status"] == "ok"
    assert first["requested_model"].startswith("claude-")
    assert len(first["prompt_token_ids"]) > 5_000  # claude-code's system prompt and tool list
    assert first["request"]["tools"], "claude-code's tools are logged with the request"
    for line in lines:
        choice = line["choices"][0]
        assert choice["completion_token_ids"] and len(choice["completion_token_ids"]) == len(choice["completion_logprobs"])
