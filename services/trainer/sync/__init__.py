"""Weight sync: how a trainer's new weights reach every registered replica.

Every mode implements ``WeightPublisher.publish(model, version) -> SyncReport``; the trainer
loop does not know which one it runs.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import httpx
from pydantic import BaseModel, Field

from rlstack.common.auth import bearer

if TYPE_CHECKING:
    import torch

log = logging.getLogger(__name__)


class ProbeResult(BaseModel):
    """One replica's answer to the served-weights check (``verify``)."""

    replica: str
    dtype: str | None
    mean_abs: float | None = None
    """Mean |trainer - replica| logprob over the probe, nats per token."""
    max_abs: float | None = None
    passed: bool
    error: str | None = None
    answered: bool = True
    """False when the replica did not answer the probe (refused, timed out, 5xx): gone, not wrong."""


class SyncReport(BaseModel):
    version: int
    seconds: float
    """Wall time of the whole sync, save through resume."""
    save_seconds: float = 0.0
    replicas: list[str]
    """Replicas now serving this version."""
    failed: dict[str, str] = Field(default_factory=dict)
    """Replicas that could not take it or failed the served-weights check (replica id -> error)."""
    served_name: str | None = None
    """The model name the new version answers to on the replicas (a lora adapter's); the served model when unset."""
    verify_seconds: float = 0.0
    """Wall time of the served-weights check (not part of ``seconds``)."""
    probes: dict[str, ProbeResult] = Field(default_factory=dict)
    unchecked: list[str] = Field(default_factory=list)
    """Replicas that took the weights but left the registry before they could be checked."""


class SyncFailed(RuntimeError):
    """No replica took the new weights."""


class ReplicasAway(SyncFailed):
    """No replica passed the served-weights check, and some did not answer it (a vLLM killed mid-check)."""

    def __init__(self, message: str, replicas: list[str]) -> None:
        super().__init__(message)
        self.replicas = replicas


async def fan_out(endpoints: Sequence, push: Callable[[object], Awaitable[None]]) -> tuple[list[str], dict[str, str]]:
    """Push to every replica at once. One replica dying mid-sync must not stop training: it is
    reported (and keeps its old version in the registry, so groups it produces are stamped
    stale) while the others serve the new weights; only when every replica fails is it an error."""
    results = await asyncio.gather(*(push(e) for e in endpoints), return_exceptions=True)
    done = [e.id for e, r in zip(endpoints, results) if not isinstance(r, BaseException)]
    failed = {e.id: f"{type(r).__name__}: {r}" for e, r in zip(endpoints, results) if isinstance(r, BaseException)}
    for replica, error in failed.items():
        log.warning("weight sync to %s failed: %s", replica, error)
    if endpoints and not done:
        raise SyncFailed(f"no replica took the weights: {failed}")
    return done, failed


def replica_headers(api_key: str | None) -> dict[str, str]:
    """vLLM's --api-key guards the weight routes as well as generation."""
    return bearer(api_key)


def version_rpc(version: int, adapter: str | None = None) -> dict:
    """``/collective_rpc`` body storing the served version in the worker, where the sidecar reads it."""
    return {"method": "rlstack_set_weight_version", "kwargs": {"version": version, **({"adapter": adapter} if adapter else {})}}


def full_weights(model) -> list[tuple[str, torch.Tensor]]:  # noqa: ANN001 - a transformers PreTrainedModel
    """Every tensor a replica loads, contiguous; a tied lm_head is the embedding and is not sent twice.
    (A policy sharded over torchrun ranks streams through ``sync.gather`` instead.)"""
    if not hasattr(model, "state_dict"):
        raise TypeError("this sync mode needs the whole model in this process; a sharded policy syncs with filesystem or lora")
    tied = getattr(model.config, "tie_word_embeddings", False)
    return [(name, p.detach().contiguous()) for name, p in model.state_dict().items() if not (tied and name.endswith("lm_head.weight"))]


async def save_version(model, shared_dir: Path, version: int, dtype: torch.dtype | None = None) -> tuple[Path, float]:  # noqa: ANN001 - a PreTrainedModel or PeftModel
    """``save_pretrained`` into ``<shared_dir>/v<version>`` off the event loop; the path and the seconds it took.

    ``dtype``: write the tensors cast to it (bf16 for bf16 replicas: half the bytes to write and read, and
    the same values, since a replica casting float32 on load rounds them the same way). A policy
    sharded over torchrun ranks writes its own dtype."""
    start = time.perf_counter()
    path = shared_dir / f"v{version:06d}"

    def save() -> None:
        if dtype is None or not hasattr(model, "state_dict"):
            model.save_pretrained(path, safe_serialization=True)
            return
        state = {name: t.detach().to(dtype) if t.is_floating_point() else t for name, t in model.state_dict().items()}
        model.save_pretrained(path, safe_serialization=True, state_dict=state)

    await asyncio.to_thread(save)
    return path, time.perf_counter() - start


PAUSE = {"mode": "keep", "clear_cache": "true"}
"""Hold in-flight calls for the update. In vLLM 0.32 a ``keep`` pause preempts them and drops the
prefix cache (their docs say ``clear_cache`` is ignored there; their engine does clear): a held call
recomputes its context under the new weights when generation resumes, so every token labelled
with the new version was sampled from the new weights alone. Asked for by name, not by default."""
RESET_ALL = {"reset_running_requests": "true"}
"""The reset after the update preempts too: without it vLLM refuses while any call holds KV and
says so only in its answer, leaving every prefix the old weights computed hittable by the new
version's calls (``check_reset`` turns that answer into an error)."""


def check_reset(url: str, answer: httpx.Response) -> None:
    answer.raise_for_status()
    if not answer.json().get("success"):
        raise RuntimeError(f"{url} kept its prefix cache after a weight update: {answer.text}")


@contextlib.asynccontextmanager
async def paused(client: httpx.AsyncClient, url: str) -> AsyncIterator[None]:
    """Generation paused with in-flight requests kept; resumed whatever happens in between."""
    (await client.post(f"{url}/pause", params=PAUSE)).raise_for_status()
    try:
        yield
    finally:
        (await client.post(f"{url}/resume")).raise_for_status()


async def mark_new_weights(client: httpx.AsyncClient, url: str, version: int) -> None:
    """After an in-place update, still paused: label the tokens generated from now on with the version
    (vLLM's engine-side label, which it reports per token), store it for the sidecar, and drop KV
    computed by the old weights."""
    (await client.post(f"{url}/update_weight_version", json={"new_version": str(version)})).raise_for_status()
    (await client.post(f"{url}/collective_rpc", json=version_rpc(version))).raise_for_status()
    check_reset(url, await client.post(f"{url}/reset_prefix_cache", params=RESET_ALL))


def finish_update(client: httpx.Client, url: str, version: int) -> None:
    """After tensors were streamed or shared into a replica (broadcast, ipc): end vLLM's update with the
    version, store it in the worker, and drop KV computed by the old weights (blocking: these
    publishers run in a thread)."""
    client.post(f"{url}/finish_weight_update", json={"weight_version": str(version)}).raise_for_status()
    client.post(f"{url}/collective_rpc", json=version_rpc(version)).raise_for_status()
    check_reset(url, client.post(f"{url}/reset_prefix_cache", params=RESET_ALL))


class WeightPublisher(Protocol):
    async def publish(self, model, version: int) -> SyncReport: ...  # noqa: ANN001 - a transformers PreTrainedModel

    async def aclose(self) -> None: ...
