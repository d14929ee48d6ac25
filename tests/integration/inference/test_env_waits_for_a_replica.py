"""An env server started beside a proxy that has no replica yet (a chart install: every pod at once,
vLLM minutes behind) waits for one before its first rollout, saying so, instead of starting groups
that fail ("no answered model call": 13 trials abandoned on the first real-node run). A real proxy and
env server; the replica that arrives later is the benchmarks' simulated vLLM (``bench/sim_replica.py``),
under its own served name so the session's proxy never sees it."""

from __future__ import annotations

import re
import subprocess
import sys
import time

import httpx

from tests.conftest import PROXY_PYTHON, REPO, free_port, start_process, start_service
from tests.helpers.groups import trainer_registration
from tests.helpers.wait import wait_until
from tests.integration.inference.conftest import SECRET, endpoint

SERVED = "policy-arrives-late"
DROPPED = re.compile(r'^rlstack_env_groups_dropped_total\{env="arithmetic"\} (\S+)$', re.M)


def dropped(env_url: str) -> float:
    match = DROPPED.search(httpx.get(f"{env_url}/metrics").text)
    return float(match.group(1)) if match else 0.0


def test_first_rollout_waits_for_the_proxy_to_have_a_replica(registry, stack_logs, tmp_path):
    port = free_port()
    proxy = start_process("proxy", [str(PROXY_PYTHON), "-m", "rlstack.proxy", "--port", str(port), "--registry-url", registry.url,
                                    "--trials-dir", str(tmp_path / "trials"), "--trial-key-secret", SECRET, "--served-model-name", SERVED,
                                    "--max-tokens-cap", "64", "--watch-timeout-seconds", "2"], port, stack_logs / f"proxy-late-{port}.log", cwd=REPO)
    batcher = env = sim = None
    try:
        proxy.wait_ready("/healthz", timeout=180)  # alive, and not ready: no replica
        assert httpx.get(f"{proxy.url}/readyz").status_code == 503
        batcher = start_service("batcher", ["--data-dir", str(tmp_path / "wal")], stack_logs)
        httpx.post(f"{batcher.url}/register", json=trainer_registration(batch_size=4)).raise_for_status()
        env = start_service("envs", ["--batcher-url", batcher.url, "--proxy-url", proxy.url, "--registry-url", registry.url,
                                     "--trial-key-secret", SECRET, "--run-id", "late", "--served-model-name", SERVED, "--group-size", "2",
                                     "--max-tokens", "6", "--workers", "2", "--max-batches-offpolicy", "1"], stack_logs, ready_timeout=60,
                            env={"RLSTACK_ENV_REPLICA_WAIT_SECONDS": "600", "RLSTACK_ENV_REPLICA_WAIT_POLL_SECONDS": "0.5"})
        wait_until(lambda: "waiting for the proxy to have a replica to route to" in env.log(), timeout=30)
        time.sleep(3)  # the old env server dropped a group a second here (each call: 503, no replica)
        assert dropped(env.url) == 0

        sim_port = free_port()
        with (stack_logs / f"late-sim-{sim_port}.log").open("w") as log:
            sim = subprocess.Popen([sys.executable, str(REPO / "bench" / "sim_replica.py"), "--ports", str(sim_port), "--registry-url",
                                    registry.url, "--heartbeat-seconds", "1", "--served-model-name", SERVED, "--replica-prefix", "late",
                                    "--ttft-ms", "5", "--tpot-ms", "1", "--completion-tokens", "4", "--max-model-len", "4096"],
                                   cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        wait_until(lambda: endpoint(registry, "late-0").get("ready") is True, timeout=60)
        wait_until(lambda: httpx.get(f"{batcher.url}/status").json()["queue_size"] > 0, timeout=120)
        assert dropped(env.url) == 0  # every group from the first was answered
        assert "the proxy has a replica after" in env.log()
    finally:
        for svc in (env, batcher):
            if svc is not None:
                svc.terminate()
        if sim is not None:
            sim.terminate()
            sim.wait(timeout=30)
        proxy.terminate()
