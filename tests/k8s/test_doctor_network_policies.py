"""`rlstack doctor` says whether NetworkPolicies are enforced (issue 22, item 10): a pod labelled
as a sandbox tries vLLM's port on a registered replica. The fake kubelet, like a network plugin
that ignores NetworkPolicies, lets it through, and doctor must say so; a port nothing listens on
stands in for a blocked one. Real registry process; API emulator and fake kubelet."""

from __future__ import annotations

import socket

import httpx

from rlstack.ops.doctor import DoctorConfig, check_network_policies
from tests.conftest import free_port
from tests.helpers.fake_kubelet import FakeKubelet

NS = "rl"


def register(registry_url: str, port: int) -> None:
    body = {"url": f"http://127.0.0.1:{port}", "model": "policy"}
    httpx.put(f"{registry_url}/v1/endpoints/r0", json=body).raise_for_status()


def test_doctor_reports_unenforced_network_policies(kube_api, service_factory, tmp_path):
    registry = service_factory("registry")
    vllm = socket.create_server(("127.0.0.1", 0))  # what the probe must not reach
    register(registry.url, vllm.getsockname()[1])
    config = DoctorConfig(registry_url=registry.url, namespace=NS, kube_api_url=kube_api.url, probe_image="python:3", timeout_s=30)
    try:
        with FakeKubelet(kube_api, tmp_path, NS):
            reached = check_network_policies(config)
            register(registry.url, free_port())  # now nothing answers: as if the policy dropped it
            blocked = check_network_policies(config)
    finally:
        vllm.close()
    assert reached is not None and not reached.ok and "NOT enforced" in reached.remedy
    assert blocked is not None and blocked.ok, blocked.detail
    probes = [p for (ns, _), p in kube_api.pods.items()]
    assert probes == []  # the probe pods are deleted
    assert check_network_policies(config.model_copy(update={"probe_image": None})) is None
