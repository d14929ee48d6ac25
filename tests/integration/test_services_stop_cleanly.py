"""SIGTERM: each service drains, flushes and exits 0; the batcher's log then replays in full."""

import httpx

from tests.helpers.groups import env_registration, make_group, trainer_registration


def test_batcher_sigterm_exits_zero_and_keeps_data(service_factory, tmp_path):
    args = ["--data-dir", str(tmp_path / "wal")]
    batcher = service_factory("batcher", args)
    httpx.post(f"{batcher.url}/register", json=trainer_registration(batch_size=2)).raise_for_status()
    httpx.post(f"{batcher.url}/register-env", json=env_registration(group_size=2)).raise_for_status()
    httpx.post(f"{batcher.url}/scored_data_list", json=[make_group(seed=s) for s in range(3)]).raise_for_status()
    assert batcher.terminate() == 0
    assert "log flushed" in batcher.log()

    again = service_factory("batcher", args, port=batcher.port)
    assert httpx.get(f"{again.url}/status").json() == {"current_step": 0, "queue_size": 3}


def test_registry_sigterm_exits_zero(service_factory):
    registry = service_factory("registry")
    assert httpx.get(f"{registry.url}/healthz").status_code == 200
    assert registry.terminate() == 0
