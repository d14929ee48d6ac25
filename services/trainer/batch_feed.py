"""Batches in: the trainer's wait for its next batch, through a batcher outage and a starved queue."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable

import httpx

from rlstack.common.batcher_client import BatcherClient, BatcherRefused
from rlstack.trainer.metrics import TrainerMetrics

log = logging.getLogger(__name__)
IDLE_LOOK_SECONDS = 5.0
"""While it waits for a batch, how often the trainer runs ``on_idle`` (a look for replicas behind its weights)."""
STARVED_LOG_SECONDS = 60.0
"""While it waits for a batch, how often the trainer logs why (the batcher's ``/progress``)."""


class BatchFeed:
    def __init__(self, batcher: BatcherClient, policy: str | None, outage_seconds: float, metrics: TrainerMetrics) -> None:
        self.batcher = batcher
        self.policy = policy
        self.outage_seconds = outage_seconds
        self.metrics = metrics

    async def next(self, step: int, saved_step: int, on_idle: Callable[[], Awaitable[None]]) -> tuple[list[dict], float]:
        """The next batch and how long it took to come."""
        start = looked = said = time.monotonic()
        away_since: float | None = None
        while True:
            try:
                batch = await self.batcher.batch(saved_step=saved_step, policy=self.policy)
            except (httpx.TransportError, httpx.HTTPStatusError) as exc:
                # A batcher restart (Recreate rollout, node loss) outlasts the client's retries;
                # exiting here would reload the policy and lose the steps since the checkpoint.
                now = time.monotonic()
                away_since = away_since or now
                if now - away_since > self.outage_seconds:
                    raise
                if now - said >= STARVED_LOG_SECONDS or away_since == now:
                    said = now
                    log.warning("batcher unreachable for %.0fs at step %d (%r): waiting up to %.0fs for it",
                                now - away_since, step, exc, self.outage_seconds)
                await asyncio.sleep(1.0)
                continue
            if away_since is not None:
                log.info("batcher back after %.0fs", time.monotonic() - away_since)
                away_since = None
            if batch:
                waited = time.monotonic() - start
                self.metrics.batch_wait_seconds.inc(waited)
                return batch, waited
            if time.monotonic() - looked >= IDLE_LOOK_SECONDS:
                looked = time.monotonic()
                await on_idle()
            if time.monotonic() - said >= STARVED_LOG_SECONDS:
                said = time.monotonic()
                await self._say_why_starved(said - start, step)
            await asyncio.sleep(0.05)

    async def _say_why_starved(self, waited: float, step: int) -> None:
        """A long wait for a batch is logged with the batcher's account of it: the queue, and what
        each env is doing (holding back, silent, producing)."""
        try:
            report = await self.batcher.progress(self.policy)
        except (httpx.HTTPError, BatcherRefused, ValueError) as exc:  # an Atropos server has no /progress
            log.warning("no batch for %.0fs at step %d (the batcher gives no account: %r)", waited, step, exc)
            return
        whose = f" of policy {self.policy}" if self.policy else ""
        log.warning("no batch%s for %.0fs at step %d%s: %s", whose, waited, step, " (stalled)" if report.stalled else "",
                    report.describe())
