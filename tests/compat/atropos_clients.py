"""Drive atroposlib 0.4.0's real clients against a batcher URL; print one JSON line of results.

Runs under .venv-atropos (never the project's runtime): the trainer side uses
``example_trainer.api.register_trainer``/``get_batch`` unchanged, the env side a minimal
``BaseEnv`` subclass whose own methods register, poll status and post scored groups
(single, list, and gzip-compressed, exactly as BaseEnv sends them).

    python atropos_clients.py http://127.0.0.1:PORT WORKDIR
"""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path
from types import SimpleNamespace

from atroposlib.envs.base import APIServerConfig, BaseEnv, BaseEnvConfig
from example_trainer.api import get_batch, register_trainer
from tokenizers import Tokenizer, models, pre_tokenizers
from transformers import PreTrainedTokenizerFast


class ProbeEnv(BaseEnv):
    """The smallest BaseEnv: every rollout is posted by hand through BaseEnv's own methods."""

    name = "compat_probe"

    async def setup(self):
        pass

    async def get_next_item(self):
        return None

    async def collect_trajectories(self, item):
        return None, []

    async def evaluate(self, *args, **kwargs):
        return None


def local_tokenizer(workdir: Path) -> str:
    """BaseEnv loads a tokenizer by name; nothing can be downloaded, so build one on disk."""
    vocab = {"[UNK]": 0, "[PAD]": 1, **{f"t{i}": i + 2 for i in range(100)}}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="[UNK]"))
    tok.pre_tokenizer = pre_tokenizers.Whitespace()
    path = workdir / "tokenizer"
    PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="[UNK]", pad_token="[PAD]").save_pretrained(path)
    return str(path)


def group(seed: int, size: int = 2, length: int = 300) -> dict:
    tokens = [[(seed * 7 + i * 13 + j) % 97 + 2 for j in range(length)] for i in range(size)]
    return {
        "tokens": tokens,
        "masks": [[-100] * 4 + row[4:] for row in tokens],
        "scores": [1.0, -1.0][:size] + [0.0] * max(0, size - 2),
        "inference_logprobs": [[0.0] * 4 + [-0.5] * (length - 4) for _ in range(size)],
        "advantages": None,
        "messages": None,
    }


async def env_side(url: str, workdir: Path) -> dict:
    config = BaseEnvConfig(
        group_size=2, use_wandb=False, rollout_server_url=url, tokenizer_name=local_tokenizer(workdir),
        wandb_name="compat", max_token_length=1024, total_steps=10, ensure_scores_are_not_same=False,
        include_messages=False, batch_size=-1,
    )
    servers = [APIServerConfig(model_name="policy", base_url="http://127.0.0.1:9/v1", api_key="x", num_requests_for_eval=1)]
    env = ProbeEnv(config, servers, testing=True)
    await env.register_env()
    await env.get_server_info()
    await env.get_status()
    out = {"env_id": env.env_id, "batch_size": env.config.batch_size, "status": dict(env.status_dict)}
    await env.handle_send_to_api(group(1))  # one group: ~3 KB, so BaseEnv gzips it
    await env.handle_send_to_api([group(2), group(3), group(4)])  # a list -> /scored_data_list
    await env.get_status()
    out["status_after"] = dict(env.status_dict)
    return out


def main() -> None:
    url, workdir = sys.argv[1], Path(sys.argv[2])
    trainer = SimpleNamespace(
        atropos_url=url, checkpoint_interval=5, training_steps=10, wandb_group=None, wandb_project=None,
        batch_size=2, gradient_accumulation_steps=2, seq_len=1024, save_path=str(workdir / "ckpt"),
    )
    register_trainer(trainer)  # batch_size 2 x 2 accumulation = 4 sequences
    result = {"env": asyncio.run(env_side(url, workdir))}
    batches = [get_batch(url)["batch"] for _ in range(3)]
    result["batches"] = [[g["tokens"][0][:3] for g in b] if b else None for b in batches]
    result["batch_keys"] = sorted(batches[0][0]) if batches[0] else []
    result["expected_first_tokens"] = [group(s)["tokens"][0][:3] for s in (1, 2, 3, 4)]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
