"""The sandbox manager against the Kubernetes API emulator: launch, wait, logs, delete, reap."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from rlstack.episodes.sandboxes.pods import (
    SandboxGone,
    SandboxManager,
    SandboxOwner,
    SandboxSpec,
    agent_env,
)
from rlstack.kube.connection import connect

NS = "rl"


def manager(api, **kw) -> SandboxManager:
    return SandboxManager(connect(api.url, NS), NS, "run-7", **kw)


def test_pod_manifest_is_locked_down_labelled_and_owned():
    m = SandboxManager(None, NS, "run-7", owner=SandboxOwner(name="env-0", uid="u-1"))  # type: ignore[arg-type]
    spec = SandboxSpec(trial="t-1", image="agent:1", command=["claude", "-p", "fix it"], env={"A": "1"})
    pod = m.manifest(spec)
    assert pod["metadata"]["name"] == "sbx-run-7-t-1"
    assert pod["metadata"]["labels"]["harbor-run"] == "run-7" and pod["metadata"]["labels"]["harbor-trial"] == "t-1"
    assert pod["metadata"]["ownerReferences"] == [{"apiVersion": "v1", "kind": "Pod", "name": "env-0", "uid": "u-1", "controller": True}]
    assert pod["spec"]["automountServiceAccountToken"] is False and pod["spec"]["restartPolicy"] == "Never"
    container = pod["spec"]["containers"][0]
    assert container["securityContext"]["capabilities"]["drop"] == ["ALL"]
    assert container["resources"]["limits"] == {"cpu": "1", "memory": "2Gi", "ephemeral-storage": "4Gi"}
    assert container["env"] == [{"name": "A", "value": "1"}]


def test_a_set_cpu_request_books_less_than_the_tasks_cpus_and_keeps_them_as_the_limit():
    """Found on a real 2-core node: one whole core booked per sandbox left trials' pods Pending."""
    from rlstack.episodes.sandboxes.pods import SandboxPodSecurity

    spec = SandboxSpec(trial="t-1", image="agent:1", command=["true"], cpu="1", memory="512Mi")
    default = SandboxManager(None, NS, "run-7").manifest(spec)["spec"]["containers"][0]["resources"]  # type: ignore[arg-type]
    assert default["requests"] == default["limits"]  # Guaranteed, as before
    small = SandboxManager(None, NS, "run-7", pod_security=SandboxPodSecurity(cpu_request="50m"))  # type: ignore[arg-type]
    resources = small.manifest(spec)["spec"]["containers"][0]["resources"]
    assert resources["requests"] == {"cpu": "50m", "memory": "512Mi", "ephemeral-storage": "4Gi"}
    assert resources["limits"] == {"cpu": "1", "memory": "512Mi", "ephemeral-storage": "4Gi"}


def test_a_set_memory_request_books_less_than_the_tasks_memory_and_keeps_it_as_the_limit():
    """Found on a real 23 GiB node: 16 sandboxes booked at their tasks' 2 GiB left half of them Pending."""
    from rlstack.episodes.sandboxes.pods import SandboxPodSecurity

    spec = SandboxSpec(trial="t-1", image="agent:1", command=["true"], cpu="1", memory="2048Mi")
    small = SandboxManager(None, NS, "run-7", pod_security=SandboxPodSecurity(cpu_request="25m", memory_request="64Mi"))  # type: ignore[arg-type]
    resources = small.manifest(spec)["spec"]["containers"][0]["resources"]
    assert resources["requests"] == {"cpu": "25m", "memory": "64Mi", "ephemeral-storage": "4Gi"}
    assert resources["limits"] == {"cpu": "1", "memory": "2048Mi", "ephemeral-storage": "4Gi"}


def test_pod_names_are_valid_and_distinct_for_awkward_trials():
    m = SandboxManager(None, NS, "Run_7")  # type: ignore[arg-type]
    names = {m.pod_name(t) for t in ("T.1", "t-1", "t_1", "x" * 60)}
    assert len(names) == 4
    assert all(len(n) <= 63 and n == n.lower() and n[0].isalnum() and n[-1].isalnum() for n in names)


def test_bad_trial_and_run_are_refused():
    with pytest.raises(ValueError):
        SandboxSpec(trial="has space", image="i", command=["c"])
    with pytest.raises(ValueError):
        SandboxManager(None, NS, "-bad")  # type: ignore[arg-type]


def test_agent_env_points_both_dialects_at_the_trial_prefix():
    env = agent_env("http://proxy:4000/", "r", "t", "k")
    assert env["ANTHROPIC_BASE_URL"] == "http://proxy:4000/trials/r/t"
    assert env["OPENAI_BASE_URL"] == "http://proxy:4000/trials/r/t/v1"
    assert env["ANTHROPIC_API_KEY"] == env["OPENAI_API_KEY"] == "k"


def test_launch_wait_logs_delete(kube_api):
    async def scenario():
        m = manager(kube_api)
        name = await m.launch(SandboxSpec(trial="t1", image="agent:1", command=["true"]))
        assert await m.launch(SandboxSpec(trial="t1", image="agent:1", command=["true"])) == name  # idempotent
        waiting = asyncio.create_task(m.wait(name, timeout=20))
        await asyncio.sleep(0.3)
        assert not waiting.done()
        await asyncio.to_thread(kube_api.set_status, NS, name, "Running")
        await asyncio.sleep(0.3)
        assert not waiting.done()
        await asyncio.to_thread(kube_api.set_status, NS, name, "Failed", exit_code=3, log="tests failed\n")
        outcome = await waiting
        assert (outcome.phase, outcome.exit_code) == ("Failed", 3)
        assert await m.logs(name) == "tests failed\n"
        assert await m.delete(name) is True
        assert await m.delete(name) is False
        with pytest.raises(SandboxGone):
            await m.wait(name, timeout=5)

    asyncio.run(scenario())
    assert [p for p in kube_api.pods] == []


def test_wait_reports_a_pod_deleted_under_it(kube_api):
    async def scenario():
        m = manager(kube_api)
        name = await m.launch(SandboxSpec(trial="t2", image="agent:1", command=["sleep", "1000"]))
        waiting = asyncio.create_task(m.wait(name, timeout=20))
        await asyncio.sleep(0.3)
        await asyncio.to_thread(kube_api.delete_pod, NS, name)
        with pytest.raises(SandboxGone):
            await waiting

    asyncio.run(scenario())


def test_reaper_removes_finished_and_expired_sandboxes_it_owns_only(kube_api):
    owner = SandboxOwner(name="env-0", uid="me")

    async def scenario():
        m = manager(kube_api, owner=owner, ttl_seconds=3600, finished_grace_seconds=60)
        other = manager(kube_api, owner=SandboxOwner(name="env-1", uid="other"))
        running = await m.launch(SandboxSpec(trial="running", image="a", command=["x"]))
        done = await m.launch(SandboxSpec(trial="done", image="a", command=["x"]))
        old = await m.launch(SandboxSpec(trial="old", image="a", command=["x"]))
        theirs = await other.launch(SandboxSpec(trial="theirs", image="a", command=["x"]))
        await asyncio.to_thread(kube_api.set_status, NS, running, "Running")
        await asyncio.to_thread(kube_api.set_status, NS, done, "Succeeded", exit_code=0)
        await asyncio.to_thread(kube_api.set_status, NS, theirs, "Succeeded", exit_code=0)
        await asyncio.to_thread(kube_api.set_status, NS, old, "Running", created="2020-01-01T00:00:00Z")
        assert await m.reap() == [old]  # "done" is inside its grace period
        later = datetime.now(UTC) + timedelta(seconds=120)
        assert await m.reap(later) == [done]
        return {p.metadata.name for p in await m.list()}, theirs

    left, theirs = asyncio.run(scenario())
    assert left == {"sbx-run-7-running"}
    assert ("rl", theirs) in kube_api.pods  # another env server's sandbox is not ours to reap


def test_rlstack_sandbox_runs_one_trial_and_exits_with_its_code(kube_api):
    import subprocess
    import sys
    import threading

    from rlstack.common.trial_keys import verify
    from tests.helpers.wait import wait_until

    def kubelet() -> None:
        wait_until(lambda: (NS, "sbx-r-t9") in kube_api.pods, timeout=30)
        pod = kube_api.pods[(NS, "sbx-r-t9")]
        env = {e["name"]: e["value"] for e in pod["spec"]["containers"][0]["env"]}
        assert env["ANTHROPIC_BASE_URL"] == "http://proxy:4000/trials/r/t9"
        identity = verify("s3cret", env["ANTHROPIC_API_KEY"])
        kube_api.set_status(NS, "sbx-r-t9", "Failed", exit_code=7, log=f"agent ran as {identity.run}/{identity.trial}\n")

    player = threading.Thread(target=kubelet)
    player.start()
    done = subprocess.run([sys.executable, "-m", "rlstack.cli", "sandbox", "r", "t9", "--image", "agent:1",
                           "--proxy-url", "http://proxy:4000", "--namespace", NS, "--kube-api-url", kube_api.url,
                           "--secret", "s3cret", "--timeout", "30", "--", "claude", "-p", "hi"],
                          capture_output=True, text=True, timeout=60)
    player.join()
    assert done.returncode == 7, done.stderr
    assert done.stdout == "agent ran as r/t9\n"
    assert (NS, "sbx-r-t9") not in kube_api.pods  # deleted once its log was read
