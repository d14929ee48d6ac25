"""The arithmetic env server against the real stack: proxy -> vLLM, scored groups into the
batcher, built from vLLM's own ids (they match the proxy's trajectory log)."""

from __future__ import annotations

import time

import httpx

from tests.conftest import start_service
from tests.helpers.groups import trainer_registration
from tests.integration.inference.conftest import SECRET


def test_env_posts_groups_built_from_vllm_ids(proxy, registry, stack_logs, tmp_path):
    batcher = start_service("batcher", ["--data-dir", str(tmp_path / "wal")], stack_logs)
    env = None
    try:
        httpx.post(f"{batcher.url}/register", json=trainer_registration(batch_size=8)).raise_for_status()
        env = start_service("envs", [
            "--batcher-url", batcher.url, "--proxy-url", proxy.url, "--registry-url", registry.url,
            "--trial-key-secret", SECRET, "--run-id", "envtest", "--group-size", "4", "--max-tokens", "6",
            "--workers", "2", "--max-batches-offpolicy", "1"], stack_logs, ready_timeout=60)
        deadline = time.monotonic() + 120
        batch = None
        while batch is None and time.monotonic() < deadline:
            batch = httpx.get(f"{batcher.url}/batch").json()["batch"]
            time.sleep(0.5)
        assert batch is not None and sum(len(g["tokens"]) for g in batch) == 8

        logged = {}
        for worker in (0, 1):
            if (proxy.trials_dir / "envtest" / f"arithmetic-{worker}").exists():
                for line in proxy.lines("envtest", f"arithmetic-{worker}", expect=1):
                    for choice in line["choices"]:
                        logged[tuple(line["prompt_token_ids"] + choice["completion_token_ids"])] = line
        for group in batch:
            assert group["env_id"] == 0 and group["weight_version"] == 0
            assert all(s in (0.0, 1.0) for s in group["scores"])
            for tokens, masks in zip(group["tokens"], group["masks"]):
                assert tuple(tokens) in logged  # exactly the ids the proxy logged from vLLM
                prompt_len = len(logged[tuple(tokens)]["prompt_token_ids"])
                assert masks[:prompt_len] == [-100] * prompt_len and masks[prompt_len:] == tokens[prompt_len:]

        metrics = httpx.get(f"{env.url}/metrics").text
        assert 'rlstack_env_groups_posted_total{env="arithmetic"}' in metrics
    finally:
        if env is not None:
            assert env.terminate() == 0
        batcher.terminate()
