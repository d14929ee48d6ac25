"""Warm pods per task image: started ahead of their trials, claimed with one file write.

A GRPO step starts its trials in bursts (a group of the same task at once), and a pod's start on a
busy node is seconds: the pod sandbox, the bundle's copy, the task image's container. The pool
keeps pods of the upcoming tasks' images running the bundle's trial driver in ``--wait-claim``
mode, with nothing of any trial in them. A trial claims one by staging its tests and plan into
that pod's directory on the trials volume and writing the ``claim`` file; the driver sees it
within its poll and starts the agent. A pod serves one trial and is deleted after it.

Sizes follow demand: the env server names the tasks of its next groups (``expect``), and each
image's target is the trials those groups will start, capped per image and in total. Pods beyond
the target are deleted once idle for ``trim_after_seconds``. A pod that dies, is evicted, cannot
pull its image or is not running ``ready_timeout_seconds`` after its creation is dropped and never
handed out; an image that cannot be
pulled stops its pool (logged, counted) and its trials start cold. A restarted env server
deletes the pool pods its predecessor owned before it starts any (``start``).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import secrets
import shutil
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, Gauge, Histogram
from prometheus_client import Counter as MetricCounter

from rlstack.episodes.sandboxes.base import STAGE
from rlstack.episodes.sandboxes.config import WarmPoolConfig

if TYPE_CHECKING:
    from lightkube.resources.core_v1 import Pod

log = logging.getLogger(__name__)

POOL_LABEL = "rlstack.dev/pool"
"""On a warm pod: its pool's key digest (``kubectl get pods -l rlstack.dev/pool``)."""
POOL_DIR = ".pool"
"""Inside the trials directory: one directory per warm pod (its logs and stage until claimed)."""
PULL_FAILURES = ("ErrImagePull", "ImagePullBackOff", "InvalidImageName", "ErrImageNeverPull")
CLOSE_WAIT_SECONDS = 10.0
"""How long a close waits for the watch to see its starting pods go."""
CLOSE_ASK_SECONDS = 25.0
"""Then how long it asks the API, once a second, for those not seen gone (at most ``max_starting``):
the whole close stays inside a stop's grace (60 s in the chart and under ``rlstack up``)."""
ORPHAN_AFTER_SECONDS = 60.0
MAIN_CONTAINER = "trial"


@dataclass(frozen=True)
class PoolKey:
    """What makes two trials' pods interchangeable: the image, its user, the pod's size and the
    agents the bundle copy holds."""

    image: str
    user: str
    cpu: str
    memory: str
    agents: tuple[str, ...]

    @property
    def digest(self) -> str:
        return hashlib.sha256(repr(self).encode()).hexdigest()[:10]

    @property
    def image_name(self) -> str:
        """The image without registry, tag or digest: a metric label of bounded cardinality."""
        return self.image.split("@")[0].rsplit("/", 1)[-1].split(":")[0]


@dataclass
class WarmPod:
    name: str
    key: PoolKey
    created: float = field(default_factory=time.monotonic)
    ready: bool = False
    idle_since: float = field(default_factory=time.monotonic)


class PoolMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        registry = registry if registry is not None else CollectorRegistry()
        self.pods = Gauge("rlstack_sandbox_pool_pods", "Warm pods waiting for a claim, by task image and state "
                          "(starting, ready)", ["image", "state"], registry=registry)
        self.target = Gauge("rlstack_sandbox_pool_target", "Warm pods the next groups need, by task image", ["image"],
                            registry=registry)
        self.claims = MetricCounter("rlstack_sandbox_claims", "Trial pods by how they started: warm (claimed from the "
                                    "pool) or cold (created for the trial)", ["start"], registry=registry)
        self.lost = MetricCounter("rlstack_sandbox_pool_lost", "Warm pods that ended before a claim (died, evicted, "
                                  "deleted), never handed out", ["image"], registry=registry)
        self.pull_failures = MetricCounter("rlstack_sandbox_pool_pull_failures", "Warm pods whose image could not be "
                                           "pulled (the image's pool stops)", ["image"], registry=registry)
        self.start_seconds = Histogram("rlstack_sandbox_start_seconds", "From a trial's start to its agent's first "
                                       "instruction, by how its pod started", ["start"], registry=registry,
                                       buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64, 128))
        self.in_flight = Gauge("rlstack_sandbox_pods_in_flight", "Trials running in pods now", registry=registry)
        for start in ("warm", "cold"):
            self.claims.labels(start)
            self.start_seconds.labels(start)


class WarmPool:
    """The pool's bookkeeping and its reconcile loop; the sandbox does the claims' file work.

    ``make_spec(key, pod_id)`` is the warm pod's ``SandboxSpec``; ``pod_dir(name)`` its directory on
    this server's mount of the trials volume, made (open to the pod's user) before it is created.
    """

    def __init__(self, manager, watch, config: WarmPoolConfig, make_spec: Callable, pod_dir: Callable[[str], Path],  # noqa: ANN001
                 metrics: PoolMetrics | None = None) -> None:
        self.manager, self.watch, self.config = manager, watch, config
        self.make_spec, self.pod_dir = make_spec, pod_dir
        self.metrics = metrics or PoolMetrics()
        self.pods: dict[str, WarmPod] = {}
        self.targets: Counter[PoolKey] = Counter()
        self.broken: dict[PoolKey, str] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task | None = None
        self._deleting: set[str] = set()
        """Dropped pods whose DELETED has not come yet: their directories go with it."""
        self._tasks: set[asyncio.Task] = set()

    async def start(self) -> None:
        """Delete what a predecessor of this env server left (unclaimed or mid-trial: its trials were
        abandoned with it), then start the loop."""
        self.watch.subscribe(self._on_event)
        left = [p.metadata.name for p in await self.manager.list() if POOL_LABEL in (p.metadata.labels or {})]
        for name in left:
            await self._remove(name)
        if left:
            log.info("warm pool: deleted %d pod(s) a previous env server left", len(left))
        await asyncio.to_thread(self._remove_orphan_dirs)
        self._task = asyncio.create_task(self._loop(), name="warm pool")

    async def close(self) -> None:
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        await asyncio.gather(*(self._drop(name, delete=True) for name in list(self.pods)))  # at once: a stop's grace is short
        deadline = time.monotonic() + CLOSE_WAIT_SECONDS  # their directories go as the watch sees them go
        while self._deleting and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
        deadline = time.monotonic() + CLOSE_ASK_SECONDS
        while self._deleting:  # not seen gone yet (a busy node deletes pods in init for tens of seconds):
            await asyncio.gather(*(self._gone_yet(name) for name in list(self._deleting)))  # the API says; past
            if not self._deleting or time.monotonic() >= deadline:  # the deadline, or with the API server away,
                break  # the next start's sweep takes them
            await asyncio.sleep(1.0)
        with contextlib.suppress(OSError):  # the run's own directory, once no pod's is left in it
            self._run_dir().rmdir()

    async def _gone_yet(self, name: str) -> None:
        """Asked again at a close: a pod the API no longer has takes its directory with it."""
        with contextlib.suppress(Exception):
            if not await self.manager.delete(name):
                await self._release(name)

    def _run_dir(self) -> Path:
        """``.pool/<run>/``: where every pod directory of this pool's run lies."""
        return self.pod_dir("x").parent

    def _remove_orphan_dirs(self) -> None:
        """This run's pool directories (``.pool/<run>/``) with no pod of the run (a server killed while
        deleting), older than a minute: a younger one may be a pod another env server of the run is
        creating now."""
        root = self._run_dir()
        live = {p.metadata.name for p in self.watch.pods()}
        for entry in root.iterdir() if root.is_dir() else ():
            if entry.name not in live and entry.name not in self._deleting \
                    and time.time() - entry.stat().st_mtime > ORPHAN_AFTER_SECONDS:
                shutil.rmtree(entry, ignore_errors=True)

    def expect(self, demand: Counter[PoolKey]) -> None:
        """The trials the next groups will start, by key: the new targets, capped."""
        room = self.config.max_total
        targets: Counter[PoolKey] = Counter()
        for key, wanted in demand.most_common():
            if key in self.broken:
                continue
            targets[key] = min(wanted, self.config.max_per_image, room)
            room -= targets[key]
        self.targets = +targets
        for key in {*self.targets, *[p.key for p in self.pods.values()]}:
            self.metrics.target.labels(key.image_name).set(self.targets[key])
            self.metrics.lost.labels(key.image_name)  # 0 from the start, not "No data"
            self.metrics.pull_failures.labels(key.image_name)
        self._wake.set()

    def claim(self, key: PoolKey) -> WarmPod | None:
        """A ready pod of ``key`` still in the cluster and not near its idle exit, taken out of the pool."""
        cutoff = self.config.idle_seconds - self.config.claim_margin_seconds
        for pod in sorted(self.pods.values(), key=lambda p: p.created):
            if pod.key != key or not pod.ready:
                continue
            if time.monotonic() - pod.created > cutoff:
                continue
            seen = self.watch.get(pod.name)
            if seen is None or not _main_running(seen):
                continue
            del self.pods[pod.name]
            self._gauges(key)
            self._wake.set()  # refill
            return pod
        return None

    def _on_event(self, kind: str, pod: Pod) -> None:
        name = pod.metadata.name
        if kind == "DELETED" and name in self._deleting:  # gone now: the kubelet makes no mount point again
            self._deleting.discard(name)
            shutil.rmtree(self.pod_dir(name), ignore_errors=True)
        warm = self.pods.get(name)
        if warm is None:
            return
        phase = pod.status.phase if pod.status else None
        if kind == "DELETED" or phase in ("Succeeded", "Failed"):
            log.info("warm pool: pod %s ended before a claim (%s); replacing it", name, "deleted" if kind == "DELETED" else phase)
            self.metrics.lost.labels(warm.key.image_name).inc()
            self._spawn(self._drop(name, delete=kind != "DELETED"))
            return
        failure = pull_failure(pod)
        if failure is not None:
            self.broken[warm.key] = failure
            self.targets.pop(warm.key, None)
            self.metrics.pull_failures.labels(warm.key.image_name).inc()
            log.error("warm pool: %s cannot be pulled (%s): no warm pods of it; its trials start cold", warm.key.image, failure)
            self._spawn(self._drop(name, delete=True))
            return
        if not warm.ready and _main_running(pod):
            warm.ready, warm.idle_since = True, time.monotonic()
            self._gauges(warm.key)
            self._wake.set()  # room to start the next one

    async def _loop(self) -> None:
        while True:
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(5):
                    await self._wake.wait()
            self._wake.clear()
            try:
                await self._reconcile()
            except Exception:  # the API server may be away for a moment: the next round tries again
                log.exception("warm pool: reconcile failed")

    async def _reconcile(self) -> None:
        now = time.monotonic()
        stuck = [p for p in self.pods.values() if not p.ready and now - p.created > self.config.ready_timeout_seconds]
        for pod in stuck:
            log.warning("warm pool: pod %s not running %.0fs after its creation (no room, no pod sandbox, a pull?): "
                        "replacing it", pod.name, now - pod.created)
            self.metrics.lost.labels(pod.key.image_name).inc()
            await self._drop(pod.name, delete=True)
        have = Counter(p.key for p in self.pods.values())
        expired = [p.name for p in self.pods.values() if now - p.created > self.config.idle_seconds - self.config.claim_margin_seconds]
        surplus = []
        for key in have:
            extra = have[key] - self.targets[key]
            idle = sorted((p for p in self.pods.values() if p.key == key and p.name not in expired),
                          key=lambda p: p.idle_since)
            surplus += [p.name for p in idle[:max(0, extra)] if now - p.idle_since > self.config.trim_after_seconds]
        for name in expired + surplus:
            await self._drop(name, delete=True)
        have = Counter(p.key for p in self.pods.values())
        room = min(self.config.max_total - len(self.pods),
                   self.config.max_starting - sum(1 for p in self.pods.values() if not p.ready))
        creates = []
        for key, target in self.targets.items():
            n = min(target - have[key], room)
            if n > 0:
                creates += [key] * n
                room -= n
        if creates:
            await asyncio.gather(*(self._create(key) for key in creates))

    async def _create(self, key: PoolKey) -> None:
        pod_id = f"w{key.digest[:6]}-{secrets.token_hex(4)}"
        spec = self.make_spec(key, pod_id)
        name = self.manager.pod_name(pod_id)
        directory = self.pod_dir(name)
        await asyncio.to_thread(_make_pod_dir, directory)
        self.pods[name] = WarmPod(name=name, key=key)
        self._gauges(key)
        try:
            await self.manager.launch(spec)
        except BaseException:  # refused, or cancelled at close: a create that landed anyway is deleted
            if self.pods.pop(name, None) is not None:
                self._gauges(key)
                self._spawn(self._remove(name))
            raise
        seen = self.watch.get(name)  # its ADDED (or Running) may have come before it was booked
        if seen is not None:
            self._on_event("MODIFIED", seen)

    async def _drop(self, name: str, delete: bool) -> None:
        """Out of the pool. A pod still starting keeps its directory until it is gone: deleted while
        its init container runs, it may still start its main one, whose mounts would make the
        directory again. A running one's mounts are made, so its directory goes at once (a close on a
        busy node would otherwise wait out its pods' deletions, or leave their directories)."""
        pod = self.pods.pop(name, None)
        if pod is None:  # claimed meanwhile (a trial's now), or dropped already: not the pool's to delete
            return
        self._gauges(pod.key)
        if delete:
            await self._remove(name, mounted=pod.ready)
        else:
            await asyncio.to_thread(shutil.rmtree, self.pod_dir(name), True)
        self._wake.set()

    async def _remove(self, name: str, mounted: bool = False) -> None:
        """Delete the pod; its directory goes now when its main container had started (``mounted``)
        or the pod is gone already, else when the watch sees it gone."""
        if mounted:
            await asyncio.to_thread(shutil.rmtree, self.pod_dir(name), True)
        else:
            self._deleting.add(name)
        try:
            gone = not await self.manager.delete(name)
        except Exception:  # the API server away: the reaper, or the next start, deletes it
            log.warning("warm pool: could not delete pod %s", name, exc_info=True)
            return
        if gone and name in self._deleting:  # 404: nothing will say DELETED
            await self._release(name)

    async def _release(self, name: str) -> None:
        """A deleted pod known gone: its directory goes."""
        self._deleting.discard(name)
        await asyncio.to_thread(shutil.rmtree, self.pod_dir(name), True)

    def _spawn(self, coro) -> None:  # noqa: ANN001
        """A task the pool keeps a reference to (an unreferenced task may be collected mid-run)."""
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def _gauges(self, key: PoolKey) -> None:
        ready = sum(1 for p in self.pods.values() if p.key == key and p.ready)
        starting = sum(1 for p in self.pods.values() if p.key == key and not p.ready)
        self.metrics.pods.labels(key.image_name, "ready").set(ready)
        self.metrics.pods.labels(key.image_name, "starting").set(starting)


def _make_pod_dir(directory: Path) -> None:
    """The pod's logs and stage, open to its user (an image's own, or root) before it mounts them."""
    from rlstack.episodes.inside.trial import CLAIM

    for sub in ("agent", "verifier", STAGE):
        (directory / sub).mkdir(parents=True, exist_ok=True)
    for path in (directory, *(directory / sub for sub in ("agent", "verifier", STAGE))):
        path.chmod(0o777)  # noqa: S103 - the pod's user writes its logs and empties its stage
    (directory / STAGE / CLAIM).touch()  # the driver opens it until the claim writes a line in it


def _main_running(pod: Pod) -> bool:
    """Running: past its init containers (the bundle's copy), its driver waiting for the claim. The
    claim is a file, so a pod handed out a moment early still starts the trial, only later."""
    if not (pod.status and pod.status.phase == "Running" and pod.metadata.deletionTimestamp is None):
        return False
    statuses = pod.status.containerStatuses or []
    return not any(s.name == MAIN_CONTAINER and s.state is not None and s.state.terminated is not None for s in statuses)


def pull_failure(pod: Pod) -> str | None:
    """Why the kubelet cannot pull one of the pod's images (``ErrImagePull: ...``), or None."""
    statuses = [*((pod.status.initContainerStatuses if pod.status else None) or []),
                *((pod.status.containerStatuses if pod.status else None) or [])]
    for status in statuses:
        waiting = status.state.waiting if status.state else None
        if waiting is not None and waiting.reason in PULL_FAILURES:
            return f"{waiting.reason}: {waiting.message or ''}".strip(": ")
    return None
