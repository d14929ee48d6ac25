"""Shared bench plumbing: start a server process on a free loopback port, wait, stop it."""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx

from rlstack.common.ports import free_port  # noqa: F401 - re-exported for tests and benches

REPO = Path(__file__).resolve().parents[1]


@contextmanager
def server(cmd: list[str], port: int, ready_path: str, log: Path, env: dict[str, str] | None = None,
           timeout: float = 60.0) -> Iterator[str]:
    """Run ``cmd`` until the block ends; yields the base URL once ``ready_path`` answers 200."""
    url = f"http://127.0.0.1:{port}"
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}, cwd=REPO)
    try:
        deadline = time.monotonic() + timeout
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{cmd[0]} exited early:\n{log.read_text()[-2000:]}")
            try:
                if httpx.get(url + ready_path, timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise TimeoutError(f"{cmd} not ready")
            time.sleep(0.1)
        yield url
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
