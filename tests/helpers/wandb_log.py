"""Reads the records of an offline W&B run file (``run-<id>.wandb``) so tests can see what was logged.

wandb 0.31 no longer ships a Python reader. The file is a 7-byte ``:W&B`` header followed by
LevelDB-style log blocks of 32 KiB, each record a 7-byte header (crc32, little-endian length,
type: 1 full, 2 first, 3 middle, 4 last) and a protobuf ``Record``.
"""

from __future__ import annotations

from pathlib import Path

BLOCK = 32768


def read_records(path: Path) -> list:
    from wandb.proto import wandb_internal_pb2

    data = path.read_bytes()
    assert data[:4] == b":W&B", "not a W&B run file"
    pos, chunks, pending = 7, [], b""
    while pos + 7 <= len(data):
        left = BLOCK - pos % BLOCK
        if left < 7:  # a block's tail too short for a header is padding
            pos += left
            continue
        length, kind = int.from_bytes(data[pos + 4:pos + 6], "little"), data[pos + 6]
        if kind == 0:
            pos += left
            continue
        chunk = data[pos + 7:pos + 7 + length]
        pos += 7 + length
        if kind == 1:
            chunks.append(chunk)
        elif kind == 2:
            pending = chunk
        elif kind == 3:
            pending += chunk
        elif kind == 4:
            chunks.append(pending + chunk)
    return [wandb_internal_pb2.Record.FromString(c) for c in chunks]


def history(path: Path) -> list[dict[str, str]]:
    """Each logged step as {key: json value}."""
    return [{item.key or "/".join(item.nested_key): item.value_json for item in r.history.item}
            for r in read_records(path) if r.WhichOneof("record_type") == "history"]


def summary(path: Path) -> dict[str, str]:
    out: dict[str, str] = {}
    for r in read_records(path):
        if r.WhichOneof("record_type") == "summary":
            out.update({item.key or "/".join(item.nested_key): item.value_json for item in r.summary.update})
    return out
