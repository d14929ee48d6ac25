"""Agent trials end to end on real parts: a Harbor task, an agent in a bubblewrap sandbox, its
calls through the real proxy into a real vLLM replica, the verifier's reward, the assembled
group in a real batcher, decoded by the replica's tokenizer back to what vLLM saw and produced.

The session's policy is the random tiny model: it solves nothing (reward 0), which is what a
group of honest zeros looks like; the learning run is ``make run-agent``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx
import pytest
from transformers import AutoTokenizer

from rlstack.common.contracts.atropos import MASKED
from rlstack.common.contracts.trajectory import read_trajectory
from tests.conftest import REPO, ServiceProcess
from tests.helpers.groups import trainer_registration
from tests.helpers.wait import wait_until
from tests.integration.inference.conftest import SECRET

TASK = REPO / "examples" / "tasks" / "write-greeting-1"


def dataset(tmp_path: Path) -> Path:
    root = tmp_path / "tasks"
    root.mkdir()
    shutil.copytree(TASK, root / TASK.name)
    return root


def start_agent_env(service_factory, batcher: ServiceProcess, proxy, registry, tasks: Path, run: str, agent: str,
                    group_size: int, *extra: str) -> ServiceProcess:
    return service_factory("envs", [
        "--task", "harbor", "--tasks-dir", str(tasks), "--agent", agent, "--sandbox", "local", "--sandbox-environment", "host", "--name", run,
        "--trials-dir", str(proxy.trials_dir), "--batcher-url", batcher.url, "--proxy-url", proxy.url,
        "--registry-url", registry.url, "--trial-key-secret", SECRET, "--run-id", run, "--group-size", str(group_size),
        "--workers", "1", "--max-batches-offpolicy", "1", "--trial-retries", "0", *extra], ready_timeout=60)


def first_batch(batcher: ServiceProcess, timeout: float) -> list[dict]:
    found: list[dict] = []

    def ready() -> bool:
        batch = httpx.get(f"{batcher.url}/batch").json().get("batch")
        if batch:
            found.extend(batch)
        return bool(found)

    wait_until(ready, timeout=timeout)
    return found


def trial_dirs(proxy, run: str) -> list[Path]:
    return sorted(p for p in (proxy.trials_dir / run).iterdir() if (p / "result.json").exists())


def check_group_is_vllms_tokens(group: dict, trial: Path, tokenizer) -> None:
    """Every posted sequence is the trial's calls, token for token; only completions are trained."""
    lines = [r.model_dump() for r in read_trajectory(trial)]
    first = lines[0]
    completion = first["choices"][0]["completion_token_ids"]
    sequence = group["tokens"][0]
    assert sequence[: len(first["prompt_token_ids"]) + len(completion)] == first["prompt_token_ids"] + completion
    trained = [t for t, m in zip(sequence, group["masks"][0]) if m != MASKED]
    assert trained[: len(completion)] == completion
    logprobs = [lp for lp, m in zip(group["inference_logprobs"][0], group["masks"][0]) if m != MASKED]
    assert logprobs[: len(completion)] == pytest.approx(first["choices"][0]["completion_logprobs"])
    text = tokenizer.decode(sequence[: len(first["prompt_token_ids"])])
    assert TASK.joinpath("instruction.md").read_text().strip() in text


def test_builtin_agent_trials_become_a_group_of_vllms_own_tokens(service_factory, proxy, registry, tiny_model, tmp_path):
    batcher = service_factory("batcher", ["--data-dir", str(tmp_path / "wal")])
    httpx.post(f"{batcher.url}/register", json=trainer_registration(batch_size=2)).raise_for_status()
    env = start_agent_env(service_factory, batcher, proxy, registry, dataset(tmp_path), "agents-builtin", "builtin", 2,
                          "--max-tokens", "32", "--agent-max-turns", "2")
    batch = first_batch(batcher, timeout=300)
    group = batch[0]
    assert len(group["tokens"]) == 2 and group["scores"] == [0.0, 0.0]  # one row per trial; honest zeros
    trials = trial_dirs(proxy, "agents-builtin")
    assert len(trials) >= 2
    result = json.loads((trials[0] / "result.json").read_text())
    assert result["status"] == "ok" and result["reward"] == 0.0 and result["agent"]["name"] == "builtin"
    assert result["trajectory"]["calls"] >= 1 and result["trajectory"]["failed_calls"] == 0
    assert (trials[0] / "verifier" / "reward.txt").read_text().strip() == "0"
    atif = json.loads((trials[0] / "agent" / "trajectory.json").read_text())
    assert atif["schema_version"].startswith("ATIF-") and atif["agent"]["name"] == "builtin"
    posted = [g for g in batch if len(g["tokens"][0]) > 0]
    check_group_is_vllms_tokens(posted[0], next(t for t in trials if _first_sequence_matches(posted[0], t)),
                                AutoTokenizer.from_pretrained(tiny_model))
    metrics = httpx.get(f"{env.url}/metrics").text
    assert 'rlstack_env_trials_finished_total{env="agents-builtin",status="ok"}' in metrics
    assert 'rlstack_env_constant_groups_total{env="agents-builtin"}' in metrics
    assert env.terminate() == 0


def _first_sequence_matches(group: dict, trial: Path) -> bool:
    line = read_trajectory(trial)[0].model_dump()
    return group["tokens"][0][: len(line["prompt_token_ids"])] == line["prompt_token_ids"] and \
        line["choices"][0]["completion_token_ids"] == [t for t, m in zip(group["tokens"][0], group["masks"][0])
                                                       if m != MASKED][: len(line["choices"][0]["completion_token_ids"])]


def test_claude_code_trials_run_in_the_sandbox_and_are_trained_on_exact_ids(service_factory, proxy, registry,
                                                                            tiny_model, claude_bin, tmp_path):
    """The real claude-code CLI as the agent, with the random demo policy. Every reply hits the
    proxy's max_tokens cap; claude-code sends the cut reply back ("Output token limit hit.
    Resume...") and finally gives up (exit 1). Its calls were all answered and none failed, so
    that exit is the policy's outcome: the trial is scored (0) and posted, not retried. Token-in
    sends every continued call on the thread's exact ids (the cut replies re-tokenise
    differently: every one was a thread break before), so the trial is one sequence whose
    trained tokens are exactly what vLLM generated."""
    batcher = service_factory("batcher", ["--data-dir", str(tmp_path / "wal")])
    httpx.post(f"{batcher.url}/register", json=trainer_registration(batch_size=1, batch_fill="at_least")).raise_for_status()
    env = start_agent_env(service_factory, batcher, proxy, registry, dataset(tmp_path), "agents-claude", "claude-code",
                          1, "--claude-code-bin", claude_bin, "--agent-timeout-seconds", "300")
    [group] = first_batch(batcher, timeout=600)
    assert env.terminate() == 0
    trial = trial_dirs(proxy, "agents-claude")[0]
    result = json.loads((trial / "result.json").read_text())
    assert result["agent"]["name"] == "claude-code" and result["status"] == "ok" and result["reward"] == 0.0
    assert result["agent"]["run"]["exit_code"] != 0  # claude-code gave up; the verdict still scored it
    assert "output token maximum" in (trial / "agent" / "stdout.txt").read_text()  # claude-code's own verdict

    from rlstack.episodes.assemble import assemble

    calls = read_trajectory(trial)
    first = calls[0]
    assert first.api == "anthropic" and len(calls) >= 2
    assert "Output token limit hit" in calls[-1].request["messages"][-1]["content"][0]["text"]
    for before, after in zip(calls, calls[1:], strict=False):
        exact = before.prompt_token_ids + before.choices[0].completion_token_ids
        assert after.splice is not None and after.splice.onto == before.request_id
        assert after.prompt_token_ids[: len(exact)] == exact
    assembly = assemble(calls)
    assert result["trajectory"]["thread_breaks"] == assembly.thread_breaks == 0
    assert result["trajectory"]["spliced_calls"] == len(calls) - 1 and assembly.merge_share == 1.0
    # The posted row is the whole conversation: vLLM's prompt ids, and exactly its completions trained.
    assert group["scores"] == [0.0] and len(group["tokens"]) == 1
    assert group["tokens"][0] == calls[-1].prompt_token_ids + calls[-1].choices[0].completion_token_ids
    generated = [t for c in calls for t in c.choices[0].completion_token_ids]
    assert [t for t, m in zip(group["tokens"][0], group["masks"][0]) if m != MASKED] == generated
    tokenizer = AutoTokenizer.from_pretrained(tiny_model)
    assert TASK.joinpath("instruction.md").read_text().strip() in tokenizer.decode(first.prompt_token_ids)
    atif = json.loads((trial / "agent" / "trajectory.json").read_text())
    assert atif["agent"]["name"] == "claude-code" and atif["steps"][0]["source"] in ("system", "user")
