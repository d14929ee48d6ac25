"""Wires an env server: the runner (and the sandbox reaper) as supervised loops, with health,
readiness and metrics. A runner that dies fails the process (/healthz 503, exit 1)."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator

from fastapi import FastAPI, HTTPException
from prometheus_client import CollectorRegistry

from rlstack.common.server import create_app
from rlstack.common.supervise import Supervisor
from rlstack.envs.config import EnvSettings
from rlstack.envs.runner import EnvMetrics, EnvRunner


def build_app(settings: EnvSettings) -> FastAPI:
    registry = CollectorRegistry()
    if settings.task == "harbor":
        # On a fresh volume nothing has made the trials directory yet (the proxy makes it on its
        # first write, after the first trial has started): an env server that required it would
        # crash-loop on every new install.
        settings.trials_dir.mkdir(parents=True, exist_ok=True)
        from rlstack.envs.agent.runner import AgentEnvRunner, AgentMetrics

        runner: EnvRunner = AgentEnvRunner(settings, EnvMetrics(registry), AgentMetrics(registry))
    else:
        runner = EnvRunner(settings, EnvMetrics(registry))
    supervisor = Supervisor("env", settings.failure_exit_delay_seconds)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        kube = None
        try:
            # On stop, in-flight rollouts are abandoned: their groups were never acknowledged.
            async with supervisor:
                supervisor.start("env runner", runner.run())
                if settings.sandbox_reaper:
                    kube, sandboxes = sandbox_manager(settings)
                    supervisor.start("sandbox reaper", sandboxes.reap_forever(settings.sandbox_reap_interval_seconds))
                yield
        finally:
            await runner.aclose()
            if kube is not None:
                await kube.close()

    app = create_app(service="env", registry=registry, ready=lambda: (runner.registered, {"env_id": runner.env_id}),
                     supervisor=supervisor, lifespan=lifespan)
    app.state.runner = runner

    @app.post("/evaluate", tags=["env"])
    async def evaluate() -> dict:
        """Greedy held-out accuracy of the policy being served now."""
        if settings.task == "harbor":
            raise HTTPException(404, "the harbor task has no held-out evaluation; its training reward is the signal")
        return await runner.evaluate()

    return app


def sandbox_manager(settings: EnvSettings):  # noqa: ANN201 - lightkube is imported only when used
    from rlstack.kube.connection import connect
    from rlstack.kube.sandboxes import SandboxManager, SandboxOwner

    client = connect(settings.kube_api_url, settings.kube_namespace)
    owner = SandboxOwner(name=settings.pod_name, uid=settings.pod_uid) if settings.pod_name and settings.pod_uid else None
    manager = SandboxManager(client, settings.kube_namespace or client.namespace, settings.run_id, owner=owner,
                             ttl_seconds=settings.sandbox_ttl_seconds, finished_grace_seconds=settings.sandbox_grace_seconds)
    return client, manager
