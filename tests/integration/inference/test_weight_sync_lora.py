"""lora weight sync into a live vLLM replica: after a real GRPO step on a peft adapter and a
publish, vLLM serving the adapter gives the trainer's own logprobs (within CPU numerics), the
base model is untouched, and the registry names the adapter the proxy should route to.

The replica serves under its own name so the shared proxy never routes to it.
"""

from __future__ import annotations

import asyncio

import httpx
import torch

from rlstack.common.registry_client import RegistryClient
from rlstack.trainer.batch import to_tensors
from rlstack.trainer.config import TrainerSettings
from rlstack.trainer.loop import load_policy
from rlstack.trainer.loss import GRPOLossConfig
from rlstack.trainer.step import grpo_step, policy_logprobs
from rlstack.trainer.sync.lora import LoraPublisher, adapter_name
from tests.helpers.wait import wait_until
from tests.integration.inference.conftest import start_replica

PROBE = [1, 298, 203, 306, 283, 225, 22, 15, 23, 35, 2, 203, 1, 309, 203]
TOLERANCE = 0.05
SERVED = "policy-lora"


def trainer_logprobs(model, tokens: list[int] = PROBE) -> list[float]:  # noqa: ANN001
    with torch.no_grad():
        lp = policy_logprobs(model, torch.tensor([tokens[:-1]]), torch.ones(1, len(tokens) - 1, dtype=torch.long), torch.tensor([tokens[1:]]))
    return lp[0].tolist()


def vllm_logprobs(url: str, model: str) -> list[float]:
    body = {"model": model, "prompt": PROBE, "max_tokens": 1, "prompt_logprobs": 0, "temperature": 0}
    r = httpx.post(f"{url}/v1/completions", json=body, timeout=60)
    r.raise_for_status()
    return [next(iter(d.values()))["logprob"] for d in r.json()["choices"][0]["prompt_logprobs"][1:]]


def gap(a: list[float], b: list[float]) -> float:
    return max(abs(x - y) for x, y in zip(a, b))


def test_lora_sync_serves_the_trainers_adapter(registry, tiny_model, stack_logs, tmp_path):
    replica = start_replica(registry.url, tiny_model, stack_logs, "replica-lora", served_model_name=SERVED)
    try:
        settings = TrainerSettings(model=str(tiny_model), sync_mode="lora", lora_rank=8, registry_url=registry.url)
        model = load_policy(settings, None)
        old = trainer_logprobs(model)
        assert gap(vllm_logprobs(replica.vllm_url, SERVED), old) < TOLERANCE

        completions = [PROBE[5:9], PROBE[9:13]]
        tokens = [PROBE[:5] + c for c in completions]
        inference = [[0.0] + trainer_logprobs(model, t) for t in tokens]
        group = {"tokens": tokens, "masks": [[-100] * 5 + c for c in completions], "scores": [1.0, 0.0], "inference_logprobs": inference}
        trainable = [p for p in model.parameters() if p.requires_grad]
        grpo_step(model, torch.optim.AdamW(trainable, lr=5e-2), to_tensors([group]), GRPOLossConfig())
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
        replica.sidecar.terminate(timeout=60)
