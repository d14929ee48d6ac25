"""The vLLM child process: start it, know when the model is really loaded, stop it."""

from __future__ import annotations

import asyncio
import logging
import os
import signal
import subprocess
import time

import httpx

from rlstack.common.auth import bearer

log = logging.getLogger(__name__)


class VllmProcess:
    def __init__(self, argv: list[str], env: dict[str, str], base_url: str, served_model_name: str, api_key: str | None) -> None:
        self.argv, self.env = argv, env
        self.base_url = base_url.rstrip("/")
        self.served_model_name = served_model_name
        self.headers = bearer(api_key)
        self.proc: subprocess.Popen | None = None
        self.loaded = False
        self.started_at = 0.0
        self.load_seconds: float | None = None
        self.max_model_len: int | None = None
        """The context length vLLM serves (its /v1/models entry), registered as a label so env
        servers read it from the registry: vLLM's own port is closed to them."""

    def start(self) -> None:
        log.info("starting vLLM: %s", " ".join(a if "api-key" not in prev else "***" for prev, a in zip(["", *self.argv], self.argv)))
        self.started_at = time.monotonic()
        # vLLM's output goes to ours (the replica's log); its own process group so a
        # Ctrl-C in a terminal reaches it only through us, in order.
        self.proc = subprocess.Popen(self.argv, env={**os.environ, **self.env}, start_new_session=True)

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
        if self.proc is None or self.proc.poll() is not None:
            return None if self.proc is None else self.proc.returncode
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            return self.proc.wait(grace)
        except subprocess.TimeoutExpired:
            log.warning("vLLM ignored SIGTERM for %.0fs; killing its process group", grace)
            os.killpg(self.proc.pid, signal.SIGKILL)
            return self.proc.wait()
