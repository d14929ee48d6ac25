"""A trial's end passed on to peer proxies: every address a DNS name gives, and a dead peer named, not waited on."""

from __future__ import annotations

import asyncio
import socket

from rlstack.proxy.peers import Peers


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_dns_name_gives_every_address_as_a_peer_on_the_proxys_port():
    peers = Peers([], "localhost", 4123, timeout=5)
    peers.own = set()
    urls = asyncio.run(peers.addresses())
    assert "http://127.0.0.1:4123" in urls and all(u.endswith(":4123") for u in urls)
    peers.own = {"127.0.0.1"}  # a pod skips its own entry
    assert "http://127.0.0.1:4123" not in asyncio.run(peers.addresses())


def test_a_peer_that_does_not_answer_is_named_and_the_rest_still_count():
    dead = f"http://127.0.0.1:{closed_port()}"

    async def end():
        peers = Peers([dead], "no-such-name.invalid", 4000, timeout=5)
        try:
            return await peers.end("run", "trial", "token")
        finally:
            await peers.aclose()

    ended = asyncio.run(end())
    assert ended.unreached == [dead] and ended.in_flight == 0
