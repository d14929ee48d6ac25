"""A real vLLM replica: ready only once loaded, registered, token ids + logprobs, clean exit."""

from __future__ import annotations

import time

import httpx

from tests.integration.inference.conftest import start_replica


def test_replica_registers_once_loaded_and_returns_token_ids(replica, registry):
    listed = httpx.get(f"{registry.url}/v1/endpoints", params={"model": "policy", "ready": "true"}).json()["endpoints"]
    assert [e["id"] for e in listed] == ["replica-0"]
    assert listed[0]["url"].startswith(replica.vllm_url)

    body = {"model": "policy", "messages": [{"role": "user", "content": "What is 2 + 3?"}], "max_tokens": 6,
            "logprobs": True, "return_token_ids": True, "n": 2, "temperature": 1.0}
    reply = httpx.post(f"{replica.vllm_url}/v1/chat/completions", json=body, timeout=60).json()
    assert reply["prompt_token_ids"][0] == 1  # <|im_start|>: the chat template ran
    assert sum(len(c["token_ids"]) for c in reply["choices"]) == reply["usage"]["completion_tokens"]
    for choice in reply["choices"]:
        assert len(choice["token_ids"]) == len(choice["logprobs"]["content"])
        assert all(t["logprob"] <= 0 for t in choice["logprobs"]["content"])


def test_worker_extension_is_loaded(replica):
    out = httpx.post(f"{replica.vllm_url}/collective_rpc", json={"method": "rlstack_weights_checksum"}, timeout=60).json()
    assert len(out["results"]) == 1 and float(out["results"][0]) != 0.0


def test_sidecar_reports_health_and_metrics(replica):
    assert httpx.get(f"{replica.sidecar.url}/healthz").status_code == 200
    ready = httpx.get(f"{replica.sidecar.url}/readyz").json()
    assert ready["model_loaded"] and ready["registered"]
    metrics = httpx.get(f"{replica.sidecar.url}/metrics").text
    assert "rlstack_inference_model_loaded 1.0" in metrics


def test_sigterm_deregisters_before_vllm_stops(registry, tiny_model, stack_logs):
    second = start_replica(registry.url, tiny_model, stack_logs, "replica-short-lived", dp_rank=1)
    try:
        ids = lambda: [e["id"] for e in httpx.get(f"{registry.url}/v1/endpoints").json()["endpoints"]]  # noqa: E731
        assert "replica-short-lived" in ids()  # the sidecar is ready only once registered
    finally:
        code = second.sidecar.terminate(grace=60)
    assert code == 0
    assert "replica-short-lived" not in ids()  # removed by the replica itself, not by TTL expiry
    log = second.sidecar.log()
    assert log.index("deregistered replica-short-lived") < log.index("vLLM stopped")
    time.sleep(0.2)
    try:
        httpx.get(f"{second.vllm_url}/v1/models", timeout=2)
        raise AssertionError("vLLM still answering after the replica stopped")
    except httpx.HTTPError:
        pass
