"""Wires the registry: table, prober, background loops, routes and metrics."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from fastapi import FastAPI
from prometheus_client import CollectorRegistry

from rlstack.common.http import async_client
from rlstack.common.loop_lag import LoopLag
from rlstack.common.server import create_app
from rlstack.common.supervise import Supervisor
from rlstack.registry.api import router
from rlstack.registry.config import RegistrySettings
from rlstack.registry.metrics import RegistryCollector
from rlstack.registry.prober import Prober
from rlstack.registry.service import RegistryService
from rlstack.registry.table import EndpointTable

REQUEST_BYTES = 256 * 1024
"""A registration or quarantine is a few hundred bytes; the bound keeps a flood of big bodies cheap."""


def build_app(settings: RegistrySettings) -> FastAPI:
    registry = CollectorRegistry()
    client = async_client(timeout=settings.probe_timeout_seconds)
    api_key = settings.probe_api_key.get_secret_value() if settings.probe_api_key else None
    table = EndpointTable(settings.default_ttl_seconds, settings.probe_failure_threshold)
    svc = RegistryService(settings, table, Prober(table, client, api_key))
    registry.register(RegistryCollector(svc))
    supervisor = Supervisor("registry", settings.failure_exit_delay_seconds)
    lag = LoopLag(registry, "registry")

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        kube = None
        try:
            async with supervisor:
                supervisor.start("loop lag", lag.run())
                if settings.kube_watch_pods:
                    from rlstack.kube.connection import connect
                    from rlstack.kube.replica_pods import watch_replica_pods

                    kube = connect(settings.kube_api_url, settings.kube_namespace)
                    svc.start(supervisor, watch_replica_pods(kube, settings.kube_namespace, settings.kube_replica_selector, svc.drop_pod))
                else:
                    svc.start(supervisor)
                yield
        finally:
            await svc.stop()
            await client.aclose()
            if kube is not None:
                await kube.close()

    # The registry is ready as soon as it serves: an empty table is a valid answer.
    app = create_app(service="registry", registry=registry, ready=lambda: (True, {"endpoints": len(table.all())}),
                     supervisor=supervisor, lifespan=lifespan, max_request_bytes=REQUEST_BYTES)
    app.state.registry = svc
    app.include_router(router)
    return app
