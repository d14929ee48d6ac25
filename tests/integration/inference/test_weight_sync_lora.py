"""lora weight sync into a live vLLM replica: after a real GRPO step on a peft adapter and a
publish, vLLM serving the adapter gives the trainer's own logprobs (within CPU numerics), the
base model is untouched, the registry names the adapter, and a real proxy routes the policy's
next call to it; a second publish changes only the adapter label, and the proxy follows.

The replica is the one the sync tests share (``sync_replica``), under its own served name.
"""

from __future__ import annotations

import asyncio

import httpx

from rlstack.common.contracts.trajectory import read_trajectory
from rlstack.common.names import adapter_name
from rlstack.common.registry_client import RegistryClient
from rlstack.trainer.config import TrainerSettings
from rlstack.trainer.loop import load_policy
from rlstack.trainer.sync.lora import LoraPublisher
from tests.conftest import PROXY_PYTHON, start_service
from tests.helpers.wait import wait_until
from tests.integration.inference.conftest import SYNC_SERVED, endpoint
from tests.integration.inference.logprob_probe import (
    TOLERANCE,
    gap,
    grpo_step_on,
    probe_group,
    trainer_logprobs,
    vllm_logprobs,
)

SERVED = SYNC_SERVED


def served_through_proxy(proxy_url: str, trials_dir, n: int) -> str | None:
    """The model vLLM answered a call through the proxy with, as the trajectory logger recorded it."""
    body = {"model": SERVED, "messages": [{"role": "user", "content": f"call {n}: 1 + 1?"}], "max_tokens": 2}
    r = httpx.post(f"{proxy_url}/trials/lora/t{n}/v1/chat/completions", json=body, headers={"Authorization": "Bearer open"}, timeout=120)
    assert r.status_code == 200, r.text
    trial = trials_dir / "lora" / f"t{n}"
    wait_until(lambda: bool(read_trajectory(trial)), timeout=20)
    return read_trajectory(trial)[0].answered_by


def test_lora_sync_serves_the_trainers_adapter(registry, sync_replica, tiny_model, stack_logs, tmp_path):
    replica = sync_replica
    proxy = None
    try:
        settings = TrainerSettings(model=str(tiny_model), sync_mode="lora", lora_rank=8, registry_url=registry.url)
        model = load_policy(settings, None)
        old = trainer_logprobs(model)
        assert gap(vllm_logprobs(replica.vllm_url, SERVED), old) < TOLERANCE

        grpo_step_on(model, probe_group(model))
        new = trainer_logprobs(model)
        assert gap(new, old) > 10 * TOLERANCE

        async def publish_version(version: int):
            publisher = LoraPublisher(tmp_path / "adapters", RegistryClient(registry.url), SERVED)
            try:
                return await publisher.publish(model, version=version)
            finally:
                await publisher.aclose()

        report = asyncio.run(publish_version(1))
        assert report.replicas == ["replica-sync"]

        name = adapter_name(SERVED, 1)
        served = vllm_logprobs(replica.vllm_url, name)
        assert gap(served, new) < TOLERANCE and gap(served, old) > 10 * TOLERANCE
        assert gap(vllm_logprobs(replica.vllm_url, SERVED), old) < TOLERANCE  # the base stays as it was

        def entry() -> dict:
            return endpoint(registry, "replica-sync")

        wait_until(lambda: entry()["weight_version"] == 1 and entry()["labels"].get("adapter") == name, timeout=20)

        # The proxy routes the policy to the adapter the registry names, and follows a new one.
        trials = tmp_path / "trials"
        proxy = start_service("proxy", ["--registry-url", registry.url, "--served-model-name", SERVED, "--trials-dir", str(trials),
                                        "--watch-timeout-seconds", "2"], stack_logs, python=PROXY_PYTHON, ready_timeout=180)
        assert served_through_proxy(proxy.url, trials, 1) == name
        grpo_step_on(model, probe_group(model))
        asyncio.run(publish_version(2))
        second = adapter_name(SERVED, 2)
        wait_until(lambda: entry()["labels"].get("adapter") == second, timeout=20)
        calls = iter(range(2, 100))
        wait_until(lambda: served_through_proxy(proxy.url, trials, next(calls)) == second, timeout=30)
    finally:
        if proxy is not None:
            proxy.terminate()
