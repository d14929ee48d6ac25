"""A lean HTTP/1.1 keep-alive client for load generation on loopback.

httpx costs about 2 ms of client CPU per 65 KB post on this machine, more than either
server under test spends; with client and servers sharing two cores that would flatten every
ratio. This client sends pre-built requests and parses only status, headers and body.
"""

from __future__ import annotations

import asyncio
import gzip


class HttpError(RuntimeError):
    pass


class RawHttpClient:
    def __init__(self, host: str, port: int) -> None:
        self.host, self.port = host, port
        self._reader: asyncio.StreamReader | None = None
        self._writer: asyncio.StreamWriter | None = None

    async def __aenter__(self) -> RawHttpClient:
        self._reader, self._writer = await asyncio.open_connection(self.host, self.port, limit=1 << 24)
        return self

    async def __aexit__(self, *exc: object) -> None:
        if self._writer is not None:
            self._writer.close()
            await self._writer.wait_closed()

    async def request(self, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None) -> tuple[int, bytes]:
        assert self._reader is not None and self._writer is not None
        lines = [f"{method} {path} HTTP/1.1", f"Host: {self.host}", "Accept-Encoding: gzip, deflate", f"Content-Length: {len(body)}"]
        lines += [f"{k}: {v}" for k, v in (headers or {}).items()]
        self._writer.write(("\r\n".join(lines) + "\r\n\r\n").encode() + body)
        head = await self._reader.readuntil(b"\r\n\r\n")
        status_line, *header_lines = head.decode("latin-1").split("\r\n")
        status = int(status_line.split(" ", 2)[1])
        fields = {k.strip().lower(): v.strip() for k, _, v in (h.partition(":") for h in header_lines if h)}
        if "content-length" in fields:
            payload = await self._reader.readexactly(int(fields["content-length"]))
        elif fields.get("transfer-encoding") == "chunked":
            payload = await self._read_chunked()
        else:
            raise HttpError(f"{method} {path}: response without a length")
        if fields.get("content-encoding") == "gzip":
            payload = gzip.decompress(payload)
        return status, payload

    async def _read_chunked(self) -> bytes:
        assert self._reader is not None
        parts = []
        while True:
            size = int((await self._reader.readuntil(b"\r\n")).split(b";")[0], 16)
            if size == 0:
                await self._reader.readuntil(b"\r\n")
                return b"".join(parts)
            parts.append(await self._reader.readexactly(size))
            await self._reader.readexactly(2)
