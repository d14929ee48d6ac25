"""Shared bench plumbing: start a server process on a free loopback port, wait, stop it (``common.process``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from rlstack.common.ports import free_port  # noqa: F401 - re-exported for tests and benches
from rlstack.common.process import start_process

REPO = Path(__file__).resolve().parents[2]
PROXY_PY = REPO / ".venv-proxy" / "bin" / "python"
"""The proxy's own venv (LiteLLM), for benches that start a proxy or LiteLLM's bare one."""


@contextmanager
def server(cmd: list[str], port: int, ready_path: str, log: Path, env: dict[str, str] | None = None,
           timeout: float = 60.0) -> Iterator[str]:
    """Run ``cmd`` until the block ends; yields the base URL once ``ready_path`` answers 200."""
    log.unlink(missing_ok=True)
    svc = start_process(Path(cmd[0]).name, cmd, port, log, env=env, cwd=REPO)
    try:
        svc.wait_ready(ready_path, timeout)
        yield svc.url
    finally:
        svc.terminate()
