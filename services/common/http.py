"""HTTP client plumbing: httpx with explicit timeouts and bounded, jittered retries.

Retries cover what a restart or a full queue looks like from outside (connection refused,
502/503/504 with Retry-After); a 4xx is the caller's bug and is returned at once.
"""

from __future__ import annotations

import asyncio
import random
from typing import Any

import httpx

RETRY_STATUSES = frozenset({502, 503, 504})
RETRY_EXCEPTIONS = (httpx.ConnectError, httpx.ConnectTimeout, httpx.ReadError, httpx.RemoteProtocolError)


def make_timeout(total: float = 30.0, connect: float = 5.0) -> httpx.Timeout:
    """Timeout with a short connect phase: a dead host should fail fast."""
    return httpx.Timeout(total, connect=min(connect, total))


def async_client(base_url: str = "", timeout: float = 30.0, **kwargs: Any) -> httpx.AsyncClient:
    return httpx.AsyncClient(base_url=base_url, timeout=make_timeout(timeout), **kwargs)


def _delay(attempt: int, response: httpx.Response | None, base: float, cap: float) -> float:
    if response is not None:
        retry_after = response.headers.get("retry-after")
        if retry_after and retry_after.replace(".", "", 1).isdigit():
            return min(float(retry_after), cap)
    return min(cap, base * 2**attempt) * (0.5 + random.random() / 2)


async def request_with_retries(
    client: httpx.AsyncClient,
    method: str,
    url: str,
    *,
    attempts: int = 4,
    backoff: float = 0.2,
    max_delay: float = 5.0,
    **kwargs: Any,
) -> httpx.Response:
    """Send a request, retrying transient failures up to ``attempts`` times in all."""
    last_exc: Exception | None = None
    for attempt in range(attempts):
        response: httpx.Response | None = None
        try:
            response = await client.request(method, url, **kwargs)
            if response.status_code not in RETRY_STATUSES:
                return response
        except RETRY_EXCEPTIONS as exc:
            last_exc = exc
        if attempt + 1 < attempts:
            await asyncio.sleep(_delay(attempt, response, backoff, max_delay))
    if response is not None:
        return response
    assert last_exc is not None
    raise last_exc
