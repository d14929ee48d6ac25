"""ASGI middleware that inflates ``Content-Encoding: gzip`` request bodies.

Atropos clients gzip large scored-data posts. Inflation is capped so a small bomb cannot
exhaust memory; a bad or oversized payload is a 400/413 that says so.
"""

from __future__ import annotations

import zlib

from starlette.datastructures import MutableHeaders
from starlette.responses import JSONResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send


class GzipRequestMiddleware:
    def __init__(self, app: ASGIApp, max_inflated_bytes: int = 512 * 1024 * 1024) -> None:
        self.app = app
        self.max_inflated_bytes = max_inflated_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        headers = MutableHeaders(scope=scope)
        if "gzip" not in headers.get("content-encoding", "").lower():
            await self.app(scope, receive, send)
            return

        compressed = bytearray()
        while True:
            message = await receive()
            compressed += message.get("body", b"")
            if not message.get("more_body", False):
                break
        inflater = zlib.decompressobj(wbits=31)
        try:
            body = inflater.decompress(bytes(compressed), self.max_inflated_bytes)
        except zlib.error as exc:
            await _error(scope, receive, send, 400, f"body: invalid gzip payload ({exc})")
            return
        if inflater.unconsumed_tail:
            limit = self.max_inflated_bytes
            await _error(scope, receive, send, 413, f"body: inflates past {limit} bytes")
            return

        del headers["content-encoding"]
        headers["content-length"] = str(len(body))
        delivered = False

        async def inflated_receive() -> Message:
            nonlocal delivered
            if delivered:
                return await receive()
            delivered = True
            return {"type": "http.request", "body": body, "more_body": False}

        await self.app(scope, inflated_receive, send)


async def _error(scope: Scope, receive: Receive, send: Send, status: int, msg: str) -> None:
    detail = [{"loc": ["body"], "msg": msg, "type": "content_encoding"}]
    await JSONResponse({"detail": detail}, status_code=status)(scope, receive, send)
