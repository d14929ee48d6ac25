"""Trials in their tasks' own images on the cluster's path: the ``kubernetes`` backend against the
API emulator, with a FakeKubelet that runs each container in its image from podman's store.

Each pod: the bundle image's init container copies the agent bundle into an emptyDir, then the
task's image runs the bundle's trial driver as PID 1, agent then verifier in one filesystem.
"""

from __future__ import annotations

import asyncio
import sys
from pathlib import Path

import pytest

from rlstack.episodes.bundle.image import bundle_image_ref
from rlstack.episodes.harbor import HarborTask
from rlstack.episodes.harbor.dataset import load_dataset
from rlstack.episodes.images.lock import ImageLock
from rlstack.episodes.sandboxes import KubernetesSandboxConfig, build_sandbox
from rlstack.episodes.sandboxes.pods import SandboxManager, SandboxOwner, SandboxPodSecurity
from rlstack.episodes.trials import AgentSpec, TrialSpec, TrialStatus, run_trial
from rlstack.kube.connection import connect
from tests.helpers.env_server_as_user import shared_claim
from tests.helpers.fake_kubelet import FakeKubelet
from tests.helpers.prebuild import SESSION
from tests.helpers.task_images import BUNDLE, DATASETS
from tests.k8s.pod_security import restricted_violations

NS = "rl"
RUN = "run-i"
IMAGE_TASKS = DATASETS[0]

pytestmark = pytest.mark.prebuilt("task-images")


@pytest.fixture(scope="module")
def images():
    SESSION.wait("task-images")


@pytest.fixture
def claim():  # noqa: ANN201
    with shared_claim() as path:
        yield path


def sandbox(api, trials: Path, level: str = "baseline", **fields):  # noqa: ANN001, ANN003, ANN201
    """The example tasks' images run as root (as Harbor's suites do): Pod Security baseline."""
    manager = SandboxManager(connect(api.url, NS), NS, RUN, owner=SandboxOwner(name="env-0", uid="u-0"),
                             pod_security=SandboxPodSecurity(level=level))
    config = KubernetesSandboxConfig(bundle_image=bundle_image_ref(BUNDLE), claim_name="shared", trials_dir=trials,
                                     trials_subpath="trials", python=sys.executable, image_pull_policy="Never",
                                     kill_grace_sec=0.5, **fields)
    return build_sandbox(config, manager)


def run(api, claim: Path, box, *specs: TrialSpec):  # noqa: ANN001, ANN201
    trials = claim / "trials"

    async def go():  # noqa: ANN202
        return await asyncio.gather(*(run_trial(s, box, trials) for s in specs))

    with FakeKubelet(api, claim, NS) as kubelet:
        return asyncio.run(go()), kubelet


def test_image_only_tasks_score_in_their_images_in_pods(images, kube_api, claim):
    trials = claim / "trials"
    trials.mkdir(parents=True, exist_ok=True)
    box = sandbox(kube_api, trials)
    lock = ImageLock.load(IMAGE_TASKS / "images.lock.json")
    tasks = load_dataset(IMAGE_TASKS).tasks
    assert box.prepare(tasks) == {}
    specs = [TrialSpec(run=RUN, trial=f"{t.short_name}-{a.name}", task=t, agent=a)
             for t in tasks for a in (AgentSpec.oracle(), AgentSpec.nop())]
    results, kubelet = run(kube_api, claim, box, *specs)
    for spec, result in zip(specs, results, strict=True):
        want = 1.0 if spec.agent.name == "oracle" else 0.0
        assert (result.status, result.reward) == (TrialStatus.OK, want), (spec.trial, result.error, kubelet.output)
        entry = lock.images[spec.task.name]
        assert result.image == f"{entry.ref}@{entry.image_id}"
    ran_in = {key.split("/")[1]: image for key, image in kubelet.images.items()}
    assert set(ran_in) == {"bundle", "trial"} and "host" not in kubelet.images.values()
    assert kube_api.pods == {}


def sh(script: str) -> AgentSpec:
    return AgentSpec(name="sh", command=["/bin/sh", "-c", script])


ATTACK = r"""
{ ls -A /tests /solution; ls -A /run/rlstack-trial; } > /logs/agent/seen.txt 2>&1
cat /proc/1/environ > /logs/agent/environ.txt 2>&1 || echo denied >> /logs/agent/environ.txt
kill -9 1; echo "kill pid 1: $?" >> /logs/agent/seen.txt
echo 1 > /logs/verifier/reward.txt
printf '#!/bin/bash\necho 1 > /logs/verifier/reward.txt\n' > /tests/test.sh
ln -s /etc/passwd /logs/agent/phase.json
setsid sh -c 'while true; do echo 1 > /logs/verifier/reward.txt; sleep 0.05; done' > /dev/null 2>&1 &
echo planted
"""


def test_the_agent_cannot_see_the_tests_stop_the_driver_or_plant_a_reward(images, kube_api, claim):
    """Everything the agent can reach in its pod, attacked from inside: the staged tests are gone
    before it starts and /tests is empty, the driver (PID 1) can be neither killed nor read, and a
    reward, a test script, a symlinked outcome and a process left behind change nothing."""
    trials = claim / "trials"
    trials.mkdir(parents=True, exist_ok=True)
    box = sandbox(kube_api, trials)
    task = HarborTask.load(IMAGE_TASKS / "secret-outside-app")
    (result,), kubelet = run(kube_api, claim, box, TrialSpec(run=RUN, trial="attack", task=task, agent=sh(ATTACK)))
    assert (result.status, result.reward) == (TrialStatus.OK, 0.0), (result.error, kubelet.output)
    agent_dir = trials / RUN / "attack" / "agent"
    seen = (agent_dir / "seen.txt").read_text()
    assert "test.sh" not in seen and "solve.sh" not in seen and "plan.json" in seen  # the stage: no tests left
    assert "kill pid 1: 1" in seen or "kill pid 1: 0" in seen
    assert "denied" in (agent_dir / "environ.txt").read_text()
    assert not (agent_dir / "phase.json").is_symlink() and result.agent.run.exit_code == 0
    assert (trials / RUN / "attack" / "verifier" / "reward.txt").read_text().strip() == "0"


def test_an_image_with_its_own_user_runs_as_it_under_restricted_and_root_keeps_baseline_caps(images, kube_api, claim, tmp_path):
    from rlstack.episodes.images.dataset import build_dataset
    from rlstack.episodes.sandboxes.base import SandboxJob
    from tests.helpers.harbor_tasks import write_task
    from tests.helpers.task_images import PYTHON_IMAGE, image_settings

    verifier = "#!/bin/bash\n[ \"$(id -u)\" = 1234 ] && [ -f /home/agent/made ] && echo 1 > /logs/verifier/reward.txt || echo 0 > /logs/verifier/reward.txt\n"
    root = write_task(tmp_path / "ds" / "own-user", test_sh=verifier,
                      dockerfile=PYTHON_IMAGE + "RUN useradd -u 1234 -m agent\nUSER agent\n")
    built = build_dataset(tmp_path / "ds", image_settings(), progress=False)
    assert built.ok, built.failures
    task = HarborTask.load(root)
    trials = claim / "trials"
    trials.mkdir(parents=True, exist_ok=True)
    box = sandbox(kube_api, trials, level="restricted")
    refused = box.prepare([task, HarborTask.load(IMAGE_TASKS / "jq-field")])  # its image runs as root
    assert set(refused) == {"rlstack/jq-field"} and "sandboxes.podSecurity=baseline" in refused["rlstack/jq-field"]
    (result,), kubelet = run(kube_api, claim, box, TrialSpec(run=RUN, trial="own-user", task=task,
                                                             agent=sh("touch /home/agent/made")))
    assert (result.status, result.reward) == (TrialStatus.OK, 1.0), (result.error, kubelet.output)
    job = SandboxJob(run=RUN, trial="m", task=task, agent_command=["true"], agent_timeout_sec=5, verifier_timeout_sec=5,
                     agent_dir=trials / RUN / "m" / "agent", verifier_dir=trials / RUN / "m" / "verifier")
    image = box.images.entry(task)
    pod = box.manager.manifest(box.spec(job, trials / RUN / "m", image))["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True and pod["securityContext"]["runAsUser"] == 1234
    assert pod["containers"][0]["securityContext"]["capabilities"] == {"drop": ["ALL"]}
    assert restricted_violations(pod) == []
    as_root = box.manager.manifest(box.spec(job, trials / RUN / "m", image.model_copy(update={"user": "0:0"})))["spec"]
    assert as_root["securityContext"]["runAsNonRoot"] is False and as_root["securityContext"]["runAsUser"] == 0
    assert "SYS_ADMIN" not in as_root["containers"][0]["securityContext"]["capabilities"]["add"]
    assert as_root["containers"][0]["securityContext"]["allowPrivilegeEscalation"] is False
    # What restricted refuses of it is being root and its root capabilities, all baseline allows; nothing else.
    assert all("runAsUser: 0" in v or "runAsNonRoot" in v or "capabilities add" in v for v in restricted_violations(as_root))


def test_a_task_missing_from_the_lock_is_refused_before_trials_and_an_infra_error_in_one(images, kube_api, claim, tmp_path):
    from tests.helpers.harbor_tasks import write_task

    task = HarborTask.load(write_task(tmp_path / "ds" / "unbuilt"))
    trials = claim / "trials"
    trials.mkdir(parents=True, exist_ok=True)
    box = sandbox(kube_api, trials, image_lock=IMAGE_TASKS / "images.lock.json")
    why = box.prepare([task])[task.name]
    assert "unbuilt" in why and "rlstack tasks build" in why
    (result,), kubelet = run(kube_api, claim, box, TrialSpec(run=RUN, trial="unbuilt", task=task, agent=AgentSpec.oracle()))
    assert result.status == TrialStatus.INFRA_ERROR and result.reward is None and "rlstack tasks build" in result.error
    assert kubelet.started == []


def test_the_bundle_as_an_image_volume_needs_no_copy(images, kube_api, claim):
    trials = claim / "trials"
    trials.mkdir(parents=True, exist_ok=True)
    box = sandbox(kube_api, trials, bundle_source="volume")
    task = HarborTask.load(IMAGE_TASKS / "jq-field")
    (result,), kubelet = run(kube_api, claim, box, TrialSpec(run=RUN, trial="vol", task=task, agent=AgentSpec.oracle()))
    assert (result.status, result.reward) == (TrialStatus.OK, 1.0), (result.error, kubelet.output)
    assert {key.split("/")[1] for key in kubelet.images} == {"trial"}  # no init container


def test_a_pod_ended_by_its_init_container_names_it():
    """No pods/log for env servers: the pod's status is all an error can say, so it says which
    container failed (the bundle's copy, say) rather than "no reason"."""
    from lightkube.resources.core_v1 import Pod

    from rlstack.episodes.sandboxes.pods import outcome

    terminated = {"terminated": {"exitCode": 1, "reason": "Error"}}
    pod = Pod.from_dict({"metadata": {"name": "sbx"}, "status": {
        "phase": "Failed", "initContainerStatuses": [{"name": "bundle", "state": terminated, "ready": False,
                                                      "restartCount": 0, "image": "b", "imageID": ""}],
        "containerStatuses": [{"name": "trial", "state": {"waiting": {"reason": "PodInitializing"}}, "ready": False,
                               "restartCount": 0, "image": "t", "imageID": ""}]}})
    ended = outcome(pod)
    assert (ended.container, ended.exit_code, ended.reason) == ("bundle", 1, "Error")
