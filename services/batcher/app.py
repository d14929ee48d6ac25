"""Wires the batcher: log replay, the service, routes, metrics and shutdown in one place."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator

from fastapi import FastAPI
from prometheus_client import CollectorRegistry

from rlstack.batcher.api import rejected_handler, router
from rlstack.batcher.config import BatcherSettings
from rlstack.batcher.metrics import BatcherCollector, wal_sync_histogram
from rlstack.batcher.service import BatcherService
from rlstack.batcher.validation import GroupRejected
from rlstack.batcher.wal import WriteAheadLog
from rlstack.common.server import create_app
from rlstack.common.supervise import Supervisor

log = logging.getLogger(__name__)
COMPACT_CHECK_SECONDS = 30.0
WATCH_SECONDS = 1.0


def build_app(settings: BatcherSettings) -> FastAPI:
    registry = CollectorRegistry()
    sync_seconds = wal_sync_histogram(registry)
    wal = WriteAheadLog(
        settings.data_dir / "batcher.wal",
        settings.durability,
        on_sync=lambda seconds, _bytes: sync_seconds.observe(seconds),
    )
    svc = BatcherService(settings, wal)
    registry.register(BatcherCollector(svc))
    ready = {"replayed": False}
    supervisor = Supervisor("batcher", settings.failure_exit_delay_seconds)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        svc.replay()
        ready["replayed"] = True
        try:
            async with supervisor:
                supervisor.start("compactor", _compact_periodically(svc))
                supervisor.start("flow watch", _watch_flow(svc))
                yield
        finally:
            await wal.close()
            log.info("batcher stopped: log flushed at step %d", svc.state.step)

    app = create_app(
        service="batcher",
        registry=registry,
        ready=lambda: (ready["replayed"], {"step": svc.state.step, "queue_groups": svc.state.available_groups}),
        supervisor=supervisor,
        lifespan=lifespan,
        max_request_bytes=settings.max_request_bytes,
        request_read_timeout=settings.request_read_timeout_seconds,
    )
    app.state.batcher = svc
    app.include_router(router)
    app.add_exception_handler(GroupRejected, rejected_handler)
    return app


async def _compact_periodically(svc: BatcherService) -> None:
    while True:
        await asyncio.sleep(COMPACT_CHECK_SECONDS)
        try:
            await svc.maybe_compact()
        except OSError:
            log.exception("compaction failed; the old log stays in use")


async def _watch_flow(svc: BatcherService) -> None:
    """Once a second: expire the leases of silent envs, and name a stall when a trainer starves."""
    last = time.monotonic()
    while True:
        await asyncio.sleep(WATCH_SECONDS)
        now = time.monotonic()
        late = now - last - WATCH_SECONDS
        last = now
        if late > WATCH_SECONDS:  # the batcher itself stood still: that time is nobody's silence
            svc.leases.pause(late)
            log.warning("batcher stalled %.1fs: env leases extended by as much", late)
        for env_id in svc.leases.sweep():
            env = svc.state.envs[env_id]
            log.warning("env %d (%s) silent for %.0fs: lease expired, it no longer takes a share of the weight; "
                        "its queued groups stay trainable", env_id, env.real_name, svc.settings.env_lease_seconds)
        for policy, stall in svc.stalls.items():  # each trainer on its own queue
            report = svc.progress(policy)
            change, say = stall.update(report.stalled)
            whose = "" if len(svc.stalls) == 1 else f" (policy {policy})"
            if change == "ended":
                log.info("stall over%s after %.0fs: %s", whose, stall.last_duration, report.describe())
            elif say:
                log.warning("run stalled%s%s: %s", whose, "" if change == "began" else f" for {stall.lasted():.0f}s",
                            report.describe())
