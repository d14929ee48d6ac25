"""The vLLM child process: start it, know when the model is really loaded, stop it."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import socket
import subprocess
import tempfile
import time
from pathlib import Path

import httpx

from rlstack.common.auth import bearer

log = logging.getLogger(__name__)
PID_DIR = Path(tempfile.gettempdir()) / "rlstack-vllm"
"""Where each sidecar records the vLLM it started, by vLLM's port: vLLM runs in a session of its
own, so a sidecar killed alone (an OOM kill of one process) leaves it serving, and the next
sidecar must stop it before it can bind the port."""


def port_taken(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as probe:
        probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            probe.bind(("0.0.0.0", port))
        except OSError:
            return True
    return False


def _cmdline(pid: int) -> bytes | None:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes()
    except OSError:
        return None


def reap_previous(pid_file: Path, timeout: float = 30.0) -> int | None:
    """Kill the process group of the vLLM an earlier sidecar recorded in ``pid_file``, if that very
    process (same command line: not a reused pid) still runs; returns its pid."""
    try:
        pid_text, _, recorded = pid_file.read_bytes().partition(b"\n")
        pid = int(pid_text)
    except (OSError, ValueError):
        return None
    if _cmdline(pid) != recorded:
        return None
    log.warning("a vLLM left by an earlier sidecar (pid %d) still runs: killing its process group", pid)
    try:
        os.killpg(pid, signal.SIGKILL)
    except ProcessLookupError:
        return None
    deadline = time.monotonic() + timeout
    while _cmdline(pid) == recorded and time.monotonic() < deadline:  # a zombie's cmdline is empty
        time.sleep(0.1)
    return pid


class VllmProcess:
    def __init__(self, argv: list[str], env: dict[str, str], base_url: str, served_model_name: str, api_key: str | None) -> None:
        self.argv, self.env = argv, env
        self.base_url = base_url.rstrip("/")
        self.served_model_name = served_model_name
        self.headers = bearer(api_key)
        self.proc: subprocess.Popen | None = None
        self.port_wait_seconds = 10.0
        self.loaded = False
        self.started_at = 0.0
        self.load_seconds: float | None = None
        self.max_model_len: int | None = None
        """The context length vLLM serves (its /v1/models entry), registered as a label so env
        servers read it from the registry: vLLM's own port is closed to them."""

    @property
    def port(self) -> int:
        return int(self.argv[self.argv.index("--port") + 1])

    def start(self) -> None:
        """Start vLLM on its port, after stopping one an earlier sidecar left there; refuse a port
        another process holds (its server would answer our readiness checks as if it were ours)."""
        pid_file = PID_DIR / f"{self.port}.pid"
        reap_previous(pid_file)
        deadline = time.monotonic() + self.port_wait_seconds
        while port_taken(self.port):  # a killed server's socket can take a moment to go
            if time.monotonic() > deadline:
                raise RuntimeError(f"vLLM's port {self.port} is held by another process (not a vLLM this replica's "
                                   f"sidecars started): free it or give --vllm-port another")
            time.sleep(0.2)
        log.info("starting vLLM: %s", " ".join(a if "api-key" not in prev else "***" for prev, a in zip(["", *self.argv], self.argv)))
        self.started_at = time.monotonic()
        # vLLM's output goes to ours (the replica's log); its own process group so a
        # Ctrl-C in a terminal reaches it only through us, in order.
        self.proc = subprocess.Popen(self.argv, env={**os.environ, **self.env}, start_new_session=True)
        PID_DIR.mkdir(parents=True, exist_ok=True)
        # The command line as /proc will show it, from argv: read back right after Popen it can still be
        # empty (the exec is not done setting up the new image), and an empty record is never reaped.
        pid_file.write_bytes(f"{self.proc.pid}\n".encode() + b"".join(os.fsencode(a) + b"\0" for a in self.argv))

    @property
    def exited(self) -> int | None:
        return None if self.proc is None else self.proc.poll()

    async def model_listed(self, client: httpx.AsyncClient) -> bool:
        """True once /v1/models names our model: /health passes earlier, before weights load."""
        try:
            r = await client.get(f"{self.base_url}/v1/models", headers=self.headers, timeout=5)
        except httpx.HTTPError:
            return False
        if r.status_code != 200:
            return False
        ours = [m for m in r.json().get("data", []) if m.get("id") == self.served_model_name]
        if ours and isinstance(ours[0].get("max_model_len"), int):
            self.max_model_len = ours[0]["max_model_len"]
        return bool(ours)

    async def wait_loaded(self, timeout: float) -> None:
        deadline = time.monotonic() + timeout
        async with httpx.AsyncClient() as client:
            while time.monotonic() < deadline:
                if self.exited is not None:
                    raise RuntimeError(f"vLLM exited with {self.exited} while loading")
                if await self.model_listed(client):
                    self.loaded = True
                    self.load_seconds = time.monotonic() - self.started_at
                    log.info("vLLM serving %s after %.1fs", self.served_model_name, self.load_seconds)
                    return
                await asyncio.sleep(0.5)
        raise TimeoutError(f"vLLM did not list {self.served_model_name} within {timeout}s")

    def stop(self, grace: float = 30.0) -> int | None:
        if self.proc is None:  # started none: the record, if any, is an earlier sidecar's vLLM, still to reap
            return None
        (PID_DIR / f"{self.port}.pid").unlink(missing_ok=True)
        if self.proc.poll() is not None:
            return self.proc.returncode
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            return self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            log.warning("vLLM ignored SIGTERM for %.0fs; killing its process group", grace)
            os.killpg(self.proc.pid, signal.SIGKILL)
            return self.proc.wait()
