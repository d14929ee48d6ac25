"""Env server workers against a real batcher that goes away, or forgets them.

A batcher outage is waited out by every worker (logged once, then "back"); a batcher that no
longer knows the env is a failure no retry fixes: /healthz and /readyz turn 503 with the
cause, which is logged once, and the process exits 1 so Kubernetes restarts (re-registers) it.
No vLLM here: the proxy URL is a closed port, so rollouts fail (counted as dropped groups),
which shows a worker still going round its loop.
"""

from __future__ import annotations

import re

import httpx

from tests.conftest import ServiceProcess, free_port
from tests.helpers.groups import trainer_registration
from tests.helpers.wait import wait_until

NO_REPLICA_WAIT = {"RLSTACK_ENV_REPLICA_WAIT_SECONDS": "0"}
"""The closed proxy port stands for a proxy whose calls fail: the workers must not wait for it first."""
DROPPED = re.compile(r'^rlstack_env_groups_dropped_total\{env="arithmetic"\} (\S+)$', re.M)


def env_args(batcher: ServiceProcess, *extra: str) -> list[str]:
    return ["--batcher-url", batcher.url, "--proxy-url", f"http://127.0.0.1:{free_port()}", "--group-size", "2",
            "--workers", "2", "--max-batches-offpolicy", "1", *extra]


def dropped(env: ServiceProcess) -> float:
    match = DROPPED.search(httpx.get(f"{env.url}/metrics").text)
    return float(match.group(1)) if match else 0.0


def test_workers_wait_out_a_batcher_outage(service_factory, tmp_path):
    data = ["--data-dir", str(tmp_path / "wal")]
    batcher = service_factory("batcher", data)
    httpx.post(f"{batcher.url}/register", json=trainer_registration(batch_size=4)).raise_for_status()
    env = service_factory("envs", env_args(batcher), env=NO_REPLICA_WAIT)
    wait_until(lambda: dropped(env) > 0)  # workers are looping: each rollout fails at the closed proxy port

    assert batcher.terminate() == 0
    wait_until(lambda: all(f"worker {i}: batcher unavailable" in env.log() for i in (0, 1)))
    assert httpx.get(f"{env.url}/healthz").status_code == 200
    during = dropped(env)  # both workers now wait for the batcher, producing nothing

    service_factory("batcher", data, port=batcher.port)  # same port, same log: env 0 is known again
    wait_until(lambda: all(f"worker {i}: batcher back" in env.log() for i in (0, 1)))
    wait_until(lambda: dropped(env) > during)
    assert httpx.get(f"{env.url}/healthz").status_code == 200
    assert httpx.get(f"{env.url}/readyz").status_code == 200
    assert env.log().count("worker 0: batcher unavailable") == 1  # once per outage, not per retry
    assert env.terminate() == 0


def test_an_env_the_batcher_forgot_fails_loudly(service_factory, tmp_path):
    batcher = service_factory("batcher", ["--data-dir", str(tmp_path / "wal")])
    httpx.post(f"{batcher.url}/register", json=trainer_registration(batch_size=4)).raise_for_status()
    lingering = service_factory("envs", env_args(batcher, "--failure-exit-delay-seconds", "600"), env=NO_REPLICA_WAIT)
    prompt = service_factory("envs", env_args(batcher, "--failure-exit-delay-seconds", "0"))

    httpx.get(f"{batcher.url}/reset_data").raise_for_status()  # both env ids are unknown from now on

    wait_until(lambda: httpx.get(f"{lingering.url}/healthz").status_code == 503)
    health = httpx.get(f"{lingering.url}/healthz").json()
    assert health["status"] == "failed" and "BatcherRefused" in health["error"] and "404" in health["error"]
    assert httpx.get(f"{lingering.url}/readyz").status_code == 503
    assert lingering.terminate() == 1  # even a clean SIGTERM now reports the failure

    prompt.proc.wait(60)  # nobody stops this one: it stops itself
    assert prompt.proc.returncode == 1
    for env in (lingering, prompt):
        assert env.log().count("env runner failed: BatcherRefused") == 1
