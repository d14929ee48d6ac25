"""Appends trajectory records to per-trial JSONL files from one writer thread.

Callbacks only enqueue (never block a response); one thread owns every file it writes, so
concurrent calls of one trial can never interleave half-lines, and shutdown drains the queue
before exit. Each proxy process writes files named by its own writer id, so several worker
processes and pods never append to the same file (see ``trajectory_file``).
"""

from __future__ import annotations

import logging
import queue
import threading
from pathlib import Path

from prometheus_client import Counter

from rlstack.common.contracts.trajectory import TrajectoryRecord, trajectory_file

log = logging.getLogger(__name__)
_STOP = object()


class TrajectoryWriter:
    def __init__(self, trials_dir: Path, writer_id: str, lines: Counter | None = None) -> None:
        self.trials_dir = trials_dir
        self.writer_id = writer_id
        self.lines = lines
        """``rlstack_proxy_trajectory_lines{outcome}``: a failed write must show on the dashboard, not only in a log."""
        self._queue: queue.Queue = queue.Queue()
        self._thread = threading.Thread(target=self._run, name="trajectory-writer", daemon=True)
        self.written = 0
        self.failed = 0

    def path_for(self, run: str, trial: str) -> Path:
        return trajectory_file(self.trials_dir / run / trial, self.writer_id)

    def start(self) -> None:
        self._thread.start()

    def submit(self, record: TrajectoryRecord) -> None:
        self._queue.put(record)

    def flush(self, timeout: float = 30.0) -> bool:
        """Block until everything submitted before this call is on disk (or the timeout)."""
        done = threading.Event()
        self._queue.put(done)
        return done.wait(timeout)

    def close(self, timeout: float = 30.0) -> None:
        self._queue.put(_STOP)
        self._thread.join(timeout)

    def _count(self, outcome: str, n: int) -> None:
        if self.lines is not None:
            self.lines.labels(outcome).inc(n)

    def _run(self) -> None:
        while True:
            batch = [self._queue.get()]
            while not self._queue.empty() and len(batch) < 256:
                batch.append(self._queue.get_nowait())
            stop = any(item is _STOP for item in batch)
            flushed = [item for item in batch if isinstance(item, threading.Event)]
            by_file: dict[Path, list[bytes]] = {}
            for item in batch:
                if item is not _STOP and not isinstance(item, threading.Event):
                    line = item.model_dump_json(exclude_none=False).encode() + b"\n"
                    by_file.setdefault(self.path_for(item.run_id, item.trial_id), []).append(line)
            for path, lines in by_file.items():
                try:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    with path.open("ab") as f:
                        f.write(b"".join(lines))
                    self.written += len(lines)
                    self._count("written", len(lines))
                except OSError:
                    self.failed += len(lines)
                    self._count("failed", len(lines))
                    log.exception("could not write %d trajectory lines to %s", len(lines), path)
            for event in flushed:
                event.set()
            if stop:
                return
