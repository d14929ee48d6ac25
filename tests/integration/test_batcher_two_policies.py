"""Two trainers, one batcher process (issue 53): each trainer's client (the one the trainer runs)
registers its policy and takes batches of its own policy's groups only, over real HTTP; a client
naming no policy, as Atropos's do, is the first policy's."""

from __future__ import annotations

import asyncio
import json

import httpx

from rlstack.common.batcher_client import BatcherClient
from rlstack.common.contracts.atropos import TrainerRegistration
from tests.helpers.groups import env_registration, make_group, trainer_registration


def test_each_trainer_client_takes_its_own_policys_batches(service_factory, tmp_path):
    batcher = service_factory("batcher", ["--policies", json.dumps(["lead", "helper"]), "--durability", "flush",
                                          "--data-dir", str(tmp_path / "batcher")])  # not the checkout's shared default

    async def run() -> tuple[list, list, list | None, dict]:
        lead, helper = BatcherClient(batcher.url), BatcherClient(batcher.url)
        await lead.register_trainer(TrainerRegistration.model_validate(trainer_registration(batch_size=2, policy="lead")))
        await helper.register_trainer(TrainerRegistration.model_validate(trainer_registration(batch_size=2, policy="helper")))
        async with httpx.AsyncClient(base_url=batcher.url) as client:
            env = (await client.post("/register-env", json=env_registration())).json()["env_id"]
            groups = []
            for seed, policy in enumerate(["helper", "lead", "helper"]):
                group = make_group(seed=seed, env_id=env)
                group.update(policy=policy, trials=[0, 1])
                groups.append(group)
            assert (await client.post("/scored_data_list", json=groups, headers={"Idempotency-Key": "trial-group-1"})).status_code == 200
            info = (await client.get("/info", params={"policy": "helper"})).json()
        got_lead = await lead.batch(policy="lead")
        got_helper = [await helper.batch(policy="helper") for _ in range(2)]
        atropos = await BatcherClient(batcher.url).batch()  # no policy: the first's, now empty
        for c in (lead, helper):
            await c.aclose()
        return got_lead, got_helper, atropos, info

    lead, helper, atropos, info = asyncio.run(run())
    assert [g["tokens"] for g in lead] == [make_group(seed=1)["tokens"]] and lead[0]["policy"] == "lead"
    assert [[g["tokens"] for g in b] for b in helper] == [[make_group(seed=0)["tokens"]], [make_group(seed=2)["tokens"]]]
    assert atropos is None and info["batch_size"] == 2
