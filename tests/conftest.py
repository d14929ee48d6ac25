"""Fixtures shared by every suite: free ports and service processes stopped by PID."""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from rlstack.common.ports import free_port  # noqa: F401 - re-exported for tests and benches
from rlstack.common.process import ServiceProcess, start_process  # noqa: F401 - ServiceProcess re-exported for the suites

REPO = Path(__file__).resolve().parents[1]


VLLM_PYTHON = REPO / ".venv-vllm" / "bin" / "python"
PROXY_PYTHON = REPO / ".venv-proxy" / "bin" / "python"


def cpu_identity() -> str:
    """The CPU model and the ISA features vLLM's CPU kernels choose by: CI's machine changes between runs."""
    import platform

    import torch

    cpuinfo = Path("/proc/cpuinfo")
    lines = cpuinfo.read_text().splitlines() if cpuinfo.exists() else []
    model = next((line.split(":", 1)[1].strip() for line in lines if line.startswith("model name")), platform.processor())
    features = {"isa": torch.backends.cpu.get_cpu_capability(), "amx": torch.cpu._is_amx_tile_supported(),
                "avx512_bf16": torch.cpu._is_avx512_bf16_supported()}
    return f"{model}; " + ", ".join(f"{k}={v}" for k, v in features.items())


def pytest_addoption(parser) -> None:  # noqa: ANN001
    parser.addoption("--matrix", action="store_true", help="run every cell of the agent x model-family matrix (make matrix)")


def pytest_configure(config) -> None:  # noqa: ANN001
    config.addinivalue_line("markers", "prebuilt(name): needs a background build (tests/helpers/prebuild.py); runs last")


def pytest_collection_modifyitems(config, items) -> None:  # noqa: ANN001
    """Cells marked ``matrix`` run under ``make matrix`` (``--matrix``); the suite runs the diagonal.
    Tests marked ``prebuilt`` move to the end, in the order of their jobs (``prebuild.ORDER``)."""
    if not config.getoption("--matrix"):
        kept = [item for item in items if item.get_closest_marker("matrix") is None]
        if len(kept) < len(items):
            config.hook.pytest_deselected(items=[item for item in items if item.get_closest_marker("matrix") is not None])
            items[:] = kept
    from tests.helpers.prebuild import ORDER

    def jobs(item) -> list[str]:  # noqa: ANN001 - a test may need several (its module's and its own)
        return [marker.args[0] for marker in item.iter_markers("prebuilt")]

    late = sorted((item for item in items if jobs(item)), key=lambda item: max(ORDER.index(j) for j in jobs(item)))
    items[:] = [item for item in items if not jobs(item)] + late
    config.stash[PREBUILDS] = sorted({j for item in late for j in jobs(item)}, key=ORDER.index)


PREBUILDS = pytest.StashKey[list]()


@pytest.hookimpl(tryfirst=True)
def pytest_runtestloop(session) -> None:  # noqa: ANN001
    """The background builds start once collection is done, never for --collect-only."""
    from tests.helpers.disk_watch import WATCH

    if not session.config.option.collectonly:
        WATCH.begin()
    names = session.config.stash.get(PREBUILDS, [])
    if names and not session.config.option.collectonly:
        from tests.helpers.prebuild import SESSION

        SESSION.start(names)


def pytest_sessionfinish(session) -> None:  # noqa: ANN001
    from tests.helpers.prebuild import SESSION

    SESSION.stop()


def pytest_runtest_logstart(nodeid, location) -> None:  # noqa: ANN001
    from tests.helpers.disk_watch import WATCH

    WATCH.current = nodeid


def pytest_terminal_summary(terminalreporter) -> None:  # noqa: ANN001
    """The CPU and the disk at the end of the output, where CI's tail shows them beside any failure."""
    from tests.helpers.disk_watch import WATCH

    terminalreporter.write_line(f"cpu: {cpu_identity()}")
    if WATCH.start:
        for line in WATCH.end():
            terminalreporter.write_line(line)


def start_service(name: str, args: list[str], log_dir: Path, env: dict[str, str] | None = None, port: int | None = None,
                  python: Path | str = sys.executable, ready_timeout: float = 30.0) -> ServiceProcess:
    port = port or free_port()
    log_path = log_dir / f"{name}-{port}-{time.monotonic_ns()}.log"
    service = start_process(name, [str(python), "-m", f"rlstack.{name}", "--port", str(port), *args], port, log_path, env=env, cwd=REPO)
    try:
        service.wait_ready(timeout=ready_timeout)
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


@pytest.fixture
def kube_api():
    """A FakeKubeApiServer on loopback (no real API server can run here): the k8s suite's, and the
    scaffold matrix's cell on the cluster's path."""
    from tests.helpers.fake_kube_api import FakeKubeApiServer

    server = FakeKubeApiServer().start()
    yield server
    server.stop()
