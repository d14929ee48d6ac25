"""A trial's end passed on to peer proxies: every address a DNS name gives, and a dead peer named."""

from __future__ import annotations

import asyncio
import socket

from rlstack.proxy.records.peers import Peers


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_dns_name_gives_every_address_as_a_peer_on_the_proxys_port():
    async def addresses(own: set[str]) -> list[str]:
        peers = Peers([], "localhost", 4123, timeout=5)
        peers.own = own
        try:
            return await peers.addresses()
        finally:
            await peers.aclose()

    urls = asyncio.run(addresses(set()))
    assert "http://127.0.0.1:4123" in urls and all(u.endswith(":4123") for u in urls)
    assert "http://127.0.0.1:4123" not in asyncio.run(addresses({"127.0.0.1"}))  # a pod skips its own entry


def test_a_peer_that_does_not_answer_is_named_and_an_unresolvable_name_is_no_peer():
    dead = f"http://127.0.0.1:{closed_port()}"

    async def end():
        peers = Peers([dead], "no-such-name.invalid", 4000, timeout=5)
        try:
            return await peers.end("run", "trial", "token")
        finally:
            await peers.aclose()

    ended = asyncio.run(end())
    assert ended.unreached == [dead] and ended.in_flight == 0
