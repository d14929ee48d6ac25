"""Before its first trial, an env server waits until the proxy has a replica to route to.

Started beside a proxy with no replica yet (a chart install: every pod starts at once, vLLM takes
minutes), an env server's first trials got "no replica" answers, and agents that never had a model
call answered were abandoned (13 trials on the first real-node run). The proxy's ``/readyz`` says
200 once it has a replica and has answered through it; until then the env server waits, saying so.
"""

from __future__ import annotations

import asyncio
import logging
import time

import httpx
from pydantic import Field
from pydantic_settings import BaseSettings, SettingsConfigDict

log = logging.getLogger(__name__)


class ReplicaWaitSettings(BaseSettings):
    """Read from ``RLSTACK_ENV_*`` like the env server's own settings."""

    model_config = SettingsConfigDict(env_prefix="RLSTACK_ENV_", extra="ignore")

    replica_wait_seconds: float = Field(default=900.0, ge=0.0, le=86_400.0)
    """Longest wait for the proxy to have a replica before the first trial; then trials start anyway (warned)."""
    replica_wait_poll_seconds: float = Field(default=1.0, gt=0.0, le=60.0)
    """How often the proxy's ``/readyz`` is asked meanwhile."""


async def wait_for_a_replica(proxy: httpx.AsyncClient, settings: ReplicaWaitSettings | None = None,
                             policies: list[str] | None = None) -> bool:
    """Until the proxy's ``/readyz`` answers 200 (and, with ``policies``, lists a replica of each);
    True then. A proxy without that route (another OpenAI server) is not waited for. False after
    ``replica_wait_seconds``, with a warning."""
    s = settings or ReplicaWaitSettings()
    start = time.monotonic()
    said = False
    while True:
        try:
            r = await proxy.get("/readyz", timeout=10.0)
            if r.status_code == 200 and (missing := _without_replica(r, policies or [])):
                why = f"no replica yet of policy {', '.join(missing)}"
            elif r.status_code == 200 or r.status_code not in (502, 503, 504):
                if said:
                    log.info("the proxy has a replica after %.0fs: starting trials", time.monotonic() - start)
                return True
            else:
                why = r.text[:200]
        except httpx.HTTPError as exc:
            why = repr(exc)
        waited = time.monotonic() - start
        if waited >= s.replica_wait_seconds:
            log.warning("the proxy still has no replica to route to after %.0fs (%s): starting trials anyway",
                        waited, why)
            return False
        if not said:
            log.info("waiting for the proxy to have a replica to route to (up to %.0fs; RLSTACK_ENV_REPLICA_WAIT_SECONDS): %s",
                     s.replica_wait_seconds, why)
            said = True
        await asyncio.sleep(min(s.replica_wait_poll_seconds, max(0.0, s.replica_wait_seconds - waited)))


def _without_replica(readyz: httpx.Response, policies: list[str]) -> list[str]:
    """The policies the proxy's ``/readyz`` body lists no replica for (none asked: none)."""
    if not policies:
        return []
    try:
        listed = readyz.json().get("policies") or {}
    except ValueError:
        return []  # not our proxy's body: nothing to wait on
    return [p for p in policies if not listed.get(p)]
