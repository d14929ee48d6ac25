"""Process-group set-up and FSDP2 sharding for a trainer launched by ``torchrun``.

``torchrun`` sets RANK/WORLD_SIZE/LOCAL_RANK; without them the trainer is one plain process
(no process group, no sharding: today's behaviour). Under torchrun every rank runs the same
code: NCCL between GPUs, gloo between CPU processes, plus a gloo group for the small Python
messages rank 0 sends the others (a batch, a command), so they never occupy the GPU links.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Any

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class DistContext:
    rank: int = 0
    world_size: int = 1
    local_rank: int = 0
    device: torch.device = torch.device("cpu")
    launched: bool = False
    """Started by torchrun: the model is sharded with FSDP2 (even on one rank, so that one code path is tested)."""
    control: Any = None
    """gloo group for Python objects (rank 0 -> others); None in a plain process."""

    @property
    def is_main(self) -> bool:
        return self.rank == 0


def launched_by_torchrun() -> bool:
    return "RANK" in os.environ and "WORLD_SIZE" in os.environ and "LOCAL_RANK" in os.environ


def init_distributed(device: str = "auto", timeout_s: float = 1800.0) -> DistContext:
    """The context of this process, starting the process groups when torchrun launched it.

    ``device`` auto picks this rank's GPU (LOCAL_RANK) when CUDA is present, else the CPU.
    """
    use_cuda = torch.cuda.is_available() if device == "auto" else device == "cuda"
    if not launched_by_torchrun():
        return DistContext(device=torch.device("cuda" if use_cuda else "cpu"))
    from datetime import timedelta

    rank, world, local = int(os.environ["RANK"]), int(os.environ["WORLD_SIZE"]), int(os.environ["LOCAL_RANK"])
    if use_cuda:
        torch.cuda.set_device(local)
    if not dist.is_initialized():
        # Both backends on the default group: NCCL carries CUDA tensors, gloo the CPU ones.
        backend = "cpu:gloo,cuda:nccl" if use_cuda else "gloo"
        dist.init_process_group(backend=backend, timeout=timedelta(seconds=timeout_s))
    control = dist.new_group(backend="gloo")
    return DistContext(rank=rank, world_size=world, local_rank=local, launched=True, control=control,
                       device=torch.device("cuda", local) if use_cuda else torch.device("cpu"))


def shutdown(ctx: DistContext) -> None:
    if ctx.launched and dist.is_initialized():
        dist.destroy_process_group()


def broadcast_object(ctx: DistContext, obj: Any = None) -> Any:
    """Rank 0's ``obj`` on every rank (over the gloo control group)."""
    if ctx.world_size == 1:
        return obj
    box = [obj]
    dist.broadcast_object_list(box, src=0, group=ctx.control)
    return box[0]


def gather_object(ctx: DistContext, obj: Any) -> list[Any] | None:
    """Every rank's ``obj`` in rank order on rank 0 (over the gloo control group); None elsewhere."""
    if ctx.world_size == 1:
        return [obj]
    box: list[Any] | None = [None] * ctx.world_size if ctx.is_main else None
    dist.gather_object(obj, box, dst=0, group=ctx.control)
    return box


def barrier(ctx: DistContext) -> None:
    """Every rank waits here until all have arrived (control group)."""
    if ctx.world_size > 1:
        dist.barrier(group=ctx.control)


def all_reduce(ctx: DistContext, values: list[float], op: str = "sum") -> list[float]:
    """Element-wise sum (or max) of a few floats across ranks, as float64 on the control group."""
    if ctx.world_size == 1:
        return list(values)
    t = torch.tensor(values, dtype=torch.float64)
    dist.all_reduce(t, op=dist.ReduceOp.MAX if op == "max" else dist.ReduceOp.SUM, group=ctx.control)
    return t.tolist()


def decoder_layers(model: torch.nn.Module) -> list[torch.nn.Module]:
    """The repeated transformer blocks: the units FSDP gathers one at a time."""
    decoder = model.get_decoder() if hasattr(model, "get_decoder") else None
    layers = getattr(decoder, "layers", None)
    if layers is None:
        raise ValueError(f"{type(model).__name__}: no decoder layers to shard")
    return list(layers)


def shard(policy: torch.nn.Module, model: torch.nn.Module, ctx: DistContext, mixed_precision: bool,
          cpu_offload: bool) -> torch.nn.Module:
    """FSDP2 over every rank: one unit per decoder layer, and the root (embeddings, final norm,
    head) around ``policy`` (the module whose forward the step calls, holding ``model``).

    Mixed precision: bf16 parameters and compute, float32 gradient reduction, float32 master
    weights and optimiser state (kept sharded, so each rank holds 1/N of them).
    """
    from torch.distributed.fsdp import (
        CPUOffloadPolicy,
        MixedPrecisionPolicy,
        OffloadPolicy,
        fully_shard,
    )

    mp = MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32) if mixed_precision else MixedPrecisionPolicy()
    offload = CPUOffloadPolicy(pin_memory=ctx.device.type == "cuda") if cpu_offload else OffloadPolicy()
    for layer in decoder_layers(model):
        fully_shard(layer, mp_policy=mp, offload_policy=offload)
    fully_shard(policy, mp_policy=mp, offload_policy=offload)
    return policy


def is_sharded(module: torch.nn.Module) -> bool:
    from torch.distributed.fsdp import FSDPModule

    return isinstance(module, FSDPModule)
