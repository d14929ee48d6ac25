import asyncio
import os

import pytest

from rlstack.batcher.wal import HEADER, CorruptLogError, WriteAheadLog


def run(coro):
    return asyncio.run(coro)


def test_records_round_trip_in_order(tmp_path):
    path = tmp_path / "x.wal"

    async def write():
        wal = WriteAheadLog(path)
        list(wal.open())
        applied = []
        await asyncio.gather(*(wal.append(1, f"r{i}".encode(), on_durable=lambda i=i: applied.append(i)) for i in range(50)))
        await wal.close()
        return applied

    applied = run(write())
    assert applied == list(range(50))  # callbacks run in log order
    assert [p for _, p in WriteAheadLog(path).open()] == [f"r{i}".encode() for i in range(50)]


def test_concurrent_appends_share_fsyncs(tmp_path):
    syncs = []

    async def write():
        wal = WriteAheadLog(tmp_path / "x.wal", on_sync=lambda s, n: syncs.append(n))
        list(wal.open())
        await asyncio.gather(*(wal.append(1, b"x" * 100) for _ in range(200)))
        await wal.close()

    run(write())
    assert sum(syncs) == 200 * (HEADER.size + 100)
    assert len(syncs) < 200  # group commit: fewer writes than records


def test_torn_tail_is_cut_and_log_stays_appendable(tmp_path):
    path = tmp_path / "x.wal"

    async def write(payloads):
        wal = WriteAheadLog(path)
        list(wal.open())
        for p in payloads:
            await wal.append(1, p)
        await wal.close()

    run(write([b"one", b"two"]))
    with path.open("ab") as f:
        f.write(HEADER.pack(1, 100, 0) + b"partial")  # a crash mid-write
    assert [p for _, p in WriteAheadLog(path).open()] == [b"one", b"two"]
    run(write([b"three"]))
    assert [p for _, p in WriteAheadLog(path).open()] == [b"one", b"two", b"three"]


def test_corruption_in_the_middle_is_refused(tmp_path):
    path = tmp_path / "x.wal"

    async def write():
        wal = WriteAheadLog(path)
        list(wal.open())
        for p in (b"aaaa", b"bbbb", b"cccc"):
            await wal.append(1, p)
        await wal.close()

    run(write())
    data = bytearray(path.read_bytes())
    data[HEADER.size] ^= 0xFF  # flip a payload byte of the first record
    path.write_bytes(bytes(data))
    with pytest.raises(CorruptLogError):
        list(WriteAheadLog(path).open())


def test_rewrite_replaces_contents_atomically(tmp_path):
    path = tmp_path / "x.wal"

    async def go():
        wal = WriteAheadLog(path)
        list(wal.open())
        for i in range(10):
            await wal.append(1, b"old%d" % i)
        await wal.rewrite(lambda: [(2, b"snap")])
        await wal.append(1, b"after")
        await wal.close()

    run(go())
    assert [(k, p) for k, p in WriteAheadLog(path).open()] == [(2, b"snap"), (1, b"after")]
    assert not os.path.exists(path.with_suffix(".compact"))


def test_memory_only_policy_writes_nothing(tmp_path):
    path = tmp_path / "x.wal"

    async def go():
        wal = WriteAheadLog(path, durability="none")
        list(wal.open())
        hit = []
        await wal.append(1, b"x", on_durable=lambda: hit.append(1))
        return hit

    assert run(go()) == [1]
    assert not path.exists()
