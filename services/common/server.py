"""The base every service's HTTP app is built on: health, readiness, metrics, clean shutdown.

``/healthz`` says the process is alive; ``/readyz`` asks the service whether its dependencies
are ready (503 with the reason otherwise); ``/metrics`` renders the app's own registry.
Uvicorn turns SIGTERM into a graceful stop: no new connections, in-flight requests finish,
then the lifespan's shutdown half runs (flushes, deregistration).
"""

from __future__ import annotations

import logging
import signal
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import uvicorn
from fastapi import FastAPI
from fastapi.responses import JSONResponse
from prometheus_client import CollectorRegistry, disable_created_metrics

from rlstack.common.metrics import RequestLatencyMiddleware, metrics_response
from rlstack.common.settings import ServiceSettings

ReadyCheck = Callable[[], tuple[bool, dict[str, Any]]]
log = logging.getLogger(__name__)
disable_created_metrics()  # the *_created series only add cardinality


def create_app(
    *,
    service: str,
    registry: CollectorRegistry,
    ready: ReadyCheck,
    lifespan: Callable[[FastAPI], AbstractAsyncContextManager[None]] | None = None,
) -> FastAPI:
    """A FastAPI app with the three operational routes and request-latency metrics."""
    app = FastAPI(title=f"rlstack {service}", lifespan=lifespan)
    app.add_middleware(RequestLatencyMiddleware, registry=registry, service=service)

    @app.get("/healthz", tags=["ops"])
    async def healthz() -> dict[str, str]:
        return {"status": "ok", "service": service}

    @app.get("/readyz", tags=["ops"])
    async def readyz() -> JSONResponse:
        is_ready, detail = ready()
        return JSONResponse({"ready": is_ready, **detail}, status_code=200 if is_ready else 503)

    @app.get("/metrics", tags=["ops"])
    async def metrics():  # noqa: ANN202 - a plain Prometheus text response
        return metrics_response(registry)

    return app


class _Server(uvicorn.Server):
    """uvicorn re-raises SIGTERM after draining; for a pod that is the normal stop, so exit 0."""

    def handle_exit(self, sig: int, frame: Any) -> None:
        super().handle_exit(sig, frame)
        captured = getattr(self, "_captured_signals", None)
        if sig == signal.SIGTERM and captured and captured[-1] == sig:
            captured.pop()


def serve(app: Any, settings: ServiceSettings) -> None:
    """Run ``app`` under uvicorn until SIGTERM/SIGINT; uvicorn drains in-flight requests."""
    config = uvicorn.Config(
        app,
        host=settings.host,
        port=settings.port,
        log_config=None,  # keep our own logging set-up
        access_log=False,
        timeout_graceful_shutdown=30,
        loop="auto",
        http="auto",
    )
    _Server(config).run()
