"""Wires an env server: the runner as a background task, with health, readiness and metrics."""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import AsyncIterator

from fastapi import FastAPI
from prometheus_client import CollectorRegistry

from rlstack.common.server import create_app
from rlstack.envs.config import EnvSettings
from rlstack.envs.runner import EnvMetrics, EnvRunner

log = logging.getLogger(__name__)


def build_app(settings: EnvSettings) -> FastAPI:
    registry = CollectorRegistry()
    runner = EnvRunner(settings, EnvMetrics(registry))

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        tasks = [asyncio.create_task(runner.run())]
        tasks[0].add_done_callback(_report_crash)
        kube = None
        if settings.sandbox_reaper:
            kube, sandboxes = sandbox_manager(settings)
            tasks.append(asyncio.create_task(sandboxes.reap_forever(settings.sandbox_reap_interval_seconds)))
        try:
            yield
        finally:
            for task in tasks:
                task.cancel()  # in-flight rollouts are abandoned: their groups were never acknowledged
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
            await runner.aclose()
            if kube is not None:
                await kube.close()

    app = create_app(service="env", registry=registry, ready=lambda: (runner.registered, {"env_id": runner.env_id}), lifespan=lifespan)
    app.state.runner = runner

    @app.post("/evaluate", tags=["env"])
    async def evaluate() -> dict:
        """Greedy held-out accuracy of the policy being served now."""
        return await runner.evaluate()

    return app


def _report_crash(task: asyncio.Task) -> None:
    """The runner ends only by cancellation; anything else (a refused registration) must be seen."""
    if not task.cancelled() and task.exception() is not None:
        log.error("env runner stopped: %s", task.exception(), exc_info=task.exception())


def sandbox_manager(settings: EnvSettings):  # noqa: ANN201 - lightkube is imported only when used
    from rlstack.kube.connection import connect
    from rlstack.kube.sandboxes import SandboxManager, SandboxOwner

    client = connect(settings.kube_api_url, settings.kube_namespace)
    owner = SandboxOwner(name=settings.pod_name, uid=settings.pod_uid) if settings.pod_name and settings.pod_uid else None
    manager = SandboxManager(client, settings.kube_namespace or client.namespace, settings.run_id, owner=owner,
                             ttl_seconds=settings.sandbox_ttl_seconds, finished_grace_seconds=settings.sandbox_grace_seconds)
    return client, manager
