"""claude-code's own side call and a forced compaction, through the real proxy into a real vLLM,
become trained sequences of the trial, none dropped.

claude-code compacts when its context passes a share of its window: 1 % of 100k tokens here
(``CLAUDE_AUTOCOMPACT_PCT_OVERRIDE``), which the ~1,300-token first request of the demo setup
passes at once. It then asks for a summary (the conversation plus an instruction: a side call
that continues the main thread's exact ids) and goes on from the summary (a history it changed:
a new segment). The agent runs by command (``--agent-command``), as any scaffold would.
"""

from __future__ import annotations

import json
import shlex

import httpx

from rlstack.common.contracts.atropos import MASKED
from rlstack.common.contracts.trajectory import read_trajectory
from rlstack.episodes.agents import CLAUDE_CODE_SYSTEM_PROMPT, CLAUDE_CODE_TOOLS
from rlstack.episodes.assemble import assemble
from tests.helpers.groups import trainer_registration
from tests.integration.inference.test_agent_trials_through_proxy import (
    dataset,
    first_batch,
    start_agent_env,
    trial_dirs,
)

COMPACTION = "CRITICAL: Respond with TEXT ONLY"
"""How claude-code 2.1's summary request begins."""


def compacting_claude(claude_bin: str) -> str:
    env = ["CLAUDE_CODE_AUTO_COMPACT_WINDOW=100000", "CLAUDE_AUTOCOMPACT_PCT_OVERRIDE=1",
           "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC=1", "DISABLE_AUTOUPDATER=1", "DISABLE_TELEMETRY=1", "IS_SANDBOX=1",
           "CLAUDE_CODE_ATTRIBUTION_HEADER=0"]
    argv = [claude_bin, "-p", "{instruction}", "--dangerously-skip-permissions", "--bare", "--tools", CLAUDE_CODE_TOOLS,
            "--system-prompt", CLAUDE_CODE_SYSTEM_PROMPT]
    return shlex.join(["env", *env, *argv])


def text(message: dict) -> str:
    content = message.get("content")
    return content if isinstance(content, str) else "".join(p.get("text", "") for p in content or [] if isinstance(p, dict))


def test_compaction_and_its_summary_call_are_trained_with_the_trials_reward(service_factory, proxy, registry, claude_bin,
                                                                           tmp_path):
    batcher = service_factory("batcher", ["--data-dir", str(tmp_path / "wal")])
    httpx.post(f"{batcher.url}/register", json=trainer_registration(batch_size=1, batch_fill="at_least", max_token_len=32768)).raise_for_status()
    env = start_agent_env(service_factory, batcher, proxy, registry, dataset(tmp_path), "agents-compact", "command", 1,
                          "--agent-command", compacting_claude(claude_bin), "--agent-timeout-seconds", "300")
    [group] = first_batch(batcher, timeout=600)
    assert env.terminate() == 0
    trial = trial_dirs(proxy, "agents-compact")[0]
    result = json.loads((trial / "result.json").read_text())
    calls = read_trajectory(trial)

    summaries = [c for c in calls if COMPACTION in text(c.request["messages"][-1])]
    assert summaries, "claude-code never asked for a summary"
    first_summary = summaries[0]
    assert first_summary.splice is not None  # the summary request continues the main thread's exact ids
    edited = [c for c in calls if c.segment == "history_edited"]
    assert edited, "no call went on from a rewritten history"
    assert not any(c.splice for c in edited)  # never spliced over the agent's own history

    assembly = assemble(calls)
    assert assembly.thread_breaks == 0 and len(assembly.sequences) >= 2
    assert result["status"] == "ok" and result["trajectory"]["edited_segments"] == assembly.edited_segments >= 1
    # Every sequence is posted, as rows of the trial's one member, with the trial's reward.
    assert len(group["tokens"]) == len(assembly.sequences) and group["trials"] == [0] * len(assembly.sequences)
    assert group["scores"] == [result["reward"]] * len(assembly.sequences)
    trained = sum(m != MASKED for row in group["masks"] for m in row)
    assert trained == sum(len(c.choices[0].completion_token_ids) for c in calls)  # every generated token, once
