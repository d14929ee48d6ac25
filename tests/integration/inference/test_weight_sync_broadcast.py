"""broadcast weight sync (vLLM weight-transfer engine, our gloo backend) into a live vLLM replica: after a real GRPO step and a publish, vLLM's
logprobs equal the trainer's own (within CPU numerics) and differ from the old weights'.

Then, into the same replica, a policy sharded over two torchrun ranks (FSDP2, gloo): the ranks
gather one layer at a time and rank 0 streams each into the replica. Two real steps later every
sync passed the served-weights check (the replica's logprobs equal the sharded trainer's) and
the served weights moved off the base model.

The replica is the one the sync tests share (``sync_replica``), under its own served name.
"""

from __future__ import annotations

import asyncio
import sys

import httpx
from transformers import AutoModelForCausalLM

from rlstack.common.registry_client import RegistryClient
from rlstack.trainer.sync.broadcast import BroadcastPublisher
from tests.conftest import REPO, free_port, start_process
from tests.helpers.groups import feed_trainer
from tests.helpers.prometheus import metric
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
SHARDED_STEPS = 2


def test_broadcast_sync_puts_the_trainers_weights_in_vllm(registry, sync_replica, tiny_model, service_factory, tmp_path):
    replica = sync_replica
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
    assert first.replicas == second.replicas == ["replica-sync"] and not second.failed
    new = trainer_logprobs(model)

    served = vllm_logprobs(replica.vllm_url, SERVED)
    assert gap(served, new) < TOLERANCE
    assert gap(served, old) > 10 * TOLERANCE

    wait_until(lambda: endpoint(registry, "replica-sync")["weight_version"] == 2, timeout=20)
    sharded_trainer_streams_into(replica, registry, tiny_model, service_factory, tmp_path)


def sharded_trainer_streams_into(replica, registry, tiny_model, service_factory, tmp_path) -> None:  # noqa: ANN001
    base = trainer_logprobs(AutoModelForCausalLM.from_pretrained(tiny_model).float())
    batcher = service_factory("batcher", ["--data-dir", str(tmp_path / "batcher")])
    port = free_port()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "rlstack.trainer",
           "--port", str(port), "--model", str(tiny_model), "--batcher-url", batcher.url, "--registry-url", registry.url,
           "--served-model", SERVED, "--sync-mode", "broadcast", "--run-dir", str(tmp_path / "run"), "--steps", str(SHARDED_STEPS),
           "--batch-size", "4", "--pack-tokens", "32", "--lr", "5e-3", "--torch-threads", "1"]
    trainer = start_process("trainer", cmd, port, tmp_path / "trainer.log", cwd=REPO)
    try:
        trainer.wait_ready(timeout=300)
        feed_trainer(batcher.url, SHARDED_STEPS)
        wait_until(lambda: metric(httpx.get(f"{trainer.url}/metrics").text, "rlstack_trainer_weight_version") == SHARDED_STEPS,
                   timeout=300, interval=0.5)
        metrics = httpx.get(f"{trainer.url}/metrics").text
        assert metric(metrics, "rlstack_trainer_sync_replica_failures_total") == 0, trainer.log()
        assert metric(metrics, "rlstack_trainer_sync_verify_failures_total") == 0
        assert metric(metrics, "rlstack_trainer_sync_probe_gap") < TOLERANCE  # the replica serves the sharded trainer's weights
        assert gap(vllm_logprobs(replica.vllm_url, SERVED), base) > 5 * TOLERANCE  # and they are not the base model's
    finally:
        trainer.terminate()  # torchrun's agent exits 1 on SIGTERM (it re-raises the signal): docs/trainer.md

