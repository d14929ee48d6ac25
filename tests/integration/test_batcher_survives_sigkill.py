"""Crash safety: SIGKILL the batcher mid-load; every acknowledged group survives, none twice."""

from __future__ import annotations

import threading

import httpx
import orjson

from tests.helpers.groups import env_registration, make_group, trainer_registration


def _post_many(url: str, seeds: range, acked: list[int], stop: threading.Event) -> None:
    with httpx.Client(base_url=url, timeout=10) as client:
        for seed in seeds:
            if stop.is_set():
                return
            try:
                r = client.post("/scored_data", json=make_group(seed=seed, length=32))
            except httpx.HTTPError:
                return  # the server died under us: this post was never acknowledged
            if r.status_code == 200:
                acked.append(seed)


def _drain(url: str) -> list[list[list[int]]]:
    groups = []
    with httpx.Client(base_url=url, timeout=10) as client:
        while (batch := client.get("/batch").json()["batch"]) is not None:
            groups += [g["tokens"] for g in batch]
    return groups


def test_acknowledged_groups_survive_sigkill_exactly_once(service_factory, tmp_path):
    data = ["--data-dir", str(tmp_path / "wal"), "--durability", "fsync"]
    batcher = service_factory("batcher", data)
    httpx.post(f"{batcher.url}/register", json=trainer_registration(batch_size=2)).raise_for_status()
    assert httpx.post(f"{batcher.url}/register-env", json=env_registration(group_size=2)).json()["env_id"] == 0

    # Hand one batch out before the crash: it must not come back after it.
    for seed in (1000, 1001):
        httpx.post(f"{batcher.url}/scored_data", json=make_group(seed=seed, length=32)).raise_for_status()
    served_before = [g["tokens"] for g in httpx.get(f"{batcher.url}/batch").json()["batch"]]

    acked: list[int] = []
    stop = threading.Event()
    workers = [threading.Thread(target=_post_many, args=(batcher.url, range(w, 400, 8), acked, stop)) for w in range(8)]
    for w in workers:
        w.start()
    while len(acked) < 120:  # kill while posts are still in flight
        threading.Event().wait(0.005)
    batcher.kill()
    stop.set()
    for w in workers:
        w.join()
    acked_at_kill = list(acked)
    assert len(acked_at_kill) >= 120

    restarted = service_factory("batcher", data, port=batcher.port)
    # The env registered before the crash keeps posting without registering again.
    status = httpx.request("GET", f"{restarted.url}/status-env", json={"env_id": 0})
    assert status.status_code == 200 and status.json()["current_step"] == 1
    httpx.post(f"{restarted.url}/scored_data", json=make_group(seed=5000, length=32)).raise_for_status()

    recovered = _drain(restarted.url)
    keys = [orjson.dumps(tokens) for tokens in recovered]
    assert len(keys) == len(set(keys)), "a group came back twice"
    for seed in acked_at_kill:
        assert orjson.dumps(make_group(seed=seed, length=32)["tokens"]) in keys, f"acknowledged group {seed} lost"
    assert orjson.dumps(served_before[0]) not in keys, "a batch handed out before the crash came back"
    assert orjson.dumps(make_group(seed=5000, length=32)["tokens"]) in keys
    assert restarted.terminate() == 0
