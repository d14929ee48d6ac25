"""The ipc mode needs a GPU shared with a replica, which these machines lack: its payload and
call sequence are checked with CPU tensors and a stand-in for vLLM's HTTP routes
(``StandInReplicaTransport``: records calls, answers 200), and the registry is the real one.
A sharded policy's ipc sync runs across real torchrun ranks in
tests/integration/test_trainer_fsdp_matches_one_process.py."""

from __future__ import annotations

import asyncio
import base64
import json
import pickle
import time

import httpx
import pytest
import torch
from fastapi.testclient import TestClient
from transformers import Qwen2Config, Qwen2ForCausalLM

from rlstack.common.contracts.registry import EndpointRegistration
from rlstack.common.registry_client import RegistryClient
from rlstack.registry.app import build_app
from rlstack.registry.config import RegistrySettings
from rlstack.trainer.sync import SyncFailed
from rlstack.trainer.sync.ipc import (
    IpcPublisher,
    IpcSource,
    cuda_source,
    merge,
    share,
)
from tests.helpers.wait import wait_until


class StandInReplicaTransport(httpx.BaseTransport):
    """Stands in for a replica's vLLM routes (no GPU here): records each call, optionally fails one."""

    def __init__(self, fail_path: str | None = None, keeps_prefix_cache: bool = False) -> None:
        self.calls: list[tuple[str, dict | None]] = []
        self.fail_path = fail_path
        self.keeps_prefix_cache = keeps_prefix_cache
        """Answer the reset as vLLM does while a call holds KV: 200, ``success: false``."""

    def handle_request(self, request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content) if request.content else None
        self.calls.append((request.url.path, body))
        answer = {"success": not self.keeps_prefix_cache} if request.url.path == "/reset_prefix_cache" else {}
        return httpx.Response(500 if request.url.path == self.fail_path else 200, json=answer)


def test_payload_carries_names_shapes_and_a_handle_per_tensor():
    tensors = [("a.weight", torch.zeros(2, 3)), ("b.bias", torch.zeros(4, dtype=torch.bfloat16))]
    payload = share(dict(tensors), IpcSource("GPU-1", lambda t: (tuple(t.shape),))).update_info()
    assert payload["names"] == ["a.weight", "b.bias"] and payload["dtype_names"] == ["float32", "bfloat16"]
    assert payload["shapes"] == [[2, 3], [4]]
    assert pickle.loads(base64.b64decode(payload["ipc_handles_pickled"])) == [{"GPU-1": ((2, 3),)}, {"GPU-1": ((4,),)}]


def in_process_registry(app) -> RegistryClient:  # noqa: ANN001
    client = RegistryClient("http://registry")
    client._client = httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://registry")
    return client


def test_publish_drives_vllms_routes_in_order_and_always_resumes():
    with TestClient(build_app(RegistrySettings(probe_interval_seconds=300))) as registry:  # the real registry, in process
        reg = EndpointRegistration(url="http://replica:8001", model="policy")
        registry.put("/v1/endpoints/r0", json=reg.model_dump(mode="json")).raise_for_status()
        table = registry.app.state.registry.table
        wait_until(lambda: table.get("r0").last_probe_at is not None)  # its own probe of an unreachable URL ran
        table.record_probe("r0", True, None, time.time())  # as a probe of a live replica would
        torch.manual_seed(0)
        model = Qwen2ForCausalLM(Qwen2Config(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                                             num_attention_heads=2, num_key_value_heads=1, tie_word_embeddings=True))

        transport = StandInReplicaTransport()
        publisher = IpcPublisher(in_process_registry(registry.app), "policy", transport=transport, source=IpcSource("GPU-1", lambda t: ("h",)))
        report = asyncio.run(publisher.publish(model, version=3))
        assert report.replicas == ["r0"]
        assert [p for p, _ in transport.calls] == ["/init_weight_transfer_engine", "/pause", "/start_weight_update", "/update_weights",
                                                  "/finish_weight_update", "/collective_rpc", "/reset_prefix_cache", "/resume"]
        calls = dict(transport.calls)
        assert "lm_head.weight" not in calls["/update_weights"]["update_info"]["names"]
        assert "model.embed_tokens.weight" in calls["/update_weights"]["update_info"]["names"]
        assert calls["/finish_weight_update"] == {"weight_version": "3"}

        failing = StandInReplicaTransport(fail_path="/update_weights")
        publisher = IpcPublisher(in_process_registry(registry.app), "policy", transport=failing, source=IpcSource("GPU-1", lambda t: ("h",)))
        with pytest.raises(SyncFailed):
            asyncio.run(publisher.publish(model, version=4))
        assert [p for p, _ in failing.calls][-1] == "/resume"  # generation is never left paused

        stale = StandInReplicaTransport(keeps_prefix_cache=True)
        publisher = IpcPublisher(in_process_registry(registry.app), "policy", transport=stale, source=IpcSource("GPU-1", lambda t: ("h",)))
        with pytest.raises(SyncFailed, match="kept its prefix cache"):  # the old weights' KV would serve the new version
            asyncio.run(publisher.publish(model, version=5))
        assert [p for p, _ in stale.calls][-1] == "/resume"


def test_ranks_handles_to_one_layer_merge_by_device():
    layer = {"model.layers.0.mlp.up_proj.weight": torch.zeros(4, 2), "model.layers.0.input_layernorm.weight": torch.ones(2)}
    units = [share(layer, IpcSource(f"GPU-{rank}", lambda t, rank=rank: (rank, tuple(t.shape)))) for rank in range(2)]
    merged = merge(units)
    assert merged.names == list(layer) and merged.shapes == [[4, 2], [2]]
    assert merged.handles == [{"GPU-0": (0, (4, 2)), "GPU-1": (1, (4, 2))}, {"GPU-0": (0, (2,)), "GPU-1": (1, (2,))}]
    other = share({"model.layers.1.mlp.up_proj.weight": torch.zeros(4, 2)}, IpcSource("GPU-1", lambda t: ()))
    with pytest.raises(RuntimeError, match="different tensors"):
        merge([units[0], other])


def test_without_cuda_the_mode_refuses_to_start():
    if torch.cuda.is_available():
        pytest.skip("a CUDA device is present")
    with pytest.raises(RuntimeError, match="no CUDA device"):
        cuda_source()
