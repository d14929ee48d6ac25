"""Prometheus helpers: one registry per app (no process globals) and request-latency middleware.

Labels stay low-cardinality: the route template, never the raw path or an id. A service run as
several worker processes on one port (the proxy's ``--workers``) sets ``PROMETHEUS_MULTIPROC_DIR``
before its workers start; every worker's values then live in that directory, and whichever
worker answers ``/metrics`` renders the sum, so a scrape never sees one worker's share.
"""

from __future__ import annotations

import os
import time

from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, Histogram, generate_latest
from starlette.requests import Request
from starlette.responses import Response
from starlette.types import ASGIApp, Receive, Scope, Send

MULTIPROCESS_ENV = "PROMETHEUS_MULTIPROC_DIR"
LATENCY_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)


def metrics_response(registry: CollectorRegistry) -> Response:
    """Render ``registry`` in the Prometheus text format (all workers' values when run as several processes)."""
    if os.environ.get(MULTIPROCESS_ENV):
        from prometheus_client import multiprocess

        registry = CollectorRegistry()
        multiprocess.MultiProcessCollector(registry)
    return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)


class RequestLatencyMiddleware:
    """Records ``rlstack_<service>_http_request_seconds{route,method,status}``."""

    def __init__(self, app: ASGIApp, registry: CollectorRegistry, service: str) -> None:
        self.app = app
        self.histogram = Histogram(
            f"rlstack_{service}_http_request_seconds",
            "HTTP request latency by route template",
            ["route", "method", "status"],
            registry=registry,
            buckets=LATENCY_BUCKETS,
        )

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        start = time.perf_counter()
        status = 500

        async def send_wrapper(message: dict) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_wrapper)
        finally:
            self.histogram.labels(_route_template(scope), scope["method"], str(status)).observe(
                time.perf_counter() - start
            )


def _route_template(scope: Scope) -> str:
    """The matched route's path template (``/v1/endpoints/{endpoint_id}``); unmatched paths share one label."""
    route = scope.get("route")
    return getattr(route, "path", "unmatched")


__all__ = ["CollectorRegistry", "Request", "RequestLatencyMiddleware", "metrics_response"]
