"""A trainer killed between checkpoints: the batches it trained and lost are served to it again, in
order and with their step numbers, before anything new (``replay_unsaved``); over a batcher
restart and a log compaction alike. The real app and service on a real log on tmp disk."""

from __future__ import annotations

import asyncio

import orjson
import pytest
from fastapi.testclient import TestClient

from rlstack.batcher.app import build_app
from rlstack.batcher.config import BatcherSettings
from rlstack.batcher.service import BatcherService
from rlstack.batcher.wal import WriteAheadLog
from rlstack.common.contracts.atropos import (
    SAVED_STEP_HEADER,
    EnvRegistration,
    TrainerRegistration,
)
from tests.helpers.groups import env_registration, make_group, trainer_registration


def trainer(starting_step: int = 0, replay: bool = True) -> dict:
    return {**trainer_registration(batch_size=2), "starting_step": starting_step, "replay_unsaved": replay}


def tokens(batch: list[dict]) -> list:
    return [g["tokens"] for g in batch]


@pytest.fixture
def client(tmp_path):
    with TestClient(build_app(BatcherSettings(data_dir=tmp_path / "wal"))) as c:
        assert c.post("/register", json=trainer()).status_code == 200
        c.post("/register-env", json=env_registration(group_size=2))
        for seed in range(6):
            c.post("/scored_data", json=make_group(seed=seed))
        yield c


def test_a_resumed_trainer_gets_the_batches_after_its_checkpoint_again(client):
    served = [client.get("/batch", headers={SAVED_STEP_HEADER: "0"}).json()["batch"] for _ in range(3)]
    assert client.post("/register", json=trainer(starting_step=1)).status_code == 200  # back from step 1's checkpoint
    again = [client.get("/batch", headers={SAVED_STEP_HEADER: "1"}).json()["batch"] for _ in range(2)]
    assert tokens(again[0]) == tokens(served[1]) and tokens(again[1]) == tokens(served[2])
    assert client.get("/status").json()["current_step"] == 3
    assert tokens(client.get("/batch").json()["batch"]) == [make_group(seed=3)["tokens"]]  # then what is new
    assert client.get("/status").json()["current_step"] == 4


def test_what_a_checkpoint_holds_is_not_served_again(client):
    for saved in ("0", "1", "2"):
        client.get("/batch", headers={SAVED_STEP_HEADER: saved})
    client.get("/batch", headers={SAVED_STEP_HEADER: "3"})  # steps 1-3 saved; step 4 served
    assert client.post("/register", json=trainer(starting_step=3)).status_code == 200
    assert tokens(client.get("/batch").json()["batch"]) == [make_group(seed=3)["tokens"]]  # step 4 again
    assert tokens(client.get("/batch").json()["batch"]) == [make_group(seed=4)["tokens"]]


def test_an_atropos_trainer_that_asks_for_no_replay_gets_new_batches(tmp_path):
    with TestClient(build_app(BatcherSettings(data_dir=tmp_path / "wal"))) as c:
        c.post("/register", json=trainer(replay=False))
        c.post("/register-env", json=env_registration(group_size=2))
        for seed in range(6):
            c.post("/scored_data", json=make_group(seed=seed))
        first = c.get("/batch").json()["batch"]
        c.post("/register", json=trainer(starting_step=0, replay=False))
        assert tokens(c.get("/batch").json()["batch"]) != tokens(first)


@pytest.mark.parametrize("value", ["-1", "two", "1e3", "9" * 13])
def test_a_bad_saved_step_header_is_a_422_naming_it(client, value):
    r = client.get("/batch", headers={SAVED_STEP_HEADER: value})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["header", SAVED_STEP_HEADER]
    assert client.get("/status").json() == {"current_step": 0, "queue_size": 6}  # nothing taken


@pytest.mark.parametrize("compact", [False, True])
def test_the_replay_survives_a_batcher_restart_midway(tmp_path, compact):
    settings = BatcherSettings(data_dir=tmp_path, compact_min_bytes=0)

    async def start() -> BatcherService:
        svc = BatcherService(settings, WriteAheadLog(tmp_path / "batcher.wal", "fsync"))
        svc.replay()
        return svc

    async def run() -> None:
        svc = await start()
        await svc.register_trainer(TrainerRegistration.model_validate(trainer()))
        await svc.register_env(EnvRegistration.model_validate(env_registration(group_size=2)))
        for seed in range(8):
            await svc.post_groups(orjson.dumps(make_group(seed=seed)), as_list=False)
        served = [orjson.loads(await svc.next_batch(saved_step=0))["batch"] for _ in range(3)]
        await svc.register_trainer(TrainerRegistration.model_validate(trainer(starting_step=0)))
        assert tokens(orjson.loads(await svc.next_batch(saved_step=0))["batch"]) == tokens(served[0])
        if compact:
            await svc.wal.rewrite(svc._snapshot_records)  # as maybe_compact does once the log is large
        await svc.wal.close()

        again = await start()  # the batcher killed while the trainer catches up
        assert [tokens(orjson.loads(await again.next_batch(saved_step=0))["batch"]) for _ in range(2)] == [tokens(b) for b in served[1:]]
        assert again.state.step == 3
        new = orjson.loads(await again.next_batch(saved_step=3))["batch"]
        assert tokens(new) == [make_group(seed=3)["tokens"]]
        assert list(again.state.served) == [4]
        await again.wal.close()

    asyncio.run(run())
