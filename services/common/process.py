"""A service as a child process on loopback: started with its own log file, awaited until its
readiness route answers 200, stopped by PID with SIGTERM and a grace period (never by name).

``rlstack up``, the test fixtures and the benches all start services through this, so a fix
to start-up or shutdown lands in all three.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import httpx


class ServiceFailed(RuntimeError):
    """A service exited or never became ready; the message carries the tail of its log."""


def log_tail(path: Path, lines: int = 30) -> str:
    try:
        return "\n".join(path.read_text(errors="replace").splitlines()[-lines:])
    except FileNotFoundError:
        return "(no log)"


@dataclass
class ServiceProcess:
    name: str
    port: int
    proc: subprocess.Popen
    log_path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def log(self) -> str:
        return self.log_path.read_text(errors="replace")

    def wait_ready(self, path: str = "/readyz", timeout: float = 30.0, poll: float = 0.1) -> None:
        """Until ``path`` answers 200; a process that exits first, or a timeout, raises ``ServiceFailed`` with its log."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise ServiceFailed(f"{self.name} exited with {self.proc.returncode}:\n{log_tail(self.log_path)}")
            try:
                if httpx.get(self.url + path, timeout=2.0).status_code == 200:
                    return
            except httpx.HTTPError:
                pass
            time.sleep(poll)
        raise ServiceFailed(f"{self.name} not ready after {timeout:.0f}s:\n{log_tail(self.log_path)}")

    def terminate(self, grace: float = 30.0) -> int:
        """SIGTERM, then SIGKILL after ``grace`` seconds; returns the exit code."""
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(grace)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()
        return self.proc.returncode

    def kill(self) -> None:
        """SIGKILL: the crash case, nothing gets to flush."""
        self.proc.kill()
        self.proc.wait()


def start_process(name: str, cmd: Sequence[str], port: int, log_path: Path, env: dict[str, str] | None = None,
                  cwd: Path | None = None, new_session: bool = False) -> ServiceProcess:
    """Start ``cmd`` with stdout and stderr appended to ``log_path``; ``env`` adds to this process's environment.

    ``new_session`` keeps a terminal's Ctrl-C away from the child, so the caller stops it in order.
    """
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as out:
        proc = subprocess.Popen(list(cmd), stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}, cwd=cwd,
                                start_new_session=new_session)
    return ServiceProcess(name, port, proc, log_path)
