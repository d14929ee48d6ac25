"""An env's back-pressure counts its own groups in the batcher, not every env's (issue 22, item 6).

`make e2e` trains on arithmetic, then upgrades to the agent env: the arithmetic groups the
finished trainer never took still fill the queue. An env reading the global queue size would
start no trial at all. Real batcher process, real ``EnvRunner``; nothing is rolled out.
"""

from __future__ import annotations

import asyncio

import httpx
from prometheus_client import CollectorRegistry

from rlstack.envs.config import EnvSettings
from rlstack.envs.runner import EnvMetrics, EnvRunner
from tests.conftest import free_port
from tests.helpers.groups import env_registration, make_group, trainer_registration


def test_groups_left_by_another_env_do_not_hold_a_new_env_back(service_factory, tmp_path):
    batcher = service_factory("batcher", ["--data-dir", str(tmp_path / "wal")])
    httpx.post(f"{batcher.url}/register", json=trainer_registration(batch_size=4)).raise_for_status()
    old = httpx.post(f"{batcher.url}/register-env", json=env_registration(group_size=2, name="arith")).json()["env_id"]
    for seed in range(6):  # three batches waiting, more than max_batches_offpolicy (2)
        httpx.post(f"{batcher.url}/scored_data", json=make_group(size=2, env_id=old, seed=seed)).raise_for_status()

    settings = EnvSettings(name="agent", batcher_url=batcher.url, proxy_url=f"http://127.0.0.1:{free_port()}",
                           group_size=2, max_batches_offpolicy=2)
    runner = EnvRunner(settings, EnvMetrics(CollectorRegistry()))

    async def scenario() -> tuple[bool, bool]:
        try:
            await runner.register()
            before = await runner.backlog_full()
            for seed in range(4):  # its own share: two envs of equal weight, half of 2 batches of 4
                group = make_group(size=2, env_id=runner.env_id, seed=100 + seed)
                httpx.post(f"{batcher.url}/scored_data", json=group).raise_for_status()
            return before, await runner.backlog_full()
        finally:
            await runner.aclose()

    before, after = asyncio.run(scenario())
    assert before is False  # the queue is full of the other env's groups: this env still produces
    assert after is True  # its own groups fill its share: it holds back
