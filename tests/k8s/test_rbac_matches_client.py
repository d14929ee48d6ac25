"""The chart's Roles grant exactly the API calls our Kubernetes client code makes.

Each identity's code runs every operation it has against the API emulator, which records each
request as the RBAC verb kube-apiserver would check; the rendered Role must equal that set, so
a new call without a grant, or a grant nobody uses, fails here.
"""

from __future__ import annotations

import asyncio
import contextlib
from datetime import UTC, datetime

from rlstack.episodes.sandboxes.pods import SandboxManager, SandboxOwner, SandboxSpec
from rlstack.kube.connection import connect
from rlstack.kube.replica_pods import watch_replica_pods
from rlstack.ops.doctor import DoctorConfig, check_sandboxes
from tests.k8s.conftest import by_kind

NS = "rl"


def sandbox_manager_calls(api) -> set[tuple[str, str]]:
    """Everything an env server does with its sandboxes: launch (and relaunch), wait, reap, delete."""
    async def everything() -> None:
        m = SandboxManager(connect(api.url, NS), NS, "run", owner=SandboxOwner(name="env-0", uid="u"))
        spec = SandboxSpec(trial="t", image="agent", command=["true"])
        name = await m.launch(spec)
        await m.launch(spec)  # the retry path: create answers 409, get finds our pod
        waiting = asyncio.create_task(m.wait(name, timeout=20))
        await asyncio.sleep(0.3)
        await asyncio.to_thread(api.set_status, NS, name, "Succeeded", exit_code=0, log="ok\n")
        await waiting  # no m.logs(): only `rlstack sandbox` reads a pod's log, with the user's own credentials
        await m.reap(datetime(2100, 1, 1, tzinfo=UTC))
        await m.delete(name)

    asyncio.run(everything())
    return api.verbs()


def registry_calls(api) -> set[tuple[str, str]]:
    async def watch_a_while() -> None:
        task = asyncio.create_task(watch_replica_pods(connect(api.url, NS), NS, {"app": "x"}, lambda gone: None))
        while ("pods", "watch") not in api.verbs():
            await asyncio.sleep(0.05)
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    asyncio.run(asyncio.wait_for(watch_a_while(), 20))
    return api.verbs()


def role_grants(objects: list[dict]) -> dict[str, set[tuple[str, str]]]:
    return {r["metadata"]["name"].removeprefix("rl-rlstack-"):
            {(res, verb) for rule in r["rules"] for res in rule["resources"] for verb in rule["verbs"]}
            for r in by_kind(objects, "Role")}


def test_sandbox_manager_role_is_exactly_what_the_sandbox_code_calls(rendered, kube_api):
    calls = sandbox_manager_calls(kube_api)
    assert calls == {("pods", "create"), ("pods", "get"), ("pods", "list"), ("pods", "watch"), ("pods", "delete")}
    assert role_grants(rendered[1])["sandbox-manager"] == calls


def test_registry_role_is_exactly_what_the_pod_watch_calls(rendered, kube_api):
    calls = registry_calls(kube_api)
    assert role_grants(rendered[1])["registry"] == calls


def test_doctor_lists_sandboxes_through_the_api(kube_api):
    kube_api.add_pod(NS, "sbx-run-a", {"harbor-run": "run"}, phase="Pending")
    kube_api.add_pod(NS, "sbx-other", {"harbor-run": "other"}, phase="Pending")
    config = DoctorConfig(run_prefix="run", namespace=NS, kube_api_url=kube_api.url, stuck_after_s=60)
    assert check_sandboxes(config).detail.startswith("1 pod(s) (0 warm, waiting for a claim), 0 stuck pending")
    later = datetime(2100, 1, 1, tzinfo=UTC)
    stuck = check_sandboxes(config, now=later)
    assert not stuck.ok and "sbx-run-a" in stuck.remedy
    assert kube_api.verbs() == {("pods", "list")}
    assert not check_sandboxes(config.model_copy(update={"kube_api_url": "http://127.0.0.1:9"})).ok
