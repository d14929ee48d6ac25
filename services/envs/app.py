"""Wires an env server: the runner as a background task, with health, readiness and metrics."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator

from fastapi import FastAPI
from prometheus_client import CollectorRegistry

from rlstack.common.server import create_app
from rlstack.envs.config import EnvSettings
from rlstack.envs.runner import EnvMetrics, EnvRunner


def build_app(settings: EnvSettings) -> FastAPI:
    registry = CollectorRegistry()
    runner = EnvRunner(settings, EnvMetrics(registry))

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        task = asyncio.create_task(runner.run())
        try:
            yield
        finally:
            task.cancel()  # in-flight rollouts are abandoned: their groups were never acknowledged
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            await runner.aclose()

    app = create_app(service="env", registry=registry, ready=lambda: (runner.registered, {"env_id": runner.env_id}), lifespan=lifespan)
    app.state.runner = runner

    @app.post("/evaluate", tags=["env"])
    async def evaluate() -> dict:
        """Greedy held-out accuracy of the policy being served now."""
        return await runner.evaluate()

    return app
