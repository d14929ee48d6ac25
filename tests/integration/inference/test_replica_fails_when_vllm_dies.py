"""vLLM dies under a live sidecar: the sidecar deregisters, then fails loudly.

Its /healthz turns 503 with the cause (a liveness probe restarts the pod) and the process
exits 1. The exit delay is long here so the 503 can be read before the test stops it; that a
failed process exits by itself is checked with the env server, which needs no vLLM.
"""

from __future__ import annotations

import os
import signal

import httpx

from tests.helpers.wait import wait_until
from tests.integration.inference.conftest import start_replica

REPLICA = "replica-vllm-dies"


def test_sidecar_whose_vllm_dies_deregisters_fails_health_and_exits_1(registry, tiny_model, stack_logs):
    handle = start_replica(registry.url, tiny_model, stack_logs, REPLICA, dp_rank=2,
                           extra_args=["--failure-exit-delay-seconds", "600"])
    sidecar = handle.sidecar

    def listed() -> list[str]:
        return [e["id"] for e in httpx.get(f"{registry.url}/v1/endpoints").json()["endpoints"]]

    try:
        assert REPLICA in listed()  # ready means registered
        vllm_pid = httpx.get(f"{sidecar.url}/readyz").json()["vllm_pid"]
        os.killpg(vllm_pid, signal.SIGKILL)  # vLLM and its engine process: its own session, its own group

        wait_until(lambda: httpx.get(f"{sidecar.url}/healthz").status_code == 503, timeout=60)
        assert REPLICA not in listed()  # deregistered before health turned
        health = httpx.get(f"{sidecar.url}/healthz").json()
        assert health["status"] == "failed" and "vLLM exited with -9" in health["error"]
        assert httpx.get(f"{sidecar.url}/readyz").status_code == 503
        assert sidecar.proc.poll() is None  # still answering 503 while the exit delay runs
    finally:
        code = sidecar.terminate(grace=60)
    assert code == 1  # the failure outlives a clean SIGTERM
    log = sidecar.log()
    assert log.count("replica failed: RuntimeError: vLLM exited with -9") == 1
    assert log.index(f"deregistered {REPLICA}") < log.index("replica failed")
