"""atroposlib 0.4.0's own BaseEnv posting groups without ``inference_logprobs`` (as every unmodified
Atropos env does) to a batcher whose trainer is already registered; prints one JSON line.

    python atropos_env_without_logprobs.py http://127.0.0.1:PORT WORKDIR GROUPS
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from atropos_clients import ProbeEnv, local_tokenizer
from atroposlib.envs.base import APIServerConfig, BaseEnvConfig


def group(seed: int, length: int = 12) -> dict:
    tokens = [[(seed * 7 + i * 13 + j) % 97 + 2 for j in range(length)] for i in range(2)]
    return {"tokens": tokens, "masks": [[-100] * 4 + row[4:] for row in tokens], "scores": [1.0, -1.0],
            "advantages": None, "messages": None}


async def main(url: str, workdir: Path, groups: int) -> dict:
    config = BaseEnvConfig(
        group_size=2, use_wandb=False, rollout_server_url=url, tokenizer_name=local_tokenizer(workdir),
        wandb_name="compat", max_token_length=1024, total_steps=10, ensure_scores_are_not_same=False,
        include_messages=False, batch_size=-1,
    )
    servers = [APIServerConfig(model_name="policy", base_url="http://127.0.0.1:9/v1", api_key="x", num_requests_for_eval=1)]
    env = ProbeEnv(config, servers, testing=True)
    await env.register_env()
    for seed in range(groups):
        sent = group(seed)
        assert "inference_logprobs" not in sent
        await env.handle_send_to_api(sent)
    await env.get_status()
    return {"env_id": env.env_id, "status": dict(env.status_dict)}


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], Path(sys.argv[2]), int(sys.argv[3])))))
