"""What the agent env reads from the registry (issue 22): the served context length, never from
vLLM (item 7), and the trainer's version for its staleness gate, never a lagging replica's (item 3).

The context length:
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
from rlstack.envs.config import EnvSettings
from rlstack.envs.harbor_metrics import HarborMetrics
from rlstack.envs.harbor_runner import DEFAULT_CONTEXT, HarborEnvRunner
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
    settings = EnvSettings(task="harbor", sandbox_environment="host", tasks_dir=REPO / "examples" / "tasks", registry_url=registry.url,
                           proxy_url=closed, batcher_url=closed, served_model="policy")
    metrics = CollectorRegistry()
    runner = HarborEnvRunner(settings, EnvMetrics(metrics), HarborMetrics(metrics), sandbox=UnusedSandbox())

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


def test_a_lagging_replica_does_not_hold_the_staleness_gate_shut(service_factory):
    registry = service_factory("registry")
    closed = f"http://127.0.0.1:{free_port()}"
    settings = EnvSettings(task="harbor", sandbox_environment="host", tasks_dir=REPO / "examples" / "tasks", registry_url=registry.url,
                           proxy_url=closed, batcher_url=closed, served_model="policy", group_size=2, max_staleness=1)
    metrics = CollectorRegistry()
    runner = HarborEnvRunner(settings, EnvMetrics(metrics), HarborMetrics(metrics), sandbox=UnusedSandbox())
    runner.batch_size = 4  # two groups per batch
    runner.groups_started = 8  # (v2 + 1 + 1) * 2: past the bound of any version below 3

    async def scenario() -> bool:
        client = RegistryClient(registry.url)
        try:
            await client.put("restarted", EndpointRegistration(url=closed, model="policy", weight_version=0))
            await client.put("current", EndpointRegistration(url=closed, model="policy", weight_version=3))
            await asyncio.wait_for(runner._wait_for_staleness_room(), 10)  # v3: room for (3 + 1 + 1) * 2 groups
            return True
        finally:
            await client.aclose()
            await runner.aclose()

    assert asyncio.run(scenario())


def models_endpoint(name: str):  # noqa: ANN201 - a Starlette app
    """What the registry's readiness probe asks a replica: its /v1/models, listing ``name``."""
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def models(request):  # noqa: ANN001, ANN202
        return JSONResponse({"object": "list", "data": [{"id": name, "object": "model"}]})

    return Starlette(routes=[Route("/v1/models", models)])


def test_a_second_served_model_does_not_change_the_envs_version(service_factory):
    """Groups are labelled with the oldest version of this env's model only: a ready replica of
    another model at version 0 once made every group look stale (issue 30, item 3)."""
    from tests.helpers.serving import served

    registry = service_factory("registry", ["--probe-interval-seconds", "0.2"])
    closed = f"http://127.0.0.1:{free_port()}"
    settings = EnvSettings(task="harbor", sandbox_environment="host", tasks_dir=REPO / "examples" / "tasks", registry_url=registry.url,
                           proxy_url=closed, batcher_url=closed, served_model="policy")
    metrics = CollectorRegistry()
    runner = HarborEnvRunner(settings, EnvMetrics(metrics), HarborMetrics(metrics), sandbox=UnusedSandbox())

    async def scenario(policy_url: str, other_url: str) -> tuple[int | None, int, int]:
        client = RegistryClient(registry.url)
        try:
            await client.put("policy-a", EndpointRegistration(url=policy_url, model="policy", weight_version=4))
            await client.put("policy-b", EndpointRegistration(url=policy_url, model="policy", weight_version=5))
            await client.put("evaluator", EndpointRegistration(url=other_url, model="evaluator", weight_version=0))
            for _ in range(100):  # the registry probes each /v1/models before it calls a replica ready
                if len((await client.list(ready=True)).endpoints) == 3:
                    break
                await asyncio.sleep(0.1)
            ready = len((await client.list(ready=True)).endpoints)
            return await runner.weight_version(), await runner.policy_version(), ready
        finally:
            await client.aclose()
            await runner.aclose()

    with served(models_endpoint("policy")) as policy_url, served(models_endpoint("evaluator")) as other_url:
        version, newest, ready = asyncio.run(scenario(policy_url, other_url))
    assert ready == 3  # the other model's replica is ready too: only the filter leaves it out
    assert version == 4 and newest == 5
