"""ApiCalls against the Kubernetes API emulator over real HTTP (lightkube's AsyncClient): what is
retried, what is not, what is counted, and how fast creates leave when a batch of trials starts."""

from __future__ import annotations

import asyncio
import time

import pytest
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Pod
from prometheus_client import CollectorRegistry

from rlstack.common.ports import free_port
from rlstack.episodes.sandboxes.api_calls import ApiCalls, ApiCallSettings
from rlstack.kube.connection import connect

NS = "rl"
FAST = ApiCallSettings(base_delay=0.01, max_delay=0.05)
"""Back-off short enough for a test; what is retried does not depend on it."""


def pod(name: str) -> Pod:
    return Pod.from_dict({"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "labels": {"harbor-run": "r"}},
                          "spec": {"containers": [{"name": "main", "image": "scratch"}]}})


def sample(registry: CollectorRegistry, name: str, verb: str, code: str) -> float:
    return registry.get_sample_value(name, {"verb": verb, "code": code}) or 0.0


def test_a_429_is_retried_after_its_retry_after_and_lands_exactly_one_pod(kube_api):
    """The server's priority-and-fairness filter answered "later": the create comes back no sooner
    than it asked, once, and one pod exists."""
    registry = CollectorRegistry()
    kube_api.fail_next("create", 429, retry_after=1)

    async def scenario() -> Pod:
        calls, client = ApiCalls(FAST, registry), connect(kube_api.url, NS)
        return await calls.call("create", lambda: client.create(pod("p-1"), namespace=NS))

    created = asyncio.run(scenario())
    assert created.metadata.name == "p-1" and list(kube_api.pods) == [(NS, "p-1")]
    first, second = kube_api.times("create")
    assert second - first >= 1.0  # Retry-After: 1, not the 10 ms back-off
    assert sample(registry, "rlstack_sandbox_api_requests_total", "create", "429") == 1
    assert sample(registry, "rlstack_sandbox_api_requests_total", "create", "201") == 1
    assert sample(registry, "rlstack_sandbox_api_retries_total", "create", "429") == 1


def test_a_create_whose_answer_was_lost_is_not_made_twice(kube_api):
    """A 500 after the pod was written: the retry meets the pod (409, raised for the caller, which
    reads the pod back); there is never a second pod for the trial."""
    registry = CollectorRegistry()
    kube_api.fail_next("create", 500, after_commit=True)

    async def scenario() -> None:
        calls, client = ApiCalls(FAST, registry), connect(kube_api.url, NS)
        await calls.call("create", lambda: client.create(pod("p-1"), namespace=NS))

    with pytest.raises(ApiError) as raised:
        asyncio.run(scenario())
    assert raised.value.status.code == 409
    assert list(kube_api.pods) == [(NS, "p-1")] and len(kube_api.times("create")) == 2
    assert sample(registry, "rlstack_sandbox_api_retries_total", "create", "500") == 1


def test_three_500s_then_an_answer_returns_the_answer(kube_api):
    registry = CollectorRegistry()
    kube_api.add_pod(NS, "p-1", {"harbor-run": "r"})
    kube_api.fail_next("get", 500, times=3)

    async def scenario() -> Pod:
        calls, client = ApiCalls(FAST, registry), connect(kube_api.url, NS)
        return await calls.call("get", lambda: client.get(Pod, "p-1", namespace=NS))

    assert asyncio.run(scenario()).metadata.name == "p-1"
    assert len(kube_api.times("get")) == 4
    assert sample(registry, "rlstack_sandbox_api_requests_total", "get", "500") == 3
    assert sample(registry, "rlstack_sandbox_api_requests_total", "get", "200") == 1
    assert sample(registry, "rlstack_sandbox_api_retries_total", "get", "500") == 3


def test_a_403_is_raised_at_once(kube_api):
    """Forbidden is the Role's answer: no retry changes it."""
    registry = CollectorRegistry()
    kube_api.fail_next("create", 403)

    async def scenario() -> None:
        calls, client = ApiCalls(FAST, registry), connect(kube_api.url, NS)
        await calls.call("create", lambda: client.create(pod("p-1"), namespace=NS))

    with pytest.raises(ApiError) as raised:
        asyncio.run(scenario())
    assert raised.value.status.code == 403
    assert len(kube_api.times("create")) == 1 and kube_api.pods == {}
    assert sample(registry, "rlstack_sandbox_api_requests_total", "create", "403") == 1
    assert sample(registry, "rlstack_sandbox_api_retries_total", "create", "403") == 0


def test_retries_stop_at_max_attempts_with_the_last_error(kube_api):
    kube_api.fail_next("get", 503, times=10)

    async def scenario() -> None:
        calls = ApiCalls(FAST.model_copy(update={"max_attempts": 3}))
        client = connect(kube_api.url, NS)
        await calls.call("get", lambda: client.get(Pod, "p-1", namespace=NS))

    with pytest.raises(ApiError) as raised:
        asyncio.run(scenario())
    assert raised.value.status.code == 503 and len(kube_api.times("get")) == 3


def test_a_connection_failure_is_retried_and_counted_as_error(kube_api):
    """Nothing listens on the first address (lightkube's own transport error, from httpx2)."""
    registry = CollectorRegistry()
    kube_api.add_pod(NS, "p-1", {"harbor-run": "r"})

    async def scenario() -> Pod:
        calls = ApiCalls(FAST, registry)
        clients = iter([connect(f"http://127.0.0.1:{free_port()}", NS), connect(kube_api.url, NS)])
        return await calls.call("get", lambda: next(clients).get(Pod, "p-1", namespace=NS))

    assert asyncio.run(scenario()).metadata.name == "p-1"
    assert sample(registry, "rlstack_sandbox_api_requests_total", "get", "error") == 1
    assert sample(registry, "rlstack_sandbox_api_retries_total", "get", "error") == 1
    assert len(kube_api.times("get")) == 1


def test_creates_leave_at_the_set_rate_after_the_burst(kube_api):
    """Ten trials started together at 5 creates/s with a burst of 2: two at once, then one per
    0.2 s, so the tenth leaves 1.6 s after the first and no second holds more than 7. Timed where
    each create leaves the limiter: when they reach the server also depends on the connection (a
    first request slowed by its connect arrived late on busy cores, shortening the span)."""
    left: list[float] = []

    def create(client, i: int):  # noqa: ANN001, ANN202
        left.append(time.monotonic())
        return client.create(pod(f"p-{i}"), namespace=NS)

    async def scenario() -> None:
        calls, client = ApiCalls(FAST), connect(kube_api.url, NS)
        calls.set_create_rate(5, burst=2)
        await asyncio.gather(*(calls.call("create", lambda i=i: create(client, i)) for i in range(10)))

    asyncio.run(scenario())
    assert len(kube_api.times("create")) == 10 and len(kube_api.pods) == 10
    assert len(left) == 10 and left[-1] - left[0] >= 1.5
    assert max(sum(1 for t in left if start <= t < start + 1.0) for start in left) <= 7


def test_a_429_on_one_create_holds_the_others_for_its_retry_after(kube_api):
    """The server asked this client for quiet: a create started after the 429 waits it out too."""
    kube_api.fail_next("create", 429, retry_after=1)

    async def scenario() -> None:
        calls, client = ApiCalls(FAST), connect(kube_api.url, NS)
        first = asyncio.create_task(calls.call("create", lambda: client.create(pod("p-0"), namespace=NS)))
        async with asyncio.timeout(10):
            while calls.bucket.not_before == 0:
                await asyncio.sleep(0.01)
        await calls.call("create", lambda: client.create(pod("p-1"), namespace=NS))
        await first

    asyncio.run(scenario())
    refused, *later = kube_api.times("create")
    assert len(later) == 2 and min(later) - refused >= 1.0
    assert sorted(name for _, name in kube_api.pods) == ["p-0", "p-1"]
