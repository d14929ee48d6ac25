"""broadcast weight sync from a policy sharded over two torchrun ranks (FSDP2, gloo) into a live
vLLM replica: the ranks gather one layer at a time and rank 0 streams each into the replica. After
two real steps the replica holds version 2, every sync passed the served-weights check (the
replica's logprobs equal the sharded trainer's), and the served weights moved off the base model.

The replica serves under its own name so the shared proxy never routes to it.
"""

from __future__ import annotations

import re
import sys

import httpx
import pytest
from transformers import AutoModelForCausalLM

from tests.conftest import REPO, free_port, start_process
from tests.helpers.groups import env_registration, make_group
from tests.helpers.wait import wait_until
from tests.integration.inference.conftest import start_replica
from tests.integration.inference.logprob_probe import (
    TOLERANCE,
    gap,
    trainer_logprobs,
    vllm_logprobs,
)

SERVED = "policy-shards"
STEPS = 2
pytestmark = pytest.mark.slow


def metric(text: str, name: str) -> float:
    found = re.search(rf"^{name}(?:{{[^}}]*}})? (\S+)$", text, re.M)
    assert found, f"{name} not exported"
    return float(found.group(1))


def test_two_ranks_stream_their_shards_into_vllm(registry, tiny_model, stack_logs, service_factory, tmp_path):
    base = trainer_logprobs(AutoModelForCausalLM.from_pretrained(tiny_model).float())
    replica = start_replica(registry.url, tiny_model, stack_logs, "replica-shards", served_model_name=SERVED)
    batcher = service_factory("batcher", ["--data-dir", str(tmp_path / "batcher")])
    port = free_port()
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node", "2", "-m", "rlstack.trainer",
           "--port", str(port), "--model", str(tiny_model), "--batcher-url", batcher.url, "--registry-url", registry.url,
           "--served-model", SERVED, "--sync-mode", "broadcast", "--run-dir", str(tmp_path / "run"), "--steps", str(STEPS),
           "--batch-size", "4", "--pack-tokens", "32", "--lr", "5e-3", "--torch-threads", "1"]
    trainer = start_process("trainer", cmd, port, tmp_path / "trainer.log", cwd=REPO)
    try:
        trainer.wait_ready(timeout=300)
        env = httpx.post(f"{batcher.url}/register-env", json=env_registration(group_size=4)).json()["env_id"]
        for seed in range(STEPS):
            group = make_group(size=4, length=12, env_id=env, seed=seed, prompt_len=4, vocab=4000)
            group["scores"] = [1.0, 0.0, 0.5, 0.0]
            httpx.post(f"{batcher.url}/scored_data", json=group, timeout=10).raise_for_status()

        def entry() -> dict:
            return httpx.get(f"{registry.url}/v1/endpoints/replica-shards").json()

        wait_until(lambda: entry()["weight_version"] == STEPS, timeout=300, interval=0.5)
        assert entry()["quarantine"] is None
        metrics = httpx.get(f"{trainer.url}/metrics").text
        assert metric(metrics, "rlstack_trainer_sync_replica_failures_total") == 0
        assert metric(metrics, "rlstack_trainer_sync_verify_failures_total") == 0
        assert metric(metrics, "rlstack_trainer_sync_probe_gap") < TOLERANCE  # the replica serves the sharded trainer's weights
        assert gap(vllm_logprobs(replica.vllm_url, SERVED), base) > 5 * TOLERANCE  # and they are not the base model's
    finally:
        trainer.terminate()
        replica.sidecar.terminate(grace=60)
