"""A replica added later serves; a replica killed mid-run costs no request; the registry drops it."""

from __future__ import annotations

import concurrent.futures
import os
import signal
import time

import httpx

from tests.helpers.wait import wait_until
from tests.integration.inference.conftest import start_replica


def replicas_in(proxy) -> list[str]:
    return httpx.get(f"{proxy.url}/readyz").json()["replicas"]


def test_added_replica_serves_and_killed_replica_costs_no_request(proxy, registry, tiny_model, stack_logs):
    late = start_replica(registry.url, tiny_model, stack_logs, "replica-late", dp_rank=1)
    try:
        wait_until(lambda: replicas_in(proxy) == ["replica-0", "replica-late"], timeout=60)

        def call(i: int) -> tuple[int, str]:
            key = proxy.key("churn", f"t{i}")
            r = httpx.post(f"{proxy.url}/v1/chat/completions", headers={"Authorization": f"Bearer {key}"}, timeout=120,
                           json={"model": "policy", "messages": [{"role": "user", "content": f"{i} + 1 ="}], "max_tokens": 4})
            return r.status_code, r.text[:200]

        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            assert all(status == 200 for status, _ in pool.map(call, range(12)))
        served_by = {proxy.lines("churn", f"t{i}", expect=1)[0]["replica_id"] for i in range(12)}
        assert served_by == {"replica-0", "replica-late"}  # sticky per trial, spread across replicas

        # Kill the late replica's vLLM outright while calls are in flight.
        vllm_pid = httpx.get(f"{late.sidecar.url}/readyz").json()["vllm_pid"]
        with concurrent.futures.ThreadPoolExecutor(4) as pool:
            futures = [pool.submit(call, i) for i in range(100, 124)]
            time.sleep(0.5)
            os.killpg(vllm_pid, signal.SIGKILL)
            results = [f.result() for f in futures]
        assert [s for s, _ in results] == [200] * len(results), [r for r in results if r[0] != 200]

        ids = lambda: [e["id"] for e in httpx.get(f"{registry.url}/v1/endpoints").json()["endpoints"]]  # noqa: E731
        wait_until(lambda: "replica-late" not in ids(), timeout=60)
        wait_until(lambda: replicas_in(proxy) == ["replica-0"], timeout=60)
        assert call(999)[0] == 200
    finally:
        late.sidecar.terminate(grace=60)
