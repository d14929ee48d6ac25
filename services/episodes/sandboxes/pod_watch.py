"""One list+watch over a run's sandbox pods, shared by every trial that waits on one.

Waiting on a pod with a GET and a watch of its own costs the API server two requests and an open
stream per trial: at RL concurrency (hundreds of trials) that is hundreds of watches, all of them
over the same pods. :class:`RunPodWatch` lists the run's pods once (label selector, one
namespace), then keeps one watch open from the list's resourceVersion and holds what it saw as a
cache. Each :meth:`RunPodWatch.wait_for` is a future the watch task resolves, so N concurrent
waits cost no request at all.

The watch is kept up the way client-go's reflector keeps it: a watch that ends or fails is opened
again from the last resourceVersion seen, so nothing that happened while it was down is lost; one
answered 410 Gone (the server no longer keeps that version) is replaced by a fresh list, and a
pod the cache had that the new list lacks counts as deleted. A pod is gone only when a DELETED
event (or such a relist) says so: a waiter for a pod created a moment ago may come before the
watch has seen its ADDED event, and waits for it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import random
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass

from lightkube import AsyncClient
from lightkube.resources.core_v1 import Pod

from rlstack.episodes.sandboxes.api_calls import ApiCalls, classify, status_code

log = logging.getLogger(__name__)

Predicate = Callable[[Pod], bool]
Subscriber = Callable[[str, Pod], None]


class PodGone(Exception):
    """The pod was deleted (by the reaper, a user, node loss) before what was awaited happened."""

    def __init__(self, name: str) -> None:
        super().__init__(f"pod {name} was deleted")
        self.name = name


class WatchClosed(RuntimeError):
    """The watch was closed while a waiter still waited."""


@dataclass(eq=False)  # a waiter is itself, whatever it waits for
class _Waiter:
    predicate: Predicate
    future: asyncio.Future[Pod]
    uid: str | None


class RunPodWatch:
    """The pods matching ``labels`` in ``namespace``, kept current by one watch."""

    def __init__(self, client: AsyncClient, namespace: str, labels: dict[str, str], *,
                 api_calls: ApiCalls | None = None, tombstones: int = 4096, rewatch_seconds: float = 300.0) -> None:
        self.client, self.namespace, self.labels = client, namespace, dict(labels)
        self.api_calls = api_calls if api_calls is not None else ApiCalls()
        """Counts the list and watch requests and paces retries (its back-off)."""
        self.rewatch_seconds = rewatch_seconds
        """A watch is reopened (from where it was) after about this long, so a connection that died
        without a word (no RST: a lost node, a NAT timeout) cannot leave the cache stale for long."""
        self.version: str | None = None
        """The last resourceVersion seen: where the next watch starts; None: relist first."""
        self.relists = 0
        """Lists after the first (each one after a 410)."""
        self._cache: dict[str, Pod] = {}
        self._tombstones: OrderedDict[str, str | None] = OrderedDict()  # name -> uid of the pod deleted
        self._max_tombstones = tombstones
        self._waiters: dict[str, list[_Waiter]] = {}
        self._subscribers: list[Subscriber] = []
        self._task: asyncio.Task[None] | None = None
        self._closed = False

    # --- the cache -------------------------------------------------------------------------

    def get(self, name: str) -> Pod | None:
        return self._cache.get(name)

    def pods(self) -> list[Pod]:
        return list(self._cache.values())

    def subscribe(self, callback: Subscriber) -> Callable[[], None]:
        """``callback(kind, pod)`` for every ADDED, MODIFIED and DELETED the watch (or a relist)
        sees, after the cache has it; called in the watch task, so it must not block. An error in
        it is logged, never the watch's end. Returns the unsubscribe function."""
        self._subscribers.append(callback)
        return lambda: self._subscribers.remove(callback) if callback in self._subscribers else None

    async def wait_for(self, name: str, predicate: Predicate, timeout: float | None = None, *,
                       uid: str | None = None) -> Pod:
        """The pod as soon as ``predicate(pod)`` holds (checked at once against the cache, then on
        every change); :class:`PodGone` once it is deleted; ``TimeoutError`` after ``timeout``.

        A pod not seen yet is waited for, not taken for gone. A name deleted before this call (and
        not seen again since) is gone at once, unless ``uid`` says which pod is meant: then only that
        pod (the uid a create or get answered) is looked at, so a pod made again under the name of a
        deleted one is waited for, and its predecessor's state is never taken for its own."""
        if self._task is None:
            raise RuntimeError("RunPodWatch.start() has not been called")
        if self._closed:
            raise WatchClosed(f"the watch over {self._selector()} is closed")
        pod = self._cache.get(name)
        if pod is not None and _is(pod, uid) and predicate(pod):
            return pod
        if pod is None and name in self._tombstones and uid in (None, self._tombstones[name]):
            raise PodGone(name)
        waiter = _Waiter(predicate, asyncio.get_running_loop().create_future(), uid)
        self._waiters.setdefault(name, []).append(waiter)
        try:
            async with asyncio.timeout(timeout):
                return await waiter.future
        finally:
            waiting = self._waiters.get(name, [])
            if waiter in waiting:
                waiting.remove(waiter)
            if not waiting:
                self._waiters.pop(name, None)

    # --- lifecycle -------------------------------------------------------------------------

    async def start(self) -> None:
        """List (errors raise here: a missing Role shows at start, not in a trial), then watch in
        the background."""
        if self._task is not None:
            return
        await self._relist(first=True)
        self._task = asyncio.create_task(self._run(), name=f"pod-watch {self._selector()}")

    async def close(self) -> None:
        """Stop watching; every waiter still waiting gets :class:`WatchClosed`."""
        self._closed = True
        if self._task is not None:
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        for waiters in self._waiters.values():
            for waiter in waiters:
                if not waiter.future.done():
                    waiter.future.set_exception(WatchClosed(f"the watch over {self._selector()} was closed"))

    # --- the watch task --------------------------------------------------------------------

    async def _run(self) -> None:
        failures = 0
        while True:
            try:
                if self.version is None:
                    await self._relist()
                if await self._watch_once():
                    failures = 0
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # noqa: BLE001 - the API server comes and goes; only close() ends this
                if status_code(exc) == 410:
                    log.info("pod watch over %s: resourceVersion %s expired; relisting", self._selector(), self.version)
                    self.version = None
                    continue
                failures += 1
                delay = self.api_calls.backoff(failures)
                log.warning("pod watch over %s failed (%s: %s); watching again from %s in %.2fs",
                            self._selector(), type(exc).__name__, exc, self.version or "a new list", delay)
                await asyncio.sleep(delay)

    async def _watch_once(self) -> bool:
        """One watch request from ``self.version`` until it fails or its bound runs out; whether it
        delivered anything. A watch the server ends cleanly is reopened by lightkube itself, from the
        same version and uncounted: kube-apiserver ends one only after 30-60 minutes, well past this
        bound, or when it shuts down."""
        code: str | None = "200"
        delivered = False
        bound = asyncio.timeout(self.rewatch_seconds * (1 + random.random() / 2))  # noqa: S311 - spread, not a secret
        try:
            async with bound:
                stream = self.client.watch(Pod, namespace=self.namespace, labels=self.labels,
                                           resource_version=self.version)
                async with contextlib.aclosing(stream):
                    async for kind, pod in stream:
                        delivered = True
                        self._apply(kind, pod)
        except TimeoutError:
            if not bound.expired():
                code = "error"
                raise
        except Exception as exc:
            code = classify(exc)[0]
            raise
        finally:
            if code is not None:
                self.api_calls.record("watch", code)
        return delivered

    async def _relist(self, first: bool = False) -> None:
        async def fetch() -> tuple[list[Pod], str]:
            listing = self.client.list(Pod, namespace=self.namespace, labels=self.labels)
            items = [pod async for pod in listing]
            return items, listing.resourceVersion

        items, version = await self.api_calls.call("list", fetch)
        if not first:
            self.relists += 1
        old, self._cache = self._cache, {pod.metadata.name: pod for pod in items}
        self.version = version
        changes: list[tuple[str, Pod]] = []
        for name, pod in old.items():
            now = self._cache.get(name)
            if now is None or now.metadata.uid != pod.metadata.uid:  # gone, or replaced while unseen
                self._bury(name, pod)
                changes.append(("DELETED", pod))
        for name, pod in self._cache.items():
            before = old.get(name)
            if before is None or before.metadata.uid != pod.metadata.uid:
                self._tombstones.pop(name, None)
                changes.append(("ADDED", pod))
            elif before.metadata.resourceVersion != pod.metadata.resourceVersion:
                changes.append(("MODIFIED", pod))
        for kind, pod in changes:
            self._tell(kind, pod)

    def _apply(self, kind: str, pod: Pod) -> None:
        if pod.metadata is not None and pod.metadata.resourceVersion:
            self.version = pod.metadata.resourceVersion
        if kind not in ("ADDED", "MODIFIED", "DELETED"):
            return  # BOOKMARK: only a newer version to resume from
        name = pod.metadata.name
        if kind == "DELETED":
            if _is(self._cache.get(name), pod.metadata.uid):
                self._cache.pop(name, None)
            self._bury(name, pod)
        else:
            self._cache[name] = pod
            self._tombstones.pop(name, None)
        self._tell(kind, pod)

    def _bury(self, name: str, pod: Pod) -> None:
        self._tombstones[name] = pod.metadata.uid
        self._tombstones.move_to_end(name)
        while len(self._tombstones) > self._max_tombstones:
            self._tombstones.popitem(last=False)

    def _tell(self, kind: str, pod: Pod) -> None:
        """Subscribers first, then the waiters on this pod."""
        for callback in list(self._subscribers):
            try:
                callback(kind, pod)
            except Exception:  # noqa: BLE001 - a subscriber's bug must not stop the watch
                log.exception("pod watch subscriber %r failed on %s %s", callback, kind, pod.metadata.name)
        name = pod.metadata.name
        for waiter in list(self._waiters.get(name, ())):
            if waiter.future.done() or not _is(pod, waiter.uid):
                continue
            if kind == "DELETED":
                waiter.future.set_exception(PodGone(name))
                continue
            try:
                if waiter.predicate(pod):
                    waiter.future.set_result(pod)
            except Exception as exc:  # noqa: BLE001 - the waiter's own error, raised to it
                waiter.future.set_exception(exc)

    def _selector(self) -> str:
        return f"{self.namespace}/{','.join(f'{k}={v}' for k, v in sorted(self.labels.items()))}"


def _is(pod: Pod | None, uid: str | None) -> bool:
    """The pod is the one meant: any, when no uid is given."""
    return pod is not None and (uid is None or pod.metadata.uid == uid)
