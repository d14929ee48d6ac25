"""A private gloo process group between a trainer and a replica's workers (weight broadcast).

Both sides build it the same way from a TCPStore the trainer hosts; it never touches the
default process group (vLLM's workers and a torchrun trainer each have their own).
"""

from __future__ import annotations

from datetime import timedelta


def gloo_group(address: str, port: int, rank: int, world_size: int, timeout_s: float, is_master: bool):  # noqa: ANN201 - torch types
    import torch.distributed as dist

    timeout = timedelta(seconds=timeout_s)
    store = dist.TCPStore(address, port, world_size, is_master=is_master, timeout=timeout)
    return dist.ProcessGroupGloo(store, rank, world_size, timeout), store
