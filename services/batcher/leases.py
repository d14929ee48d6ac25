"""Which registered envs are alive: a lease per env, renewed by its ``/status-env`` polls.

Atropos never forgets an env that dies without ``/disconnect-env``: it keeps its share of the
weight, so a restarted env (a new registration) gets half a share and holds back on groups the
trainer needs. A lease ends that: an env that has not polled for ``lease_seconds`` stops counting,
and one that polls again counts again. Liveness is a fact about now, not about what was accepted,
so it lives in memory, never in the write-ahead log; after a batcher restart every registered env
starts with a fresh lease and the dead ones run theirs out.

Atropos's ``BaseEnv`` polls ``/status-env`` every 0.1 s; rlstack's env servers poll at least every
few seconds (a heartbeat besides their workers). Posts do not renew a lease: a restarted env posts
its dead predecessor's journaled groups under the predecessor's id.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass

from rlstack.common.contracts.atropos import HoldReason


@dataclass
class EnvLease:
    seen: float
    holding_back: HoldReason | None = None
    last_post: float | None = None
    expired: bool = False
    """Set by ``sweep`` once the lease ran out, cleared by the next poll (for the log and the counter)."""


class EnvLeases:
    def __init__(self, lease_seconds: float, clock: Callable[[], float] = time.monotonic) -> None:
        self.lease_seconds = lease_seconds
        self.clock = clock
        self.leases: dict[int, EnvLease] = {}
        self.expired_total = 0

    def adopt(self, env_ids: Iterable[int]) -> None:
        """Envs known from the log (a batcher restart): each gets a lease from now."""
        now = self.clock()
        for env_id in env_ids:
            self.leases.setdefault(env_id, EnvLease(seen=now))

    def touch(self, env_id: int, holding_back: HoldReason | None = None) -> bool:
        """A poll or a registration; returns True when it brings back an env whose lease had expired."""
        lease = self.leases.get(env_id)
        if lease is None:
            self.leases[env_id] = EnvLease(seen=self.clock(), holding_back=holding_back)
            return False
        revived = lease.expired
        lease.seen, lease.holding_back, lease.expired = self.clock(), holding_back, False
        return revived

    def posted(self, env_id: int) -> None:
        lease = self.leases.get(env_id)
        if lease is not None:
            lease.last_post = self.clock()

    def live_ids(self) -> set[int]:
        now = self.clock()
        return {env_id for env_id, lease in self.leases.items() if now - lease.seen <= self.lease_seconds}

    def sweep(self) -> list[int]:
        """Envs whose lease ran out since the last sweep (each counted once until it polls again)."""
        now = self.clock()
        newly = [env_id for env_id, lease in self.leases.items() if not lease.expired and now - lease.seen > self.lease_seconds]
        for env_id in newly:
            self.leases[env_id].expired = True
        self.expired_total += len(newly)
        return newly

    def pause(self, seconds: float) -> None:
        """The batcher itself stood still (starved, stopped): polls sent meanwhile sit unread in its
        socket, so the time does not count against anyone's lease (as the registry does)."""
        for lease in self.leases.values():
            lease.seen += seconds

    def forget(self) -> None:
        """``/reset_data``: every registration is gone."""
        self.leases.clear()

    def seconds_since(self, env_id: int) -> tuple[float | None, float | None]:
        """(since its last poll, since its last post)."""
        lease = self.leases.get(env_id)
        if lease is None:
            return None, None
        now = self.clock()
        return now - lease.seen, None if lease.last_post is None else now - lease.last_post

    def holding_back(self, env_id: int) -> HoldReason | None:
        lease = self.leases.get(env_id)
        return lease.holding_back if lease is not None else None
