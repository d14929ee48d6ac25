"""A real uvicorn server on loopback for an in-process app: real sockets, so tests can send what
no HTTP client library would (short bodies, lying headers)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import uvicorn

from rlstack.common.ports import free_port


class BackgroundServer:
    """``app`` served by uvicorn on 127.0.0.1 from a thread of its own, with its event loop at hand
    (``loop``) for a test that changes the app's state from outside."""

    def __init__(self, app: Any, port: int | None = None, lifespan: str = "on", name: str = "served") -> None:
        self.port = port or free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.loop: asyncio.AbstractEventLoop | None = None
        self._server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=self.port, log_config=None, access_log=False,
                                                     timeout_graceful_shutdown=2, lifespan=lifespan))
        self._thread = threading.Thread(target=self._serve, name=name, daemon=True)

    def _serve(self) -> None:
        self.loop = asyncio.new_event_loop()
        self.loop.run_until_complete(self._server.serve())

    def start(self) -> BackgroundServer:
        """Start, and return once it answers."""
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                raise RuntimeError("server did not start")
            time.sleep(0.02)
        return self

    def stop(self, force: bool = False) -> None:
        """``force``: do not wait for open requests (a watch never ends by itself)."""
        self._server.should_exit = True
        self._server.force_exit = force
        self._thread.join(10)


@contextlib.contextmanager
def served(app: Any, port: int | None = None, lifespan: str = "on") -> Iterator[str]:
    """Serve ``app`` on 127.0.0.1 until the block ends; yields its base URL. ``lifespan="off"``
    serves the routes without starting the service's loops (a replica without its vLLM)."""
    server = BackgroundServer(app, port, lifespan).start()
    try:
        yield server.url
    finally:
        server.stop()


def raw_request(base_url: str, data: bytes, timeout: float = 20.0) -> bytes:
    """Send ``data`` as is on a fresh connection; what the server answered before closing or ``timeout``."""
    host, port = base_url.removeprefix("http://").split(":")
    with socket.create_connection((host, int(port)), timeout=timeout) as sock:
        sock.sendall(data)
        answer = b""
        with contextlib.suppress(TimeoutError):
            while b"\r\n\r\n" not in answer or not _complete(answer):
                chunk = sock.recv(65536)
                if not chunk:
                    break
                answer += chunk
        return answer


def _complete(answer: bytes) -> bool:
    head, _, body = answer.partition(b"\r\n\r\n")
    for line in head.split(b"\r\n"):
        if line.lower().startswith(b"content-length:"):
            return len(body) >= int(line.split(b":")[1])
    return False
