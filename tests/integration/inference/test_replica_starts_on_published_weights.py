"""A replica that restarts mid-run serves the trainer's current weights, not the base model
(issue 22, item 3), and registers vLLM's context length for the env servers (item 7).

The trainer takes a real GRPO step and publishes version 1 through the filesystem sync while
no replica of its served name is up (the old one was killed). The successor, a real vLLM
started with ``--weights-dir``, must answer with version 1's logprobs and report version 1:
before, it served version 0 until the next publish, and forever once the trainer was done.
A half-written version 2 beside it is passed over. One vLLM start, its own served name.
"""

from __future__ import annotations

import asyncio

from transformers import AutoModelForCausalLM

from rlstack.common.registry_client import RegistryClient
from rlstack.trainer.sync.filesystem import FilesystemPublisher
from tests.helpers.wait import wait_until
from tests.integration.inference.conftest import endpoint, start_replica
from tests.integration.inference.logprob_probe import (
    TOLERANCE,
    gap,
    grpo_step_on,
    probe_group,
    trainer_logprobs,
    vllm_logprobs,
)

SERVED = "policy-successor"


def test_a_successor_replica_serves_the_latest_published_version(registry, tiny_model, stack_logs, tmp_path):
    model = AutoModelForCausalLM.from_pretrained(tiny_model).float()
    old = trainer_logprobs(model)
    grpo_step_on(model, probe_group(model))
    new = trainer_logprobs(model)
    assert gap(new, old) > 10 * TOLERANCE

    weights = tmp_path / "weights"

    async def publish():  # noqa: ANN202
        client = RegistryClient(registry.url)
        try:
            return await FilesystemPublisher(weights, client, SERVED).publish(model, version=1)
        finally:
            await client.aclose()

    assert asyncio.run(publish()).replicas == []  # the replica it would have reached is gone
    half = weights / "v000002"
    half.mkdir()
    (half / "config.json").write_text("{}")
    (half / "model.safetensors").write_bytes((weights / "v000001" / "model.safetensors").read_bytes()[:4096])

    successor = start_replica(registry.url, tiny_model, stack_logs, "replica-successor", served_model_name=SERVED,
                              extra_args=["--weights-dir", str(weights)])
    try:
        wait_until(lambda: endpoint(registry, "replica-successor").get("ready"), timeout=60)
        entry = endpoint(registry, "replica-successor")
        assert entry["weight_version"] == 1
        assert entry["labels"]["max_model_len"] == "32768"  # the fixture's --max-model-len, read from vLLM
        served = vllm_logprobs(successor.vllm_url, SERVED)
        assert gap(served, new) < TOLERANCE
        assert gap(served, old) > 10 * TOLERANCE
    finally:
        successor.sidecar.terminate(grace=60)
