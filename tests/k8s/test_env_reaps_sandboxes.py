"""An env server process with the sandbox reaper on, against the Kubernetes API emulator."""

from __future__ import annotations

import httpx

from tests.helpers.groups import trainer_registration
from tests.helpers.wait import wait_until

NS = "rl"


def test_env_server_reaps_its_finished_sandboxes_and_leaves_the_rest(service_factory, kube_api, tmp_path):
    owned = [{"apiVersion": "v1", "kind": "Pod", "name": "env-0", "uid": "env-uid"}]
    for name, phase in (("sbx-done", "Succeeded"), ("sbx-busy", "Running"), ("sbx-not-mine", "Succeeded")):
        kube_api.add_pod(NS, name, {"harbor-run": "r1"}, phase=phase)
        if name != "sbx-not-mine":
            kube_api.pods[(NS, name)]["metadata"]["ownerReferences"] = owned
    kube_api.set_status(NS, "sbx-done", "Succeeded", exit_code=0)
    kube_api.set_status(NS, "sbx-not-mine", "Succeeded", exit_code=0)

    batcher = service_factory("batcher", ["--data-dir", str(tmp_path / "batcher")])
    httpx.post(f"{batcher.url}/register", json=trainer_registration()).raise_for_status()  # lets the env register
    service_factory("envs", ["--batcher-url", batcher.url, "--proxy-url", "http://127.0.0.1:9", "--run-id", "r1", "--group-size", "2"], env={
        "RLSTACK_ENV_SANDBOX__REAPER": "true", "RLSTACK_ENV_SANDBOX__GRACE_SECONDS": "0",
        "RLSTACK_ENV_SANDBOX__REAP_INTERVAL_SECONDS": "0.2", "RLSTACK_ENV_KUBE__API_URL": kube_api.url,
        "RLSTACK_ENV_KUBE__NAMESPACE": NS, "RLSTACK_ENV_KUBE__POD_NAME": "env-0", "RLSTACK_ENV_KUBE__POD_UID": "env-uid"})

    wait_until(lambda: (NS, "sbx-done") not in kube_api.pods, timeout=20)
    assert {name for _, name in kube_api.pods} == {"sbx-busy", "sbx-not-mine"}
    assert {verb for verb, _, _ in kube_api.requests} == {"list", "delete"}
