"""Fixtures shared by every suite: free ports and service processes stopped by PID."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest

from rlstack.common.ports import free_port  # noqa: F401 - re-exported for tests and benches

REPO = Path(__file__).resolve().parents[1]


@dataclass
class ServiceProcess:
    """A service started as ``python -m rlstack.<name>`` on loopback."""

    name: str
    port: int
    proc: subprocess.Popen
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"{self.name} exited with {self.proc.returncode}:\n{self.log()}")
            try:
                if httpx.get(f"{self.url}/readyz", timeout=1.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(0.1)
        raise TimeoutError(f"{self.name} not ready after {timeout}s:\n{self.log()}")

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL: the crash case, nothing gets to flush."""
        self.proc.kill()
        self.proc.wait()


VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
PROXY_PYTHON = REPO / ".venv-proxy" / "bin" / "python"


def start_service(name: str, args: list[str], log_dir: Path, env: dict[str, str] | None = None, port: int | None = None,
                  python: Path | str = sys.executable, ready_timeout: float = 30.0) -> ServiceProcess:
    port = port or free_port()
    log_path = log_dir / f"{name}-{port}-{time.monotonic_ns()}.log"
    proc = subprocess.Popen(
        [str(python), "-m", f"rlstack.{name}", "--port", str(port), *args],
        stdout=log_path.open("wb"),
        stderr=subprocess.STDOUT,
        env={**os.environ, **(env or {})},
        cwd=REPO,
    )
    service = ServiceProcess(name, port, proc, log_path)
    try:
        service.wait_ready(ready_timeout)
    except Exception:
        service.terminate()
        raise
    return service


@pytest.fixture
def service_factory(tmp_path: Path) -> Iterator:
    """Start services; every one still running at teardown gets SIGTERM (by PID)."""
    started: list[ServiceProcess] = []

    def factory(name: str, args: list[str] | None = None, **kwargs) -> ServiceProcess:
        svc = start_service(name, args or [], tmp_path, **kwargs)
        started.append(svc)
        return svc

    yield factory
    for svc in started:
        svc.terminate()


@pytest.fixture(scope="session")
def tiny_model() -> Path:
    """The demo model, built once into models/tiny (reused across runs)."""
    from rlstack.modelkit.tiny import build_tiny_model, is_current

    out = REPO / "models" / "tiny"
    if not is_current(out):
        build_tiny_model(out)
    return out
