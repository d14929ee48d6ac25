"""What the batcher stores is what a trainer can use: hostile or sloppy groups are a 422 naming the field."""

import json

import pytest
from fastapi.testclient import TestClient

from rlstack.batcher.app import build_app
from rlstack.batcher.config import BatcherSettings
from tests.helpers.groups import env_registration, make_group, trainer_registration


@pytest.fixture
def client(tmp_path):
    with TestClient(build_app(BatcherSettings(data_dir=tmp_path / "wal"))) as c:
        assert c.post("/register", json=trainer_registration(batch_size=4, vocab_size=1000)).status_code == 200
        assert c.post("/register-env", json=env_registration(group_size=2)).json()["env_id"] == 0
        assert c.post("/register-env", json=env_registration(group_size=2, name="other")).json()["env_id"] == 1
        yield c


def good() -> dict:
    return make_group(seed=3, vocab=1000)


def mutate(path: tuple, value) -> dict:
    group = good()
    target = group
    for key in path[:-1]:
        target = target[key]
    target[path[-1]] = value
    return group


HOSTILE = [
    (("tokens", 0, 1), "5", ["tokens", 0, 1]),
    (("tokens", 0, 1), 5.0, ["tokens", 0, 1]),
    (("tokens", 0, 1), True, ["tokens", 0, 1]),
    (("tokens", 0, 1), -3, ["tokens", 0, 1]),
    (("tokens", 0, 1), 1000, ["tokens", 0, 1]),  # outside the trainer's vocabulary
    (("tokens", 0, 1), 2**70, ["tokens", 0, 1]),
    (("masks", 1, 5), True, ["masks", 1, 5]),
    (("masks", 1, 5), 7.5, ["masks", 1, 5]),
    (("scores", 0), "1.0", ["scores", 0]),
    (("scores", 0), 1e308, ["scores", 0]),
    (("scores", 1), -1e308, ["scores", 1]),
    (("scores", 1), True, ["scores", 1]),
    (("inference_logprobs", 0, 3), "x", ["inference_logprobs", 0, 3]),
    (("env_id",), -1, ["env_id"]),
    (("env_id",), -5, ["env_id"]),
    (("weight_version",), 2**64, ["weight_version"]),
]


@pytest.mark.parametrize(("path", "value", "loc"), HOSTILE, ids=[f"{p}={v!r}" for p, v, _ in HOSTILE])
def test_hostile_values_are_refused_naming_the_field(client, path, value, loc):
    body = json.dumps(mutate(path, value))  # the stdlib writes ints past 64 bits; orjson refuses
    r = client.post("/scored_data", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 422, r.text
    assert any(e["loc"][1:len(loc) + 1] == loc for e in r.json()["detail"]), r.json()
    assert client.get("/status").json()["queue_size"] == 0


def test_per_sequence_advantages_must_be_finite_numbers(client):
    group = {**good(), "advantages": [[1e308], [0.0]]}
    r = client.post("/scored_data", json=group)
    assert r.status_code == 422 and r.json()["detail"][0]["loc"][:3] == ["body", "advantages", 0]


def test_negative_env_id_does_not_read_another_envs_slot(client):
    r = client.request("GET", "/status-env", params={"env_id": -1})
    assert r.status_code == 404 and r.json()["detail"][0]["loc"] == ["body", "env_id"]
    assert client.post("/disconnect-env", json={"env_id": -1}).status_code == 422
    # env 1 is still connected: status for it is the normal answer
    assert client.request("GET", "/status-env", params={"env_id": 1}).status_code == 200


def test_vocab_bound_comes_from_settings_when_the_trainer_does_not_say(tmp_path):
    with TestClient(build_app(BatcherSettings(data_dir=tmp_path / "w", vocab_size=500))) as c:
        c.post("/register", json=trainer_registration(batch_size=4))
        c.post("/register-env", json=env_registration(group_size=2))
        r = c.post("/scored_data", json=make_group(seed=1, vocab=100_000))
        assert r.status_code == 422 and "outside the vocabulary (500)" in r.json()["detail"][0]["msg"]
        assert c.post("/scored_data", json=make_group(seed=1, vocab=500)).status_code == 200


def test_what_is_served_is_what_was_validated(client):
    """A lone group is served as the client's bytes: the stored bytes parse to exactly the ints the trainer needs."""
    group = good()
    assert client.post("/scored_data", json=group).status_code == 200
    assert client.post("/scored_data", json=make_group(seed=4, vocab=1000)).status_code == 200
    served = client.get("/batch").json()["batch"][0]
    assert served["tokens"] == group["tokens"]
    assert all(type(t) is int for row in served["tokens"] for t in row)
    assert all(type(m) is int for row in served["masks"] for m in row)


def test_huge_env_weight_is_refused_not_a_500(client):
    r = client.post("/register-env", json=env_registration(weight=1e308))
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "weight"]
