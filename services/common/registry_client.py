"""Client for the registry's API, used by replicas (register/heartbeat), the proxy and the trainer (watch)."""

from __future__ import annotations

import os

import httpx

from rlstack.common.auth import bearer
from rlstack.common.contracts.registry import Endpoint, EndpointList, EndpointRegistration
from rlstack.common.http import request_with_retries

REGISTRY_TOKEN_ENV = "RLSTACK_REGISTRY_TOKEN"
"""The registry's bearer token for every client in a process that names none (``rlstack up`` sets it)."""

SYNC_TARGET_ATTEMPTS = 10
"""Tries to list a sync's replicas (backing off to 5 s: about 30 s in all). A restarted registry
answers within seconds; before, the fault run's registry kill failed the trainer's next sync."""


class RegistryClient:
    def __init__(self, base_url: str, token: str | None = None, timeout: float = 10.0) -> None:
        headers = bearer(token if token else os.environ.get(REGISTRY_TOKEN_ENV))
        self._client = httpx.AsyncClient(base_url=base_url.rstrip("/"), headers=headers, timeout=httpx.Timeout(timeout, connect=3.0))

    async def put(self, endpoint_id: str, registration: EndpointRegistration) -> None:
        body = registration.model_dump(mode="json", exclude_none=True)
        response = await request_with_retries(self._client, "PUT", f"/v1/endpoints/{endpoint_id}", json=body, attempts=2)
        response.raise_for_status()

    async def delete(self, endpoint_id: str) -> bool:
        response = await request_with_retries(self._client, "DELETE", f"/v1/endpoints/{endpoint_id}", attempts=2)
        if response.status_code == 404:
            return False
        response.raise_for_status()
        return True

    async def list(self, model: str | None = None, ready: bool | None = None, attempts: int = 4) -> EndpointList:
        params = {k: v for k, v in (("model", model), ("ready", None if ready is None else str(ready).lower())) if v is not None}
        response = await request_with_retries(self._client, "GET", "/v1/endpoints", params=params, attempts=attempts)
        response.raise_for_status()
        return EndpointList.model_validate_json(response.content)

    async def sync_targets(self, model: str) -> list[Endpoint]:
        """Replicas a weight sync goes to: the ready ones, and the quarantined ones (a sync that
        passes its check is how a quarantine ends). Patient (``SYNC_TARGET_ATTEMPTS``, about 30 s):
        a registry being restarted must not end the trainer's run in the middle of a sync."""
        endpoints = (await self.list(model=model, attempts=SYNC_TARGET_ATTEMPTS)).endpoints
        return [e for e in endpoints if e.ready or e.quarantine is not None]

    async def quarantine(self, endpoint_id: str, reason: str) -> None:
        response = await request_with_retries(self._client, "PUT", f"/v1/endpoints/{endpoint_id}/quarantine",
                                              json={"reason": reason[:2000]}, attempts=3)
        response.raise_for_status()

    async def release(self, endpoint_id: str) -> None:
        response = await request_with_retries(self._client, "DELETE", f"/v1/endpoints/{endpoint_id}/quarantine", attempts=3)
        if response.status_code != 404:  # gone meanwhile: nothing to release
            response.raise_for_status()

    async def watch(self, revision: int, timeout: float = 30.0) -> EndpointList:
        response = await self._client.get(
            "/v1/endpoints/watch", params={"revision": revision, "timeout": timeout}, timeout=timeout + 10
        )
        response.raise_for_status()
        return EndpointList.model_validate_json(response.content)

    async def aclose(self) -> None:
        await self._client.aclose()
