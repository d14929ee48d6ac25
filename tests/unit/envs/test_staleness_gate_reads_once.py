"""Groups waiting at the staleness gate share one read of the policy's version, however many wait."""

from __future__ import annotations

import asyncio

from prometheus_client import CollectorRegistry

from rlstack.envs.config import EnvSettings
from rlstack.envs.harbor_metrics import HarborMetrics
from rlstack.envs.harbor_runner import HarborEnvRunner
from rlstack.envs.runner import EnvMetrics
from tests.conftest import REPO
from tests.unit.envs.test_agent_trials import UnusedSandbox


def test_a_hundred_waiting_groups_read_the_version_about_twice_a_second():
    s = EnvSettings(task="harbor", sandbox_environment="host", tasks_dir=REPO / "examples" / "tasks", group_size=2, max_staleness=0)
    registry = CollectorRegistry()
    r = HarborEnvRunner(s, EnvMetrics(registry), HarborMetrics(registry), sandbox=UnusedSandbox())
    r.batch_size = 2  # one group per batch: at version 0 the gate holds one group
    reads = {"n": 0, "version": 0}

    async def served_version() -> int:
        reads["n"] += 1
        await asyncio.sleep(0.01)  # a registry round trip
        return reads["version"]

    r.policy_version = served_version

    async def scenario() -> None:
        r.groups_started = 1
        waiting = [asyncio.create_task(r._wait_for_staleness_room()) for _ in range(100)]
        await asyncio.sleep(1.2)
        assert not any(w.done() for w in waiting)
        reads["version"] = 200  # room for every group
        await asyncio.wait_for(asyncio.gather(*waiting), 5)

    asyncio.run(scenario())
    assert reads["n"] <= 5  # one read per 0.5 s shared by all (was one per group per 0.5 s: ~300)
