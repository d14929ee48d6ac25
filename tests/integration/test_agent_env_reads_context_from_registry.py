"""The agent env reads the served context length from the registry, never from vLLM (issue 22, item 7).

On a cluster the inference NetworkPolicy closes vLLM's port to env pods (it also serves the dev
routes), so asking a replica's /v1/models timed out and the env guessed. The replica's sidecar
registers vLLM's ``max_model_len`` as a label; the env reads the registry. Here the replica's
URL is a closed port: only the registry can answer. Real registry process.
"""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry

from rlstack.common.contracts.registry import EndpointRegistration
from rlstack.common.registry_client import RegistryClient
from rlstack.envs.agent.runner import DEFAULT_CONTEXT, AgentEnvRunner, AgentMetrics
from rlstack.envs.config import EnvSettings
from rlstack.envs.runner import EnvMetrics
from tests.conftest import REPO, free_port


class UnusedSandbox:
    kind = "unused"

    def check(self) -> None: ...

    async def run(self, job):  # noqa: ANN001, ANN201
        raise AssertionError("no trial runs here")

    async def close(self) -> None: ...


def test_the_context_length_comes_from_the_replicas_registry_labels(service_factory):
    registry = service_factory("registry")
    closed = f"http://127.0.0.1:{free_port()}"  # vLLM's port as an env pod sees it: unreachable
    settings = EnvSettings(task="harbor", tasks_dir=REPO / "examples" / "tasks", registry_url=registry.url,
                           proxy_url=closed, batcher_url=closed, served_model="policy")
    metrics = CollectorRegistry()
    runner = AgentEnvRunner(settings, EnvMetrics(metrics), AgentMetrics(metrics), sandbox=UnusedSandbox())

    async def scenario() -> int:
        client = RegistryClient(registry.url)
        try:
            for name, length in (("r0", "4096"), ("r1", "8192")):
                await client.put(name, EndpointRegistration(url=closed, model="policy", labels={"max_model_len": length}))
            await client.put("other", EndpointRegistration(url=closed, model="someone-else", labels={"max_model_len": "64"}))
            return await runner.token_limit()
        finally:
            await client.aclose()
            await runner.aclose()

    limit = asyncio.run(scenario())
    assert limit != DEFAULT_CONTEXT
    assert limit == 4096  # the smallest context of the replicas serving this env's model
