"""Agent trials in pods: the ``kubernetes`` sandbox backend against the API emulator.

A FakeKubelet (no kubelet can run here) executes each trial pod's containers on this host under
bubblewrap with the pod's own mounts, so the real phase runner, verifier and trial runner
decide every outcome: create, wait, reward, logs on the trials volume, delete.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from rlstack.episodes.harbor.task import HarborTask
from rlstack.episodes.sandboxes import KubernetesSandboxConfig, build_sandbox
from rlstack.episodes.sandboxes.pods import SandboxManager, SandboxOwner
from rlstack.episodes.trials import AgentSpec, TrialSpec, TrialStatus, run_trial
from rlstack.kube.connection import connect
from tests.conftest import REPO
from tests.helpers.env_server_as_user import (
    ENV_GROUP,
    ENV_USER,
    can_switch_users,
    finish,
    shared_claim,
    start_trials,
)
from tests.helpers.fake_kubelet import FakeKubelet

NS = "rl"
RUN = "run-k"
TASK = HarborTask.load(REPO / "examples" / "tasks" / "write-greeting-1")


def sandbox(api, trials: Path):  # noqa: ANN001, ANN201
    manager = SandboxManager(connect(api.url, NS), NS, RUN, owner=SandboxOwner(name="env-0", uid="u-0"))
    config = KubernetesSandboxConfig(environment="host", image="rlstack:test", claim_name="shared", trials_dir=trials,
                                     trials_subpath="trials", python=sys.executable)
    return build_sandbox(config, manager)


def trial(name: str, agent: AgentSpec, **kw) -> TrialSpec:
    return TrialSpec(run=RUN, trial=name, task=TASK, agent=agent, **kw)


def run(api, claim: Path, *specs: TrialSpec, during=None):  # noqa: ANN001, ANN201
    """The env side as the chart's env-server user where the test may switch users (root, as in
    CI), so the pods' own identities meet directories it made, as on a node."""
    if can_switch_users():
        with FakeKubelet(api, claim, NS) as kubelet:
            env_side = start_trials(api.url, NS, RUN, claim, list(specs))
            if during is not None:
                asyncio.run(during())
            return finish(env_side), kubelet
    trials = claim / "trials"
    trials.mkdir(parents=True, exist_ok=True)
    box = sandbox(api, trials)

    async def go():  # noqa: ANN202
        tasks = [asyncio.create_task(run_trial(s, box, trials)) for s in specs]
        if during is not None:
            await during()
        return await asyncio.gather(*tasks)

    with FakeKubelet(api, claim, NS) as kubelet:
        results = asyncio.run(go())
    return results, kubelet


@pytest.fixture
def claim():  # noqa: ANN201
    with shared_claim() as path:
        yield path


def test_reference_solution_scores_1_and_doing_nothing_0_each_in_its_own_pod(kube_api, claim):
    (solved, idle), kubelet = run(kube_api, claim, trial("oracle", AgentSpec.oracle()), trial("nop", AgentSpec.nop()))
    assert (solved.status, solved.reward) == (TrialStatus.OK, 1.0), solved.error
    assert (idle.status, idle.reward) == (TrialStatus.OK, 0.0), idle.error
    assert solved.sandbox == "kubernetes" and len(kubelet.started) == 2
    trial_dir = claim / "trials" / RUN / "oracle"
    assert (trial_dir / "verifier" / "reward.txt").read_text().strip() == "1"
    assert (trial_dir / "agent" / "exit_code.txt").read_text().strip() == "0"
    assert not (trial_dir / ".sandbox").exists()  # staged tests and solution are gone with the pod
    assert kube_api.pods == {}  # every pod deleted once its outcome was read
    if kubelet.runs_as_pod_identity:  # issue 22, item 1: the env server's user, no fsGroup
        assert set(kubelet.identities.values()) == {(ENV_USER, ENV_GROUP, ())}


def test_the_pod_is_labelled_locked_down_and_sized_by_task_toml(kube_api, tmp_path):
    trials = tmp_path / "trials"
    trials.mkdir()
    box = sandbox(kube_api, trials)
    from rlstack.episodes.sandboxes.base import SandboxJob

    job = SandboxJob(run=RUN, trial="t1", task=TASK, agent_command=["true"], agent_env={"OPENAI_BASE_URL": "u"},
                     agent_timeout_sec=60, verifier_timeout_sec=30, agent_dir=trials / RUN / "t1" / "agent",
                     verifier_dir=trials / RUN / "t1" / "verifier")
    pod = box.manager.manifest(box.spec(job, trials / RUN / "t1"))
    assert pod["metadata"]["labels"]["harbor-run"] == RUN and pod["metadata"]["labels"]["harbor-trial"] == "t1"
    assert pod["spec"]["automountServiceAccountToken"] is False and pod["spec"]["activeDeadlineSeconds"] == 60 + 30 + 300
    workspace, agent = pod["spec"]["initContainers"]
    verifier = pod["spec"]["containers"][0]
    assert agent["resources"]["limits"] == {"cpu": "1", "memory": "2048Mi", "ephemeral-storage": "4Gi"}  # task.toml: cpus 1, memory_mb 2048
    assert {m["mountPath"] for m in agent["volumeMounts"]} == {"/app", "/tmp", "/logs/agent"}  # no tests, no trials
    assert {"name": "OPENAI_BASE_URL", "value": "u"} in agent["env"]
    mounts = {m["mountPath"]: m for m in verifier["volumeMounts"]}
    assert mounts["/tests"]["subPath"] == f"trials/{RUN}/t1/.sandbox/tests" and mounts["/tests"]["readOnly"]
    assert mounts["/logs/verifier"]["subPath"] == f"trials/{RUN}/t1/verifier"


def test_an_agent_past_its_timeout_is_killed_and_not_scored(kube_api, claim):
    (result,), _ = run(kube_api, claim, trial("slow", AgentSpec(name="sleeper", command=["sleep", "60"]),
                                                          agent_timeout_sec=1))
    assert result.status == TrialStatus.AGENT_TIMEOUT and result.reward is None
    assert result.agent.run.timed_out and kube_api.pods == {}


def test_a_pod_deleted_mid_trial_is_an_infra_error_with_no_reward(kube_api, claim):
    async def delete_while_the_agent_runs() -> None:
        for _ in range(400):
            if kube_api.pods:
                break
            await asyncio.sleep(0.05)
        await asyncio.sleep(1.0)
        (ns, name), = kube_api.pods
        await asyncio.to_thread(kube_api.delete_pod, ns, name)

    (result,), _ = run(kube_api, claim, trial("doomed", AgentSpec(name="sleeper", command=["sleep", "60"])),
                       during=delete_while_the_agent_runs)
    assert result.status == TrialStatus.INFRA_ERROR and result.reward is None
    assert "deleted before the trial finished" in result.error
    assert (claim / "trials" / RUN / "doomed" / "result.json").exists()


def test_sandbox_pods_are_hardened_from_their_settings(kube_api, tmp_path, monkeypatch):
    """Issue 22, items 1, 5 and 11: the env server's own group, no fsGroup (a shared claim would be
    re-chowned by every pod), a read-only root, sized emptyDirs and disk, an optional sandboxing
    runtime, and an owner reference the drain and the cluster-autoscaler accept."""
    from rlstack.episodes.sandboxes.base import SandboxJob
    from rlstack.episodes.sandboxes.pods import SandboxPodSecurity

    for name, value in {"RUN_AS_USER": "10001", "RUN_AS_GROUP": "10001", "RUNTIME_CLASS_NAME": "gvisor",
                        "EPHEMERAL_STORAGE": "3Gi", "EMPTY_DIR_SIZE_LIMIT": "1Gi"}.items():
        monkeypatch.setenv(f"RLSTACK_SANDBOX_POD_{name}", value)  # what the chart sets from sandboxes.pod
    trials = tmp_path / "trials"
    box = sandbox(kube_api, trials)
    job = SandboxJob(run=RUN, trial="t1", task=TASK, agent_command=["true"], agent_env={}, agent_timeout_sec=60,
                     verifier_timeout_sec=30, agent_dir=trials / RUN / "t1" / "agent", verifier_dir=trials / RUN / "t1" / "verifier")
    pod = box.manager.manifest(box.spec(job, trials / RUN / "t1"))["spec"]
    assert pod["securityContext"]["runAsUser"] == 10001 and pod["securityContext"]["runAsGroup"] == 10001
    assert "fsGroup" not in pod["securityContext"] and pod["runtimeClassName"] == "gvisor"
    for c in pod["initContainers"] + pod["containers"]:
        assert c["securityContext"]["readOnlyRootFilesystem"] is True and c["resources"]["limits"]["ephemeral-storage"] == "3Gi"
    assert all(v["emptyDir"]["sizeLimit"] == "1Gi" for v in pod["volumes"] if "emptyDir" in v)
    [owner] = box.manager.manifest(box.spec(job, trials / RUN / "t1"))["metadata"]["ownerReferences"]
    assert owner["controller"] is True and "blockOwnerDeletion" not in owner
    assert SandboxPodSecurity(fs_group=5).identity(1000)[0] >= 1  # never root, whoever runs the env server
