"""The batcher's HTTP surface in-process (real app, real log on tmp disk, TestClient)."""

import gzip

import orjson
import pytest
from fastapi.testclient import TestClient

from rlstack.batcher.app import build_app
from rlstack.batcher.config import BatcherSettings
from tests.helpers.groups import env_registration, make_group, trainer_registration


@pytest.fixture
def make_client(tmp_path):
    clients = []

    def factory(**settings) -> TestClient:
        cfg = BatcherSettings(data_dir=tmp_path / "wal", **settings)
        client = TestClient(build_app(cfg))
        client.__enter__()
        clients.append(client)
        return client

    yield factory
    for c in clients:
        c.__exit__(None, None, None)


@pytest.fixture
def client(make_client):
    c = make_client()
    assert c.post("/register", json=trainer_registration(batch_size=4)).status_code == 200
    assert c.post("/register-env", json=env_registration(group_size=2)).json()["env_id"] == 0
    return c


def test_batch_before_register_is_atropos_error_shape(make_client):
    c = make_client()
    body = c.get("/batch").json()
    assert body["status"] == "error" and body["batch"] == []
    assert c.get("/info").json() == {"batch_size": -1, "max_token_len": -1, "batch_fill": "exact"}


def test_env_waits_for_trainer(make_client):
    c = make_client()
    assert c.post("/register-env", json=env_registration()).json() == {"status": "wait for trainer to start"}


def test_register_env_response_matches_atropos(client):
    body = client.post("/register-env", json=env_registration(name="arith")).json()
    assert body == {
        "status": "success", "env_id": 1, "wandb_name": "arith_1", "checkpoint_dir": "/tmp/ckpt",
        "starting_step": 0, "checkpoint_interval": 10, "num_steps": 100,
    }


def test_groups_come_back_in_order_as_whole_batches(client):
    for seed in range(5):
        assert client.post("/scored_data", json=make_group(seed=seed)).json() == {"status": "received"}
    first = client.get("/batch").json()["batch"]
    second = client.get("/batch").json()["batch"]
    assert [g["tokens"] for g in first] == [make_group(seed=0)["tokens"], make_group(seed=1)["tokens"]]
    assert [g["tokens"] for g in second] == [make_group(seed=2)["tokens"], make_group(seed=3)["tokens"]]
    assert client.get("/batch").json() == {"batch": None}  # one group left: not a whole batch
    assert client.get("/status").json() == {"current_step": 2, "queue_size": 1}


@pytest.mark.parametrize("as_list", [True, False])
def test_batch_items_carry_every_atropos_key(client, as_list):
    groups = [make_group(seed=1), {**make_group(seed=2), "advantages": [[1.0], [-1.0]]}]
    if as_list:
        client.post("/scored_data_list", json=groups)
    else:
        for g in groups:
            client.post("/scored_data", json=g)
    first, second = client.get("/batch").json()["batch"]
    assert first["tokens"] == groups[0]["tokens"] and first["inference_logprobs"] == groups[0]["inference_logprobs"]
    assert first["advantages"] is None and second["advantages"] == [[1.0], [-1.0]]
    item = first
    for key in ("tokens", "masks", "scores", "advantages", "ref_logprobs", "messages", "generation_params",
                "inference_logprobs", "overrides", "group_overrides", "images", "env_id",
                "distill_token_ids", "distill_logprobs"):
        assert key in item


def test_gzip_body_and_unknown_fields_are_accepted(client):
    group = {**make_group(), "some_future_field": 1, "advantages": None}
    r = client.post("/scored_data", content=gzip.compress(orjson.dumps(group)),
                    headers={"content-encoding": "gzip", "content-type": "application/json"})
    assert r.status_code == 200, r.text


def test_bad_gzip_is_a_400(client):
    r = client.post("/scored_data", content=b"not gzip", headers={"content-encoding": "gzip"})
    assert r.status_code == 400
    assert "gzip" in r.json()["detail"][0]["msg"]


def test_list_with_one_bad_group_is_rejected_whole(client):
    bad = make_group(seed=2)
    bad["scores"] = [float("nan"), 1.0]
    # orjson writes NaN as null; send the literal so the finite check is what fires
    body = b'[' + orjson.dumps(make_group(seed=1)) + b',' + orjson.dumps(bad).replace(b'"scores":[null', b'"scores":[NaN') + b']'
    r = client.post("/scored_data_list", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"][:3] == ["body", 1, "scores"]
    assert client.get("/status").json()["queue_size"] == 0  # nothing from the list was kept


def test_group_size_must_match_the_env(client):
    r = client.post("/scored_data", json=make_group(size=3))
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "tokens"]
    assert "group_size 2" in r.json()["detail"][0]["msg"]


def test_group_larger_than_batch_is_rejected_up_front(make_client):
    c = make_client()
    c.post("/register", json=trainer_registration(batch_size=2))
    r = c.post("/scored_data", json=make_group(size=3, env_id=None))
    assert r.status_code == 422
    assert "can never fit a batch of 2" in r.json()["detail"][0]["msg"]


def test_unknown_env_id_is_named(client):
    r = client.post("/scored_data", json=make_group(env_id=7))
    assert r.status_code == 422
    assert r.json()["detail"][0]["loc"] == ["body", "env_id"]


def test_full_queue_answers_503_with_retry_after_and_keeps_what_it_has(make_client):
    c = make_client(max_queue_sequences=4)
    c.post("/register", json=trainer_registration(batch_size=4))
    c.post("/register-env", json=env_registration(group_size=2))
    assert c.post("/scored_data", json=make_group(seed=1)).status_code == 200
    assert c.post("/scored_data", json=make_group(seed=2)).status_code == 200
    r = c.post("/scored_data", json=make_group(seed=3))
    assert r.status_code == 503 and r.headers["retry-after"] == "1"
    assert len(c.get("/batch").json()["batch"]) == 2  # the two accepted groups, intact
    assert c.post("/scored_data", json=make_group(seed=3)).status_code == 200  # room again


def test_stale_groups_are_dropped_at_batch_time_and_counted(make_client):
    c = make_client(max_staleness=1)
    c.post("/register", json=trainer_registration(batch_size=2, starting_step=5))
    c.post("/register-env", json=env_registration(group_size=2))
    c.post("/scored_data", json=make_group(seed=1, weight_version=3))  # older than 5 - 1
    c.post("/scored_data", json=make_group(seed=2, weight_version=4))
    batch = c.get("/batch").json()["batch"]
    assert [g["weight_version"] for g in batch] == [4]
    assert 'rlstack_batcher_groups_dropped_total{policy="policy",reason="stale"} 1.0' in c.get("/metrics").text


def test_status_env_reads_json_body_on_get(client):
    client.post("/register-env", json=env_registration(name="other", weight=3.0))
    client.post("/scored_data", json=make_group())
    body = client.request("GET", "/status-env", json={"env_id": 0}).json()
    assert body["self_queue_size"] == 1 and body["queue_size"] == 1
    assert body["env_weight"] == pytest.approx(0.25)  # its share of weight x context
    assert client.get("/status-env", params={"env_id": 1}).json()["self_queue_size"] == 0


def test_unknown_env_status_is_404(client):
    r = client.request("GET", "/status-env", json={"env_id": 9})
    assert r.status_code == 404


def test_auth_protects_every_route_that_reads_or_changes_state(make_client):
    c = make_client(auth_token="s3cret")
    assert c.post("/register", json=trainer_registration()).status_code == 401
    assert c.get("/reset_data").status_code == 401
    for path in ("/status", "/batch", "/latest_example", "/info", "/wandb_info", "/status-env?env_id=0"):
        assert c.get(path).status_code == 401, path  # an unauthenticated GET /batch took the trainer's batch
    assert c.get("/healthz").status_code == 200 and c.get("/metrics").status_code == 200
    ok = {"Authorization": "Bearer s3cret"}
    assert c.get("/status", headers=ok).status_code == 200
    assert c.post("/register", json=trainer_registration(), headers=ok).status_code == 200
    assert c.get("/reset_data", headers=ok).text == "Reset successful"


def test_reset_clears_everything(client):
    client.post("/scored_data", json=make_group())
    assert client.get("/reset_data").status_code == 200
    assert client.get("/status").json() == {"current_step": 0, "queue_size": 0}
    assert client.get("/info").json()["batch_size"] == -1


def test_restart_replays_state(make_client, tmp_path):
    c = make_client()
    c.post("/register", json=trainer_registration(batch_size=2))
    c.post("/register-env", json=env_registration(group_size=2))
    for seed in range(3):
        c.post("/scored_data", json=make_group(seed=seed))
    c.get("/batch")
    c.__exit__(None, None, None)
    again = make_client()
    assert again.get("/status").json() == {"current_step": 1, "queue_size": 2}
    assert again.get("/batch").json()["batch"][0]["tokens"] == make_group(seed=1)["tokens"]
    assert again.post("/scored_data", json=make_group(seed=9)).status_code == 200  # env 0 still known


def test_ops_routes(client):
    assert client.get("/healthz").json()["status"] == "ok"
    assert client.get("/readyz").status_code == 200
    metrics = client.get("/metrics").text
    assert "rlstack_batcher_queue_sequences" in metrics
    assert "rlstack_batcher_http_request_seconds_bucket" in metrics


def test_idempotency_key_lands_a_retried_post_once_across_a_restart(make_client, tmp_path):
    c = make_client()
    c.post("/register", json=trainer_registration(batch_size=4))
    c.post("/register-env", json=env_registration(group_size=2))
    group = make_group(seed=7)
    first = c.post("/scored_data", json=group, headers={"Idempotency-Key": "post-1"})
    again = c.post("/scored_data", json=group, headers={"Idempotency-Key": "post-1"})
    assert first.json() == again.json() == {"status": "received"}
    assert "idempotent-replayed" not in first.headers and again.headers["idempotent-replayed"] == "true"
    listed = c.post("/scored_data_list", json=[make_group(seed=8), make_group(seed=9)], headers={"Idempotency-Key": "list-1"})
    assert listed.json() == {"status": "received", "groups_processed": 2}
    assert c.get("/status").json()["queue_size"] == 3
    c.__exit__(None, None, None)

    restarted = make_client()  # same data dir: the log is replayed
    retry = restarted.post("/scored_data_list", json=[make_group(seed=8), make_group(seed=9)], headers={"Idempotency-Key": "list-1"})
    assert retry.json() == {"status": "received", "groups_processed": 2} and retry.headers["idempotent-replayed"] == "true"
    assert restarted.post("/scored_data", json=group, headers={"Idempotency-Key": "post-1"}).headers["idempotent-replayed"] == "true"
    assert restarted.get("/status").json()["queue_size"] == 3
    # a key reused for another body is refused; a new key lands
    reused = restarted.post("/scored_data", json=make_group(seed=10), headers={"Idempotency-Key": "post-1"})
    assert reused.status_code == 422 and reused.json()["detail"][0]["loc"] == ["header", "idempotency-key"]
    assert restarted.post("/scored_data", json=make_group(seed=10), headers={"Idempotency-Key": "post-2"}).status_code == 200
    assert restarted.get("/status").json()["queue_size"] == 4


def test_idempotency_keys_survive_compaction(tmp_path):
    import asyncio

    from rlstack.batcher.service import BatcherService
    from rlstack.batcher.wal import WriteAheadLog
    from rlstack.common.contracts.atropos import EnvRegistration, TrainerRegistration

    async def run() -> None:
        settings = BatcherSettings(data_dir=tmp_path, compact_min_bytes=0)
        svc = BatcherService(settings, WriteAheadLog(tmp_path / "batcher.wal", "fsync"))
        svc.replay()
        await svc.register_trainer(TrainerRegistration.model_validate(trainer_registration(batch_size=2)))
        await svc.register_env(EnvRegistration.model_validate(env_registration(group_size=2)))
        body = orjson.dumps(make_group(seed=1))
        assert await svc.post_groups(body, as_list=False, key="k1") == (1, False)
        await svc.next_batch()  # consumed: only the key remembers the post
        assert await svc.maybe_compact()
        await svc.wal.close()

        again = BatcherService(settings, WriteAheadLog(tmp_path / "batcher.wal", "fsync"))
        again.replay()
        assert await again.post_groups(body, as_list=False, key="k1") == (1, True)
        assert again.state.available_groups == 0
        await again.wal.close()

    asyncio.run(run())


def test_concurrent_retries_with_one_key_land_once(tmp_path):
    import asyncio

    from rlstack.batcher.service import BatcherService
    from rlstack.batcher.wal import WriteAheadLog
    from rlstack.common.contracts.atropos import EnvRegistration, TrainerRegistration

    async def run() -> None:
        svc = BatcherService(BatcherSettings(data_dir=tmp_path), WriteAheadLog(tmp_path / "batcher.wal", "fsync"))
        svc.replay()
        await svc.register_trainer(TrainerRegistration.model_validate(trainer_registration(batch_size=2)))
        await svc.register_env(EnvRegistration.model_validate(env_registration(group_size=2)))
        body = orjson.dumps(make_group(seed=1))
        results = await asyncio.gather(*(svc.post_groups(body, as_list=False, key="same") for _ in range(8)))
        assert sorted(replayed for _, replayed in results) == [False] + [True] * 7
        assert svc.state.available_groups == 1
        await svc.wal.close()

    asyncio.run(run())
