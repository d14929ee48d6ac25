"""filesystem weight sync into a live vLLM replica: after a real GRPO step and a publish, vLLM's
logprobs equal the trainer's own (within CPU numerics) and differ from the old weights'.

The replica is the one the sync tests share (``sync_replica``), under its own served name.
"""

from __future__ import annotations

import asyncio

from safetensors import safe_open
from transformers import AutoModelForCausalLM

from rlstack.common.registry_client import RegistryClient
from rlstack.trainer.sync.filesystem import FilesystemPublisher
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


def test_filesystem_sync_puts_the_trainers_weights_in_vllm(registry, sync_replica, tiny_model, tmp_path):
    replica = sync_replica
    model = AutoModelForCausalLM.from_pretrained(tiny_model).float()
    old = trainer_logprobs(model)
    assert gap(vllm_logprobs(replica.vllm_url, SERVED), old) < TOLERANCE

    # A real GRPO step moves the weights.
    grpo_step_on(model, probe_group(model))
    new = trainer_logprobs(model)
    assert gap(new, old) > 10 * TOLERANCE

    async def publish():
        client = RegistryClient(registry.url)
        try:
            return await FilesystemPublisher(tmp_path / "weights", client, SERVED).publish(model, version=1)
        finally:
            await client.aclose()

    report = asyncio.run(publish())
    assert report.replicas == ["replica-sync"] and report.seconds > 0
    # The replica computes in bf16 (vLLM's CPU default for a float32 checkpoint): the weights were written
    # rounded to bf16, as it would round them on load, and it serves the trainer's step all the same.
    with safe_open(tmp_path / "weights" / "v000001" / "model.safetensors", "pt") as published:
        assert {published.get_slice(name).get_dtype() for name in published.keys()} == {"BF16"}

    served = vllm_logprobs(replica.vllm_url, SERVED)
    assert gap(served, new) < TOLERANCE
    assert gap(served, old) > 10 * TOLERANCE

    wait_until(lambda: endpoint(registry, "replica-sync")["weight_version"] == 1, timeout=20)

