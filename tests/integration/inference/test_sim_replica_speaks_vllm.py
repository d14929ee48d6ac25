"""The simulated replica of the control-plane benchmarks (``bench/sim_replica.py``) answers every
route the proxy, the registry and the weight sync call as the session's real vLLM replica does, in
every field they read; and the real proxy runs a trial on it, token-in and all. If vLLM's answers
change, or the proxy starts reading a field the simulation lacks, this fails: the benchmarks'
figures cannot silently stop describing the real hop."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Iterator
from typing import Any

import httpx
import pytest

from rlstack.common.trial_keys import mint
from rlstack.trainer.sync.filesystem import reload_from
from tests.conftest import PROXY_PYTHON, start_service
from tests.helpers.wait import wait_until
from tests.integration.inference.conftest import SECRET, endpoint, sim_replica

SERVED = "sim-policy"
"""Its own served name: the session's proxy never routes to the simulation."""

READS: dict[str, list[str]] = {
    # what the relay and the hooks read of vLLM's answers (services/proxy/relay/tokenin.py, routing/hooks.py)
    "chat": ["id", "model", "prompt_token_ids", "usage.prompt_tokens", "usage.completion_tokens", "choices[].index",
             "choices[].message.role", "choices[].message.content", "choices[].finish_reason", "choices[].token_ids",
             "choices[].logprobs.content[].logprob"],
    "render": ["token_ids", "sampling_params", "sampling_params.max_tokens", "model", "request_id"],
    "generate": ["choices[].token_ids", "choices[].finish_reason", "choices[].weight_versions[].version",
                 "choices[].weight_versions[].start", "choices[].weight_versions[].end", "choices[].logprobs.content[].logprob",
                 "choices[].logprobs.content[].token_id"],
    "derender": ["id", "choices[].index", "choices[].message.role", "choices[].message.content", "choices[].finish_reason",
                 "choices[].logprobs.content[].logprob", "usage.completion_tokens"],
    "tokenize": ["count", "tokens", "max_model_len"],
    "models": ["data[].id", "data[].max_model_len"],
    "weight_info": ["weight_version"],
    "weight_state": ["results[].dtype", "results[].version"],
    "probe": ["choices[].prompt_logprobs"],
}


def at(data: Any, path: str) -> list[Any]:  # noqa: ANN401 - JSON
    """Every value at ``path`` (``a.b[].c``: each element of the list ``b``); raises if a step is missing."""
    values = [data]
    for step in path.split("."):
        name, each = step.removesuffix("[]"), step.endswith("[]")
        values = [v[name] for v in values]
        if each:
            assert all(isinstance(v, list) and v for v in values), f"{path}: {step} is not a non-empty list"
            values = [x for v in values for x in v]
    return values


def kind(value: Any) -> str:  # noqa: ANN401 - JSON
    return "number" if isinstance(value, (int, float)) and not isinstance(value, bool) else type(value).__name__


@pytest.fixture(scope="module")
def sim(registry, stack_logs) -> Iterator[str]:
    with sim_replica(registry, stack_logs, SERVED, "sim", tpot_ms=1, completion_tokens=6) as url:
        yield url


def answers(base: str, model: str) -> dict[str, Any]:
    """The same calls, in the proxy's order, to one replica: what each route gave back."""
    messages = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "List the files."}]
    chat_body = {"model": model, "messages": messages, "max_tokens": 4, "logprobs": True, "return_token_ids": True}
    with httpx.Client(base_url=base, timeout=60) as client:
        out = {"chat": client.post("/v1/chat/completions", json=chat_body).json()}
        reply = out["chat"]["choices"][0]["message"]
        follow = [*messages, {"role": "assistant", "content": reply["content"] or ""}, {"role": "user", "content": "Go on."}]
        out["render"] = client.post("/v1/chat/completions/render", json={**chat_body, "messages": follow}).json()
        out["generate"] = client.post("/inference/v1/generate", json=out["render"]).json()
        out["derender"] = client.post("/v1/chat/completions/derender", json={"model": model, "generate_response": out["generate"],
                                                                            "prompt_token_ids": out["render"]["token_ids"],
                                                                            "chat_request": {**chat_body, "messages": follow}}).json()
        out["tokenize"] = client.post("/tokenize", json={"model": model, "messages": follow, "add_generation_prompt": True}).json()
        out["models"] = client.get("/v1/models").json()
        out["weight_info"] = client.get("/weight_info").json()
        out["weight_state"] = client.post("/collective_rpc", json={"method": "rlstack_weight_state"}).json()
        out["probe"] = client.post("/v1/completions", json={"model": model, "prompt": out["render"]["token_ids"][:8], "max_tokens": 1,
                                                            "prompt_logprobs": 0, "temperature": 0}).json()
        out["count_tokens"] = client.post("/v1/messages/count_tokens", json={"model": model, "messages": follow[1:],
                                                                              "system": "You are an agent."})
    return out


def test_the_simulation_answers_every_field_the_proxy_reads_as_vllm_does(replica, sim):
    real, simulated = answers(replica.vllm_url, "policy"), answers(sim, SERVED)
    for route, paths in READS.items():
        for path in paths:
            want = {kind(v) for v in at(real[route], path)} - {"NoneType"}
            got = {kind(v) for v in at(simulated[route], path)} - {"NoneType"}
            # vLLM's None says nothing of the type (a version never set): then any value will do
            assert got <= want or not want, f"{route} {path}: vLLM answers {want}, the simulation {got}"
    for answer in (real, simulated):  # a continued call: the rendered history, then the generation prompt
        assert answer["tokenize"]["tokens"] == answer["render"]["token_ids"]
        assert answer["chat"]["prompt_token_ids"] == answer["render"]["token_ids"][: len(answer["chat"]["prompt_token_ids"])]
    real_count, sim_count = real["count_tokens"], simulated["count_tokens"]
    assert sim_count.status_code == 200 and (real_count.status_code != 200 or "input_tokens" in real_count.json())
    assert "input_tokens" in sim_count.json()


def test_the_real_proxy_runs_a_token_in_trial_and_a_sync_on_the_simulation(registry, sim, stack_logs, tmp_path):
    proxy = start_service("proxy", ["--registry-url", registry.url, "--trials-dir", str(tmp_path / "trials"), "--trial-key-secret", SECRET,
                                    "--served-model-name", SERVED, "--max-tokens-cap", "64", "--watch-timeout-seconds", "2"],
                          stack_logs, python=PROXY_PYTHON, ready_timeout=180)
    try:
        key = mint(SECRET, "sim", "t0")
        headers = {"Authorization": f"Bearer {key}"}
        messages: list[dict] = [{"role": "system", "content": "You are an agent."}, {"role": "user", "content": "List the files."}]
        for n in range(3):
            r = httpx.post(f"{proxy.url}/v1/chat/completions", json={"model": SERVED, "messages": messages, "max_tokens": 16},
                           headers=headers, timeout=60)
            assert r.status_code == 200, r.text
            messages += [{"role": "assistant", "content": r.json()["choices"][0]["message"]["content"]},
                         {"role": "user", "content": f"Output {n}: a.txt"}]
        # The sync's routes: pause, reload, version, prefix-cache reset, resume; the next call is labelled with it.
        asyncio.run(_reload(sim, tmp_path, version=3))
        assert httpx.get(f"{sim}/weight_info").json() == {"weight_version": "3"}
        wait_until(lambda: endpoint(registry, "sim-0")["weight_version"] == 3, timeout=20)
        r = httpx.post(f"{proxy.url}/v1/messages", json={"model": "claude-sonnet-4-5", "max_tokens": 16, "messages": [
            {"role": "user", "content": "List the files."}]}, headers={"x-api-key": key, "anthropic-version": "2023-06-01"}, timeout=60)
        assert r.status_code == 200, r.text
        records = _lines(tmp_path / "trials" / "sim" / "t0", 4)
        assert [rec["status"] for rec in records] == ["ok"] * 4
        for before, after in zip(records[:2], records[1:3], strict=True):  # token-in: render, generate, derender on the simulation
            exact = before["prompt_token_ids"] + before["choices"][0]["completion_token_ids"]
            assert after["prompt_token_ids"][: len(exact)] == exact and after["splice"]["onto"] == before["request_id"]
        assert records[3]["choices"][0]["weight_versions"] == [3]
    finally:
        proxy.terminate()


async def _reload(sim: str, tmp_path, version: int) -> None:  # noqa: ANN001
    async with httpx.AsyncClient(timeout=30) as client:
        await reload_from(client, sim, tmp_path, version)


def _lines(trial_dir, expect: int) -> list[dict]:  # noqa: ANN001
    from rlstack.common.contracts.trajectory import read_trajectory

    lines: list[dict] = []

    def enough() -> bool:
        nonlocal lines
        lines = [json.loads(r.model_dump_json()) for r in read_trajectory(trial_dir)] if trial_dir.exists() else []
        return len(lines) >= expect

    wait_until(enough, timeout=30)
    return sorted(lines, key=lambda r: r["started_at"])
