"""Two policies in one run: each trainer's batches hold exactly its own policy's calls, token for token,
and none of the other's.

The session's two real vLLM replicas are two policies here (``policy`` and ``policy-sync``, each its own
served name), behind a real proxy routing ``claude-sonnet-*`` to the first and ``claude-haiku-*`` to the
second, as a lead and its sub-agent ask (docs/policies.md). The agent is a command that talks to both in
each trial, two turns each, through the trial's URL; the env server splits each trial group by policy
and posts both groups in one keyed request to a batcher of two queues.
"""

from __future__ import annotations

import json
import shlex
import shutil
import sys

import httpx

from rlstack.common.contracts.trajectory import read_trajectory
from tests.conftest import start_service
from tests.helpers.groups import trainer_registration
from tests.helpers.wait import wait_until
from tests.integration.inference.conftest import PROXY_PYTHON, SECRET, SYNC_SERVED, ProxyHandle
from tests.integration.inference.test_agent_trials_through_proxy import (
    dataset,
    start_agent_env,
    trial_dirs,
)

LEAD, HELPER = "policy", SYNC_SERVED
POLICIES = [{"name": LEAD, "served_names": ["claude-sonnet-*"]}, {"name": HELPER, "served_names": ["claude-haiku-*"]}]
TEAM_AGENT = """
import json, os, urllib.request

base, key = os.environ["ANTHROPIC_BASE_URL"], os.environ["ANTHROPIC_API_KEY"]

def call(model, messages):
    body = {"model": model, "max_tokens": 8, "temperature": 1.0, "messages": messages}
    request = urllib.request.Request(base + "/v1/messages", data=json.dumps(body).encode(), method="POST",
                                     headers={"x-api-key": key, "content-type": "application/json",
                                              "anthropic-version": "2023-06-01"})
    with urllib.request.urlopen(request, timeout=120) as reply:
        return json.load(reply)

for model, role in (("claude-sonnet-4-5", "lead"), ("claude-haiku-4-5", "helper")):
    messages = [{"role": "user", "content": f"You are the {role}. Say something."}]
    text = "".join(b.get("text", "") for b in call(model, messages)["content"] if b.get("type") == "text")
    messages += [{"role": "assistant", "content": text or "-"}, {"role": "user", "content": f"{role}: again."}]
    call(model, messages)
"""


def batch_of(batcher_url: str, policy: str) -> list[dict]:
    found: list[dict] = []

    def ready() -> bool:
        found.extend(httpx.get(f"{batcher_url}/batch", params={"policy": policy}).json().get("batch") or [])
        return bool(found)

    wait_until(ready, timeout=300)
    return found


def test_each_policys_batches_hold_exactly_its_own_calls_ids(service_factory, registry, replica, shared_sync_replica,
                                                           stack_logs, tmp_path):
    trials_dir = tmp_path / "trials"
    proxy = start_service("proxy", ["--registry-url", registry.url, "--trials-dir", str(trials_dir), "--trial-key-secret",
                                    SECRET, "--max-tokens-cap", "16", "--watch-timeout-seconds", "2",
                                    "--policies", json.dumps(POLICIES)],
                          stack_logs, python=PROXY_PYTHON, ready_timeout=180)
    try:
        ready = httpx.get(f"{proxy.url}/readyz").json()
        assert set(ready["policies"]) == {LEAD, HELPER}
        batcher = service_factory("batcher", ["--data-dir", str(tmp_path / "wal"), "--policies", json.dumps([LEAD, HELPER])])
        for policy in (LEAD, HELPER):  # each policy's trainer, one group of two trials a batch
            httpx.post(f"{batcher.url}/register", json=trainer_registration(
                batch_size=2, batch_fill="at_least", max_token_len=4096, policy=policy)).raise_for_status()
        python = shutil.which("python3", path="/usr/bin") or sys.executable  # the sandbox shows no test files: inline
        handle = ProxyHandle(proxy, trials_dir)
        env = start_agent_env(service_factory, batcher, handle, registry, dataset(tmp_path), "team", "command", 2,
                              "--agent-command", shlex.join([python, "-c", TEAM_AGENT]), "--policies", json.dumps(POLICIES))
        batches = {policy: batch_of(batcher.url, policy) for policy in (LEAD, HELPER)}
        assert env.terminate() == 0
    finally:
        proxy.terminate()

    records = [r for trial in trial_dirs(handle, "team") for r in read_trajectory(trial)]
    assert records and all(r.status == "ok" for r in records)
    by_policy = {policy: [r for r in records if r.policy == policy] for policy in (LEAD, HELPER)}
    assert len(by_policy[LEAD]) + len(by_policy[HELPER]) == len(records)  # every call names the policy that served it
    for policy, own in by_policy.items():
        assert {r.requested_model for r in own} == {"claude-sonnet-4-5" if policy == LEAD else "claude-haiku-4-5"}
        assert {r.answered_by for r in own} == {policy}
        replica_of = replica.replica_id if policy == LEAD else shared_sync_replica.replica_id
        assert {r.replica_id for r in own} == {replica_of}
        continued = [r for r in own if len(r.request["messages"]) > 1]
        ids = {r.request_id: r for r in own}
        assert continued and all(r.splice is not None and r.splice.onto in ids for r in continued)  # spliced on its own policy's ids

    for policy, batch in batches.items():
        other = HELPER if policy == LEAD else LEAD
        assert {group.get("policy") for group in batch} == {policy}
        whole = {tuple(r.prompt_token_ids + r.choices[0].completion_token_ids) for r in by_policy[policy]
                 if len(r.request["messages"]) > 1}
        foreign = [r.prompt_token_ids for r in by_policy[other]]
        sequences = [tuple(tokens) for group in batch for tokens in group["tokens"]]
        assert sequences and set(sequences) <= whole  # each row is one of its own threads, ids exact
        for sequence in sequences:
            assert not any(list(sequence[: len(ids)]) == ids for ids in foreign)  # no row starts as the other's call
