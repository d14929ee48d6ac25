"""The warm pool on the cluster's path: the ``kubernetes`` backend against the API emulator, with a
FakeKubelet running each pod's containers in their images (the bundle's copy, then the task's
image under the bundle's PID-1 driver, here waiting for its claim).

Warm pods are started for the tasks the env names as next; a trial claims one by staging its
tests and plan in the pod's directory and writing the claim file; the pod is deleted after its
one trial. A pod that dies before its claim is never handed out, a claim that finds its pod gone
takes another, and a restarted env server deletes what its predecessor's pool left.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from rlstack.episodes.bundle.image import bundle_image_ref
from rlstack.episodes.harbor import HarborTask
from rlstack.episodes.harbor.dataset import load_dataset
from rlstack.episodes.sandboxes import KubernetesSandboxConfig, WarmPoolConfig, build_sandbox
from rlstack.episodes.sandboxes.pods import SandboxManager, SandboxOwner, SandboxPodSecurity
from rlstack.episodes.sandboxes.pool import POOL_DIR
from rlstack.episodes.trials import AgentSpec, TrialSpec, TrialStatus, run_trial
from rlstack.kube.connection import connect
from tests.conftest import REPO
from tests.helpers.env_server_as_user import shared_claim
from tests.helpers.fake_kubelet import FakeKubelet
from tests.helpers.prebuild import SESSION
from tests.helpers.task_images import BUNDLE, DATASETS
from tests.integration.inference.test_dashboards_query_exported_metrics import METRIC, known
from tests.integration.inference.test_dashboards_query_exported_metrics import (
    exported as exported_names,
)
from tests.k8s.test_trials_in_task_images_in_pods import ATTACK, sh

NS = "rl"
RUN = "run-w"
IMAGE_TASKS = DATASETS[0]
DASHBOARD = REPO / "charts" / "rlstack" / "dashboards" / "sandboxes.json"

pytestmark = pytest.mark.prebuilt("task-images")


@pytest.fixture(scope="module")
def images():
    SESSION.wait("task-images")


@pytest.fixture
def claim():  # noqa: ANN201
    with shared_claim() as path:
        (path / "trials").mkdir(parents=True, exist_ok=True)
        yield path


def pooled(api, trials: Path, owner_uid: str = "u-0", registry: CollectorRegistry | None = None, **pool):  # noqa: ANN001, ANN003, ANN201
    manager = SandboxManager(connect(api.url, NS), NS, RUN, owner=SandboxOwner(name="env-0", uid=owner_uid),
                             pod_security=SandboxPodSecurity(level="baseline"))
    # The bundle as an image volume: no copy per pod (the copy's path: test_trials_in_task_images_in_pods.py).
    config = KubernetesSandboxConfig(bundle_image=bundle_image_ref(BUNDLE), bundle_source="volume", claim_name="shared",
                                     trials_dir=trials, trials_subpath="trials", python=sys.executable, image_pull_policy="Never",
                                     kill_grace_sec=0.5, pool=WarmPoolConfig(**{"max_total": 4, "max_per_image": 4, **pool}))
    return build_sandbox(config, manager, registry)


async def until(check, timeout: float = 120.0) -> None:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while not check():
        assert time.monotonic() < deadline, "timed out"
        await asyncio.sleep(0.05)


def pool_dirs_left(trials: Path) -> list[Path]:
    """Warm pods' directories still on the volume (``.pool/<run>/<pod>``)."""
    return [pod for run in (trials / POOL_DIR).glob("*") for pod in run.iterdir()]


def ready(box, n: int) -> bool:  # noqa: ANN001
    return box.pool is not None and sum(p.ready for p in box.pool.pods.values()) >= n


def before_each_claim(box, act) -> None:  # noqa: ANN001
    """``act(pod name)`` awaited as each claim lands, before the trial uses its pod: the races these
    tests play between a claim and the cluster."""
    run_warm = box._run_warm

    async def acted_then_run(job, image, name):  # noqa: ANN001, ANN202
        await act(name)
        return await run_warm(job, image, name)

    box._run_warm = acted_then_run


def test_claimed_warm_pods_run_each_trial_once_score_it_and_hold_off_an_attacker(images, kube_api, claim):
    """Three warm pods of one task, three trials claiming them at once: the reference solution scores
    1, doing nothing 0, and an agent attacking its pod from inside (the cold pod's attack in
    test_trials_in_task_images_in_pods.py) 0: the pod waited with nothing of the trial in it, the
    tests were gone before the agent started, and what it planted changed nothing."""
    trials = claim / "trials"
    registry = CollectorRegistry()
    box = pooled(kube_api, trials, registry=registry)
    task = HarborTask.load(IMAGE_TASKS / "secret-outside-app")
    assert box.prepare([task]) == {}
    agents = (AgentSpec.oracle(), AgentSpec.nop(), sh(ATTACK))
    specs = [TrialSpec(run=RUN, trial=f"w-{a.name}", task=task, agent=a) for a in agents]

    async def go():  # noqa: ANN202
        await box.expect([task], 3)
        await until(lambda: ready(box, 3))
        warm = set(box.pool.pods)
        results = await asyncio.gather(*(run_trial(s, box, trials) for s in specs))
        await box.close()
        return warm, results

    with FakeKubelet(kube_api, claim, NS) as kubelet:
        warm, results = asyncio.run(go())
    for spec, result in zip(specs, results, strict=True):
        want = 1.0 if spec.agent.name == "oracle" else 0.0
        assert (result.status, result.reward) == (TrialStatus.OK, want), (spec.trial, result.error, kubelet.output)
        assert result.sandbox_start == "warm" and result.start_seconds is not None
        assert (trials / RUN / spec.trial / "agent" / "instruction.md").exists()  # moved back from the pod's directory
    assert warm <= set(kubelet.started)  # the trials ran in the pods started ahead, not in new ones
    assert len(kubelet.started) == len(warm) + 3  # ... and the pool refilled the three it gave out
    agent_dir = trials / RUN / "w-sh" / "agent"
    seen = (agent_dir / "seen.txt").read_text()
    assert "test.sh" not in seen and "solve.sh" not in seen and "plan.json" in seen
    assert "denied" in (agent_dir / "environ.txt").read_text()
    assert not (agent_dir / "phase.json").is_symlink()
    assert (trials / RUN / "w-sh" / "verifier" / "reward.txt").read_text().strip() == "0"
    assert kube_api.pods == {} and not pool_dirs_left(trials)
    assert box.metrics.claims.labels("warm")._value.get() == 3 and box.metrics.claims.labels("cold")._value.get() == 0
    # what the sandboxes dashboard queries, this sandbox exports (the pool's, the claims', the API calls')
    exported = exported_names(generate_latest(registry).decode())
    queried = {m for p in json.loads(DASHBOARD.read_text())["panels"] for t in p["targets"] for m in METRIC.findall(t["expr"])}
    assert queried and {m for m in queried if not known(m, exported)} == set()


def test_with_no_warm_pod_of_its_image_a_trial_starts_cold(images, kube_api, claim):
    trials = claim / "trials"
    box = pooled(kube_api, trials)
    task = HarborTask.load(IMAGE_TASKS / "jq-field")
    assert box.prepare([task]) == {}

    async def go():  # noqa: ANN202
        result = await run_trial(TrialSpec(run=RUN, trial="c-oracle", task=task, agent=AgentSpec.oracle()), box, trials)
        await box.close()
        return result

    with FakeKubelet(kube_api, claim, NS) as kubelet:
        result = asyncio.run(go())
    assert (result.status, result.reward, result.sandbox_start) == (TrialStatus.OK, 1.0, "cold"), (result.error, kubelet.output)
    assert box.metrics.claims.labels("cold")._value.get() == 1
    assert kube_api.pods == {}


def test_a_pod_lost_before_its_claim_is_replaced_and_a_claim_on_a_gone_pod_takes_another(images, kube_api, claim):
    """One warm pod deleted as a node loss would: dropped, counted, replaced. Then a claim whose pod
    is deleted between its claim and the claim file (the watch has told by then) takes the next one,
    with the trial's instruction still there for it."""
    trials = claim / "trials"
    box = pooled(kube_api, trials)
    task = HarborTask.load(IMAGE_TASKS / "jq-field")
    assert box.prepare([task]) == {}

    async def go():  # noqa: ANN202
        await box.expect([task], 2)
        await until(lambda: ready(box, 2))
        lost = sorted(box.pool.pods)[0]
        kube_api.delete_pod(NS, lost)
        await until(lambda: lost not in box.pool.pods and ready(box, 2))  # replaced
        image = box.pool.pods[next(iter(box.pool.pods))].key.image_name
        assert box.metrics.lost.labels(image)._value.get() == 1

        async def lose_it_first(name: str) -> None:  # the race: deleted just after its claim
            if not gone:
                gone.append(name)
                await asyncio.to_thread(kube_api.delete_pod, NS, name)
                await until(lambda: box.watch.get(name) is None)

        gone: list[str] = []
        before_each_claim(box, lose_it_first)
        result = await run_trial(TrialSpec(run=RUN, trial="r-oracle", task=task, agent=AgentSpec.oracle()), box, trials)
        await box.close()
        return lost, gone, result

    with FakeKubelet(kube_api, claim, NS) as kubelet:
        lost, gone, result = asyncio.run(go())
    assert (result.status, result.reward, result.sandbox_start) == (TrialStatus.OK, 1.0, "warm"), (result.error, kubelet.output)
    assert len(gone) == 1 and gone[0] != lost
    assert (trials / RUN / "r-oracle" / "agent" / "instruction.md").exists()
    assert kube_api.pods == {}


def test_a_claimed_pod_that_fails_before_its_agent_finishes_is_an_infra_error_never_a_retry(images, kube_api, claim):
    """A claimed pod that ends Failed (not deleted: its node said so) is the trial's infra error, as a
    cold pod's would be: no second warm pod and no cold pod run the trial again."""
    trials = claim / "trials"
    box = pooled(kube_api, trials)
    task = HarborTask.load(IMAGE_TASKS / "jq-field")
    assert box.prepare([task]) == {}

    async def go():  # noqa: ANN202
        await box.expect([task], 2)
        await until(lambda: ready(box, 2))

        async def fail_it(name: str) -> None:
            failed.append(name)
            await asyncio.to_thread(kube_api.set_status, NS, name, "Failed", exit_code=137)
            await until(lambda: (pod := box.watch.get(name)) is not None and pod.status.phase == "Failed")

        failed: list[str] = []
        before_each_claim(box, fail_it)
        slow = sh("sleep 30")  # cannot have finished when the pod's failure is read
        result = await run_trial(TrialSpec(run=RUN, trial="f-sleep", task=task, agent=slow), box, trials)
        await box.close()
        return failed, result

    with FakeKubelet(kube_api, claim, NS) as kubelet:
        failed, result = asyncio.run(go())
    assert result.status == TrialStatus.INFRA_ERROR, (result.status, result.error, kubelet.output)
    assert len(failed) == 1 and failed[0] in result.error and "Failed" in result.error
    assert box.metrics.claims.labels("warm")._value.get() == 0 and box.metrics.claims.labels("cold")._value.get() == 0
    assert kube_api.pods == {}


def test_a_restarted_env_server_deletes_the_pool_its_predecessor_left(images, kube_api, claim):
    trials = claim / "trials"
    task = HarborTask.load(IMAGE_TASKS / "jq-field")

    async def first():  # noqa: ANN202 - a server that dies without closing its pool
        box = pooled(kube_api, trials)
        assert box.prepare([task]) == {}
        await box.expect([task], 3)
        await until(lambda: ready(box, 3))  # created and running: what a dead server leaves
        box.pool._task.cancel()
        await box.watch.close()
        return set(box.pool.pods)

    async def second():  # noqa: ANN202
        box = pooled(kube_api, trials)
        assert box.prepare([task]) == {}
        await box.expect([], 0)  # starts the pool: its start deletes what the first left
        left = {name for (_, name) in kube_api.pods}
        await box.close()
        return left

    with FakeKubelet(kube_api, claim, NS):
        orphans = asyncio.run(first())
        assert {name for (_, name) in kube_api.pods} == orphans
        assert asyncio.run(second()) == set()
    assert kube_api.pods == {} and not pool_dirs_left(trials)


def test_the_example_image_tasks_share_no_pool_key():
    """Each of the example image tasks has its own image: a warm pod of one is never another's."""
    from rlstack.episodes.sandboxes.kubernetes import KubernetesSandbox
    from rlstack.episodes.sandboxes.locked_images import LockedImages

    images = LockedImages(None)
    keys = {KubernetesSandbox._key(t, images.entry(t), ()) for t in load_dataset(IMAGE_TASKS).tasks}
    assert len(keys) == len(load_dataset(IMAGE_TASKS).tasks)



def test_a_second_event_loop_is_refused_naming_the_fix(images, kube_api, claim):
    """The sandbox's API client, pod watch and pool live on the loop of its first trial: a trial on
    another loop is an infra error that says so, never a hang on a dead loop's connections."""
    trials = claim / "trials"
    box = pooled(kube_api, trials, max_total=0)
    task = HarborTask.load(IMAGE_TASKS / "jq-field")
    assert box.prepare([task]) == {}
    with FakeKubelet(kube_api, claim, NS) as kubelet:
        results = [asyncio.run(run_trial(TrialSpec(run=RUN, trial=f"loop-{i}", task=task, agent=AgentSpec.oracle()), box, trials))
                   for i in range(2)]
    assert (results[0].status, results[0].reward) == (TrialStatus.OK, 1.0), (results[0].error, kubelet.output)
    assert results[1].status == TrialStatus.INFRA_ERROR and "asyncio.Runner" in results[1].error
