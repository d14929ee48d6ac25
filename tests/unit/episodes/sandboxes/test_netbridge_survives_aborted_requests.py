"""The env server's side of the sandbox bridge against a sandbox that aborts its requests.

A sandbox killed (or an agent that hangs up) mid-upload, while the proxy has not read the
request yet, used to leave connection handlers that only the garbage collector still
referenced: collected mid-await, they were logged as "Task was destroyed but it is pending!",
and in a run the env server died of SIGSEGV right after. Real sockets, real asyncio servers."""

from __future__ import annotations

import asyncio
import gc

from rlstack.episodes.sandboxes.netbridge import HostBridge


def test_aborted_uploads_leave_no_collected_handler_and_close_cleanly(tmp_path) -> None:
    async def scenario() -> tuple[list[str], int, int]:
        loop = asyncio.get_running_loop()
        problems: list[str] = []
        loop.set_exception_handler(lambda _loop, context: problems.append(context["message"]))
        stalled: list[asyncio.StreamWriter] = []

        async def upstream(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            stalled.append(writer)  # accepts, never reads: a busy proxy
            await asyncio.Event().wait()

        server = await asyncio.start_server(upstream, "127.0.0.1", 0)
        bridge = HostBridge(str(tmp_path / "proxy.sock"), "127.0.0.1", server.sockets[0].getsockname()[1])
        await bridge.start()
        for _ in range(10):
            _, writer = await asyncio.open_unix_connection(bridge.path)
            writer.write(b"x" * 4_000_000)  # more than the sockets' buffers hold
            await asyncio.sleep(0.02)
            writer.transport.abort()  # the sandbox is gone
        await asyncio.sleep(0.2)
        gc.collect()
        await asyncio.sleep(0.2)
        held = len(bridge.connections)
        await bridge.close()
        await asyncio.sleep(0.1)
        left = len(bridge.connections)
        for writer in stalled:
            writer.transport.abort()
        server.close()
        return problems, held, left

    problems, held, left = asyncio.run(scenario())
    assert not [p for p in problems if "destroyed but it is pending" in p]
    assert held == 10  # every handler still owned while its upstream waits
    assert left == 0  # and ended when the bridge closes
