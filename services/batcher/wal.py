"""Append-only write-ahead log with group commit, torn-tail recovery and compaction.

Each record is framed as ``kind (1 byte) | length (4) | crc32 (4) | payload``. Appends queue
up while a write is in flight and go to disk together in one write + fdatasync (group
commit), so a burst of concurrent posts costs one fsync, not one each. After the write, each
record's ``on_durable`` callback runs in log order: that is how the in-memory state is kept
identical to what a replay of the log would rebuild.
"""

from __future__ import annotations

import asyncio
import logging
import os
import struct
import time
import zlib
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import BinaryIO, Literal

log = logging.getLogger(__name__)

HEADER = struct.Struct("<BII")
Durability = Literal["fsync", "flush", "none"]
OnDurable = Callable[[], None]


class CorruptLogError(RuntimeError):
    """A bad record in the middle of the log: refuse to guess, an operator must look."""


def frame(kind: int, payload: bytes) -> bytes:
    return HEADER.pack(kind, len(payload), zlib.crc32(payload)) + payload


def _scan(f: BinaryIO, path: Path) -> Iterator[tuple[int, bytes, int]]:
    """Each good record and the offset just past it; stops at a torn tail, raises on a bad record mid-log."""
    total = os.fstat(f.fileno()).st_size
    good = 0
    while True:
        header = f.read(HEADER.size)
        if not header:
            return
        if len(header) == HEADER.size:
            kind, length, crc = HEADER.unpack(header)
            payload = f.read(length)
            if len(payload) == length and zlib.crc32(payload) == crc:
                good = f.tell()
                yield kind, payload, good
                continue
            if good + HEADER.size + length < total:
                # Valid-looking data follows: not a crash artefact.
                raise CorruptLogError(f"{path}: bad record at byte {good}")
        log.warning("wal: torn tail at byte %d of %d", good, total)
        return


def read_records(path: Path) -> Iterator[tuple[int, bytes]]:
    """A log's records, read without writing: no file created, a torn tail left for the batcher to cut (the ledger's reader)."""
    with path.open("rb") as f:
        for kind, payload, _ in _scan(f, path):
            yield kind, payload


class WriteAheadLog:
    def __init__(
        self,
        path: Path,
        durability: Durability = "fsync",
        on_sync: Callable[[float, int], None] | None = None,
    ) -> None:
        self.path = path
        self.durability = durability
        self._on_sync = on_sync or (lambda seconds, nbytes: None)
        self._fd: int | None = None
        self._size = 0
        self._pending: list[tuple[bytes, OnDurable | None, asyncio.Future[None] | None]] = []
        self._flusher: asyncio.Task[None] | None = None
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="wal")

    @property
    def size(self) -> int:
        return self._size

    def open(self) -> Iterator[tuple[int, bytes]]:
        """Open the log and yield its records; a torn tail left by a crash is cut off."""
        if self.durability == "none":
            return
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.path.touch(exist_ok=True)
        good = 0
        with self.path.open("rb") as f:
            for kind, payload, end in _scan(f, self.path):
                good = end
                yield kind, payload
        if good < self.path.stat().st_size:
            os.truncate(self.path, good)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        self._size = good

    async def append(self, kind: int, payload: bytes, on_durable: OnDurable | None = None) -> None:
        """Return once the record is durable (per the policy) and ``on_durable`` has run."""
        if self.durability == "none":
            if on_durable:
                on_durable()
            return
        future: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._pending.append((frame(kind, payload), on_durable, future))
        self._kick()
        await asyncio.shield(future)

    def append_nowait(self, kind: int, payload: bytes) -> None:
        """Queue a record whose loss is harmless (replay recomputes it), without waiting."""
        if self.durability != "none":
            self._pending.append((frame(kind, payload), None, None))
            self._kick()

    def _kick(self) -> None:
        if self._flusher is None or self._flusher.done():
            self._flusher = asyncio.get_running_loop().create_task(self._flush_loop())

    async def _flush_loop(self) -> None:
        loop = asyncio.get_running_loop()
        while self._pending:
            batch, self._pending = self._pending, []
            data = b"".join(item[0] for item in batch)
            try:
                # One writer thread serialises writes with compaction's file swap.
                await loop.run_in_executor(self._executor, self._write, data)
            except OSError as exc:
                log.error("wal: write failed: %s", exc)
                for _, _, future in batch:
                    if future is not None and not future.done():
                        future.set_exception(exc)
                continue
            for _, on_durable, future in batch:
                if on_durable is not None:
                    on_durable()
                if future is not None and not future.done():
                    future.set_result(None)

    def _write(self, data: bytes) -> None:
        assert self._fd is not None, "wal used before open()"
        start = time.perf_counter()
        try:
            view = memoryview(data)
            while view:
                written = os.write(self._fd, view)
                view = view[written:]
            if self.durability == "fsync":
                os.fdatasync(self._fd)
        except OSError:
            os.ftruncate(self._fd, self._size)  # never leave half a frame behind
            raise
        self._size += len(data)
        self._on_sync(time.perf_counter() - start, len(data))

    async def drain(self) -> None:
        """Wait until everything queued so far is on disk."""
        while self._flusher is not None and not self._flusher.done():
            await self._flusher

    async def rewrite(self, snapshot: Callable[[], Iterable[tuple[int, bytes]]]) -> None:
        """Atomically replace the log with ``snapshot()``, taken once all queued writes landed.

        Records appended while the new file is written go to it afterwards, in order: the
        single writer thread runs the swap before them.
        """
        if self.durability == "none":
            return
        await self.drain()
        loop = asyncio.get_running_loop()
        frames = [frame(kind, payload) for kind, payload in snapshot()]
        await loop.run_in_executor(self._executor, self._swap, frames)

    def _swap(self, frames: list[bytes]) -> None:
        tmp = self.path.with_suffix(".compact")
        with tmp.open("wb") as f:
            for data in frames:
                f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, self.path)
        dir_fd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dir_fd)
        finally:
            os.close(dir_fd)
        if self._fd is not None:
            os.close(self._fd)
        self._fd = os.open(self.path, os.O_WRONLY | os.O_APPEND)
        self._size = self.path.stat().st_size
        log.info("wal: compacted to %d bytes", self._size)

    async def close(self) -> None:
        await self.drain()
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None
        self._executor.shutdown(wait=True)
