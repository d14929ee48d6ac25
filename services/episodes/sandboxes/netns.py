"""The proxy's door into a sandbox's own network namespace, opened from outside.

A trial in a task image has nothing of ours to run a forwarder with (no python, maybe no libc we
know), so nothing inside carries its traffic. Instead the env server enters the sandbox's network
namespace from one short-lived thread (``setns`` is per thread), opens a listening socket on
``127.0.0.1:PORT`` there once bubblewrap has given the namespace its loopback address, and goes
back: the socket stays in the sandbox's namespace while the env server's event loop accepts on it
and splices each connection to the proxy's TCP address on the host. bubblewrap holds the sandbox's
command (``--block-fd``) until the door is open, so the agent's first connection never races it.
The loopback is bubblewrap's to set up: bringing it up from here as well raced its own netlink
request, which then failed the sandbox ("Failed RTM_NEWADDR", 8 of 40 trials in one run).

Entering another namespace takes ``CAP_SYS_ADMIN`` over it: the env server runs as root (or with
that capability), which the image backend needs for its overlay mounts anyway.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import errno
import os
import socket
import threading
import time

from rlstack.episodes.sandboxes.netbridge import holding, splice_to

CLONE_NEWNET = 0x40000000
LOOPBACK_WAIT_SECONDS = 10.0
"""How long bubblewrap may take to give the new namespace its 127.0.0.1 (milliseconds on an idle host)."""

_libc = ctypes.CDLL(None, use_errno=True)


def _setns(fd: int) -> None:
    if _libc.setns(fd, CLONE_NEWNET) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"setns(CLONE_NEWNET): {os.strerror(err)}")


def _listen(port: int, backlog: int) -> socket.socket:
    """Bound as soon as the namespace has 127.0.0.1 (until then: EADDRNOTAVAIL)."""
    deadline = time.monotonic() + LOOPBACK_WAIT_SECONDS
    while True:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        try:
            listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            listener.bind(("127.0.0.1", port))
            listener.listen(backlog)
            listener.setblocking(False)
            return listener
        except OSError as exc:
            listener.close()
            if exc.errno != errno.EADDRNOTAVAIL or time.monotonic() > deadline:
                raise
        time.sleep(0.002)


def listen_in_netns(pid: int, port: int, backlog: int = 128) -> socket.socket:
    """A listening TCP socket on ``127.0.0.1:port`` inside the network namespace of process ``pid``."""
    result: dict[str, object] = {}

    def enter() -> None:
        own = os.open(f"/proc/self/task/{threading.get_native_id()}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
        try:
            target = os.open(f"/proc/{pid}/ns/net", os.O_RDONLY | os.O_CLOEXEC)
            try:
                _setns(target)
                try:
                    result["socket"] = _listen(port, backlog)
                finally:
                    _setns(own)  # this thread goes back before it ends, whatever happened
            finally:
                os.close(target)
        except BaseException as exc:  # noqa: BLE001 - handed to the caller's thread
            result["error"] = exc
        finally:
            os.close(own)

    thread = threading.Thread(target=enter, name=f"netns-{pid}")
    thread.start()
    thread.join()
    if "error" in result:
        raise result["error"]  # type: ignore[misc]
    return result["socket"]  # type: ignore[return-value]


class ProxyDoor:
    """Inside a sandbox's namespace, ``127.0.0.1:inside_port``; on the host, ``host:port`` (the proxy)."""

    def __init__(self, inside_port: int, host: str, port: int) -> None:
        self.inside_port, self.host, self.port = inside_port, host, port
        self._server: asyncio.base_events.Server | None = None
        self.connections: set[asyncio.Task] = set()

    async def open(self, pid: int) -> None:
        listener = await asyncio.to_thread(listen_in_netns, pid, self.inside_port)
        self._server = await asyncio.start_server(holding(self._handle, self.connections), sock=listener)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await splice_to((reader, writer), self.host, self.port)

    async def close(self) -> None:
        if self._server is None:
            return
        self._server.close()
        for task in list(self.connections):
            task.cancel()
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._server.wait_closed(), 1.0)
        self._server = None
