"""The warm pool's bookkeeping without a cluster: targets from the next groups' demand under both
caps, and an image that cannot be pulled taking its image out of the pool (the pods' own life,
claims and replacement run against the API emulator in tests/k8s/test_warm_pool.py)."""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from pathlib import Path

import pytest
from lightkube.models.core_v1 import (
    ContainerState,
    ContainerStateWaiting,
    ContainerStatus,
    PodStatus,
)
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Pod

from rlstack.episodes.sandboxes import WarmPoolConfig
from rlstack.episodes.sandboxes.pool import POOL_LABEL, PoolKey, WarmPod, WarmPool


class CacheOnly:
    """The pool's view of the cluster for bookkeeping tests: a pod cache, no API server."""

    def __init__(self) -> None:
        self.pods: dict[str, Pod] = {}

    def get(self, name: str) -> Pod | None:
        return self.pods.get(name)

    def subscribe(self, callback) -> None:  # noqa: ANN001
        pass


def key(image: str) -> PoolKey:
    return PoolKey(image=f"reg/rlstack-task/{image}@sha256:0", user="0:0", cpu="1", memory="2Gi", agents=())


def test_targets_follow_the_next_groups_under_both_caps():
    pool = WarmPool(None, CacheOnly(), WarmPoolConfig(max_total=10, max_per_image=4), None, lambda name: Path("/nonexistent"))
    pool._wake = asyncio.Event()
    pool.expect(Counter({key("a"): 8, key("b"): 4, key("c"): 2, key("d"): 2}))
    assert pool.targets == {key("a"): 4, key("b"): 4, key("c"): 2}  # a capped at 4; d past the total of 10
    pool.broken[key("a")] = "ErrImagePull"
    pool.expect(Counter({key("a"): 8, key("d"): 2}))
    assert pool.targets == {key("d"): 2}  # an image that cannot be pulled gets no warm pods


def test_a_pod_whose_image_cannot_be_pulled_stops_its_images_pool():
    async def go():  # noqa: ANN202
        pool = WarmPool(None, CacheOnly(), WarmPoolConfig(max_total=4), None, lambda name: Path("/nonexistent"))
        pool._drop = lambda name, delete: asyncio.sleep(0)  # noqa: ARG005 - no API server here
        pool.pods["p1"] = WarmPod(name="p1", key=key("a"))
        pool.targets[key("a")] = 4
        waiting = ContainerState(waiting=ContainerStateWaiting(reason="ImagePullBackOff", message="not found"))
        pod = Pod(metadata=ObjectMeta(name="p1", labels={POOL_LABEL: key("a").digest}),
                  status=PodStatus(phase="Pending", containerStatuses=[
                      ContainerStatus(name="trial", image="x", imageID="", ready=False, restartCount=0, state=waiting)]))
        pool._on_event("MODIFIED", pod)
        await asyncio.sleep(0)
        return pool

    pool = asyncio.run(go())
    assert key("a") in pool.broken and "ImagePullBackOff" in pool.broken[key("a")]
    assert key("a") not in pool.targets
    assert pool.metrics.pull_failures.labels("a")._value.get() == 1




def test_a_pod_never_running_is_replaced_after_its_ready_timeout():
    """A pod Pending for good (no room, a pod sandbox the runtime cannot make) must not hold its
    place in the pool: dropped, counted as lost, and the next round creates another."""
    async def go():  # noqa: ANN202
        pool = WarmPool(None, CacheOnly(), WarmPoolConfig(max_total=4, ready_timeout_seconds=60), None,
                        lambda name: Path("/nonexistent"))
        dropped = []

        async def drop(name, delete):  # noqa: ANN001, ANN202 - no API server here
            dropped.append(name)
            pool.pods.pop(name, None)

        pool._drop = drop
        pool.pods["young"] = WarmPod(name="young", key=key("a"))
        pool.pods["old"] = WarmPod(name="old", key=key("a"), created=time.monotonic() - 120)
        await pool._reconcile()
        return pool, dropped

    pool, dropped = asyncio.run(go())
    assert dropped == ["old"] and set(pool.pods) == {"young"}
    assert pool.metrics.lost.labels("a")._value.get() == 1


class DeletesNothing:
    """The manager's part in a drop, recorded: the API's answer comes later, as the watch's DELETED."""

    def __init__(self) -> None:
        self.deleted: list[str] = []

    async def delete(self, name: str) -> bool:
        self.deleted.append(name)
        return True


def test_a_dropped_pods_directory_goes_only_once_the_pod_is_gone(tmp_path):
    """Deleted while its init container runs, a pod may still start its main container, whose mounts
    would make its directory again on the volume: the directory waits for the pod's DELETED."""
    async def go():  # noqa: ANN202
        watch, manager = CacheOnly(), DeletesNothing()
        pool = WarmPool(manager, watch, WarmPoolConfig(max_total=4), None, lambda name: tmp_path / name)
        (tmp_path / "p1" / "agent").mkdir(parents=True)
        pod = Pod(metadata=ObjectMeta(name="p1", labels={POOL_LABEL: key("a").digest}), status=PodStatus(phase="Pending"))
        watch.pods["p1"] = pod
        pool.pods["p1"] = WarmPod(name="p1", key=key("a"))
        await pool._drop("p1", delete=True)
        kept = (tmp_path / "p1").exists()
        pool._on_event("DELETED", pod)
        return manager.deleted, kept, (tmp_path / "p1").exists()

    deleted, kept_until_gone, left = asyncio.run(go())
    assert deleted == ["p1"] and kept_until_gone and not left


def test_a_running_pods_directory_goes_with_its_drop(tmp_path):
    """Past its init container a pod's mounts are made and nothing makes its directory again: a
    close on a busy node (the real node's took longer than its wait) must not leave it behind."""
    async def go():  # noqa: ANN202
        watch, manager = CacheOnly(), DeletesNothing()
        pool = WarmPool(manager, watch, WarmPoolConfig(max_total=4), None, lambda name: tmp_path / name)
        for name in ("running", "starting"):
            (tmp_path / name / "agent").mkdir(parents=True)
            pool.pods[name] = WarmPod(name=name, key=key("a"), ready=name == "running")
            await pool._drop(name, delete=True)
        return manager.deleted, pool._deleting

    deleted, deleting = asyncio.run(go())
    assert deleted == ["running", "starting"]
    assert not (tmp_path / "running").exists() and deleting == {"starting"}
    assert (tmp_path / "starting").is_dir()  # until its DELETED (the test above)


class GoneAfter(DeletesNothing):
    """A pod whose DELETED the watch never delivered before the close: the API says 404 from its
    ``asks``-th ask after the delete."""

    def __init__(self, asks: int) -> None:
        super().__init__()
        self.asks = asks

    async def delete(self, name: str) -> bool:
        self.deleted.append(name)
        return self.deleted.count(name) <= self.asks


@pytest.mark.parametrize("asks", [1, 2])
def test_a_close_removes_the_directories_of_pods_the_api_says_are_gone(tmp_path, monkeypatch, asks):
    """A busy node deletes a starting pod slowly and the watch may not tell in the close's wait:
    the API is asked once a second, and a gone pod's directory goes, then the run's own; a pod
    still there at the deadline keeps its directory for the next start's sweep."""
    import rlstack.episodes.sandboxes.pool as pool_module

    monkeypatch.setattr(pool_module, "CLOSE_WAIT_SECONDS", 0.2)
    monkeypatch.setattr(pool_module, "CLOSE_ASK_SECONDS", 1.5)
    run_dir = tmp_path / "run"

    async def go(manager):  # noqa: ANN001, ANN202
        pool = WarmPool(manager, CacheOnly(), WarmPoolConfig(max_total=4), None, lambda name: run_dir / name)
        (run_dir / "p1" / "agent").mkdir(parents=True)
        pool.pods["p1"] = WarmPod(name="p1", key=key("a"))
        await pool.close()

    asyncio.run(go(GoneAfter(asks)))
    assert not run_dir.exists()
    asyncio.run(go(DeletesNothing()))  # still terminating at the deadline
    assert (run_dir / "p1").is_dir()


def test_the_pool_starts_at_most_max_starting_pods_at_once():
    """A fill or refill trickles in beside the trials it is for, instead of starting every pod at once."""
    async def go():  # noqa: ANN202
        pool = WarmPool(None, CacheOnly(), WarmPoolConfig(max_total=16, max_per_image=16, max_starting=3), None,
                        lambda name: Path("/nonexistent"))
        created: list[PoolKey] = []

        async def create(k: PoolKey) -> None:
            created.append(k)
            pool.pods[f"p{len(created)}"] = WarmPod(name=f"p{len(created)}", key=k)

        pool._create = create
        pool.expect(Counter({key("a"): 10}))
        await pool._reconcile()
        first = len(created)
        for warm in pool.pods.values():  # they came up: room for the next three
            warm.ready = True
        await pool._reconcile()
        return first, len(created)

    assert asyncio.run(go()) == (3, 6)


def test_a_claimed_pod_is_never_the_pools_to_delete(tmp_path):
    """A trim, an expiry or a pull failure that comes after a trial claimed the pod leaves it alone."""
    async def go():  # noqa: ANN202
        watch, manager = CacheOnly(), DeletesNothing()
        pool = WarmPool(manager, watch, WarmPoolConfig(max_total=4), None, lambda name: tmp_path / name)
        watch.pods["p1"] = Pod(metadata=ObjectMeta(name="p1"), status=PodStatus(phase="Running"))
        pool.pods["p1"] = WarmPod(name="p1", key=key("a"), ready=True)
        assert pool.claim(key("a")).name == "p1"
        await pool._drop("p1", delete=True)
        return manager.deleted

    assert asyncio.run(go()) == []
