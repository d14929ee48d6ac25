"""The relay's calls to a replica survive a pooled connection the replica closed as the call went out
(the race of two keep-alive timeouts: found at 1,000 trials by bench/env_scale.py), and the relay
drops idle connections before a replica's uvicorn does. Runs in the proxy's venv (aiohttp)."""

import json
import subprocess

from tests.conftest import PROXY_PYTHON

SCRIPT = r"""
import asyncio, json
from rlstack.proxy.relay.tokenin import KEEPALIVE_SECONDS, TokenInUpstream
from rlstack.proxy.replicas import ReplicaView

BODY = b'{"ok": true}'
served = []

async def replica(reader, writer):
    # Answers the first request of each connection, then closes the connection when the next
    # request arrives on it, unanswered: what a replica does whose idle timeout fires as a call is sent.
    n = 0
    while True:
        try:
            head = await reader.readuntil(b"\r\n\r\n")
        except (asyncio.IncompleteReadError, ConnectionError):
            break
        length = next((int(l.split(b":")[1]) for l in head.split(b"\r\n") if l.lower().startswith(b"content-length")), 0)
        await reader.readexactly(length)
        n += 1
        if n > 1:
            break
        served.append(1)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(BODY) + BODY)
        await writer.drain()
    writer.close()

async def main():
    server = await asyncio.start_server(replica, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    relay = TokenInUpstream(ReplicaView("policy", 32768), None, 30.0)
    await relay.start()
    keepalive = relay.session.connector._keepalive_timeout
    answers = []
    try:
        for _ in range(3):
            answers.append(await relay._post(f"http://127.0.0.1:{port}/v1/chat/completions/render", b"{}"))
    finally:
        await relay.close()
        server.close()
    print(json.dumps({"answers": answers, "served": len(served), "keepalive": keepalive,
                      "keepalive_constant": KEEPALIVE_SECONDS}))

asyncio.run(main())
"""


def test_a_call_on_a_connection_the_replica_closed_is_sent_again():
    result = subprocess.run([str(PROXY_PYTHON), "-c", SCRIPT], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["answers"] == [{"ok": True}] * 3  # each call after the first met a closed pooled connection
    assert out["served"] == 3
    assert out["keepalive"] == out["keepalive_constant"] < 5  # under vLLM's uvicorn keep-alive (5 s)
