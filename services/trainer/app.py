"""Wires the trainer: the training loop as a background task, with /status, health and metrics.

Ready once the model is loaded and the batcher knows the trainer (env servers register after
it, as Atropos requires). A run that ends, or fails, with ``exit_when_done`` stops the process
with exit code 0 or 1 so a local orchestrator (or a Kubernetes Job) sees the outcome.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
from collections.abc import AsyncIterator

from fastapi import FastAPI
from prometheus_client import CollectorRegistry

from rlstack.common.server import create_app
from rlstack.trainer.config import TrainerSettings
from rlstack.trainer.loop import TrainerStatus, TrainingLoop
from rlstack.trainer.metrics import TrainerMetrics

log = logging.getLogger(__name__)


def build_app(settings: TrainerSettings) -> FastAPI:
    registry = CollectorRegistry()
    loop = TrainingLoop(settings, TrainerMetrics(registry))

    async def supervise(app: FastAPI) -> None:
        try:
            await loop.run()
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            log.exception("training failed")
            loop.status.phase, loop.status.error = "failed", f"{type(exc).__name__}: {exc}"
            app.state.exit_code = 1
        if settings.exit_when_done:
            os.kill(os.getpid(), signal.SIGTERM)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        task = asyncio.create_task(supervise(app))
        try:
            yield
        finally:
            task.cancel()  # a step in flight is lost; the last checkpoint is where a restart resumes
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            await loop.aclose()

    def ready() -> tuple[bool, dict]:
        return loop.registered and loop.status.phase != "failed", {"phase": loop.status.phase, "step": loop.step}

    app = create_app(service="trainer", registry=registry, ready=ready, lifespan=lifespan)
    app.state.exit_code = 0
    app.state.loop = loop

    @app.get("/status", response_model=TrainerStatus, tags=["training"])
    async def status() -> TrainerStatus:
        return loop.status

    return app
