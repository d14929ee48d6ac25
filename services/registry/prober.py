"""Active readiness probing: an endpoint is ready only when its /v1/models lists its model.

vLLM's /health answers before the weights are loaded; /v1/models naming the model is the
first signal that a request would actually be served.
"""

from __future__ import annotations

import asyncio
import logging
import time
from typing import NamedTuple

import httpx

from rlstack.common.auth import bearer
from rlstack.common.contracts.registry import Endpoint
from rlstack.registry.table import EndpointTable

log = logging.getLogger(__name__)


class ProbeResult(NamedTuple):
    ready: bool
    error: str | None = None
    transient: bool = False
    """A timeout or a 5xx: what a loaded server gives too, so it counts toward the failure threshold."""


class Prober:
    def __init__(self, table: EndpointTable, client: httpx.AsyncClient, api_key: str | None = None) -> None:
        self.table = table
        self.client = client
        self.headers = bearer(api_key)
        self.failures_total = 0

    async def probe(self, endpoint: Endpoint) -> ProbeResult:
        url = str(endpoint.url).rstrip("/") + "/v1/models"
        try:
            response = await self.client.get(url, headers=self.headers)
        except httpx.HTTPError as exc:
            return ProbeResult(False, f"{type(exc).__name__}: {exc}", isinstance(exc, httpx.TimeoutException))
        if response.status_code != 200:
            return ProbeResult(False, f"GET /v1/models returned {response.status_code}", response.status_code >= 500)
        try:
            listed = {m.get("id") for m in response.json().get("data", [])}
        except (ValueError, AttributeError):
            return ProbeResult(False, "GET /v1/models did not return an OpenAI model list")
        if endpoint.model not in listed:
            return ProbeResult(False, f"model {endpoint.model!r} not listed (has {sorted(x for x in listed if x)})")
        return ProbeResult(True)

    async def probe_all(self) -> None:
        endpoints = self.table.all()
        results = await asyncio.gather(*(self.probe(e) for e in endpoints))
        now = time.time()
        for endpoint, (ready, error, transient) in zip(endpoints, results):
            was_ready = endpoint.ready  # the table updates this entry in place
            self.table.record_probe(endpoint.id, ready, error, now, transient)
            if not ready:
                self.failures_total += 1
            if was_ready and not endpoint.ready:
                log.warning("endpoint %s (%s) no longer ready: %s", endpoint.id, endpoint.url, error)
            elif not was_ready and endpoint.ready:
                log.info("endpoint %s (%s) ready with %s", endpoint.id, endpoint.url, endpoint.model)
            elif not ready and endpoint.ready:
                log.info("endpoint %s (%s) missed a probe, still routed: %s", endpoint.id, endpoint.url, error)
