"""The prober tells load (a slow answer) from absence (nothing listening), over real loopback sockets."""

import asyncio
import socket

import httpx

from rlstack.common.contracts.registry import Endpoint
from rlstack.registry.prober import Prober
from rlstack.registry.table import EndpointTable


def endpoint(port: int) -> Endpoint:
    return Endpoint(id="a", url=f"http://127.0.0.1:{port}", model="tiny", ready=True, registered_at=0,
                    last_heartbeat=0, expires_at=100)


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_a_silent_server_is_transient_and_a_closed_port_is_not():
    async def go():
        async def hold(reader, writer):
            await asyncio.sleep(5)  # reads the request, never answers: a replica too busy to reply in time
            writer.close()

        server = await asyncio.start_server(hold, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        async with httpx.AsyncClient(timeout=0.3) as client:
            prober = Prober(EndpointTable(10), client)
            slow = await prober.probe(endpoint(port))
            gone = await prober.probe(endpoint(free_port()))
        server.close()
        return slow, gone

    slow, gone = asyncio.run(go())
    assert not slow.ready and slow.transient and "Timeout" in slow.error
    assert not gone.ready and not gone.transient and "ConnectError" in gone.error
