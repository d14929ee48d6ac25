"""The registry process watching inference pods through the Kubernetes API emulator.

A replica whose pod is deleted (or ends) without deregistering must leave the table at once,
long before its heartbeat TTL, whether it is found by pod name or by pod IP.
"""

from __future__ import annotations

import json

import httpx

from tests.helpers.wait import wait_until

NS = "rl"
INFERENCE = {"app.kubernetes.io/component": "inference"}


def ids(registry) -> list[str]:
    return [e["id"] for e in httpx.get(f"{registry.url}/v1/endpoints").json()["endpoints"]]


def test_a_deleted_or_ended_replica_pod_is_dropped_before_its_ttl(service_factory, kube_api):
    kube_api.add_pod(NS, "inference-a", INFERENCE, pod_ip="10.0.0.1")
    kube_api.add_pod(NS, "inference-b", INFERENCE, pod_ip="10.0.0.2")
    kube_api.add_pod(NS, "inference-c", INFERENCE, pod_ip="10.0.0.3")
    kube_api.add_pod(NS, "trainer-x", {"app.kubernetes.io/component": "trainer"}, pod_ip="10.0.0.9")
    registry = service_factory("registry", env={
        "RLSTACK_REGISTRY_KUBE_WATCH_PODS": "true", "RLSTACK_REGISTRY_KUBE_API_URL": kube_api.url,
        "RLSTACK_REGISTRY_KUBE_NAMESPACE": NS, "RLSTACK_REGISTRY_DEFAULT_TTL_SECONDS": "600",
        "RLSTACK_REGISTRY_KUBE_REPLICA_SELECTOR": json.dumps(INFERENCE)})
    for name, url in (("inference-a", "http://10.0.0.1:8000"), ("replica-by-ip", "http://10.0.0.2:8000"),
                      ("inference-c", "http://10.0.0.3:8000"), ("external", "http://10.0.0.9:8000")):
        httpx.put(f"{registry.url}/v1/endpoints/{name}", json={"url": url, "model": "tiny"}).raise_for_status()
    wait_until(lambda: ("list", "pods") in {(v, r) for v, r, _ in kube_api.requests}
               and ("watch", "pods") in {(v, r) for v, r, _ in kube_api.requests})

    kube_api.delete_pod(NS, "inference-a")  # matched by the replica id (the pod name)
    wait_until(lambda: "inference-a" not in ids(registry), timeout=10)
    kube_api.set_status(NS, "inference-b", "Failed")  # matched by the pod IP in the endpoint URL
    wait_until(lambda: "replica-by-ip" not in ids(registry), timeout=10)
    kube_api.delete_pod(NS, "trainer-x")  # not an inference pod: its IP is not ours to judge
    assert sorted(ids(registry)) == ["external", "inference-c"]
    metrics = httpx.get(f"{registry.url}/metrics").text
    assert "rlstack_registry_removed_by_pod_total 2.0" in metrics
    assert {ns for _, _, ns in kube_api.requests} == {NS}


def test_the_registry_serves_while_the_api_server_is_away(service_factory):
    registry = service_factory("registry", env={
        "RLSTACK_REGISTRY_KUBE_WATCH_PODS": "true", "RLSTACK_REGISTRY_KUBE_API_URL": "http://127.0.0.1:9",
        "RLSTACK_REGISTRY_KUBE_NAMESPACE": NS})
    httpx.put(f"{registry.url}/v1/endpoints/r", json={"url": "http://10.0.0.1:8000", "model": "tiny"}).raise_for_status()
    assert ids(registry) == ["r"]
    assert httpx.get(f"{registry.url}/readyz").status_code == 200
