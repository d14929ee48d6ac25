"""The ``filesystem`` weight-sync mode: safetensors on a shared volume, reloaded in place.

Per replica: pause generation (in-flight requests are kept, not aborted), reload through vLLM's
layerwise ``reload_weights`` (never a raw ``load_weights`` on a live CPU model: CPU repacks
linear weights) followed by a rebuild of the CPU GEMM handles that reload leaves stale (our
worker extension's ``rlstack_reload_weights``; see ``rlstack.inference.cpu_gemm``), store the version beside the weights, reset the prefix cache (cached KV was
computed by the old weights), resume. No vLLM restart. The replica's sidecar reads the stored
version on its next heartbeat, so the registry shows it within one heartbeat.
"""

from __future__ import annotations

import asyncio
import logging
import time
from pathlib import Path
from typing import TYPE_CHECKING

import httpx

from rlstack.common.registry_client import RegistryClient
from rlstack.trainer.sync import (
    SyncReport,
    fan_out,
    mark_new_weights,
    paused,
    replica_headers,
    save_version,
)

if TYPE_CHECKING:
    import torch

    from rlstack.common.contracts.registry import Endpoint

log = logging.getLogger(__name__)


async def reload_from(client: httpx.AsyncClient, url: str, path: Path, version: int) -> None:
    """One replica reloads its weights in place from a model directory and records ``version``."""
    async with paused(client, url):
        rpc = {"method": "rlstack_reload_weights", "kwargs": {"weights_path": str(path.resolve())}}
        (await client.post(f"{url}/collective_rpc", json=rpc)).raise_for_status()
        await mark_new_weights(client, url, version)


class FilesystemPublisher:
    def __init__(self, shared_dir: Path, registry: RegistryClient, served_model_name: str, replica_api_key: str | None = None,
                 keep_versions: int = 2) -> None:
        self.shared_dir = shared_dir
        self.dtypes: dict[str, str | None] = {}
        """Each replica's compute dtype (its worker's report), asked once per replica URL."""
        self.registry = registry
        self.served_model_name = served_model_name
        self.headers = replica_headers(replica_api_key)
        self.keep_versions = keep_versions

    async def publish(self, model, version: int) -> SyncReport:  # noqa: ANN001 - a transformers PreTrainedModel
        start = time.perf_counter()
        endpoints = await self.registry.sync_targets(self.served_model_name)
        async with httpx.AsyncClient(timeout=600, headers=self.headers) as client:
            path, saved = await save_version(model, self.shared_dir, version, await self._served_dtype(client, endpoints))
            done, failed = await fan_out(endpoints, lambda e: self._reload(client, str(e.url).rstrip("/"), path, version))
        await asyncio.to_thread(self._prune, version)  # rmtree of old versions, off the event loop
        report = SyncReport(version=version, seconds=time.perf_counter() - start, save_seconds=saved, replicas=done, failed=failed)
        log.info("weights v%d on %d replica(s) in %.2fs (save %.2fs)", version, len(endpoints), report.seconds, saved)
        return report

    async def _served_dtype(self, client: httpx.AsyncClient, endpoints: list[Endpoint]) -> torch.dtype | None:
        """bf16 when every replica computes in bf16: they load the float32 weights rounded the same way, so
        writing them rounded halves the bytes saved and read for the same served values. Otherwise (float32
        replicas, mixed ones, a replica that cannot say) the trainer's own dtype."""
        import torch

        from rlstack.trainer.sync.verify import replica_dtype

        for e in endpoints:
            url = str(e.url).rstrip("/")
            if url not in self.dtypes:
                try:
                    self.dtypes[url] = await replica_dtype(client, url)
                except (httpx.HTTPError, ValueError):
                    return None  # asked again at the next sync
        served = {self.dtypes[str(e.url).rstrip("/")] for e in endpoints}
        return torch.bfloat16 if served == {"bfloat16"} else None

    async def _reload(self, client: httpx.AsyncClient, url: str, path: Path, version: int) -> None:
        await reload_from(client, url, path, version)

    async def aclose(self) -> None:
        await self.registry.aclose()

    def _prune(self, current: int) -> None:
        """Keep the last few versions (a replica may still be reading one); delete older ones."""
        import shutil

        versions = sorted(p for p in self.shared_dir.glob("v*") if p.is_dir())
        for old in versions[: -self.keep_versions]:
            if old.name != f"v{current:06d}":
                shutil.rmtree(old, ignore_errors=True)
