"""broadcast weight sync (vLLM weight-transfer engine, our gloo backend) into a live vLLM replica: after a real GRPO step and a publish, vLLM's
logprobs equal the trainer's own (within CPU numerics) and differ from the old weights'.

The replica serves under its own name so the shared proxy never routes to it.
"""

from __future__ import annotations

import asyncio

import httpx
import torch
from transformers import AutoModelForCausalLM

from rlstack.common.registry_client import RegistryClient
from rlstack.trainer.batch import to_tensors
from rlstack.trainer.loss import GRPOLossConfig
from rlstack.trainer.step import grpo_step, policy_logprobs
from rlstack.trainer.sync.broadcast import BroadcastPublisher
from tests.helpers.wait import wait_until
from tests.integration.inference.conftest import start_replica

PROBE = [1, 298, 203, 306, 283, 225, 22, 15, 23, 35, 2, 203, 1, 309, 203]
TOLERANCE = 0.05  # vLLM's CPU kernels vs transformers' eager float32


def trainer_logprobs(model) -> list[float]:
    with torch.no_grad():
        lp = policy_logprobs(model, torch.tensor([PROBE[:-1]]), torch.ones(1, len(PROBE) - 1, dtype=torch.long), torch.tensor([PROBE[1:]]))
    return lp[0].tolist()


def vllm_logprobs(url: str) -> list[float]:
    body = {"model": "policy-bcast", "prompt": PROBE, "max_tokens": 1, "prompt_logprobs": 0, "temperature": 0}
    choice = httpx.post(f"{url}/v1/completions", json=body, timeout=60).json()["choices"][0]
    return [next(iter(d.values()))["logprob"] for d in choice["prompt_logprobs"][1:]]


def test_broadcast_sync_puts_the_trainers_weights_in_vllm(registry, tiny_model, stack_logs, tmp_path):
    replica = start_replica(registry.url, tiny_model, stack_logs, "replica-bcast", served_model_name="policy-bcast")
    try:
        model = AutoModelForCausalLM.from_pretrained(tiny_model).float()
        old = trainer_logprobs(model)
        assert max(abs(a - b) for a, b in zip(vllm_logprobs(replica.vllm_url), old)) < TOLERANCE

        # A real GRPO step moves the weights.
        completions = [PROBE[5:9], PROBE[9:13]]
        tokens = [PROBE[:5] + c for c in completions]
        inference = [[0.0] + trainer_logprobs_for(model, t) for t in tokens]
        group = {"tokens": tokens, "masks": [[-100] * 5 + c for c in completions], "scores": [1.0, 0.0], "inference_logprobs": inference}
        grpo_step(model, torch.optim.AdamW(model.parameters(), lr=5e-2), to_tensors([group]), GRPOLossConfig())
        new = trainer_logprobs(model)
        assert max(abs(a - b) for a, b in zip(new, old)) > 10 * TOLERANCE

        async def publish_twice():
            publisher = BroadcastPublisher(RegistryClient(registry.url), "policy-bcast")
            try:
                first = await publisher.publish(model, version=1)
                grpo_step(model, torch.optim.AdamW(model.parameters(), lr=5e-2), to_tensors([group]), GRPOLossConfig())
                second = await publisher.publish(model, version=2)  # the group from the first sync is reused
                return first, second
            finally:
                await publisher.aclose()

        # Two syncs through the same gloo group: the first moves v1 in, the second v2.
        first, second = asyncio.run(publish_twice())
        assert first.replicas == second.replicas == ["replica-bcast"] and not second.failed
        new = trainer_logprobs(model)

        served = vllm_logprobs(replica.vllm_url)
        assert max(abs(a - b) for a, b in zip(served, new)) < TOLERANCE
        assert max(abs(a - b) for a, b in zip(served, old)) > 10 * TOLERANCE

        def registered_version() -> int:
            return httpx.get(f"{registry.url}/v1/endpoints/replica-bcast").json()["weight_version"]

        wait_until(lambda: registered_version() == 2, timeout=20)
    finally:
        replica.sidecar.terminate(timeout=60)


def trainer_logprobs_for(model, tokens: list[int]) -> list[float]:
    with torch.no_grad():
        lp = policy_logprobs(model, torch.tensor([tokens[:-1]]), torch.ones(1, len(tokens) - 1, dtype=torch.long), torch.tensor([tokens[1:]]))
    return lp[0].tolist()
