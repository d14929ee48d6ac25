"""Checkpoints: weights, optimiser state and the step, atomically.

A plain process writes Hugging Face weights (``save_pretrained``) and ``optimizer.pt``. A torchrun
job writes ``dcp/``, a torch.distributed.checkpoint of the sharded weights and optimiser state:
each rank writes its own shards, nothing is gathered, and a job of any other size (or a plain
process) reads it back resharded. Either kind resumes either way. A checkpoint is written to a
temporary directory and renamed into place, so a kill mid-write leaves the previous checkpoint
as the latest; resume picks the highest complete ``step-N``.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import torch
from pydantic import BaseModel

if TYPE_CHECKING:
    from rlstack.trainer.distributed import DistContext

STATE = "trainer_state.json"
SHARDED = "dcp"


class CheckpointState(BaseModel):
    step: int
    weight_version: int


def _paths(directory: Path, step: int) -> tuple[Path, Path]:
    return directory / f"step-{step:06d}", directory / f".tmp-step-{step:06d}"


def _commit(directory: Path, tmp: Path, final: Path, state: CheckpointState, keep: int) -> Path:
    (tmp / STATE).write_text(state.model_dump_json())
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    for old in complete(directory)[:-keep]:
        shutil.rmtree(old, ignore_errors=True)
    return final


def save(directory: Path, model, optimizer: torch.optim.Optimizer, state: CheckpointState, keep: int = 2) -> Path:  # noqa: ANN001
    final, tmp = _paths(directory, state.step)
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    model.save_pretrained(tmp, safe_serialization=True)
    torch.save(optimizer.state_dict(), tmp / "optimizer.pt")
    return _commit(directory, tmp, final, state, keep)


def _options(**kw: bool):  # noqa: ANN202 - StateDictOptions
    from torch.distributed.checkpoint.state_dict import StateDictOptions

    # Frozen weights (a LoRA base) are the model directory's; only what is trained is saved.
    return StateDictOptions(ignore_frozen_params=True, **kw)


def _training_state(policy: torch.nn.Module, optimizer: torch.optim.Optimizer) -> dict:
    from torch.distributed.checkpoint.state_dict import (
        get_model_state_dict,
        get_optimizer_state_dict,
    )

    return {"model": get_model_state_dict(policy, options=_options()),
            "optim": get_optimizer_state_dict(policy, optimizer, options=_options())}


def save_sharded(directory: Path, policy: torch.nn.Module, optimizer: torch.optim.Optimizer, state: CheckpointState,
                 keep: int, ctx: DistContext) -> Path:
    """Every rank writes its shards (called on all ranks of a torchrun job; rank 0 commits)."""
    import torch.distributed as dist
    import torch.distributed.checkpoint as dcp

    final, tmp = _paths(directory, state.step)
    if ctx.is_main:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
    dist.barrier(group=ctx.control)
    dcp.save(_training_state(policy, optimizer), checkpoint_id=tmp / SHARDED)
    dist.barrier(group=ctx.control)
    if ctx.is_main:
        _commit(directory, tmp, final, state, keep)
    dist.barrier(group=ctx.control)
    return final


def kind(path: Path) -> Literal["hf", "sharded"]:
    return "sharded" if (path / SHARDED).is_dir() else "hf"


def load_training_state(path: Path, policy: torch.nn.Module, optimizer: torch.optim.Optimizer, sharded: bool) -> None:
    """Weights and optimiser state of either kind of checkpoint into ``policy`` (a ``PolicyLogprobs``,
    sharded or not) and its optimiser. Weights of a Hugging Face checkpoint were loaded with the model."""
    from torch.distributed.checkpoint.state_dict import (
        set_model_state_dict,
        set_optimizer_state_dict,
    )

    if kind(path) == "sharded":
        import torch.distributed.checkpoint as dcp

        state = _training_state(policy, optimizer)
        import torch.distributed as dist

        # Resharded onto this job's ranks; a plain process reads every shard itself.
        dcp.load(state, checkpoint_id=path / SHARDED, no_dist=not dist.is_initialized())
        # Not strict: the frozen base (LoRA) is not in the checkpoint, it came with the model.
        set_model_state_dict(policy, state["model"], options=_options(strict=False))
        set_optimizer_state_dict(policy, optimizer, state["optim"], options=_options())
        return
    saved = torch.load(path / "optimizer.pt", weights_only=True)
    if not sharded:
        optimizer.load_state_dict(saved)
        return
    # optimizer.pt numbers the trainable parameters in order; name them for the sharded optimiser.
    names = [name for name, p in policy.named_parameters() if p.requires_grad]
    full = {"state": {names[i]: v for i, v in saved["state"].items()},
            "param_groups": [{**g, "params": [names[i] for i in g["params"]]} for g in saved["param_groups"]]}
    set_optimizer_state_dict(policy, optimizer, full, options=_options(full_state_dict=True))


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
    """``optimizer.pt`` of a plain process's checkpoint."""
    optimizer.load_state_dict(torch.load(path / "optimizer.pt", weights_only=True))
