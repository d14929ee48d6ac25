"""The ``ipc`` weight-sync mode: a trainer sharing its GPUs with the replicas hands vLLM CUDA IPC
handles to weights in its own GPU memory; each replica's worker maps the handle made on its own
GPU and copies from it through vLLM's IPC weight-transfer engine. No bytes cross a network or a
disk.

A policy sharded over torchrun ranks (one rank per GPU, a replica beside each) syncs layer by
layer: every rank gathers one decoder layer onto its GPU and makes a handle to it, rank 0
collects every rank's handles (keyed by GPU UUID, the key vLLM's workers look up) and sends the
layer to every replica in one ``/update_weights``; then every rank drops the layer. So no GPU
ever holds the whole model twice, and every replica reads from the rank on its own GPU. A plain
process sends its live parameters in one call.

Trainer and replicas must share physical GPUs, with tensor parallelism 1 (``rlstack dryrun``
checks the config), and the replicas run with ``--weight-transfer-backend ipc`` (the sidecar
then sets VLLM_ALLOW_INSECURE_SERIALIZATION, which vLLM needs to unpickle handles sent over
HTTP). CUDA IPC cannot run on our CI machines: the tests drive the same code with a CPU
shared-memory handle and stand-in replicas (tests/helpers/ipc_stand_in.py).
"""

from __future__ import annotations

import asyncio
import base64
import logging
import pickle
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import httpx
import torch

from rlstack.common.auth import bearer
from rlstack.common.registry_client import RegistryClient
from rlstack.trainer.sync import PAUSE, SyncFailed, SyncReport, finish_update, full_weights

log = logging.getLogger(__name__)
HandleFn = Callable[[torch.Tensor], tuple]


@dataclass(frozen=True)
class IpcSource:
    """How one process shares a tensor with a replica on its device: the device's id as vLLM's
    workers name it (the GPU's UUID) and a function making a handle another process can open."""

    device_id: str
    handle: HandleFn


def cuda_ipc_handle(tensor: torch.Tensor) -> tuple:
    from torch.multiprocessing.reductions import reduce_tensor

    return reduce_tensor(tensor)[1]


def cuda_source(device: torch.device | None = None) -> IpcSource:
    if not torch.cuda.is_available():
        raise RuntimeError("sync_mode=ipc needs the trainer on the replica's GPU; no CUDA device here")
    index = device.index if device is not None and device.index is not None else torch.cuda.current_device()
    return IpcSource(str(torch.cuda.get_device_properties(index).uuid), cuda_ipc_handle)


@dataclass
class IpcUnit:
    """One ``/update_weights`` worth of tensors: one decoder layer (or the whole model of a plain process)."""

    names: list[str]
    dtypes: list[torch.dtype]
    shapes: list[list[int]]
    handles: list[dict[str, tuple]]
    """Per tensor: device id -> handle, one entry per rank that shared it."""

    def update_info(self) -> dict[str, Any]:
        return {"names": self.names, "dtype_names": [str(d).removeprefix("torch.") for d in self.dtypes], "shapes": self.shapes,
                "ipc_handles_pickled": base64.b64encode(pickle.dumps(self.handles)).decode()}


def share(tensors: dict[str, torch.Tensor], source: IpcSource) -> IpcUnit:
    """This process's handles to ``tensors`` (which must stay alive until the replicas have copied them)."""
    return IpcUnit(names=list(tensors), dtypes=[t.dtype for t in tensors.values()], shapes=[list(t.shape) for t in tensors.values()],
                   handles=[{source.device_id: source.handle(t)} for t in tensors.values()])


def merge(units: list[IpcUnit]) -> IpcUnit:
    """Every rank's handles to the same layer in one unit (the ranks gathered the same names in the same order)."""
    first = units[0]
    if any(u.names != first.names for u in units):
        raise RuntimeError("ranks shared different tensors for one layer")
    handles = [{device: h for u in units for device, h in u.handles[i].items()} for i in range(len(first.names))]
    return IpcUnit(first.names, first.dtypes, first.shapes, handles)


Send = Callable[[str, IpcUnit], None]
Finish = Callable[[], None]


class IpcPublisher:
    def __init__(self, registry: RegistryClient, served_model_name: str, replica_api_key: str | None = None,
                 transport: httpx.BaseTransport | None = None, source: IpcSource | None = None,
                 timeout_s: float = 600.0) -> None:
        self.registry = registry
        self.served_model_name = served_model_name
        self.headers = bearer(replica_api_key)
        self.transport = transport
        self.source = source
        """This process's device, for a plain (unsharded) policy; a sharded one uses each rank's."""
        self.timeout_s = timeout_s
        self.initialised: set[str] = set()

    async def publish(self, model, version: int) -> SyncReport:  # noqa: ANN001 - a PreTrainedModel or a ShardedPolicy
        start = time.perf_counter()
        endpoints = await self.registry.sync_targets(self.served_model_name)
        done, failed = await asyncio.to_thread(self._sync_all, [(e.id, str(e.url).rstrip("/")) for e in endpoints], model, version)
        for replica, error in failed.items():
            log.warning("weight sync to %s failed: %s", replica, error)
        if endpoints and not done:
            raise SyncFailed(f"no replica took the weights: {failed}")
        report = SyncReport(version=version, seconds=time.perf_counter() - start, replicas=done, failed=failed)
        log.info("weights v%d shared with %d replica(s) in %.2fs", version, len(done), report.seconds)
        return report

    def _share(self, model, send: Send, finish: Finish) -> None:  # noqa: ANN001
        if hasattr(model, "share_weights"):  # a policy sharded over torchrun ranks: every rank joins
            model.share_weights(send, finish)
            return
        if self.source is None:
            self.source = cuda_source()
        tensors = dict(full_weights(model))  # contiguous views of the live parameters, alive until finish
        send("all", share(tensors, self.source))
        finish()

    def _sync_all(self, replicas: list[tuple[str, str]], model, version: int) -> tuple[list[str], dict[str, str]]:  # noqa: ANN001
        failed: dict[str, str] = {}
        with httpx.Client(timeout=self.timeout_s, headers=self.headers, transport=self.transport) as client, \
                ThreadPoolExecutor(max_workers=max(1, len(replicas))) as pool:

            def each(step: Callable[[str, str], None], who: list[tuple[str, str]], what: str, even_failed: bool = False) -> None:
                """``step`` on every replica still in the sync, at once; a failure drops that replica only."""
                futures = {rid: pool.submit(step, rid, url) for rid, url in who if even_failed or rid not in failed}
                for rid, future in futures.items():
                    try:
                        future.result()
                    except Exception as exc:  # noqa: BLE001 - this replica only
                        failed.setdefault(rid, f"{what} failed: {type(exc).__name__}: {exc}")

            def open_(rid: str, url: str) -> None:
                if rid not in self.initialised:
                    client.post(f"{url}/init_weight_transfer_engine", json={"init_info": {"packed": False}}).raise_for_status()
                    self.initialised.add(rid)
                client.post(f"{url}/pause", params=PAUSE).raise_for_status()
                paused.append((rid, url))
                client.post(f"{url}/start_weight_update").raise_for_status()

            def send(unit: str, shared: IpcUnit) -> None:
                body = {"update_info": shared.update_info()}
                each(lambda rid, url: client.post(f"{url}/update_weights", json=body).raise_for_status(), opened, f"update of {unit}")

            def finish_one(rid: str, url: str) -> None:
                finish_update(client, url, version)

            paused: list[tuple[str, str]] = []
            try:
                each(open_, replicas, "start")
                opened = [(rid, url) for rid, url in replicas if rid not in failed]
                # Finishing happens while the shared tensors are still alive: a replica may hold a
                # layer it could not process yet (a padded vocabulary) until finish.
                self._share(model, send, lambda: each(finish_one, opened, "finish"))
            finally:
                # Generation is never left paused, whatever failed before.
                each(lambda rid, url: client.post(f"{url}/resume").raise_for_status(), paused, "resume", even_failed=True)
        for rid in failed:
            self.initialised.discard(rid)  # a replica that failed is initialised afresh next time
        return [rid for rid, _ in replicas if rid not in failed], failed

    async def aclose(self) -> None:
        await self.registry.aclose()


__all__ = ["IpcPublisher", "IpcSource", "IpcUnit", "cuda_ipc_handle", "cuda_source", "merge", "share"]
