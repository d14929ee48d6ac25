"""The newest complete version the trainer has published, where a replica that (re)starts begins.

A replica that restarts or scales out mid-run would otherwise serve the base model (version 0)
until the next publish, and forever once the trainer is done. The ``filesystem`` and ``lora``
sync modes leave every version in ``<weights dir>/v<version>`` (``save_pretrained``: full
weights, or a peft adapter); the trainer may be writing the newest one right now, so a version
counts only when its config and every safetensors file it names are whole (the sizes their
headers promise). ``broadcast`` leaves no files: such a replica catches up at the next publish.
"""

from __future__ import annotations

import json
import re
import struct
from pathlib import Path
from typing import Literal

from pydantic import BaseModel

VERSION_DIR = re.compile(r"^v(\d{6,})$")


class Published(BaseModel):
    version: int
    path: Path
    kind: Literal["full", "adapter"]


def latest_published(weights_dir: Path | None) -> Published | None:
    """The highest-numbered complete version under ``weights_dir``; None when there is none."""
    if weights_dir is None or not weights_dir.is_dir():
        return None
    versions = sorted(((int(m.group(1)), p) for p in weights_dir.iterdir() if (m := VERSION_DIR.match(p.name)) and p.is_dir()),
                      reverse=True)
    for version, path in versions:
        kind = complete(path)
        if kind is not None:
            return Published(version=version, path=path, kind=kind)
    return None


def complete(path: Path) -> Literal["full", "adapter"] | None:
    """What a version directory holds once fully written: full weights or a lora adapter."""
    if (path / "adapter_config.json").is_file():
        return "adapter" if _whole(path / "adapter_model.safetensors") else None
    if not (path / "config.json").is_file():
        return None
    index = path / "model.safetensors.index.json"
    if index.is_file():
        try:
            shards = set(json.loads(index.read_text())["weight_map"].values())
        except (OSError, ValueError, KeyError, AttributeError):
            return None
        return "full" if shards and all(_whole(path / shard) for shard in shards) else None
    return "full" if _whole(path / "model.safetensors") else None


def _whole(file: Path) -> bool:
    """A safetensors file as long as its header says: 8-byte header length, JSON header, data."""
    try:
        with file.open("rb") as f:
            (header_len,) = struct.unpack("<Q", f.read(8))
            if header_len > 100_000_000:
                return False
            header = json.loads(f.read(header_len))
        end = max((t["data_offsets"][1] for k, t in header.items() if k != "__metadata__"), default=0)
        return file.stat().st_size == 8 + header_len + end
    except (OSError, ValueError, KeyError, TypeError, struct.error):
        return False
