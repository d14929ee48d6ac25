"""What the weight-sync tests compare: the trainer's and vLLM's logprobs of one fixed token sequence,
and one real GRPO step that moves the trainer's weights away from the replica's."""

from __future__ import annotations

import httpx
import torch

from rlstack.trainer.batch import to_tensors
from rlstack.trainer.loss import GRPOLossConfig
from rlstack.trainer.step import grpo_step, policy_logprobs

PROBE = [1, 298, 203, 306, 283, 225, 22, 15, 23, 35, 2, 203, 1, 309, 203]
TOLERANCE = 0.05  # vLLM's CPU kernels vs transformers' eager float32


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


def probe_group(model) -> dict:  # noqa: ANN001
    """Two completions of the probe's prefix, one rewarded, with the model's own logprobs as the inference ones."""
    completions = [PROBE[5:9], PROBE[9:13]]
    tokens = [PROBE[:5] + c for c in completions]
    inference = [[0.0] + trainer_logprobs(model, t) for t in tokens]
    return {"tokens": tokens, "masks": [[-100] * 5 + c for c in completions], "scores": [1.0, 0.0], "inference_logprobs": inference}


def grpo_step_on(model, group: dict) -> None:  # noqa: ANN001
    """A real GRPO step with a large learning rate, on whatever the model trains (all weights or an adapter)."""
    trainable = [p for p in model.parameters() if p.requires_grad]
    grpo_step(model, torch.optim.AdamW(trainable, lr=5e-2), to_tensors([group]), GRPOLossConfig())
