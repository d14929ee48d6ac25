"""The base every service's HTTP app is built on: health, readiness, metrics, clean shutdown.

``/healthz`` says the process is alive: 503 once a supervised loop died (see ``supervise``);
``/readyz`` asks the service whether its dependencies are ready (503 with the reason otherwise);
``/metrics`` renders the app's own registry. Uvicorn turns SIGTERM into a graceful stop: no new
connections, in-flight requests finish, then the lifespan's shutdown half runs (flushes,
deregistration).
"""

from __future__ import annotations

import json
import logging
import signal
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from typing import Any

import httpx
import uvicorn
from fastapi import FastAPI, Request
from fastapi.encoders import jsonable_encoder
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from prometheus_client import CollectorRegistry, disable_created_metrics

from rlstack.common.body_guard import DEFAULT_MAX_BYTES, DEFAULT_READ_TIMEOUT, BodyGuard
from rlstack.common.metrics import RequestLatencyMiddleware, metrics_response
from rlstack.common.settings import ServiceSettings
from rlstack.common.supervise import Supervisor

ReadyCheck = Callable[[], tuple[bool, dict[str, Any]]]
log = logging.getLogger(__name__)
disable_created_metrics()  # the *_created series only add cardinality


def create_app(
    *,
    service: str,
    registry: CollectorRegistry,
    ready: ReadyCheck,
    supervisor: Supervisor,
    lifespan: Callable[[FastAPI], AbstractAsyncContextManager[None]] | None = None,
    max_request_bytes: int = DEFAULT_MAX_BYTES,
    request_read_timeout: float = DEFAULT_READ_TIMEOUT,
) -> FastAPI:
    """A FastAPI app with the three operational routes and request-latency metrics.

    ``supervisor`` runs the service's loops (its lifespan starts them); health follows it, and
    ``run_service`` takes the exit code from it. Every request body is bounded by
    ``max_request_bytes`` (after gzip inflation) and must arrive within ``request_read_timeout``
    seconds (``body_guard``).
    """
    app = FastAPI(title=f"rlstack {service}", lifespan=lifespan)
    app.add_middleware(BodyGuard, max_bytes=max_request_bytes, read_timeout=request_read_timeout)
    app.add_middleware(RequestLatencyMiddleware, registry=registry, service=service)
    app.add_exception_handler(RequestValidationError, validation_error_response)
    app.add_exception_handler(httpx.TransportError, upstream_unreachable_response)
    app.state.supervisor = supervisor

    @app.get("/healthz", tags=["ops"])
    async def healthz() -> JSONResponse:
        return health_response(service, supervisor)

    @app.get("/readyz", tags=["ops"])
    async def readyz() -> JSONResponse:
        return readiness_response(supervisor, *ready())

    @app.get("/metrics", tags=["ops"])
    async def metrics():  # noqa: ANN202 - a plain Prometheus text response
        return metrics_response(registry)

    return app


async def validation_error_response(request: Request, exc: Exception) -> JSONResponse:
    """FastAPI's 422, except that an echoed input JSON cannot carry (NaN, Infinity) is shown as text:
    the stock handler raised on it, turning a bad request into a 500."""
    assert isinstance(exc, RequestValidationError)
    errors = []
    for err in exc.errors():
        try:
            safe = jsonable_encoder(err)
            json.dumps(safe, allow_nan=False)
        except (TypeError, ValueError):
            safe = {**{k: v for k, v in err.items() if k not in ("input", "ctx")}, "input": repr(err.get("input"))[:200]}
        errors.append(safe)
    return JSONResponse({"detail": errors}, status_code=422)


async def upstream_unreachable_response(request: Request, exc: Exception) -> JSONResponse:
    """A route that needed another service which did not answer (refused, timed out): 503 naming it,
    so the caller retries later, instead of a bare 500 that reads as a bug of this service."""
    target = getattr(getattr(exc, "request", None), "url", None) if isinstance(exc, httpx.TransportError) else None
    where = f"{target.scheme}://{target.host}:{target.port}" if target is not None else "a dependency"
    log.warning("%s %s: %s did not answer: %s", request.method, request.url.path, where, exc)
    detail = [{"loc": ["upstream"], "msg": f"{where} did not answer ({type(exc).__name__})", "type": "upstream_unreachable"}]
    return JSONResponse({"detail": detail}, status_code=503, headers={"Retry-After": "5"})


def health_response(service: str, supervisor: Supervisor) -> JSONResponse:
    """200 while every supervised loop runs; 503 with the cause once one died (liveness fails)."""
    if supervisor.failure is not None:
        return JSONResponse({"status": "failed", "service": service, "error": supervisor.failure}, status_code=503)
    return JSONResponse({"status": "ok", "service": service})


def readiness_response(supervisor: Supervisor, is_ready: bool, detail: dict[str, Any]) -> JSONResponse:
    """A process whose loop died is never ready, whatever its own check says."""
    if supervisor.failure is not None:
        is_ready, detail = False, {**detail, "error": supervisor.failure}
    return JSONResponse({"ready": is_ready, **detail}, status_code=200 if is_ready else 503)


class _Server(uvicorn.Server):
    """uvicorn re-raises SIGTERM after draining; for a pod that is the normal stop, so exit 0."""

    def request_stop(self) -> None:
        """Stop from inside the app exactly as on SIGTERM: drain, then the lifespan's shutdown half."""
        self.should_exit = True

    stopping: Callable[[], None] | None = None
    """The supervisor's hook, told before uvicorn waits for the requests in flight."""

    async def shutdown(self, sockets: Any = None) -> None:
        if self.stopping is not None:
            self.stopping()
        await super().shutdown(sockets)

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
    server = _Server(config)
    supervisor = getattr(getattr(app, "state", None), "supervisor", None)
    if supervisor is not None:
        supervisor.stop_process = server.request_stop
        server.stopping = supervisor.stopping
    server.run()


def serve_workers(factory: str, settings: ServiceSettings, workers: int) -> None:
    """Run ``workers`` processes on one listening socket, each building its app with ``factory`` (``module:function``).

    uvicorn's process manager binds the socket once, spawns the workers (they inherit the
    parent's argv and environment, so each resolves the same settings), restarts a worker that
    dies and forwards SIGTERM for a graceful stop of all.
    """
    uvicorn.run(factory, factory=True, workers=workers, host=settings.host, port=settings.port, log_config=None,
                access_log=False, timeout_graceful_shutdown=30)
