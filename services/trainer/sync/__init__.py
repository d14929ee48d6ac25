"""Weight sync: how a trainer's new weights reach every registered replica.

Every mode implements ``WeightPublisher.publish(model, version) -> SyncReport``; the trainer
loop does not know which one it runs.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Awaitable, Callable, Sequence
from typing import Protocol

from pydantic import BaseModel, Field

log = logging.getLogger(__name__)


class SyncReport(BaseModel):
    version: int
    seconds: float
    """Wall time of the whole sync, save through resume."""
    save_seconds: float = 0.0
    replicas: list[str]
    """Replicas now serving this version."""
    failed: dict[str, str] = Field(default_factory=dict)
    """Replicas that could not take it (replica id -> error); they keep their old version."""


class SyncFailed(RuntimeError):
    """No replica took the new weights."""


async def fan_out(endpoints: Sequence, push: Callable[[object], Awaitable[None]]) -> tuple[list[str], dict[str, str]]:
    """Push to every replica at once. One replica dying mid-sync must not stop training: it is
    reported (and keeps its old version in the registry, so groups it produces are stamped
    stale) while the others serve the new weights; only when every replica fails is it an error."""
    results = await asyncio.gather(*(push(e) for e in endpoints), return_exceptions=True)
    done = [e.id for e, r in zip(endpoints, results) if not isinstance(r, BaseException)]
    failed = {e.id: f"{type(r).__name__}: {r}" for e, r in zip(endpoints, results) if isinstance(r, BaseException)}
    for replica, error in failed.items():
        log.warning("weight sync to %s failed: %s", replica, error)
    if endpoints and not done:
        raise SyncFailed(f"no replica took the weights: {failed}")
    return done, failed


class WeightPublisher(Protocol):
    async def publish(self, model, version: int) -> SyncReport: ...  # noqa: ANN001 - a transformers PreTrainedModel

    async def aclose(self) -> None: ...
