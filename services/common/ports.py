"""A free TCP port, for services, vLLM's extra port and gloo rendezvous started by us.

A port is chosen now and bound later, sometimes minutes later (``rlstack up`` starts the
trainer once vLLM is up). A port the kernel hands out for ``bind(0)`` comes from the ephemeral
range, which every outgoing connection and every ``bind(0)`` of other programs (vLLM's own
ZMQ and gloo ports) draws from too: one of them took a trainer's port in CI. So ports are drawn
at random from below that range, checked free, and never handed out twice by one process.
"""

from __future__ import annotations

import random
import socket
import threading
from pathlib import Path

LOWEST = 20000
_given: set[int] = set()
_lock = threading.Lock()


def ephemeral_range(path: Path = Path("/proc/sys/net/ipv4/ip_local_port_range")) -> tuple[int, int]:
    """The kernel's range for ``bind(0)`` and outgoing connections (Linux's default when unreadable)."""
    try:
        low, high = (int(x) for x in path.read_text().split())
        return low, high
    except (OSError, ValueError):
        return 32768, 60999


def _bindable(host: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def free_port(host: str = "127.0.0.1") -> int:
    low, _ = ephemeral_range()
    with _lock:
        if low - LOWEST >= 1000:
            for _ in range(200):
                port = random.randrange(LOWEST, low)
                if port not in _given and _bindable(host, port):
                    _given.add(port)
                    return port
        while True:  # a machine whose ephemeral range leaves no room below it
            with socket.socket() as s:
                s.bind((host, 0))
                port = s.getsockname()[1]
            if port not in _given:
                _given.add(port)
                return port
