"""Wires the trainer: the training loop as a supervised task, with /status, health and metrics.

Ready once the model is loaded and the batcher knows the trainer (env servers register after
it, as Atropos requires). A run that fails stops the process with exit code 1, as any service
whose loop dies (after /healthz has said 503 for a moment); a run that ends stops it with 0
under ``exit_when_done``, so a local orchestrator (or a Kubernetes Job) sees the outcome.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from fastapi import FastAPI, Request
from prometheus_client import CollectorRegistry

from rlstack.common.auth import require_bearer
from rlstack.common.server import create_app
from rlstack.common.supervise import Supervisor
from rlstack.trainer.config import TrainerSettings
from rlstack.trainer.loop import TrainingLoop
from rlstack.trainer.metrics import TrainerMetrics
from rlstack.trainer.report import TrainerStatus


def build_app(settings: TrainerSettings) -> FastAPI:
    registry = CollectorRegistry()
    loop = TrainingLoop(settings, TrainerMetrics(registry, settings.policy))
    supervisor = Supervisor("trainer", settings.failure_exit_delay_seconds)

    async def train() -> None:
        try:
            await loop.run()
        except Exception as exc:
            loop.status.phase, loop.status.error = "failed", f"{type(exc).__name__}: {exc}"
            raise  # the supervisor logs it and fails the process
        if settings.exit_when_done:
            supervisor.finish()

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            # On stop a step in flight is lost; the last checkpoint is where a restart resumes.
            async with supervisor:
                supervisor.start("training loop", train(), finishes=True)
                yield
        finally:
            await loop.aclose()

    def ready() -> tuple[bool, dict]:
        return loop.registered and loop.status.phase != "failed", {"phase": loop.status.phase, "step": loop.step}

    app = create_app(service="trainer", registry=registry, ready=ready, supervisor=supervisor, lifespan=lifespan)
    app.state.loop = loop

    @app.get("/status", response_model=TrainerStatus, tags=["training"])
    async def status(request: Request) -> TrainerStatus:
        require_bearer(request, settings.auth_token)  # with --auth-token, reads need it too
        return loop.status

    return app
