"""The endpoint table: upserts, expiry, probe results and a revision that watchers wait on.

No FastAPI or I/O here; time is passed in, so tests drive expiry without sleeping.
"""

from __future__ import annotations

import asyncio

from rlstack.common.contracts.registry import Endpoint, EndpointRegistration
from rlstack.common.weight_versions import serves


class EndpointTable:
    def __init__(self, default_ttl: float, failure_threshold: int = 1) -> None:
        self.default_ttl = default_ttl
        self.failure_threshold = failure_threshold
        """Transient probe failures in a row that take a ready endpoint out of routing."""
        self.revision = 0
        self._endpoints: dict[str, Endpoint] = {}
        self._failures: dict[str, int] = {}
        self._changed = asyncio.Event()
        self.expired_total = 0
        self.stalled_seconds_total = 0.0

    def __len__(self) -> int:
        return len(self._endpoints)

    def _bump(self) -> None:
        self.revision += 1
        self._changed.set()
        self._changed = asyncio.Event()

    def upsert(self, endpoint_id: str, reg: EndpointRegistration, now: float) -> Endpoint:
        """Register or heartbeat; only a change in what watchers see bumps the revision."""
        ttl = reg.ttl_seconds or self.default_ttl
        old = self._endpoints.get(endpoint_id)
        same_target = old is not None and old.url == reg.url and old.model == reg.model
        same_server = same_target and old.instance_id == reg.instance_id
        entry = Endpoint(
            id=endpoint_id,
            **reg.model_dump(),
            ready=old.ready if same_target else False,
            registered_at=old.registered_at if old else now,
            last_heartbeat=now,
            expires_at=now + ttl,
            last_probe_at=old.last_probe_at if same_target else None,
            probe_error=old.probe_error if same_target else None,
            quarantine=old.quarantine if same_server else None,
        )
        self._endpoints[endpoint_id] = entry
        if old is None or _visible(old) != _visible(entry):
            self._bump()
        return entry

    def remove(self, endpoint_id: str) -> bool:
        self._failures.pop(endpoint_id, None)
        if self._endpoints.pop(endpoint_id, None) is None:
            return False
        self._bump()
        return True

    def extend_leases(self, seconds: float) -> None:
        """Give back time the registry itself was not running (its process starved or stopped).

        Heartbeats sent meanwhile wait unread in its sockets; on waking, the expiry loop can run
        before they are read. A lease counts only time the registry could have heard a heartbeat.
        """
        for entry in self._endpoints.values():
            entry.expires_at += seconds
        self.stalled_seconds_total += seconds

    def expire(self, now: float) -> list[str]:
        gone = [eid for eid, e in self._endpoints.items() if e.expires_at <= now]
        for eid in gone:
            del self._endpoints[eid]
            self._failures.pop(eid, None)
        if gone:
            self.expired_total += len(gone)
            self._bump()
        return gone

    def quarantine(self, endpoint_id: str, reason: str) -> Endpoint | None:
        """Out of routing until released or restarted, whatever the prober sees."""
        entry = self._endpoints.get(endpoint_id)
        if entry is None:
            return None
        changed = entry.ready or entry.quarantine != reason
        entry.quarantine, entry.ready, entry.probe_error = reason, False, f"quarantined: {reason}"
        if changed:
            self._bump()
        return entry

    def release(self, endpoint_id: str) -> Endpoint | None:
        """End a quarantine; the next probe decides readiness again."""
        entry = self._endpoints.get(endpoint_id)
        if entry is not None and entry.quarantine is not None:
            entry.quarantine, entry.probe_error = None, None
            self._bump()
        return entry

    def record_probe(self, endpoint_id: str, ready: bool, error: str | None, now: float, transient: bool = False) -> None:
        """A transient failure (a slow or 5xx answer) takes a ready endpoint out only at the threshold.

        A replica busy with long generations can miss one probe's deadline while serving well;
        dropping it from routing for that turns load into 503s. A refused connection or a model
        missing from the list is no sign of load, and acts at once.
        """
        entry = self._endpoints.get(endpoint_id)
        if entry is None:
            return  # removed while the probe was in flight
        failures = 0 if ready else self._failures.get(endpoint_id, 0) + 1
        self._failures[endpoint_id] = failures
        if transient and entry.ready and failures < self.failure_threshold:
            ready = True  # still in routing; probe_error says what was seen
        if entry.quarantine is not None:
            ready, error = False, f"quarantined: {entry.quarantine}"
        changed = entry.ready != ready
        entry.ready, entry.probe_error, entry.last_probe_at = ready, error, now
        if changed:
            self._bump()

    def get(self, endpoint_id: str) -> Endpoint | None:
        return self._endpoints.get(endpoint_id)

    def all(self) -> list[Endpoint]:
        return sorted(self._endpoints.values(), key=lambda e: (e.dp_rank is None, e.dp_rank or 0, e.id))

    def select(self, model: str | None = None, ready: bool | None = None, labels: dict[str, str] | None = None) -> list[Endpoint]:
        out = []
        for e in self.all():
            if model is not None and not serves(e, model):
                continue
            if ready is not None and e.ready != ready:
                continue
            if labels and any(e.labels.get(k) != v for k, v in labels.items()):
                continue
            out.append(e)
        return out

    async def wait_for_change(self, revision: int, timeout: float) -> None:
        """Return as soon as the table's revision passes ``revision``, or after ``timeout``."""
        if self.revision > revision:
            return
        try:
            await asyncio.wait_for(self._changed.wait(), timeout)
        except TimeoutError:
            pass


def _visible(e: Endpoint) -> tuple:
    """The parts of an entry a watcher acts on (not heartbeat times)."""
    return (str(e.url), e.model, e.weight_version, e.dp_rank, tuple(sorted(e.labels.items())), e.ready,
            e.quarantine)
