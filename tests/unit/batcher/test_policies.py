"""Two policies behind one batcher (issue 53): each policy's trainer takes batches of its own groups
only, a trial group's per-policy groups land once under one key, an undeclared policy is refused
naming it, and a restart (with or without compaction) puts every group and step back in its
policy's queue. The real service on a real log on disk."""

from __future__ import annotations

import asyncio

import orjson
import pytest

from rlstack.batcher.config import BatcherSettings
from rlstack.batcher.service import BatcherService
from rlstack.batcher.validation import GroupRejected
from rlstack.batcher.wal import WriteAheadLog
from rlstack.common.contracts.atropos import EnvRegistration, EnvStatusQuery, TrainerRegistration
from tests.helpers.groups import env_registration, make_group, trainer_registration

POLICIES = ["lead", "helper"]


def tagged(policy: str | None, seed: int, members: int = 2) -> dict:
    group = make_group(size=members, seed=seed)
    group["trials"] = list(range(members))
    if policy is not None:
        group["policy"] = policy
    return group


def tokens(batch: list[dict]) -> list:
    return [g["tokens"] for g in batch]


async def start(settings: BatcherSettings) -> BatcherService:
    svc = BatcherService(settings, WriteAheadLog(settings.data_dir / "batcher.wal", "fsync"))
    svc.replay()
    return svc


def test_each_trainer_takes_its_own_policys_groups_only(tmp_path):
    async def run() -> None:
        svc = await start(BatcherSettings(data_dir=tmp_path, policies=POLICIES))
        lead_trainer = trainer_registration(batch_size=2, policy="lead", num_steps=1)
        await svc.register_trainer(TrainerRegistration.model_validate(lead_trainer))
        assert (await svc.register_env(EnvRegistration.model_validate(env_registration())))["status"] == "wait for trainer to start"
        await svc.register_trainer(TrainerRegistration.model_validate(trainer_registration(batch_size=3, policy="helper")))
        assert (await svc.register_env(EnvRegistration.model_validate(env_registration())))["env_id"] == 0
        # One trial group: the lead's rows of both trials, and the helper's of the one trial that delegated.
        body = orjson.dumps([tagged("lead", 1), tagged("helper", 2, members=1), tagged("helper", 3, members=2)])
        assert await svc.post_groups(body, as_list=True, key="group-1") == (3, False)
        assert await svc.post_groups(body, as_list=True, key="group-1") == (3, True)  # a retry lands once
        lead = orjson.loads(await svc.next_batch(None, "lead"))["batch"]
        default = orjson.loads(await svc.next_batch(None))["batch"]  # no policy named: the first's queue
        helper = orjson.loads(await svc.next_batch(None, "helper"))["batch"]
        assert tokens(lead) == [make_group(seed=1)["tokens"]] and default is None
        assert tokens(helper) == [make_group(size=1, seed=2)["tokens"], make_group(seed=3)["tokens"]]
        assert svc.states["lead"].step == 1 and svc.states["helper"].step == 1
        status, _ = svc.env_status(EnvStatusQuery(env_id=0))
        assert set(status["policies"]) == {"lead", "helper"} and status["policies"]["helper"]["batch_size"] == 3
        # the lead's trainer took the one step it registered for: envs stop waiting on it, not on the helper's
        assert status["policies"]["lead"]["trainer_done"] and not status["policies"]["helper"]["trainer_done"]
        await svc.wal.close()

    asyncio.run(run())


def test_an_undeclared_policy_is_refused_naming_it(tmp_path):
    async def run() -> None:
        svc = await start(BatcherSettings(data_dir=tmp_path, policies=POLICIES))
        with pytest.raises(GroupRejected) as refused:
            await svc.register_trainer(TrainerRegistration.model_validate(trainer_registration(policy="critic")))
        assert "policy 'critic' is not one of this batcher's ['lead', 'helper']" in str(refused.value.errors)
        for policy in POLICIES:
            await svc.register_trainer(TrainerRegistration.model_validate(trainer_registration(batch_size=2, policy=policy)))
        await svc.register_env(EnvRegistration.model_validate(env_registration()))
        with pytest.raises(GroupRejected) as refused:
            await svc.post_groups(orjson.dumps([tagged("lead", 1), tagged("critic", 2)]), as_list=True)
        assert refused.value.status_code == 422 and refused.value.errors[0]["loc"][-2:] == [1, "policy"]
        assert svc.queued_sequences == 0  # nothing of a refused request is queued
        with pytest.raises(GroupRejected):
            await svc.next_batch(None, "critic")
        await svc.wal.close()

    asyncio.run(run())


@pytest.mark.parametrize("compact", [False, True])
def test_a_restart_puts_every_group_and_step_back_in_its_policys_queue(tmp_path, compact):
    settings = BatcherSettings(data_dir=tmp_path, policies=POLICIES)

    async def run() -> None:
        svc = await start(settings)
        for policy in POLICIES:
            await svc.register_trainer(TrainerRegistration.model_validate(trainer_registration(batch_size=2, policy=policy)))
        await svc.register_env(EnvRegistration.model_validate(env_registration()))
        for seed in range(3):
            await svc.post_groups(orjson.dumps([tagged("lead", 10 + seed), tagged("helper", 20 + seed)]), as_list=True,
                                  key=f"g{seed}")
        served = orjson.loads(await svc.next_batch(None, "helper"))["batch"]
        assert tokens(served) == [make_group(seed=20)["tokens"]]
        if compact:
            await svc.wal.rewrite(svc._snapshot_records)  # as maybe_compact does once the log is large
        await svc.wal.close()

        again = await start(settings)
        assert again.states["helper"].step == 1 and again.states["lead"].step == 0
        assert again.states["lead"].trainer is not None and again.states["helper"].trainer is not None
        assert [len(again.states[p].queue) for p in POLICIES] == [3, 2]
        lead = orjson.loads(await again.next_batch(None, "lead"))["batch"]
        helper = orjson.loads(await again.next_batch(None, "helper"))["batch"]
        assert tokens(lead) == [make_group(seed=10)["tokens"]] and tokens(helper) == [make_group(seed=21)["tokens"]]
        assert await again.post_groups(orjson.dumps([tagged("lead", 12), tagged("helper", 22)]), as_list=True,
                                       key="g2") == (2, True)  # the keys came back too
        await again.wal.close()

    asyncio.run(run())


def test_a_log_naming_a_policy_the_batcher_lacks_is_refused_at_start(tmp_path):
    async def run() -> None:
        svc = await start(BatcherSettings(data_dir=tmp_path, policies=POLICIES))
        await svc.register_trainer(TrainerRegistration.model_validate(trainer_registration(policy="helper")))
        await svc.wal.close()
        with pytest.raises(ValueError, match="the log names policy 'helper', which --policies"):
            await start(BatcherSettings(data_dir=tmp_path))

    asyncio.run(run())
