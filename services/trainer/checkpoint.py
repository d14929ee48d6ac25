"""Checkpoints: weights (safetensors via save_pretrained), optimiser state and the step, atomically.

A checkpoint is written to a temporary directory and renamed into place, so a kill mid-write
leaves the previous checkpoint as the latest; resume picks the highest complete ``step-N``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import torch
from pydantic import BaseModel

STATE = "trainer_state.json"


class CheckpointState(BaseModel):
    step: int
    weight_version: int


def save(directory: Path, model, optimizer: torch.optim.Optimizer, state: CheckpointState, keep: int = 2) -> Path:  # noqa: ANN001
    final = directory / f"step-{state.step:06d}"
    tmp = directory / f".tmp-step-{state.step:06d}"
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp, safe_serialization=True)
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    (tmp / STATE).write_text(state.model_dump_json())
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    for old in complete(directory)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def complete(directory: Path) -> list[Path]:
    """Finished checkpoints, oldest first (temporary ones are never listed)."""
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.glob("step-*") if (p / STATE).exists())


def latest(directory: Path) -> Path | None:
    found = complete(directory)
    return found[-1] if found else None


def load_state(path: Path) -> CheckpointState:
    return CheckpointState.model_validate(json.loads((path / STATE).read_text()))


def load_optimizer(path: Path, optimizer: torch.optim.Optimizer) -> None:
    optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=True))
