"""Supervised background loops: the one way every service runs its long-lived tasks.

A loop that ends or raises while the service is not stopping leaves a live-looking process
with a dead part. The supervisor logs the cause once, turns ``/healthz`` and ``/readyz`` to 503
(Kubernetes' liveness probe restarts the pod) and, after ``exit_delay`` seconds, stops the
process as SIGTERM would (``serve`` hands it uvicorn's stop), which then exits 1. Loops
cancelled by a normal stop are not failures.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Coroutine
from types import TracebackType
from typing import Any

log = logging.getLogger(__name__)


def root_cause(exc: BaseException) -> BaseException:
    """The first leaf of an exception group (a TaskGroup's), else ``exc`` itself."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


class Supervisor:
    """Starts a service's loops, cancels them on stop, and turns any unexpected end into a failed process."""

    def __init__(self, service: str, exit_delay: float = 2.0, stop_process: Callable[[], None] | None = None) -> None:
        self.service = service
        self.exit_delay = exit_delay
        self.stop_process = stop_process
        """Set by ``serve`` to uvicorn's graceful stop; an app run in-process (tests) has none and stays up, failed."""
        self.failure: str | None = None
        """The first failure's cause; set once, never cleared: a restart is the only way back."""
        self._tasks: dict[asyncio.Task[None], str] = {}
        self._stopping = False
        self._exit: asyncio.TimerHandle | None = None
        self._on_stopping: list[Callable[[], None]] = []

    def on_stopping(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` when the server begins to stop (before it waits for requests in flight)."""
        self._on_stopping.append(callback)

    def stopping(self) -> None:
        """The server stops accepting connections (``serve`` calls this on SIGTERM or a failure's stop)."""
        for callback in self._on_stopping:
            callback()

    @property
    def exit_code(self) -> int:
        return 0 if self.failure is None else 1

    def start(self, name: str, coro: Coroutine[Any, Any, None], *, finishes: bool = False) -> asyncio.Task[None]:
        """Run ``coro`` as a loop named ``name``; ``finishes=True`` when returning is its normal end (a warm-up)."""
        task = asyncio.get_running_loop().create_task(coro, name=f"{self.service}:{name}")
        self._tasks[task] = name
        task.add_done_callback(lambda done: self._ended(done, finishes))
        return task

    def fail(self, cause: str, exc: BaseException | None = None) -> None:
        """Mark the process dead: the cause logged, health 503, exit 1 after ``exit_delay``."""
        log.error("%s: %s; the process stops with exit code 1", self.service, cause, exc_info=exc)
        if self.failure is None:
            self.failure = cause
            self._request_exit(self.exit_delay)

    def finish(self) -> None:
        """The service's work is done (a trainer with exit_when_done): stop the process with exit code 0."""
        self._request_exit(0.0)

    async def stop(self) -> None:
        """Cancel every loop and wait for it: the normal end, never a failure."""
        self._stopping = True
        if self._exit is not None:
            self._exit.cancel()
        tasks = list(self._tasks)
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    async def __aenter__(self) -> Supervisor:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.stop()

    def _ended(self, task: asyncio.Task[None], finishes: bool) -> None:
        name = self._tasks.pop(task, task.get_name())
        exc = None if task.cancelled() else task.exception()
        if self._stopping:
            if exc is not None:  # cleanup trouble while stopping: worth a line, not a failed exit
                log.warning("%s raised while stopping: %r", name, exc)
            return
        if exc is not None:
            cause = root_cause(exc)
            self.fail(f"{name} failed: {type(cause).__name__}: {cause}", exc)
        elif task.cancelled():
            self.fail(f"{name} was cancelled")
        elif not finishes:
            self.fail(f"{name} ended")

    def _request_exit(self, delay: float) -> None:
        if self._exit is None and not self._stopping and self.stop_process is not None:
            self._exit = asyncio.get_running_loop().call_later(delay, self.stop_process)
