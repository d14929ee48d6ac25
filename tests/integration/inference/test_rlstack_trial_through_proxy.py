"""`rlstack trial` through the session's real proxy and vLLM: the built-in agent, and a
third-party scaffold run by command (mini-swe-agent from PyPI, `make setup-mini-swe-agent`),
which finds the policy only through OPENAI_BASE_URL and its key.

The session's policy is the random tiny model: neither agent solves the task. What is checked
is the chain: the agent's calls went through the proxy into the trial's trajectory file with
vLLM's ids, the trial was scored by the verifier, and its status follows the agent's exit as
for every agent (0: ``ok``).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rlstack.common.contracts.trajectory import read_trajectory
from tests.conftest import REPO
from tests.integration.inference.conftest import SECRET

TASK = REPO / "examples" / "tasks" / "sum-numbers-1"
MINI = REPO / ".venv-mini" / "bin" / "mini"
MINI_VERSION = "2.4.6"
STEPS = 2


def rlstack_trial(proxy, run: str, *args: str) -> tuple[dict, subprocess.CompletedProcess]:  # noqa: ANN001 - ProxyHandle
    done = subprocess.run([sys.executable, "-m", "rlstack.cli", "trial", str(TASK), "--proxy-url", proxy.url,
                           "--trials-dir", str(proxy.trials_dir), "--trial-key-secret", SECRET, "--run", run, "--environment", "host", *args],
                          cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.stdout.strip(), done.stderr[-3000:]
    return json.loads(done.stdout.strip().splitlines()[-1]), done


def check_calls_are_in_the_trial(report: dict) -> list:
    """The trial's calls, as the proxy logged them: vLLM's ids, the task's instruction in the first prompt."""
    trial = Path(report["trial_dir"])
    calls = read_trajectory(trial)
    assert len(calls) == report["calls"] >= 1
    assert all(c.status == "ok" and c.prompt_token_ids and c.choices[0].completion_token_ids for c in calls)
    assert all((c.run_id, c.trial_id) == (trial.parent.name, trial.name) for c in calls)
    assert report["continued_calls"] == report["merged_calls"] + report["thread_breaks"]
    result = json.loads((trial / "result.json").read_text())
    assert result["status"] == report["status"] and result["reward"] == report["reward"]
    assert result["trajectory"]["calls"] == report["calls"]
    assert (trial / "verifier" / "test-stdout.txt").exists()  # the verifier ran over the agent's workspace
    return calls


def test_the_builtin_agent_runs_one_trial_through_the_proxy(proxy):
    report, done = rlstack_trial(proxy, "trial-builtin", "--max-turns", "2", "--max-tokens", "32")
    assert report["agent"] == "builtin" and report["logs"] is None  # the proxy was given: nothing started
    calls = check_calls_are_in_the_trial(report)
    # The built-in agent exits 0 when its episode ends (the verifier judges) and 4 when the server
    # refused a call: either way the status is the agent's exit, and only ok has a reward.
    exit_code = int((Path(report["trial_dir"]) / "agent" / "exit_code.txt").read_text())
    assert report["status"] == ("ok" if exit_code == 0 else "agent_error")
    assert (report["reward"] == 0.0) if report["status"] == "ok" else report["reward"] is None
    assert done.returncode == (0 if report["status"] == "ok" else 1)
    assert TASK.joinpath("instruction.md").read_text().strip() in json.dumps(calls[0].request)


def test_a_third_party_scaffold_by_command_runs_a_scored_trial_through_the_proxy(proxy):
    if not MINI.exists():
        pytest.fail("no .venv-mini: run `make setup-mini-swe-agent` (mini-swe-agent from PyPI)")
    # mini-swe-agent speaks OpenAI chat through LiteLLM: openai/<served model> at OPENAI_BASE_URL with
    # OPENAI_API_KEY (the trial key). Unattended: the non-interactive agent, no first-run setup, no
    # price lookup for a model LiteLLM does not know, at most STEPS model calls.
    command = (f"env MSWEA_CONFIGURED=true MSWEA_COST_TRACKING=ignore_errors MSWEA_SILENT_STARTUP=1 "
               f"LITELLM_LOCAL_MODEL_COST_MAP=True {MINI} --agent-class default --exit-immediately -m openai/policy "
               f"-t {{instruction}} -c mini.yaml -c agent.step_limit={STEPS} -o /logs/agent/mini.traj.json")
    report, done = rlstack_trial(proxy, "trial-mini", "--agent-command", command)
    trial = Path(report["trial_dir"])
    assert report["agent"] == "mini"
    assert report["status"] == "ok", (report, (trial / "agent" / "stderr.txt").read_text()[-3000:])
    assert report["reward"] == 0.0 and done.returncode == 0  # scored: the verifier's 0, not a missing reward
    calls = check_calls_are_in_the_trial(report)
    # mini-swe-agent's own record of its run says it made exactly the calls the proxy logged
    own = json.loads((trial / "agent" / "mini.traj.json").read_text())
    assert own["info"]["mini_version"] == MINI_VERSION and own["info"]["model_stats"]["api_calls"] == len(calls) == STEPS
    assert own["info"]["exit_status"] in ("LimitsExceeded", "RepeatedFormatError", "Submitted")
    first = calls[0].request
    assert [t["function"]["name"] for t in first["tools"]] == ["bash"]  # mini's one tool, as it sent it
    assert "Please solve this issue: " + TASK.joinpath("instruction.md").read_text().strip() in json.dumps(first["messages"])
    # Trainable as any trial: every call's completion is in a sequence. (The random policy's replies
    # never parse as a tool call, and mini-swe-agent leaves such a reply out of the history it
    # resends: its second call does not continue the first, so no continuation is asserted here.)
    assert report["failed_calls"] == 0 and report["sequences"] >= 1 and report["trained_tokens"] > 0
