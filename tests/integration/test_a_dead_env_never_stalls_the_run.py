"""A killed env server must not stall the run (issue 38): the stall `make run-agent` met, replayed
against a real batcher process with the env server's own ``EnvRunner``; nothing is rolled out.

What happened: batch 32, groups of 8, ``max_batches_offpolicy`` 1. Env 0 was SIGKILLed and never
disconnected; its restart registered as env 1, posted 3 groups (24 sequences), and then held back
forever: env 0 still took half the weight, so env 1's share was 16 sequences and it had 24.
"""

from __future__ import annotations

import asyncio
import time

import httpx
from prometheus_client import CollectorRegistry

from rlstack.common.batcher_client import BatcherClient
from rlstack.common.contracts.progress import ProgressReport
from rlstack.envs.config import EnvSettings
from rlstack.envs.runner import EnvMetrics, EnvRunner
from rlstack.ops.doctor import judge_progress
from tests.conftest import free_port
from tests.helpers.groups import env_registration, make_group, trainer_registration
from tests.helpers.prometheus import metric as sample

BATCH, GROUP = 32, 8


def _stage_the_stall(batcher_url: str) -> tuple[int, int]:
    """The trainer, the dead env 0, and env 1 with its 3 groups queued; the trainer's poll comes back empty."""
    httpx.post(f"{batcher_url}/register", json=trainer_registration(batch_size=BATCH)).raise_for_status()
    dead = httpx.post(f"{batcher_url}/register-env", json=env_registration(group_size=GROUP, name="agent")).json()["env_id"]
    alive = httpx.post(f"{batcher_url}/register-env", json=env_registration(group_size=GROUP, name="agent")).json()["env_id"]
    for seed in range(3):
        httpx.post(f"{batcher_url}/scored_data", json=make_group(size=GROUP, env_id=alive, seed=seed)).raise_for_status()
    assert httpx.get(f"{batcher_url}/batch").json()["batch"] is None  # 24 of 32: the trainer waits
    return dead, alive


def _runner(batcher_url: str) -> EnvRunner:
    settings = EnvSettings(name="agent", batcher_url=batcher_url, proxy_url=f"http://127.0.0.1:{free_port()}",
                           group_size=GROUP, max_batches_offpolicy=1)
    return EnvRunner(settings, EnvMetrics(CollectorRegistry()))


def test_an_env_is_never_held_back_below_a_batch_while_the_trainer_waits(service_factory, tmp_path):
    """Red before the fix: env 1's share (16 of 32, the dead env counted) held it back for good."""
    batcher = service_factory("batcher", ["--data-dir", str(tmp_path / "wal")])
    dead, alive = _stage_the_stall(batcher.url)
    runner = _runner(batcher.url)
    runner.env_id, runner.batch_size = alive, BATCH  # env 1 as registered

    async def decide() -> bool:
        try:
            return await runner.backlog_full()
        finally:
            await runner.aclose()

    assert asyncio.run(decide()) is False  # it produces: the trainer is waiting
    # What it produces makes the batch: the run goes on, the dead env's slot notwithstanding.
    httpx.post(f"{batcher.url}/scored_data", json=make_group(size=GROUP, env_id=alive, seed=9)).raise_for_status()
    batch = httpx.get(f"{batcher.url}/batch").json()["batch"]
    assert batch is not None and sum(len(g["tokens"]) for g in batch) == BATCH


def test_a_silent_env_loses_its_share_when_its_lease_runs_out(service_factory, tmp_path):
    batcher = service_factory("batcher", ["--data-dir", str(tmp_path / "wal"), "--env-lease-seconds", "1"])
    dead, alive = _stage_the_stall(batcher.url)
    status = lambda: httpx.request("GET", f"{batcher.url}/status-env", json={"env_id": alive}).json()  # noqa: E731
    assert status()["env_weight"] == 0.5  # both registered moments ago
    deadline = time.monotonic() + 10
    while status()["env_weight"] != 1.0 and time.monotonic() < deadline:  # env 1's polls keep its own lease
        time.sleep(0.2)
    assert status()["env_weight"] == 1.0
    report = ProgressReport.model_validate(httpx.get(f"{batcher.url}/progress").json())
    by_id = {e.env_id: e for e in report.envs}
    assert not by_id[dead].live and by_id[alive].live and by_id[alive].queued_sequences == 24
    # The live env goes on polling while the once-a-second sweep names the silent one: a wait without
    # polls lets its own 1 s lease lapse too (a CI run read 0 envs live after a slow sweep).
    while f"env {dead} (agent_0) silent" not in batcher.log() and time.monotonic() < deadline:
        status()
        time.sleep(0.2)
    status()
    metrics = httpx.get(f"{batcher.url}/metrics").text
    assert sample(metrics, "rlstack_batcher_env_leases_expired_total") == 1
    assert sample(metrics, "rlstack_batcher_envs_live") == 1
    assert f"env {dead} (agent_0) silent" in batcher.log()
    # The dead env polls again (it was only paused): it takes its share again.
    httpx.request("GET", f"{batcher.url}/status-env", json={"env_id": dead}).raise_for_status()
    assert status()["env_weight"] == 0.5


def test_a_stall_is_named_in_the_log_a_metric_progress_and_doctor(service_factory, tmp_path):
    batcher = service_factory("batcher", ["--data-dir", str(tmp_path / "wal"), "--stall-after-seconds", "1",
                                          "--env-lease-seconds", "2"])
    dead, alive = _stage_the_stall(batcher.url)
    client = BatcherClient(batcher.url)

    async def hold_back_while_the_trainer_polls() -> ProgressReport:
        try:
            deadline = time.monotonic() + 15
            while time.monotonic() < deadline:
                await client.env_status(alive, holding_back="staleness")  # a rule that is not ours to overrule
                assert (await client.batch()) is None
                report = await client.progress()
                dead_live = any(e.live for e in report.envs if e.env_id == dead)
                if report.stalled and not dead_live and "run stalled" in batcher.log():
                    return report
                await asyncio.sleep(0.2)
            raise AssertionError(f"no stall named:\n{batcher.log()[-3000:]}")
        finally:
            await client.aclose()

    report = asyncio.run(hold_back_while_the_trainer_polls())
    said = report.describe()
    assert "trainer waiting" in said and f"for {BATCH} sequences; queue 24" in said
    assert f"envs holding back: agent_1 (env {alive}: 24 queued" in said and "staleness" in said
    metrics = httpx.get(f"{batcher.url}/metrics").text
    assert sample(metrics, "rlstack_batcher_stalled") == 1 and sample(metrics, "rlstack_batcher_stalls_total") == 1
    assert "run stalled: trainer waiting" in batcher.log()
    check = judge_progress(report)
    assert not check.ok and "every live env holds back" in check.remedy and "queue 24" in check.detail
    assert "1 env(s) went silent" in check.remedy and f"silent, lease expired: agent_0 (env {dead}" in check.detail

    # A group arrives, the trainer takes its batch: the stall is over and said to be.
    httpx.post(f"{batcher.url}/scored_data", json=make_group(size=GROUP, env_id=alive, seed=9)).raise_for_status()
    assert httpx.get(f"{batcher.url}/batch").json()["batch"] is not None
    deadline = time.monotonic() + 10
    while "stall over after" not in batcher.log() and time.monotonic() < deadline:
        time.sleep(0.2)
    assert "stall over after" in batcher.log()
    assert sample(httpx.get(f"{batcher.url}/metrics").text, "rlstack_batcher_stalled") == 0
