"""Wires an env server: the runner (and the sandbox reaper) as supervised loops, with health,
readiness and metrics. A runner that dies fails the process (/healthz 503, exit 1)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from fastapi import FastAPI, HTTPException, Request
from prometheus_client import CollectorRegistry

from rlstack.common.auth import require_bearer
from rlstack.common.loop_lag import LoopLag
from rlstack.common.server import create_app
from rlstack.common.supervise import Supervisor
from rlstack.envs.cluster import sandbox_manager
from rlstack.envs.config import EnvSettings
from rlstack.envs.runner import EnvMetrics, EnvRunner


def build_app(settings: EnvSettings) -> FastAPI:
    registry = CollectorRegistry()
    if settings.task == "harbor":
        # On a fresh volume nothing has made the trials directory yet (the proxy makes it on its
        # first write, after the first trial has started): an env server that required it would
        # crash-loop on every new install.
        settings.trials_dir.mkdir(parents=True, exist_ok=True)
        from rlstack.envs.harbor_metrics import HarborMetrics
        from rlstack.envs.harbor_runner import HarborEnvRunner

        runner: EnvRunner = HarborEnvRunner(settings, EnvMetrics(registry), HarborMetrics(registry))
    else:
        runner = EnvRunner(settings, EnvMetrics(registry))
    supervisor = Supervisor("env", settings.failure_exit_delay_seconds)
    lag = LoopLag(registry, "env")

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        kube = None
        try:
            # On stop, in-flight rollouts are abandoned: their groups were never acknowledged.
            async with supervisor:
                supervisor.start("env runner", runner.run())
                supervisor.start("loop lag", lag.run())
                if settings.sandbox.reaper:
                    kube, sandboxes = sandbox_manager(settings)
                    supervisor.start("sandbox reaper", sandboxes.reap_forever(settings.sandbox.reap_interval_seconds))
                yield
        finally:
            await runner.aclose()
            if kube is not None:
                await kube.close()

    app = create_app(service="env", registry=registry, ready=lambda: (runner.registered, {"env_id": runner.env_id}),
                     supervisor=supervisor, lifespan=lifespan)
    app.state.runner = runner

    @app.post("/evaluate", tags=["env"])
    async def evaluate(request: Request) -> dict:
        """Held-out score of the policy being served now: greedy accuracy (single-turn tasks), or
        the pass rate of one trial per held-out task (harbor). Needs ``--auth-token`` when set."""
        require_bearer(request, settings.auth_token)
        if settings.task == "harbor":
            from rlstack.envs.harbor_tasks import NoHeldOutTasks

            try:
                return await runner.evaluate()
            except NoHeldOutTasks as exc:
                raise HTTPException(404, f"heldout_size: {exc}") from None
        return await runner.evaluate()

    return app
