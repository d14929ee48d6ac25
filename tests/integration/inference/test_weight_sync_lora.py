"""lora weight sync into a live vLLM replica: after a real GRPO step on a peft adapter and a
publish, vLLM serving the adapter gives the trainer's own logprobs (within CPU numerics), the
base model is untouched, and the registry names the adapter the proxy should route to.

The replica serves under its own name so the shared proxy never routes to it.
"""

from __future__ import annotations

import asyncio

import httpx

from rlstack.common.registry_client import RegistryClient
from rlstack.trainer.config import TrainerSettings
from rlstack.trainer.loop import load_policy
from rlstack.trainer.sync.lora import LoraPublisher, adapter_name
from tests.helpers.wait import wait_until
from tests.integration.inference.conftest import start_replica
from tests.integration.inference.logprob_probe import (
    TOLERANCE,
    gap,
    grpo_step_on,
    probe_group,
    trainer_logprobs,
    vllm_logprobs,
)

SERVED = "policy-lora"


def test_lora_sync_serves_the_trainers_adapter(registry, tiny_model, stack_logs, tmp_path):
    replica = start_replica(registry.url, tiny_model, stack_logs, "replica-lora", served_model_name=SERVED)
    try:
        settings = TrainerSettings(model=str(tiny_model), sync_mode="lora", lora_rank=8, registry_url=registry.url)
        model = load_policy(settings, None)
        old = trainer_logprobs(model)
        assert gap(vllm_logprobs(replica.vllm_url, SERVED), old) < TOLERANCE

        grpo_step_on(model, probe_group(model))
        new = trainer_logprobs(model)
        assert gap(new, old) > 10 * TOLERANCE

        async def publish():
            publisher = LoraPublisher(tmp_path / "adapters", RegistryClient(registry.url), SERVED)
            try:
                return await publisher.publish(model, version=1)
            finally:
                await publisher.aclose()

        report = asyncio.run(publish())
        assert report.replicas == ["replica-lora"]

        name = adapter_name(SERVED, 1)
        served = vllm_logprobs(replica.vllm_url, name)
        assert gap(served, new) < TOLERANCE and gap(served, old) > 10 * TOLERANCE
        assert gap(vllm_logprobs(replica.vllm_url, SERVED), old) < TOLERANCE  # the base stays as it was

        def entry() -> dict:
            return httpx.get(f"{registry.url}/v1/endpoints/replica-lora").json()

        wait_until(lambda: entry()["weight_version"] == 1 and entry()["labels"].get("adapter") == name, timeout=20)
    finally:
        replica.sidecar.terminate(grace=60)
