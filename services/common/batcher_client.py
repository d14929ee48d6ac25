"""Client for the batcher's API as rlstack's own services use it: typed bodies out, typed replies back.

Atropos clients (atroposlib's ``BaseEnv`` and trainers) keep talking to the same routes
unchanged; this is for the env servers, the launcher's smoke check and ``rlstack doctor``.
Transient failures (connection refused, 502-504) are retried; a 4xx other than 408/429 is the
caller's mistake or a batcher that forgot it (a reset) and raises ``BatcherRefused``.
"""

from __future__ import annotations

import uuid
from typing import Any, Literal

import httpx
from pydantic import BaseModel

from rlstack.common.auth import bearer
from rlstack.common.contracts.atropos import (
    SAVED_STEP_HEADER,
    EnvIdentifier,
    EnvRegistration,
    EnvStatus,
    EnvStatusQuery,
    HoldReason,
    RegisterEnvResponse,
    ScoredData,
    Status,
    TrainerRegistration,
)
from rlstack.common.contracts.progress import ProgressReport
from rlstack.common.http import request_with_retries


class BatcherRefused(Exception):
    """The batcher answered 4xx: retrying the same request cannot help."""


class BatcherInfo(BaseModel):
    """``GET /info``: the registered trainer's batch shape (-1 while none is registered)."""

    batch_size: int
    max_token_len: int
    batch_fill: Literal["exact", "at_least"] = "exact"
    """rlstack's batcher says how the trainer takes batches (Atropos's answers lack it: exact)."""


class BatcherClient:
    def __init__(self, base_url: str, token: str | None = None, timeout: float = 30.0) -> None:
        self._client = httpx.AsyncClient(base_url=base_url.rstrip("/"), headers=bearer(token), timeout=httpx.Timeout(timeout, connect=3.0))

    async def _call(self, method: str, path: str, attempts: int = 4, max_delay: float = 5.0, **kwargs: Any) -> httpx.Response:
        r = await request_with_retries(self._client, method, path, attempts=attempts, max_delay=max_delay, **kwargs)
        if 400 <= r.status_code < 500 and r.status_code not in (408, 429):
            raise BatcherRefused(f"{method} {path}: {r.status_code} {r.text[:300]}")
        r.raise_for_status()
        return r

    async def register_trainer(self, registration: TrainerRegistration, attempts: int = 30) -> None:
        await self._call("POST", "/register", attempts=attempts, max_delay=2, json=registration.model_dump())

    async def register_env(self, registration: EnvRegistration) -> RegisterEnvResponse:
        """A ``status`` other than "success" (e.g. "wait for trainer to start") means: try again later."""
        r = await self._call("POST", "/register-env", json=registration.model_dump(exclude_none=True))
        return RegisterEnvResponse.model_validate_json(r.content)

    async def info(self, policy: str | None = None) -> BatcherInfo:
        """``policy``: that policy's trainer's shape, with a batcher of several."""
        params = {"policy": policy} if policy else None
        return BatcherInfo.model_validate_json((await self._call("GET", "/info", params=params)).content)

    async def status(self, policy: str | None = None) -> Status:
        """``policy``: that policy's queue and step, with a batcher of several."""
        params = {"policy": policy} if policy else None
        return Status.model_validate_json((await self._call("GET", "/status", params=params)).content)

    async def env_status(self, env_id: int, holding_back: HoldReason | None = None) -> EnvStatus:
        """One try: callers poll this and decide themselves how to wait out an outage. Each poll
        renews the env's lease; ``holding_back`` tells the batcher why it starts nothing now."""
        query = EnvStatusQuery(env_id=env_id, holding_back=holding_back)
        r = await self._call("GET", "/status-env", attempts=1, json=query.model_dump(exclude_none=True))
        return EnvStatus.model_validate_json(r.content)

    async def disconnect_env(self, env_id: int, timeout: float = 3.0) -> None:
        """One try, briefly: a stopping env says it is gone rather than letting its lease run out."""
        r = await self._client.post("/disconnect-env", json=EnvIdentifier(env_id=env_id).model_dump(), timeout=timeout)
        r.raise_for_status()

    async def progress(self, policy: str | None = None) -> ProgressReport:
        """rlstack's batcher only: is the trainer starving, and what each env is doing; ``policy``:
        that policy's trainer, with a batcher of several."""
        params = {"policy": policy} if policy else None
        return ProgressReport.model_validate_json((await self._call("GET", "/progress", attempts=2, params=params)).content)

    async def post_group(self, group: ScoredData | dict[str, Any], key: str | None = None) -> None:
        """``key``: the group's ``Idempotency-Key`` when the caller keeps it across its own restarts."""
        body = group.model_dump(exclude_none=True) if isinstance(group, ScoredData) else group
        # One key for every retry of this post: an answer lost after the batcher logged it must not land the group twice.
        await self._call("POST", "/scored_data", attempts=6, max_delay=10, json=body,
                         headers={"Idempotency-Key": key or uuid.uuid4().hex})

    async def post_groups(self, body: dict[str, Any] | list[dict[str, Any]], key: str | None = None) -> None:
        """A group (``/scored_data``) or several in one request (``/scored_data_list``: a trial group's
        per-policy groups), under one ``Idempotency-Key`` kept across the caller's restarts."""
        if isinstance(body, dict):
            await self.post_group(body, key=key)
            return
        await self._call("POST", "/scored_data_list", attempts=6, max_delay=10, json=body,
                         headers={"Idempotency-Key": key or uuid.uuid4().hex})

    async def batch(self, saved_step: int | None = None, policy: str | None = None) -> list[dict[str, Any]] | None:
        """The next batch as the wire carries it (the trainer builds tensors from it), or None while not ready.
        ``saved_step``: the trainer's latest checkpoint (rlstack's batcher then lets go of the batches it holds);
        ``policy``: that policy's queue, with a batcher of several."""
        headers = {SAVED_STEP_HEADER: str(saved_step)} if saved_step is not None else {}
        params = {"policy": policy} if policy else None
        return (await self._call("GET", "/batch", attempts=10, max_delay=2, headers=headers, params=params)).json().get("batch")

    async def aclose(self) -> None:
        await self._client.aclose()
