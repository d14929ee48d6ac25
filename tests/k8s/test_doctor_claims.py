"""`rlstack doctor` on a claim stuck Pending (issue 22, item 5): ReadWriteMany asked of the
default class, a block class on EKS or GKE, says so and what to set; through the API emulator."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from rlstack.ops.doctor import DoctorConfig, check_claims
from tests.k8s.fake_objects_api import FakeObjectsApiServer

NS = "rl"
LATER = datetime(2100, 1, 1, tzinfo=UTC)


@pytest.fixture
def api():
    server = FakeObjectsApiServer().start()
    yield server
    server.stop()


def claim(name: str, phase: str, modes: list[str], storage_class: str | None = None) -> dict:
    spec = {"accessModes": modes, "resources": {"requests": {"storage": "1Gi"}}}
    if storage_class is not None:
        spec["storageClassName"] = storage_class
    return {"metadata": {"name": name}, "spec": spec, "status": {"phase": phase}}


def storage_class(name: str, provisioner: str, default: bool = False, binding: str = "Immediate") -> dict:
    annotations = {"storageclass.kubernetes.io/is-default-class": "true"} if default else {}
    return {"metadata": {"name": name, "annotations": annotations}, "provisioner": provisioner, "volumeBindingMode": binding}


def config(api) -> DoctorConfig:
    return DoctorConfig(run_prefix="rl", namespace=NS, kube_api_url=api.url, stuck_after_s=60)


def test_rwx_on_the_default_block_class_is_named_with_the_fix(api):
    api.put("storageclasses", storage_class("gp2", "ebs.csi.aws.com", default=True))
    api.put("persistentvolumeclaims", claim("rl-rlstack-shared", "Pending", ["ReadWriteMany"]), NS)
    api.put("persistentvolumeclaims", claim("bound", "Bound", ["ReadWriteOnce"], "gp2"), NS)
    assert check_claims(config(api)).ok  # just made: a claim may take a moment to bind
    stuck = check_claims(config(api), now=LATER)
    assert not stuck.ok and stuck.detail == "2 claim(s), 1 pending for over 60s"
    assert "rl-rlstack-shared" in stuck.remedy and "'gp2' (ebs.csi.aws.com)" in stuck.remedy
    assert "sharedStorage.storageClass" in stuck.remedy and "bound" not in stuck.remedy
    assert api.verbs() == {("persistentvolumeclaims", "list"), ("storageclasses", "list")}


def test_other_causes_of_a_pending_claim(api):
    api.put("storageclasses", storage_class("late", "efs.csi.aws.com", binding="WaitForFirstConsumer"))
    api.put("persistentvolumeclaims", claim("nodefault", "Pending", ["ReadWriteOnce"]), NS)
    api.put("persistentvolumeclaims", claim("typo", "Pending", ["ReadWriteMany"], "efs-sc"), NS)
    api.put("persistentvolumeclaims", claim("waits", "Pending", ["ReadWriteMany"], "late"), NS)
    remedy = check_claims(config(api), now=LATER).remedy
    assert "nodefault: no storage class named and the cluster has no default" in remedy
    assert "typo: storage class 'efs-sc' does not exist" in remedy
    assert "waits: its class binds only once a pod using it is scheduled" in remedy


def test_no_cluster_access_reads_as_such(api):
    assert check_claims(DoctorConfig()) is None  # no --run-prefix: no cluster checks
    unreachable = check_claims(DoctorConfig(run_prefix="rl", namespace=NS, kube_api_url="http://127.0.0.1:9"))
    assert not unreachable.ok and "cannot list claims" in unreachable.remedy
