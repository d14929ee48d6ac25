"""The registry refuses what it must never probe or list (real app in-process), and stays bounded."""

import pytest
from fastapi.testclient import TestClient

from rlstack.registry.app import build_app
from rlstack.registry.config import RegistrySettings


@pytest.fixture
def client():
    with TestClient(build_app(RegistrySettings(max_endpoints=3, probe_interval_seconds=300))) as c:
        yield c


@pytest.mark.parametrize("url", [
    "http://user:pass@127.0.0.1:8000",
    "http://169.254.169.254",
    "http://[fe80::1]:8000",
    "http://[::ffff:169.254.169.254]",
    "http://metadata.google.internal",
    "http://0.0.0.0:8000",
    "http://224.0.0.1:80",
    "http://127.0.0.1:8000/?x=1",
])
def test_dangerous_urls_are_refused_naming_the_field(client, url):
    r = client.put("/v1/endpoints/r0", json={"url": url, "model": "m"})
    assert r.status_code == 422, r.text
    assert r.json()["detail"][0]["loc"] == ["body", "url"]
    assert client.get("/v1/endpoints").json()["endpoints"] == []


@pytest.mark.parametrize("url", ["http://127.0.0.1:8001", "http://10.2.3.4:8000", "https://replica-0.inference.svc:8000"])
def test_loopback_private_and_cluster_names_are_accepted(client, url):
    assert client.put("/v1/endpoints/r0", json={"url": url, "model": "m"}).status_code == 200


def test_endpoint_count_is_bounded_and_heartbeats_still_pass(client):
    for i in range(3):
        assert client.put(f"/v1/endpoints/r{i}", json={"url": f"http://127.0.0.1:{9000 + i}", "model": "m"}).status_code == 200
    r = client.put("/v1/endpoints/r3", json={"url": "http://127.0.0.1:9100", "model": "m"})
    assert r.status_code == 429 and "max-endpoints" in r.json()["detail"][0]["msg"] and r.headers["retry-after"]
    # the ones already held keep heartbeating, and a freed slot can be taken
    assert client.put("/v1/endpoints/r0", json={"url": "http://127.0.0.1:9000", "model": "m", "weight_version": 2}).status_code == 200
    assert client.delete("/v1/endpoints/r2").status_code == 204
    assert client.put("/v1/endpoints/r3", json={"url": "http://127.0.0.1:9100", "model": "m"}).status_code == 200


@pytest.mark.parametrize("body", [
    b'{"url": "http://127.0.0.1:1", "model": "m", "ttl_seconds": NaN}',
    b'{"url": "http://127.0.0.1:1", "model": "m", "ttl_seconds": Infinity}',
    b'{"url": "http://127.0.0.1:1", "model": "m", "ttl_seconds": -Infinity}',
])
def test_non_finite_numbers_are_422_not_500(client, body):
    r = client.put("/v1/endpoints/r0", content=body, headers={"content-type": "application/json"})
    assert r.status_code == 422 and r.json()["detail"][0]["loc"] == ["body", "ttl_seconds"]


def test_lone_surrogate_in_a_name_is_refused_and_the_list_still_answers(client):
    body = b'{"url": "http://127.0.0.1:1", "model": "m\\udc00"}'
    assert client.put("/v1/endpoints/r0", content=body, headers={"content-type": "application/json"}).status_code == 422
    assert client.get("/v1/endpoints").status_code == 200


def test_an_earlier_sidecars_empty_alias_list_is_accepted_and_a_nonempty_one_refused(client):
    """``served_model_names`` left the contract: earlier sidecars sent it empty (a rolling upgrade
    must keep them registered); names in it would route nowhere now, so they are refused by name."""
    assert client.put("/v1/endpoints/r0", json={"url": "http://127.0.0.1:9000", "model": "m", "served_model_names": []}).status_code == 200
    r = client.put("/v1/endpoints/r1", json={"url": "http://127.0.0.1:9001", "model": "m", "served_model_names": ["policy"]})
    assert r.status_code == 422 and "served_model_names" in r.text
    assert [e["id"] for e in client.get("/v1/endpoints").json()["endpoints"]] == ["r0"]
    assert "served_model_names" not in client.get("/v1/endpoints").json()["endpoints"][0]
