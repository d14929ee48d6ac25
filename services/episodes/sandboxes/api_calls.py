"""Every Kubernetes API request the sandbox code makes, counted, retried and (creates) rate-limited.

At RL concurrency one env server starts a whole batch of trials at once: 128 pod creates in the
same second would meet the API server's priority-and-fairness limits (429) or an overloaded
server (5xx). So each request goes through :meth:`ApiCalls.call`: it is counted
(``rlstack_sandbox_api_requests_total{verb, code}``), retried with exponential back-off and jitter
on 429 (honouring Retry-After), 500/502/503/504 and connection failures, and creates first take a
token from a bucket, so a burst leaves at ``creates_per_second`` after the first ``burst``; a 429
on a create holds every create for its Retry-After, since the server asked this client for quiet.

Retrying a create cannot duplicate a trial: sandbox pods have deterministic names, so a create
whose first attempt landed before its answer was lost comes back 409 AlreadyExists, which is
raised at once for the caller to resolve (``SandboxManager.launch`` reads the existing pod).
Other 4xx (403 Forbidden, 404, 409, 422) are raised at once: retrying cannot change them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import httpx
from prometheus_client import CollectorRegistry, Counter
from pydantic import BaseModel, ConfigDict, Field

log = logging.getLogger(__name__)

T = TypeVar("T")
RETRIED_CODES = frozenset({429, 500, 502, 503, 504})
RATE_LIMITED_VERBS = frozenset({"create"})
SUCCESS_CODES = {"create": "201"}
"""lightkube hands back the object, not the status, of a success: this is what kube-apiserver
answers for the verb (``200`` for every verb not named)."""
try:  # lightkube 1.x speaks through ``httpx2``, not ``httpx``: its connection failures are httpx2's
    import httpx2
except ImportError:  # pragma: no cover - a lightkube that went back to httpx
    httpx2 = httpx
TRANSPORT_ERRORS: tuple[type[Exception], ...] = (httpx2.TransportError, httpx.TransportError)
STATUS_ERRORS: tuple[type[Exception], ...] = (httpx2.HTTPStatusError, httpx.HTTPStatusError)
"""lightkube's ``ApiError`` (a JSON ``Status`` body) is an httpx2 ``HTTPStatusError``; a proxy's
plain-text 502 stays a bare ``HTTPStatusError``; a watch's refused open is one too."""


class ApiCallSettings(BaseModel):
    """How hard the sandbox code may push the API server."""

    model_config = ConfigDict(extra="forbid")

    creates_per_second: float = Field(default=20.0, gt=0)
    """Pod creates per second once the burst is spent."""
    burst: int = Field(default=40, ge=1)
    """Creates that may leave at once after a quiet spell (the bucket's size)."""
    max_attempts: int = Field(default=6, ge=1)
    """Attempts of one call, the first included."""
    base_delay: float = Field(default=0.2, ge=0)
    """Back-off before the first retry; doubled for each retry after it."""
    max_delay: float = Field(default=5.0, gt=0)
    """The most one back-off waits (a server's Retry-After may ask for longer and gets it)."""
    deadline: float | None = Field(default=60.0, gt=0)
    """Seconds one call may spend over all its attempts; None: only ``max_attempts`` bounds it."""


def status_code(exc: BaseException) -> int | None:
    """The HTTP status an API error carries (the ``Status`` body's code for a watch's ERROR event)."""
    status = getattr(exc, "status", None)  # lightkube ApiError: decoded Status, also from a watch event
    if status is not None and getattr(status, "code", None):
        return int(status.code)
    response = getattr(exc, "response", None) if isinstance(exc, STATUS_ERRORS) else None
    return response.status_code if response is not None else None


def retry_after(exc: BaseException) -> float | None:
    """Seconds the server asked us to wait: the Status's ``details.retryAfterSeconds`` or the
    ``Retry-After`` header (seconds; an HTTP date is not honoured)."""
    status = getattr(exc, "status", None)
    details = getattr(status, "details", None)
    if details is not None and getattr(details, "retryAfterSeconds", None):
        return float(details.retryAfterSeconds)
    response = getattr(exc, "response", None) if isinstance(exc, STATUS_ERRORS) else None
    header = response.headers.get("Retry-After") if response is not None else None
    with contextlib.suppress(TypeError, ValueError):
        return max(0.0, float(header))  # type: ignore[arg-type]
    return None


def classify(exc: BaseException) -> tuple[str | None, bool]:
    """(the ``code`` label, whether to retry) for a failed request; no label for an error that is
    not the API's answer or its absence (a bug, a bad argument): that is no request to count."""
    if isinstance(exc, TRANSPORT_ERRORS):
        return "error", True
    code = status_code(exc)
    if code is None:
        return None, False
    return str(code), code in RETRIED_CODES


class TokenBucket:
    """``rate`` tokens a second up to ``burst``; callers take one each, first come first served."""

    def __init__(self, rate: float, burst: int, clock: Callable[[], float] = time.monotonic) -> None:
        self.rate, self.burst, self.clock = rate, burst, clock
        self.tokens = float(burst)
        self.updated = clock()
        self.not_before = 0.0
        """A 429 on a create holds every create until then: the server asked for quiet."""
        self._lock = asyncio.Lock()  # FIFO: waiters leave in the order they came

    def set_rate(self, rate: float, burst: int | None = None) -> None:
        self._refill()
        self.rate = rate
        if burst is not None:
            self.burst = burst
            self.tokens = min(self.tokens, float(burst))

    def hold(self, seconds: float) -> None:
        self.not_before = max(self.not_before, self.clock() + seconds)

    def _refill(self) -> None:
        now = self.clock()
        self.tokens = min(float(self.burst), self.tokens + (now - self.updated) * self.rate)
        self.updated = now

    async def take(self) -> None:
        async with self._lock:
            while True:
                self._refill()
                wait = max(self.not_before - self.clock(), 0.0)
                if wait == 0 and self.tokens >= 1:
                    self.tokens -= 1
                    return
                await asyncio.sleep(max(wait, (1 - self.tokens) / self.rate))


class ApiCalls:
    """Counts, retries and rate-limits the API requests of one env server's sandbox code."""

    def __init__(self, settings: ApiCallSettings | None = None, registry: CollectorRegistry | None = None) -> None:
        self.settings = settings if settings is not None else ApiCallSettings()
        self.registry = registry if registry is not None else CollectorRegistry()
        """Private unless given, so two instances (tests, two managers) never clash on a name."""
        self.requests = Counter("rlstack_sandbox_api_requests", "Kubernetes API requests made by the sandbox code, "
                                "by verb and HTTP status (error: no answer)", ["verb", "code"], registry=self.registry)
        self.retries = Counter("rlstack_sandbox_api_retries", "Kubernetes API requests retried after a 429, a 5xx or "
                               "a connection failure, by verb and the code that was retried", ["verb", "code"],
                               registry=self.registry)
        for verb in ("create", "delete"):  # series from the start: a dashboard's 0, not "No data"
            for code in ("429", "500"):
                self.retries.labels(verb=verb, code=code)
        self.bucket = TokenBucket(self.settings.creates_per_second, self.settings.burst)

    def set_create_rate(self, creates_per_second: float, burst: int | None = None) -> None:
        """Change the create rate limit (and bucket size) from now on."""
        if creates_per_second <= 0 or (burst is not None and burst < 1):
            raise ValueError("creates_per_second must be > 0 and burst >= 1")
        self.bucket.set_rate(creates_per_second, burst)
        self.settings = self.settings.model_copy(update={"creates_per_second": creates_per_second,
                                                         **({"burst": burst} if burst is not None else {})})

    def record(self, verb: str, code: int | str) -> None:
        """Count one request made outside :meth:`call` (a watch, which streams)."""
        self.requests.labels(verb=verb, code=str(code)).inc()

    def count(self, verb: str, code: int | str | None = None) -> float:
        """Requests counted so far for ``verb`` (and ``code``), summed over the rest."""
        total = 0.0
        for metric in self.requests.collect():
            for sample in metric.samples:
                if (sample.name.endswith("_total") and sample.labels["verb"] == verb
                        and (code is None or sample.labels["code"] == str(code))):
                    total += sample.value
        return total

    def backoff(self, attempt: int) -> float:
        """The jittered wait before retry number ``attempt`` (1: the first retry): half to all of
        ``base_delay * 2**(attempt-1)``, capped at ``max_delay``, so a batch that failed together
        does not come back together."""
        s = self.settings
        delay = min(s.max_delay, s.base_delay * 2 ** max(attempt - 1, 0))
        return delay / 2 + random.random() * delay / 2  # noqa: S311 - jitter, not a secret

    async def call(self, verb: str, fn: Callable[[], Awaitable[T]]) -> T:
        """``fn()`` (one API request, made afresh on each attempt), counted and retried; ``verb``
        names it as RBAC does (create, get, list, watch, delete). Raises the last error when the
        attempts or the deadline run out, and any other error at once."""
        s = self.settings
        loop = asyncio.get_running_loop()
        deadline = loop.time() + s.deadline if s.deadline is not None else None
        attempt = 0
        while True:
            attempt += 1
            if verb in RATE_LIMITED_VERBS:
                await self.bucket.take()
            try:
                result = await fn()
            except Exception as exc:
                code, retried = classify(exc)
                if code is not None:
                    self.record(verb, code)
                if code is None or not retried or attempt >= s.max_attempts:
                    raise
                wait = self.backoff(attempt)
                asked = retry_after(exc) if code == "429" else None
                if asked is not None:
                    wait = max(wait, asked)
                    if verb in RATE_LIMITED_VERBS:
                        self.bucket.hold(asked)
                if deadline is not None and loop.time() + wait > deadline:
                    raise
                self.retries.labels(verb=verb, code=code).inc()
                log.info("kubernetes %s answered %s (attempt %d of %d); retrying in %.2fs",
                         verb, code, attempt, s.max_attempts, wait)
                await asyncio.sleep(wait)
                continue
            self.record(verb, SUCCESS_CODES.get(verb, "200"))
            return result
