"""ASGI middleware every service's app runs behind: bounded, timely, well-formed request bodies.

Before a route sees a body it is read here, whole, under three bounds:

- size: a ``Content-Length`` above ``max_bytes`` is a 413 before anything is read, and so is a
  chunked body that grows past it;
- time: a client that sends fewer bytes than it announced (or trickles them) gets a 408 after
  ``read_timeout`` seconds instead of holding a connection and a task open;
- gzip: ``Content-Encoding: gzip`` (Atropos clients compress large posts) is inflated at most to
  ``max_bytes``, in a worker thread once it is large, so a bomb neither fills memory nor stalls
  the event loop.

A JSON string escape naming a lone UTF-16 surrogate (``"\\ud800"``) is refused here too (422):
Python parses it into a ``str`` that cannot be encoded as UTF-8, so any response echoing it, or
any later read of state that holds it, would be a 500.
"""

from __future__ import annotations

import asyncio
import re
import zlib

from starlette.datastructures import MutableHeaders
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

DEFAULT_MAX_BYTES = 16 * 1024 * 1024
DEFAULT_READ_TIMEOUT = 10.0
INFLATE_IN_THREAD_BYTES = 256 * 1024
_ESCAPE = re.compile(rb"\\(u[0-9a-fA-F]{4}|.)", re.DOTALL)


class BodyGuard:
    def __init__(self, app: ASGIApp, max_bytes: int = DEFAULT_MAX_BYTES, read_timeout: float = DEFAULT_READ_TIMEOUT) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.read_timeout = read_timeout

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = MutableHeaders(scope=scope)
        declared = headers.get("content-length")
        if declared is not None:
            if not declared.isdigit():
                await _error(scope, receive, send, 400, "content-length", f"not a byte count: {declared[:40]!r}")
                return
            if int(declared) > self.max_bytes:
                await _error(scope, receive, send, 413, "body", f"{declared} bytes exceed the limit of {self.max_bytes}")
                return
        try:
            async with asyncio.timeout(self.read_timeout):
                body = await self._read(receive)
        except TimeoutError:
            await _error(scope, receive, send, 408, "body", f"not received within {self.read_timeout:g} s")
            return
        except _TooLarge:
            await _error(scope, receive, send, 413, "body", f"exceeds the limit of {self.max_bytes} bytes")
            return
        if body is None:
            return  # the client went away
        if "gzip" in headers.get("content-encoding", "").lower():
            try:
                body = await self._inflate(body)
            except zlib.error as exc:
                await _error(scope, receive, send, 400, "body", f"invalid gzip payload ({exc})")
                return
            except _TooLarge:
                await _error(scope, receive, send, 413, "body", f"inflates past {self.max_bytes} bytes")
                return
            del headers["content-encoding"]
            headers["content-length"] = str(len(body))
        if b"\\u" in body and has_lone_surrogate(body):
            await _error(scope, receive, send, 422, "body", "a string holds a lone UTF-16 surrogate escape (\\ud800-\\udfff unpaired)")
            return

        delivered = False

        async def replay() -> Message:
            nonlocal delivered
            if delivered:
                return await receive()
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, replay, send)

    async def _read(self, receive: Receive) -> bytes | None:
        chunks = bytearray()
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return None
            chunks += message.get("body", b"")
            if len(chunks) > self.max_bytes:
                raise _TooLarge
            if not message.get("more_body", False):
                return bytes(chunks)

    async def _inflate(self, compressed: bytes) -> bytes:
        if len(compressed) > INFLATE_IN_THREAD_BYTES:
            return await asyncio.to_thread(inflate, compressed, self.max_bytes)
        return inflate(compressed, self.max_bytes)


class _TooLarge(Exception):
    pass


def inflate(compressed: bytes, limit: int) -> bytes:
    """gzip → bytes, never holding more than ``limit + 1`` inflated bytes."""
    inflater = zlib.decompressobj(wbits=31)
    out = inflater.decompress(compressed, limit + 1)
    if len(out) > limit or inflater.unconsumed_tail:
        raise _TooLarge
    return out + inflater.flush()  # flush() only returns what max_length held back, which is nothing here


def has_lone_surrogate(body: bytes) -> bool:
    """True when a JSON ``\\uXXXX`` escape names a UTF-16 surrogate without its pair.

    Escapes are read left to right, so ``\\\\u…`` (an escaped backslash, then the letter u) is text.
    """
    expect_low_at = None
    for match in _ESCAPE.finditer(body):
        escape = match.group(1)
        unit = int(escape[1:], 16) if len(escape) == 5 else None
        if expect_low_at is not None:
            if match.start() == expect_low_at and unit is not None and 0xDC00 <= unit <= 0xDFFF:
                expect_low_at = None
                continue
            return True
        if unit is not None and 0xD800 <= unit <= 0xDBFF:
            expect_low_at = match.end()
        elif unit is not None and 0xDC00 <= unit <= 0xDFFF:
            return True
    return expect_low_at is not None


async def _error(scope: Scope, receive: Receive, send: Send, status: int, field: str, msg: str) -> None:
    loc = ["header", field] if field == "content-length" else [field]
    await JSONResponse({"detail": [{"loc": loc, "msg": msg, "type": "request_body"}]}, status_code=status)(scope, receive, send)
