"""What the trainer asks the registry about its own replicas: are they all on the weights just
published (before an evaluation), and is one still behind (restarted on the base model, or missed
a broadcast) so the weights must go out again."""

from __future__ import annotations

import asyncio
import logging
import time

import httpx

from rlstack.common.contracts.registry import Endpoint
from rlstack.common.registry_client import RegistryClient

log = logging.getLogger(__name__)


def replicas_behind(endpoints: list[Endpoint], version: int) -> set[str]:
    """Ready replicas that report a weight version older than ``version``."""
    return {e.id for e in endpoints if e.ready and e.weight_version < version}


class ReplicaWatch:
    """The policy's ready replicas as the registry lists them (one client, the trainer's)."""

    def __init__(self, registry: RegistryClient, served_model_name: str) -> None:
        self.registry = registry
        self.served_model_name = served_model_name
        self._behind: set[str] = set()
        """Replicas seen on older weights at the last look (``lagging``)."""

    async def wait_for(self, version: int, timeout: float = 30.0) -> bool:
        """Until every ready replica reports ``version`` (sidecars publish it on their next heartbeat)."""
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            endpoints = (await self.registry.list(model=self.served_model_name, ready=True)).endpoints
            if endpoints and all(e.weight_version == version for e in endpoints):
                return True
            await asyncio.sleep(0.2)
        log.warning("registry does not show weight version %d on every replica after %.0fs", version, timeout)
        return False

    async def lagging(self, version: int) -> set[str]:
        """Replicas on weights older than ``version`` at this look and the last (one look could catch
        a heartbeat in flight); a registry that is away answers nothing until it is back."""
        try:
            endpoints = (await self.registry.list(model=self.served_model_name, ready=True)).endpoints
        except (httpx.HTTPError, ValueError) as exc:
            log.debug("could not list replicas: %r", exc)
            return set()
        behind = replicas_behind(endpoints, version)
        lagging = behind & self._behind
        self._behind = set() if lagging else behind
        return lagging
