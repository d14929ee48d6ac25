"""The registry's watch on inference pods: a pod that is going away stops getting traffic at once.

A replica killed with SIGKILL, OOM or a lost node never deregisters; without this the proxy
would keep routing to it until the heartbeat TTL runs out. Uses exactly list and watch on pods,
which is all the chart's registry Role grants.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable

from lightkube import AsyncClient
from lightkube.core.exceptions import NotReadyError
from lightkube.resources.core_v1 import Pod
from pydantic import BaseModel

log = logging.getLogger(__name__)


class GonePod(BaseModel):
    name: str
    ip: str | None
    why: str


def going_away(kind: str, pod: Pod) -> GonePod | None:
    """Deleted, being deleted, or ended: its replica will not answer again."""
    ip = pod.status.podIP if pod.status else None
    if kind == "DELETED":
        why = "deleted"
    elif pod.metadata.deletionTimestamp is not None:
        why = "terminating"
    elif pod.status and pod.status.phase in ("Succeeded", "Failed"):
        why = f"phase {pod.status.phase}"
    else:
        return None
    return GonePod(name=pod.metadata.name, ip=ip, why=why)


async def watch_replica_pods(client: AsyncClient, namespace: str | None, selector: dict[str, str],
                             on_gone: Callable[[GonePod], None], retry_seconds: float = 2.0) -> None:
    """List, then watch from the list's resourceVersion; relist after any error (410 Gone included)."""
    while True:
        try:
            listing = client.list(Pod, namespace=namespace, labels=selector)
            async for pod in listing:
                if (gone := going_away("LISTED", pod)) is not None:
                    on_gone(gone)
            version = listing.resourceVersion if _started(listing) else None
            async for kind, pod in client.watch(Pod, namespace=namespace, labels=selector, resource_version=version):
                if (gone := going_away(kind, pod)) is not None:
                    on_gone(gone)
        except Exception as exc:  # noqa: BLE001 - the API server comes and goes; cancellation passes through
            log.warning("replica pod watch failed (%s); relisting in %.0fs", exc, retry_seconds)
        await asyncio.sleep(retry_seconds)


def _started(listing) -> bool:  # noqa: ANN001
    try:
        return bool(listing.resourceVersion)
    except NotReadyError:
        return False
