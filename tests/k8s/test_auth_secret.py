"""The auth Secret's hook (rlstack.kube.auth_secret) against the API emulator: made once with
random values, found and kept on every later run (an upgrade, a GitOps sync), never rewritten;
the hook's Role grants exactly the calls it makes."""

from __future__ import annotations

import asyncio
import base64

import pytest
import yaml

from rlstack.kube.auth_secret import SecretIncomplete, ensure_secret, main
from rlstack.kube.connection import connect
from tests.k8s.conftest import by_kind, render
from tests.k8s.fake_objects_api import FakeObjectsApiServer

KEYS = {"service-token": 32, "trial-key-secret": 32}


@pytest.fixture
def api():
    server = FakeObjectsApiServer().start()
    yield server
    server.stop()


def ensure(api, name: str = "rl-rlstack-auth", keys: dict[str, int] = KEYS) -> str:
    async def run() -> str:
        client = connect(api.url, "rl")
        try:
            return await ensure_secret(client, "rl", name, keys, {"app.kubernetes.io/instance": "rl"})
        finally:
            await client.close()
    return asyncio.run(run())


def test_made_once_then_kept_as_it_is(api):
    assert ensure(api) == "created"
    made = api.get("secrets", "rl-rlstack-auth", "rl")
    values = {k: base64.b64decode(v).decode() for k, v in made["data"].items()}
    assert set(values) == set(KEYS) and all(len(v) == 64 and int(v, 16) >= 0 for v in values.values())
    assert values["service-token"] != values["trial-key-secret"]
    assert made["metadata"]["labels"] == {"app.kubernetes.io/instance": "rl"}
    assert ensure(api) == "kept" and ensure(api) == "kept"  # every upgrade or sync runs the hook again
    assert api.get("secrets", "rl-rlstack-auth", "rl")["data"] == made["data"]


def test_a_secret_someone_made_is_never_rewritten(api):
    mine = {"metadata": {"name": "rl-rlstack-auth"}, "data": {"service-token": base64.b64encode(b"t").decode()}}
    api.put("secrets", mine, "rl")
    with pytest.raises(SecretIncomplete, match="trial-key-secret"):
        ensure(api)
    assert api.get("secrets", "rl-rlstack-auth", "rl")["data"] == mine["data"]
    assert main(["--name", "rl-rlstack-auth", "--namespace", "rl", "--kube-api-url", api.url, "--key", "trial-key-secret:32"]) == 2
    assert main(["--name", "rl-rlstack-auth", "--namespace", "rl", "--kube-api-url", api.url, "--key", "service-token:32"]) == 0


def test_hook_role_grants_exactly_what_the_hook_calls(api):
    ensure(api)
    ensure(api)
    assert api.verbs() == {("secrets", "get"), ("secrets", "create")}
    objs = [o for o in yaml.safe_load_all(render("values-cpu.yaml")) if o]
    [role] = [r for r in by_kind(objs, "Role") if r["metadata"]["name"] == "rl-rlstack-auth-init"]
    grants = {(res, verb) for rule in role["rules"] for res in rule["resources"] for verb in rule["verbs"]}
    assert grants == api.verbs()
    [get] = [rule for rule in role["rules"] if rule["verbs"] == ["get"]]
    assert get["resourceNames"] == ["rl-rlstack-auth"]  # it reads no other Secret
    [job] = [j for j in by_kind(objs, "Job") if j["metadata"]["name"] == "rl-rlstack-auth-init"]
    command = job["spec"]["template"]["spec"]["containers"][0]["command"]
    assert command[:3] == ["python3", "-m", "rlstack.kube.auth_secret"]
    assert main([*command[3:], "--namespace", "other", "--kube-api-url", api.url]) == 0  # the hook's own arguments parse and work
    made = api.get("secrets", "rl-rlstack-auth", "other")
    assert set(made["data"]) == {"service-token", "trial-key-secret"}
