"""broadcast weight sync (vLLM weight-transfer engine, our gloo backend) into a live vLLM replica: after a real GRPO step and a publish, vLLM's
logprobs equal the trainer's own (within CPU numerics) and differ from the old weights'.

The replica serves under its own name so the shared proxy never routes to it.
"""

from __future__ import annotations

import asyncio

import httpx
from transformers import AutoModelForCausalLM

from rlstack.common.registry_client import RegistryClient
from rlstack.trainer.sync.broadcast import BroadcastPublisher
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

SERVED = "policy-bcast"


def test_broadcast_sync_puts_the_trainers_weights_in_vllm(registry, tiny_model, stack_logs, tmp_path):
    replica = start_replica(registry.url, tiny_model, stack_logs, "replica-bcast", served_model_name=SERVED)
    try:
        model = AutoModelForCausalLM.from_pretrained(tiny_model).float()
        old = trainer_logprobs(model)
        assert gap(vllm_logprobs(replica.vllm_url, SERVED), old) < TOLERANCE

        # A real GRPO step moves the weights.
        group = probe_group(model)
        grpo_step_on(model, group)
        new = trainer_logprobs(model)
        assert gap(new, old) > 10 * TOLERANCE

        async def publish_twice():
            publisher = BroadcastPublisher(RegistryClient(registry.url), SERVED)
            try:
                first = await publisher.publish(model, version=1)
                grpo_step_on(model, group)
                second = await publisher.publish(model, version=2)  # the group from the first sync is reused
                return first, second
            finally:
                await publisher.aclose()

        # Two syncs through the same gloo group: the first moves v1 in, the second v2.
        first, second = asyncio.run(publish_twice())
        assert first.replicas == second.replicas == ["replica-bcast"] and not second.failed
        new = trainer_logprobs(model)

        served = vllm_logprobs(replica.vllm_url, SERVED)
        assert gap(served, new) < TOLERANCE
        assert gap(served, old) > 10 * TOLERANCE

        def registered_version() -> int:
            return httpx.get(f"{registry.url}/v1/endpoints/replica-bcast").json()["weight_version"]

        wait_until(lambda: registered_version() == 2, timeout=20)
    finally:
        replica.sidecar.terminate(grace=60)

