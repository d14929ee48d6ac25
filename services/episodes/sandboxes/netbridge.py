"""The local sandbox's one way out: the proxy, through a unix socket bound into the sandbox.

A local sandbox has its own network namespace (``bwrap --unshare-net``): a loopback of its own
and no route anywhere, so the host's batcher, registry and vLLM on 127.0.0.1 are out of reach.
The env server serves one unix socket per proxy address (``HostBridge``), forwarding each
connection to the proxy's TCP port; inside, ``python netbridge.py --forward PORT=SOCKET -- CMD``
listens on the sandbox's own 127.0.0.1:PORT, forwards each connection to that socket, and
runs the agent, so ``OPENAI_BASE_URL=http://127.0.0.1:PORT/...`` works unchanged. The agent
reaches the proxy's HTTP API and nothing else (the proxy checks its trial key).

Run inside the sandbox as a plain script (``python -I netbridge.py``): standard library only,
so it starts fast and imports nothing an agent could have put on a path.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import signal
import sys

CHUNK = 1 << 16


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> bool:
    """One direction until its end of file (True) or a broken connection (False)."""
    try:
        while data := await reader.read(CHUNK):
            writer.write(data)
            await writer.drain()
        if writer.can_write_eof():
            writer.write_eof()
    except (ConnectionError, OSError):
        return False
    return True


async def splice(client: tuple[asyncio.StreamReader, asyncio.StreamWriter],
                 upstream: tuple[asyncio.StreamReader, asyncio.StreamWriter]) -> None:
    """Both directions until both ends are done (a half-close waits for the answer, so streamed
    responses pass), or until either side breaks (then both are closed: a sandbox killed
    mid-request leaves no connection waiting on a peer that will never be read), then close."""
    pipes = {asyncio.ensure_future(_pipe(client[0], upstream[1])), asyncio.ensure_future(_pipe(upstream[0], client[1]))}
    try:
        while pipes:
            done, pipes = await asyncio.wait(pipes, return_when=asyncio.FIRST_COMPLETED)
            if not all(task.result() for task in done):
                break
    finally:
        for task in pipes:
            task.cancel()
        for _, writer in (client, upstream):
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()


async def splice_to(client: tuple[asyncio.StreamReader, asyncio.StreamWriter], host: str, port: int) -> None:
    """``client`` spliced to a new connection to ``host:port``; closed at once when that cannot be made."""
    try:
        upstream = await asyncio.open_connection(host, port)
    except OSError:
        client[1].close()
        return
    await splice(client, upstream)


def holding(handle, tasks: set):  # noqa: ANN001, ANN201
    """A connection handler whose task is kept in ``tasks`` while it runs.

    asyncio's server drops its reference to a handler's task when the client's connection is lost,
    and the loop keeps tasks only weakly: a handler still waiting on its upstream is then collected
    mid-await ("Task was destroyed but it is pending!"). A sandbox that aborts a request the proxy
    has not read yet did that to the env server, which then died of SIGSEGV in a run."""
    async def held(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        tasks.add(task)
        try:
            await handle(reader, writer)
        except asyncio.CancelledError:  # the server closing: the connection's end, not an error to report
            pass
        finally:
            tasks.discard(task)
    return held


class HostBridge:
    """On the host (the env server): a unix socket at ``path`` whose connections go to ``host:port``."""

    def __init__(self, path: str, host: str, port: int) -> None:
        self.path, self.host, self.port = path, host, port
        self._server: asyncio.base_events.Server | None = None
        self.connections: set[asyncio.Task] = set()

    async def start(self) -> None:
        self._server = await asyncio.start_unix_server(holding(self._handle, self.connections), path=self.path)
        os.chmod(self.path, 0o666)  # the sandbox's user may be mapped to another uid

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await splice_to((reader, writer), self.host, self.port)

    async def close(self) -> None:
        if self._server is not None:
            self._server.close()
            for task in list(self.connections):
                task.cancel()
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._server.wait_closed(), 1.0)
        with contextlib.suppress(FileNotFoundError):
            os.unlink(self.path)


async def _inside(forwards: list[tuple[int, str]], command: list[str]) -> int:
    async def handler_for(socket_path: str):  # noqa: ANN202
        async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            try:
                upstream = await asyncio.open_unix_connection(socket_path)
            except OSError:
                writer.close()
                return
            await splice((reader, writer), upstream)
        return handle

    connections: set[asyncio.Task] = set()
    servers = [await asyncio.start_server(holding(await handler_for(path), connections), "127.0.0.1", port)
               for port, path in forwards]
    try:
        proc = await asyncio.create_subprocess_exec(*command)
    except OSError as exc:
        print(f"netbridge: cannot start {command[0]}: {exc}", file=sys.stderr)
        return 127
    code = await proc.wait()
    for server in servers:
        server.close()
    return code


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="netbridge", description=__doc__.splitlines()[0])
    parser.add_argument("--forward", action="append", default=[], metavar="PORT=SOCKET",
                        help="listen on 127.0.0.1:PORT, forward to unix socket SOCKET")
    parser.add_argument("command", nargs=argparse.REMAINDER)
    args = parser.parse_args(argv)
    command = args.command[1:] if args.command[:1] == ["--"] else args.command
    if not command:
        parser.error("no command after --")
    forwards = []
    for item in args.forward:
        port, sep, path = item.partition("=")
        if not sep or not port.isdigit():
            parser.error(f"--forward {item!r}: expected PORT=SOCKET")
        forwards.append((int(port), path))
    code = asyncio.run(_inside(forwards, command))
    if code < 0:  # killed by a signal: end the same way, so the sandbox reports what the agent did
        sys.stdout.flush()
        signal.signal(-code, signal.SIG_DFL)
        os.kill(os.getpid(), -code)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
