"""Weight sync: how a trainer's new weights reach every registered replica.

Every mode implements ``WeightPublisher.publish(model, version) -> SyncReport``; the trainer
loop does not know which one it runs.
"""

from __future__ import annotations

from typing import Protocol

from pydantic import BaseModel


class SyncReport(BaseModel):
    version: int
    seconds: float
    """Wall time of the whole sync, save through resume."""
    save_seconds: float = 0.0
    replicas: list[str]


class WeightPublisher(Protocol):
    async def publish(self, model, version: int) -> SyncReport: ...  # noqa: ANN001 - a transformers PreTrainedModel

    async def aclose(self) -> None: ...
