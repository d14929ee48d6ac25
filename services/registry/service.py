"""Registry use cases and background loops (probing, expiry), free of HTTP routing."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Coroutine
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from fastapi import HTTPException

from rlstack.common.contracts.registry import Endpoint, EndpointList, EndpointRegistration
from rlstack.common.supervise import Supervisor
from rlstack.registry.config import RegistrySettings
from rlstack.registry.prober import Prober
from rlstack.registry.table import EndpointTable
from rlstack.registry.urls import url_problem

if TYPE_CHECKING:
    from rlstack.kube.replica_pods import GonePod  # lightkube is needed only when watching pods

log = logging.getLogger(__name__)

STALL_SECONDS = 0.25
"""An expiry-loop wake-up this late counts as the registry's own stall, given back to every lease."""


class RegistryService:
    def __init__(self, settings: RegistrySettings, table: EndpointTable, prober: Prober) -> None:
        self.settings = settings
        self.table = table
        self.prober = prober
        self._tasks: set[asyncio.Task[None]] = set()
        self.removed_by_pod_total = 0
        self.quarantined_total = 0

    def register(self, endpoint_id: str, reg: EndpointRegistration, now: float) -> Endpoint:
        problem = url_problem(reg.url)
        if problem is not None:
            raise HTTPException(422, detail=[{"loc": ["body", "url"], "msg": problem, "type": "value_error"}])
        before = self.table.get(endpoint_id)
        if before is None and len(self.table) >= self.settings.max_endpoints:
            # Bounded: every endpoint is probed each interval and listed to every watcher.
            raise HTTPException(429, detail=[{"loc": ["path", "endpoint_id"], "type": "registry_full", "msg":
                                f"the registry holds {len(self.table)} endpoints (--max-endpoints); one must leave or expire first"}],
                                headers={"Retry-After": str(int(self.settings.default_ttl_seconds))})
        entry = self.table.upsert(endpoint_id, reg, now)
        if before is None or before.url != entry.url or before.model != entry.model:
            log.info("endpoint %s registered at %s serving %s (v%d)", endpoint_id, entry.url, entry.model, entry.weight_version)
            self._spawn(self._probe_one(endpoint_id))  # a new replica should not wait a whole interval
        return entry

    def quarantine(self, endpoint_id: str, reason: str) -> Endpoint | None:
        entry = self.table.quarantine(endpoint_id, reason)
        if entry is not None:
            self.quarantined_total += 1
            log.warning("endpoint %s quarantined: %s", endpoint_id, reason)
        return entry

    def release(self, endpoint_id: str) -> Endpoint | None:
        was = self.table.get(endpoint_id)
        quarantined = was is not None and was.quarantine is not None
        entry = self.table.release(endpoint_id)
        if quarantined:
            log.info("endpoint %s released from quarantine", endpoint_id)
            self._spawn(self._probe_one(endpoint_id))  # back in routing as soon as it answers
        return entry

    def snapshot(self, model: str | None, ready: bool | None, labels: dict[str, str]) -> EndpointList:
        return EndpointList(revision=self.table.revision, endpoints=self.table.select(model, ready, labels))

    def drop_pod(self, gone: GonePod) -> list[str]:
        """Remove the replicas a vanishing pod served: registered under its name or at its IP."""
        dropped = [e.id for e in self.table.all() if e.id == gone.name or (gone.ip and urlsplit(str(e.url)).hostname == gone.ip)]
        for endpoint_id in dropped:
            if self.table.remove(endpoint_id):
                self.removed_by_pod_total += 1
                log.warning("endpoint %s removed: pod %s %s", endpoint_id, gone.name, gone.why)
        return dropped

    async def _probe_one(self, endpoint_id: str) -> None:
        entry = self.table.get(endpoint_id)
        if entry is not None:
            ready, error, transient = await self.prober.probe(entry)
            self.table.record_probe(endpoint_id, ready, error, time.time(), transient)

    async def probe_loop(self) -> None:
        while True:
            try:
                await self.prober.probe_all()
            except Exception:  # a probe bug must not stop probing
                log.exception("probe round failed")
            await asyncio.sleep(self.settings.probe_interval_seconds)

    async def expiry_loop(self) -> None:
        """Expire leases, not counting time this loop overslept: a late wake-up means the registry
        was stalled, and the heartbeats sent meanwhile have not been read yet."""
        period = min(1.0, self.settings.default_ttl_seconds / 4)
        while True:
            for endpoint_id in self.table.expire(time.time()):
                log.warning("endpoint %s expired (no heartbeat)", endpoint_id)
            asleep = time.monotonic()
            await asyncio.sleep(period)
            overslept = time.monotonic() - asleep - period
            if overslept > STALL_SECONDS:
                self.table.extend_leases(overslept)
                log.warning("the registry was stalled for %.1f s; leases extended by as much", overslept)

    def start(self, supervisor: Supervisor, pod_watch: Coroutine[None, None, None] | None = None) -> None:
        """The long-lived loops run under the supervisor: one that dies fails the process loudly."""
        supervisor.start("probe loop", self.probe_loop())
        supervisor.start("expiry loop", self.expiry_loop())
        if pod_watch is not None:
            supervisor.start("pod watch", pod_watch)

    async def stop(self) -> None:
        """Cancel the one-off probes still in flight (the loops stop with their supervisor)."""
        for task in self._tasks:
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)

    def _spawn(self, coro) -> None:  # noqa: ANN001
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)
