"""Every sync is checked against what the replicas really serve, with real vLLM logprobs.

A second replica joins the session's; the filesystem publisher sends it a perturbed tensor
through the real reload path. The served-weights check reports it, the registry quarantines it,
the proxy serves every call from the healthy replica, and a later correct sync brings it back.
Then the training–inference mismatch: near zero against a replica holding the trainer's weights,
large once the trainer moves on without a sync.
"""

from __future__ import annotations

import asyncio
from pathlib import Path

import httpx
import torch
from transformers import AutoModelForCausalLM

from rlstack.common.registry_client import RegistryClient
from rlstack.trainer.batch import to_tensors
from rlstack.trainer.loss import GRPOLossConfig
from rlstack.trainer.step import grpo_step
from rlstack.trainer.sync.filesystem import FilesystemPublisher
from rlstack.trainer.sync.verify import TOLERANCES, ServedWeightsCheck, VerifiedPublisher
from tests.helpers.wait import wait_until
from tests.integration.inference.conftest import endpoint, start_replica
from tests.integration.inference.logprob_probe import PROBE, grpo_step_on

BAD = "replica-verify"


class PerturbingPublisher(FilesystemPublisher):
    """The real filesystem sync, except that one replica is pointed at a copy with one tensor perturbed
    (a stand-in for a reload that goes wrong on that replica)."""

    def __init__(self, *args, bad_url: str, perturbed: Path, **kwargs) -> None:  # noqa: ANN002, ANN003
        super().__init__(*args, **kwargs)
        self.bad_url, self.perturbed = bad_url, perturbed

    async def _reload(self, client, url, path, version):  # noqa: ANN001, ANN202
        return await super()._reload(client, url, self.perturbed if url == self.bad_url else path, version)


def replicas_in(proxy) -> list[str]:  # noqa: ANN001
    return httpx.get(f"{proxy.url}/readyz").json()["replicas"]


def publish(registry_url: str, publisher_cls, model, version: int, **kwargs):  # noqa: ANN001, ANN201
    async def go():  # noqa: ANN202
        client = RegistryClient(registry_url)
        inner = publisher_cls(kwargs.pop("weights_dir"), client, "policy", **kwargs)
        try:
            return await VerifiedPublisher(inner, ServedWeightsCheck(client, "policy", {})).publish(model, version)
        finally:
            await inner.aclose()

    return asyncio.run(go())


def test_a_replica_serving_wrong_weights_is_reported_and_routed_around(registry, replica, proxy, tiny_model, stack_logs, tmp_path):
    bad = start_replica(registry.url, tiny_model, stack_logs, BAD, dp_rank=1)
    try:
        wait_until(lambda: replicas_in(proxy) == ["replica-0", BAD], timeout=60)
        model = AutoModelForCausalLM.from_pretrained(tiny_model).float()
        wrong = AutoModelForCausalLM.from_pretrained(tiny_model).float()
        with torch.no_grad():
            wrong.model.layers[0].mlp.down_proj.weight.add_(torch.randn_like(wrong.model.layers[0].mlp.down_proj.weight))
        wrong.save_pretrained(tmp_path / "perturbed", safe_serialization=True)

        # The trainer publishes its (unchanged) weights; the second replica ends up with the perturbed copy.
        report = publish(registry.url, PerturbingPublisher, model, 0, weights_dir=tmp_path / "weights", bad_url=bad.vllm_url,
                         perturbed=tmp_path / "perturbed")
        assert report.replicas == ["replica-0"]
        assert report.failed[BAD].startswith("served-weights check failed")
        good, off = report.probes["replica-0"], report.probes[BAD]
        # vLLM on CPU serves the float32 checkpoint in bf16: the tolerance follows what the replica reports.
        assert good.passed and good.dtype == off.dtype and good.dtype in TOLERANCES
        assert good.mean_abs < TOLERANCES[good.dtype].mean_abs / 10
        assert not off.passed and off.mean_abs > TOLERANCES[off.dtype].mean_abs
        assert report.verify_seconds > 0

        entry = endpoint(registry, BAD)
        assert entry["ready"] is False and "probe logprobs off" in entry["quarantine"]
        metrics = httpx.get(f"{registry.url}/metrics").text
        assert "rlstack_registry_endpoints_quarantined 1.0" in metrics

        # The proxy routes every trial to the healthy replica, and keeps doing so while the
        # quarantined one heartbeats and answers the prober.
        wait_until(lambda: replicas_in(proxy) == ["replica-0"], timeout=30)
        for i in range(8):
            key = proxy.key("verify", f"t{i}")
            r = httpx.post(f"{proxy.url}/v1/chat/completions", headers={"Authorization": f"Bearer {key}"}, timeout=120,
                           json={"model": "policy", "messages": [{"role": "user", "content": f"{i} + 2 ="}], "max_tokens": 4})
            assert r.status_code == 200, r.text
        assert {proxy.lines("verify", f"t{i}", expect=1)[0]["replica_id"] for i in range(8)} == {"replica-0"}
        assert endpoint(registry, BAD)["quarantine"] is not None

        # A correct sync passes the check on both and ends the quarantine.
        report = publish(registry.url, FilesystemPublisher, model, 1, weights_dir=tmp_path / "weights")
        assert sorted(report.replicas) == ["replica-0", BAD] and not report.failed
        assert all(p.passed for p in report.probes.values())
        wait_until(lambda: endpoint(registry, BAD)["ready"] and endpoint(registry, BAD)["quarantine"] is None, timeout=30)
        wait_until(lambda: replicas_in(proxy) == ["replica-0", BAD], timeout=30)
    finally:
        bad.sidecar.terminate(grace=60)


def sampled_group(vllm_url: str, version: int) -> dict:
    """Four completions sampled by the replica, with vLLM's own token ids and logprobs."""
    body = {"model": "policy", "prompt": PROBE, "max_tokens": 12, "n": 4, "temperature": 1.0, "logprobs": 0, "seed": 7,
            "return_token_ids": True, "ignore_eos": True}
    r = httpx.post(f"{vllm_url}/v1/completions", json=body, timeout=120)
    r.raise_for_status()
    tokens, masks, logprobs = [], [], []
    for choice in r.json()["choices"]:
        ids, lps = choice["token_ids"], choice["logprobs"]["token_logprobs"]
        assert len(ids) == len(lps) == 12
        tokens.append(PROBE + ids)
        masks.append([-100] * len(PROBE) + ids)
        logprobs.append([0.0] * len(PROBE) + lps)
    return {"tokens": tokens, "masks": masks, "scores": [1.0, 0.0, 1.0, 0.0], "inference_logprobs": logprobs,
            "weight_version": version}


def test_mismatch_is_near_zero_in_sync_and_large_against_a_stale_replica(replica, tiny_model):
    model = AutoModelForCausalLM.from_pretrained(tiny_model).float()
    batch = to_tensors([sampled_group(replica.vllm_url, version=0)])
    frozen = torch.optim.SGD(model.parameters(), lr=0.0)

    in_sync = grpo_step(model, frozen, batch, GRPOLossConfig(), current_version=0).mismatch
    assert in_sync is not None and in_sync.tokens == 48
    assert in_sync.kl < 1e-3 and in_sync.abs_max < TOLERANCES["bfloat16"].max_abs and in_sync.ratio_outside == 0

    grpo_step_on(model, {"tokens": batch_rows(batch), "masks": [[-100] * len(PROBE) + [1] * 12] * 4, "scores": [1.0, 0.0, 1.0, 0.0],
                         "inference_logprobs": [[0.0] * (len(PROBE) + 12)] * 4})  # the trainer moves on; the replica does not
    stale = grpo_step(model, frozen, batch, GRPOLossConfig(), current_version=0).mismatch
    assert stale.kl > 100 * max(in_sync.kl, 1e-6) and stale.abs_mean > 10 * in_sync.abs_mean


def batch_rows(batch) -> list[list[int]]:  # noqa: ANN001
    """The full token rows back out of a TrainBatch (inputs plus the last target)."""
    return [row.tolist() + [int(t[-1])] for row, t in zip(batch.input_ids, batch.targets)]
