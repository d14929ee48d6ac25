"""Groups whose members (agent trials) bring several sequences: ``trials`` per row, checked, batched
whole under a trainer's ``batch_fill: at_least``, and advantages taken over members."""

import pytest
import torch

from rlstack.batcher.packing import select_at_least
from rlstack.trainer.batch import member_advantages, to_tensors
from tests.helpers.groups import env_registration, make_group, trainer_registration
from tests.unit.batcher.test_api import make_client  # noqa: F401 - the fixture


def member_group(trials: list[int], rewards: list[float], seed: int = 0) -> dict:
    group = make_group(size=len(trials), seed=seed)
    group["trials"] = trials
    group["scores"] = [rewards[m] for m in trials]
    return group


@pytest.fixture
def agent_batcher(make_client):  # noqa: F811 - pytest fixture injection
    c = make_client()
    assert c.post("/register", json=trainer_registration(batch_size=4, batch_fill="at_least")).status_code == 200
    assert c.post("/register-env", json=env_registration(group_size=2)).json()["env_id"] == 0
    return c


def test_members_not_rows_must_match_the_envs_group_size(agent_batcher):
    # Two trials, the first with a side call and a compacted segment: 4 rows, 2 members.
    assert agent_batcher.post("/scored_data", json=member_group([0, 0, 0, 1], [1.0, 0.0])).status_code == 200
    r = agent_batcher.post("/scored_data", json=member_group([0, 1, 2], [1.0, 0.0, 0.5]))
    assert r.status_code == 422 and "3 members (trials)" in r.json()["detail"][0]["msg"]


@pytest.mark.parametrize(("trials", "field", "what"), [
    ([0, 0, 1], "trials", "entries for 4 sequences"),
    ([0, 2, 2, 0], "trials", "0..n-1"),
])
def test_bad_member_indices_are_named(agent_batcher, trials, field, what):
    group = make_group(size=4)
    group["trials"] = trials
    r = agent_batcher.post("/scored_data", json=group)
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"][-1] == field and what in r.json()["detail"][0]["msg"]


def test_a_members_rows_must_carry_one_score(agent_batcher):
    group = make_group(size=3)
    group["trials"], group["scores"] = [0, 0, 1], [1.0, 0.5, 0.0]
    r = agent_batcher.post("/scored_data", json=group)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][-2:] == ["scores", 1]


def test_at_least_batches_take_whole_groups_of_any_size(agent_batcher):
    sizes = [[0, 0, 1], [0, 1, 1, 1, 1], [0, 1]]
    for seed, trials in enumerate(sizes):
        assert agent_batcher.post("/scored_data", json=member_group(trials, [1.0, 0.0], seed)).status_code == 200
    first = agent_batcher.get("/batch").json()["batch"]
    assert [len(g["tokens"]) for g in first] == [3, 5]  # 8 >= 4: no exact sum of 4 exists, nothing stalls
    assert first[0]["trials"] == [0, 0, 1]
    assert agent_batcher.get("/batch").json() == {"batch": None}  # 2 rows left: under batch_size


def test_an_exact_trainer_keeps_atropos_packing(make_client):  # noqa: F811
    c = make_client()
    c.post("/register", json=trainer_registration(batch_size=4))
    c.post("/register-env", json=env_registration(group_size=2))
    assert c.post("/scored_data", json=member_group([0, 0, 1], [1.0, 0.0])).status_code == 200
    assert c.post("/scored_data", json=member_group([0, 1], [1.0, 0.0], seed=1)).status_code == 200
    assert c.get("/batch").json() == {"batch": None}  # 3 + 2 is not 4


def test_select_at_least_is_oldest_first():
    assert select_at_least([(0, 3), (1, 5), (2, 2)], 4) == [0, 1]
    assert select_at_least([(0, 3)], 4) is None


def test_advantages_count_each_member_once():
    # Trial 0 (reward 1) brought three sequences, trial 1 (reward 0) one: the baseline is the
    # mean over trials (0.5), not over rows (0.75).
    adv = member_advantages(torch.tensor([1.0, 1.0, 1.0, 0.0]), [0, 0, 0, 1])
    assert adv[0] == adv[1] == adv[2] > 0 > adv[3] and torch.isclose(adv[0], -adv[3])
    batch = to_tensors([member_group([0, 0, 0, 1], [1.0, 0.0])])
    assert torch.allclose(batch.advantages, adv)
