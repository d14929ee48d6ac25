"""claude-code and codex driven by one demo policy: a small model built here the way
``rlstack make-cli-agent-demo`` builds one (each CLI captured with the scripted teacher,
tokenizer and warm start on both captures), served by a real vLLM replica behind a real proxy.

The policy makes its tool calls in its own template, vLLM's hermes parser returns them, LiteLLM
turns them into claude-code's ``tool_use`` blocks or codex's ``function_call`` items, the CLI runs
them in the sandbox and sends back their output. The warm start's rendering of each CLI's
requests is vLLM's, token for token; each trial is one sequence on vLLM's ids.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from transformers import AutoTokenizer

from rlstack.common.contracts.atropos import MASKED
from rlstack.common.contracts.trajectory import TrajectoryRecord, read_trajectory
from rlstack.episodes.agents import claude_code_agent, codex_agent, trial_env
from rlstack.episodes.assemble import assemble
from rlstack.episodes.harbor.dataset import load_dataset
from rlstack.episodes.harbor.make_tasks import generate, write_task
from rlstack.episodes.sandboxes import build_sandbox
from rlstack.episodes.sandboxes.config import LocalSandboxConfig
from rlstack.episodes.trials.records import TrialSpec
from rlstack.episodes.trials.run import run_trial
from rlstack.modelkit.agent_corpus import load_exchanges, render_prompt
from rlstack.modelkit.cli_agent_demo import CliAgentDemoSpec, build_cli_agent_demo
from tests.conftest import PROXY_PYTHON, start_service
from tests.integration.inference.conftest import ReplicaHandle, start_replica

SERVED = "cc-demo"
"""Its own served name: the session's shared proxy never routes to this replica."""


@pytest.fixture(scope="module")
def demo_model(tmp_path_factory, claude_bin, codex_bin) -> tuple[Path, list[Path]]:
    """Four tasks captured with the teacher per CLI, learnt by heart (the policy need not generalise here,
    but codex's tool output carries a random chunk id and a wall time: it must read past them)."""
    root = tmp_path_factory.mktemp("cc-demo")
    spec = CliAgentDemoSpec(capture_tasks=4, capture_concurrency=2, max_position_embeddings=32768, steps=300,
                              tokenizer_prose_bytes=300_000,
                              batch_size=4, lr=3e-3, max_seconds=900)
    captures = {"claude-code": root / "claude-code", "codex": root / "codex"}
    record = build_cli_agent_demo(root / "model", captures, spec, progress=False)
    assert record["conversations"] == 8 and record["thread_breaks"] == 0
    return root / "model", list(captures.values())


@pytest.fixture(scope="module")
def demo_replica(registry, demo_model, stack_logs) -> Iterator[ReplicaHandle]:
    handle = start_replica(registry.url, demo_model[0], stack_logs, "replica-cc-demo", served_model_name=SERVED)
    yield handle
    handle.sidecar.terminate(grace=60)


@pytest.fixture(scope="module")
def demo_proxy(registry, demo_replica, stack_logs, tmp_path_factory):
    trials = tmp_path_factory.mktemp("cc-trials")
    svc = start_service("proxy", ["--registry-url", registry.url, "--trials-dir", str(trials), "--served-model-name", SERVED,
                                  "--max-tokens-cap", "128", "--watch-timeout-seconds", "2"],
                        stack_logs, python=PROXY_PYTHON, ready_timeout=180)
    yield svc, trials
    svc.terminate()


def test_the_warm_start_renders_each_clis_requests_as_vllm_does(demo_model, demo_replica):
    model, captures = demo_model
    tokenizer = AutoTokenizer.from_pretrained(model)
    for exchange in [e for capture in captures for e in load_exchanges(capture / "exchanges.jsonl") if e["task"]]:
        request = exchange["request"]
        ours = tokenizer(render_prompt(tokenizer, request), add_special_tokens=False)["input_ids"]
        body = {"model": SERVED, "messages": request["messages"], "tools": request["tools"], "add_generation_prompt": True}
        theirs = httpx.post(f"{demo_replica.vllm_url}/tokenize", json=body, timeout=60).json()["tokens"]
        assert ours == theirs


def test_claude_code_runs_the_policys_tool_calls(demo_model, demo_proxy, claude_bin, tmp_path):
    proxy, trials_dir = demo_proxy
    task_spec = generate(2, 1000)[1]  # sum-numbers-s1000-1, one of the two learnt
    write_task(task_spec, tmp_path / "tasks")
    task = load_dataset(tmp_path / "tasks").tasks[0]
    agent = claude_code_agent(Path(claude_bin))
    env = trial_env(agent, proxy.url, "cc", "t1", "open", SERVED)
    spec = TrialSpec(run="cc", trial="t1", task=task, agent=agent, env=env, agent_timeout_sec=180,
                     private_paths=[tmp_path / "tasks"])
    sandbox = build_sandbox(LocalSandboxConfig())
    result = asyncio.run(run_trial(spec, sandbox, trials_dir))
    assert result.status == "ok", (trials_dir / "cc" / "t1" / "agent" / "stdout.txt").read_text()[-2000:]

    calls = sorted(read_trajectory(trials_dir / "cc" / "t1"), key=lambda r: r.started_at)
    assert all(c.api == "anthropic" and c.status == "ok" for c in calls)
    tool_calls = [tc for c in calls for tc in (c.choices[0].message.get("tool_calls") or [])]
    assert len(tool_calls) >= 2, [c.choices[0].message for c in calls]
    # tool_use -> tool_result: each call id the policy produced comes back as the next request's tool result
    for call, following in zip(calls, calls[1:]):
        ids = [tc["id"] for tc in call.choices[0].message.get("tool_calls") or []]
        results = [block["tool_use_id"] for m in following.request["messages"] if isinstance(m.get("content"), list)
                   for block in m["content"] if block.get("type") == "tool_result"]
        assert set(ids) <= set(results)
    assert_one_exact_sequence(calls)


def test_codex_runs_the_policys_tool_calls_on_the_responses_api(demo_model, demo_proxy, codex_bin, tmp_path):
    """Learnt tasks in turn until one trial has two tool calls: the policy samples at codex's
    temperature (1.0) and each run's chunk ids are new to it, so about one trial in twelve stops
    after one call (measured); every trial, whatever the policy did, is checked for the chain."""
    proxy, trials_dir = demo_proxy
    for spec in generate(4, 1000)[:3]:
        write_task(spec, tmp_path / "tasks")
    agent = codex_agent(Path(codex_bin))
    most = 0
    for task in sorted(load_dataset(tmp_path / "tasks").tasks, key=lambda t: not t.name.startswith("sum-numbers")):
        trial = f"t-{task.short_name}"
        env = trial_env(agent, proxy.url, "cx", trial, "open", SERVED)
        spec = TrialSpec(run="cx", trial=trial, task=task, agent=agent, env=env, agent_timeout_sec=180,
                         private_paths=[tmp_path / "tasks"])
        result = asyncio.run(run_trial(spec, build_sandbox(LocalSandboxConfig()), trials_dir))
        assert result.status == "ok", (trials_dir / "cx" / trial / "agent" / "stdout.txt").read_text()[-2000:]

        calls = sorted(read_trajectory(trials_dir / "cx" / trial), key=lambda r: r.started_at)
        assert all(c.api == "responses" and c.status == "ok" for c in calls)
        # function_call -> function_call_output: each call id comes back in the next request's input
        for call, following in zip(calls, calls[1:]):
            ids = [tc["id"] for tc in call.choices[0].message.get("tool_calls") or []]
            outputs = [item["call_id"] for item in following.request["input"] if item.get("type") == "function_call_output"]
            assert ids and set(ids) <= set(outputs)
        assert_one_exact_sequence(calls)
        most = max(most, sum(len(c.choices[0].message.get("tool_calls") or []) for c in calls))
        if most >= 2:
            break
    assert most >= 2, "no codex trial ran two of the policy's tool calls"


def assert_one_exact_sequence(calls: list[TrajectoryRecord]) -> None:
    """What the env posts is vLLM's ids exactly: every continued call was sent on its thread's ids
    (token-in), so the trial is one sequence, the last call's prompt + completion, whose trained
    tokens are every completion the policy generated, in order."""
    assert all(c.prompt_token_ids and c.choices[0].completion_token_ids for c in calls)
    for before, after in zip(calls, calls[1:]):
        assert after.splice is not None and after.splice.onto == before.request_id
    assembly = assemble(calls)
    [sequence] = assembly.sequences
    assert assembly.thread_breaks == 0 and assembly.spliced_calls == len(calls) - 1
    assert sequence.tokens == calls[-1].prompt_token_ids + calls[-1].choices[0].completion_token_ids
    generated = [t for c in calls for t in c.choices[0].completion_token_ids]
    assert [t for t, m in zip(sequence.tokens, sequence.masks, strict=True) if m != MASKED] == generated
