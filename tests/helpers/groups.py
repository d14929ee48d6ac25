"""Builders for scored groups shaped like the ones env servers post."""

from __future__ import annotations

import random
from typing import Any


def make_group(size: int = 2, length: int = 8, env_id: int | None = 0, seed: int = 0, prompt_len: int = 2,
               weight_version: int | None = None, logprobs: bool = True, vocab: int = 50_000) -> dict[str, Any]:
    rng = random.Random(seed)
    tokens = [[rng.randrange(1, vocab) for _ in range(length)] for _ in range(size)]
    group: dict[str, Any] = {
        "tokens": tokens,
        "masks": [[-100] * prompt_len + row[prompt_len:] for row in tokens],
        "scores": [rng.random() for _ in range(size)],
        "env_id": env_id,
    }
    if logprobs:
        group["inference_logprobs"] = [[0.0] * prompt_len + [-rng.random() for _ in range(length - prompt_len)] for _ in range(size)]
    if weight_version is not None:
        group["weight_version"] = weight_version
    return group


def trainer_registration(batch_size: int = 4, **overrides: Any) -> dict[str, Any]:
    return {
        "wandb_group": "g", "wandb_project": "p", "batch_size": batch_size, "max_token_len": 2048,
        "checkpoint_dir": "/tmp/ckpt", "save_checkpoint_interval": 10, "starting_step": 0, "num_steps": 100,
        **overrides,
    }


def env_registration(group_size: int = 2, name: str = "arith", **overrides: Any) -> dict[str, Any]:
    return {"max_token_length": 2048, "desired_name": name, "weight": 1.0, "group_size": group_size, **overrides}


def feed_trainer(batcher_url: str, steps: int, group_size: int = 4) -> None:
    """Register an env and post one scored group of random tokens per trainer step (mixed rewards, so GRPO moves)."""
    import httpx

    env = httpx.post(f"{batcher_url}/register-env", json=env_registration(group_size=group_size)).json()["env_id"]
    for seed in range(steps):
        group = make_group(size=group_size, length=12, env_id=env, seed=seed, prompt_len=4, vocab=4000)
        group["scores"] = [1.0, 0.0, 0.5, 0.0][:group_size]
        httpx.post(f"{batcher_url}/scored_data", json=group, timeout=10).raise_for_status()
