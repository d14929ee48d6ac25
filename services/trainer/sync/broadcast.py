"""The ``broadcast`` weight-sync mode: tensors go straight from trainer memory into the replicas
through vLLM's weight-transfer engine; nothing touches a disk.

Per replica, once: a private gloo group (ours, registered in vLLM by the worker extension; the
same HTTP protocol drives NCCL on GPUs) with the trainer as rank 0, opened by
``/init_weight_transfer_engine`` while the trainer joins the same rendezvous. Per sync: every
replica is paused (in-flight requests kept), starts a layerwise reload and is told the names,
dtypes and shapes to expect (``/update_weights``, answered once all have arrived); then the
weights stream once, layer by layer, each tensor broadcast to every replica in turn; then each
replica finishes the update with the version, stores it in the worker, resets its prefix cache
and resumes. A policy sharded over torchrun ranks streams exactly the same way: the ranks
gather one layer at a time and only that layer is ever whole on rank 0. A replica that fails
mid-stream is dropped from the rest of it and reported; the others carry on.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import httpx
import torch

from rlstack.common.gloo import gloo_group
from rlstack.common.ports import free_port
from rlstack.common.registry_client import RegistryClient
from rlstack.trainer.sync import (
    PAUSE,
    SyncFailed,
    SyncReport,
    finish_update,
    full_weights,
    replica_headers,
)

log = logging.getLogger(__name__)


@dataclass
class ReplicaLink:
    url: str
    group: object
    store: object


@dataclass
class Session:
    """One replica during one sync."""

    client: httpx.Client
    url: str
    link: ReplicaLink
    paused: bool = False
    receiver: threading.Thread | None = None
    error: BaseException | None = None


Consume = Callable[[str, dict[str, torch.Tensor]], None]


def weight_stream(model) -> tuple[list[tuple[str, torch.dtype, list[int]]], Callable[[Consume], None]]:  # noqa: ANN001
    """What will be sent (names, dtypes, shapes, in order) and a function streaming it into a consumer.

    A policy sharded over torchrun ranks gathers layer by layer (``ShardedPolicy``); a plain model
    is one unit of its CPU tensors (gloo sends from CPU memory).
    """
    if hasattr(model, "stream_weights"):
        return model.weight_layout(), model.stream_weights
    tensors = {name: t.cpu() for name, t in full_weights(model)}
    return [(n, t.dtype, list(t.shape)) for n, t in tensors.items()], lambda consume: consume("all", tensors)


class BroadcastPublisher:
    def __init__(self, registry: RegistryClient, served_model_name: str, trainer_host: str = "127.0.0.1",
                 replica_api_key: str | None = None, timeout_s: float = 300.0) -> None:
        self.registry = registry
        self.served_model_name = served_model_name
        self.trainer_host = trainer_host
        """Address the replicas' workers reach the trainer's rendezvous on (the pod IP in a cluster)."""
        self.headers = replica_headers(replica_api_key)
        self.timeout_s = timeout_s
        self.links: dict[str, ReplicaLink] = {}

    async def publish(self, model, version: int) -> SyncReport:  # noqa: ANN001 - a PreTrainedModel or a ShardedPolicy
        start = time.perf_counter()
        endpoints = await self.registry.sync_targets(self.served_model_name)
        done, failed = await asyncio.to_thread(self._sync_all, [(e.id, str(e.url).rstrip("/")) for e in endpoints], model, version)
        for replica in failed:
            self.links.pop(replica, None)  # a replica that failed rejoins with a fresh group next time
            log.warning("weight sync to %s failed: %s", replica, failed[replica])
        if endpoints and not done:
            raise SyncFailed(f"no replica took the weights: {failed}")
        report = SyncReport(version=version, seconds=time.perf_counter() - start, replicas=done, failed=failed)
        log.info("weights v%d broadcast to %d replica(s) in %.2fs", version, len(done), report.seconds)
        return report

    def _sync_all(self, replicas: list[tuple[str, str]], model, version: int) -> tuple[list[str], dict[str, str]]:  # noqa: ANN001
        layout, stream = weight_stream(model)
        update = {"names": [n for n, _, _ in layout], "dtype_names": [str(d).removeprefix("torch.") for _, d, _ in layout],
                  "shapes": [shape for _, _, shape in layout]}
        failed: dict[str, str] = {}
        sessions: dict[str, Session] = {}
        with ThreadPoolExecutor(max_workers=max(1, len(replicas))) as pool:
            opened = {rid: pool.submit(self._open, rid, url, update) for rid, url in replicas}
            for rid, future in opened.items():
                try:
                    sessions[rid] = future.result()
                except Exception as exc:  # noqa: BLE001 - this replica only
                    failed[rid] = f"{type(exc).__name__}: {exc}"

            def send(unit: str, tensors: dict[str, torch.Tensor]) -> None:
                for tensor in tensors.values():
                    pending = []
                    for rid, session in sessions.items():
                        if rid not in failed:
                            try:
                                pending.append((rid, session.link.group.broadcast(tensor, 0)))
                            except Exception as exc:  # noqa: BLE001 - drop this replica from the rest of the stream
                                failed[rid] = f"broadcast of {unit} failed: {type(exc).__name__}: {exc}"
                    for rid, work in pending:  # every replica's copy in flight at once
                        try:
                            work.wait()
                        except Exception as exc:  # noqa: BLE001
                            failed[rid] = f"broadcast of {unit} failed: {type(exc).__name__}: {exc}"

            if sessions:
                stream(send)
            closed = {rid: pool.submit(self._close, session, version, rid in failed) for rid, session in sessions.items()}
            for rid, future in closed.items():
                try:
                    future.result()
                except Exception as exc:  # noqa: BLE001 - this replica only
                    failed.setdefault(rid, f"{type(exc).__name__}: {exc}")
        return [rid for rid, _ in replicas if rid not in failed], failed

    def _open(self, replica_id: str, url: str, update: dict) -> Session:
        """Pause the replica, start its reload and its receiving call; the stream may begin when this returns."""
        client = httpx.Client(timeout=self.timeout_s, headers=self.headers)
        try:
            link = self._link(client, replica_id, url)
        except Exception:
            client.close()
            raise
        session = Session(client=client, url=url, link=link)
        try:
            client.post(f"{url}/pause", params=PAUSE).raise_for_status()
            session.paused = True
            client.post(f"{url}/start_weight_update").raise_for_status()

            def receive() -> None:
                try:
                    client.post(f"{url}/update_weights", json={"update_info": update}).raise_for_status()
                except Exception as exc:  # noqa: BLE001 - surfaced by _close
                    session.error = exc

            session.receiver = threading.Thread(target=receive, daemon=True)
            session.receiver.start()
            return session
        except Exception:
            self._resume(session)
            raise

    def _close(self, session: Session, version: int, broken: bool) -> None:
        """Wait for the replica to have taken every tensor, then finish, record the version and resume."""
        url, client = session.url, session.client
        try:
            if not broken and session.receiver is not None:
                session.receiver.join(self.timeout_s)
                if session.receiver.is_alive() or session.error is not None:
                    raise RuntimeError(f"{url} failed to receive weights: {session.error or 'timed out'}")
                finish_update(client, url, version)
        finally:
            self._resume(session)

    @staticmethod
    def _resume(session: Session) -> None:
        try:
            if session.paused:
                session.client.post(f"{session.url}/resume").raise_for_status()
        finally:
            session.client.close()

    def _link(self, client: httpx.Client, replica_id: str, url: str) -> ReplicaLink:
        link = self.links.get(replica_id)
        if link is not None and link.url == url:
            return link
        port = free_port(self.trainer_host)
        init = {"master_address": self.trainer_host, "master_port": port, "rank_offset": 1, "world_size": 2,
                "timeout_seconds": self.timeout_s}
        result: dict[str, object] = {}

        def init_replica() -> None:  # blocks until both sides have joined the rendezvous
            try:
                client.post(f"{url}/init_weight_transfer_engine", json={"init_info": init}).raise_for_status()
            except Exception as exc:  # noqa: BLE001 - surfaced below
                result["error"] = exc

        thread = threading.Thread(target=init_replica, daemon=True)
        thread.start()
        group, store = gloo_group(self.trainer_host, port, 0, 2, self.timeout_s, is_master=True)
        thread.join()
        if "error" in result:
            raise RuntimeError(f"{url} could not join the weight broadcast: {result['error']}")
        link = self.links[replica_id] = ReplicaLink(url, group, store)
        return link

    async def aclose(self) -> None:
        self.links.clear()
        await self.registry.aclose()
