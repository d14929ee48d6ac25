"""A free TCP port, for services, vLLM's extra port and gloo rendezvous started by us."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
