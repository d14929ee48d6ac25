"""The ``lora`` weight-sync mode: the trainer trains a peft adapter; replicas load each version
at runtime under its own name, and the proxy routes the policy's name to the newest.

Per replica: ``/v1/load_lora_adapter`` (vLLM's runtime LoRA, enabled by the sidecar with
``VLLM_ALLOW_RUNTIME_LORA_UPDATING``), then the version and adapter name are stored in the
worker extension; the sidecar's next heartbeat puts ``labels.adapter`` in the registry and the
proxy's discovery points the policy's deployments at it. Requests already routed keep the
previous adapter, so the one before it is unloaded (vLLM holds ``max_loras`` at once). Only the
adapter moves: megabytes instead of the whole model, and no pause is needed.
"""

from __future__ import annotations

import asyncio
import logging
import shutil
import time
from pathlib import Path

import httpx

from rlstack.common.names import adapter_name
from rlstack.common.registry_client import RegistryClient
from rlstack.trainer.sync import SyncReport, fan_out, replica_headers, save_version, version_rpc

log = logging.getLogger(__name__)


class LoraPublisher:
    def __init__(self, shared_dir: Path, registry: RegistryClient, served_model_name: str, replica_api_key: str | None = None) -> None:
        self.shared_dir = shared_dir
        self.registry = registry
        self.served_model_name = served_model_name
        self.headers = replica_headers(replica_api_key)
        self.loaded: dict[str, list[str]] = {}
        """Adapters each replica holds, oldest first (by replica URL)."""

    async def publish(self, model, version: int) -> SyncReport:  # noqa: ANN001 - a peft PeftModel
        start = time.perf_counter()
        path, saved = await save_version(model, self.shared_dir, version)
        endpoints = await self.registry.sync_targets(self.served_model_name)
        name = adapter_name(self.served_model_name, version)
        async with httpx.AsyncClient(timeout=600, headers=self.headers) as client:
            done, failed = await fan_out(endpoints, lambda e: self._load(client, str(e.url).rstrip("/"), name, path, version))
        await asyncio.to_thread(self._prune, {p for names in self.loaded.values() for p in names})  # off the event loop
        report = SyncReport(version=version, seconds=time.perf_counter() - start, save_seconds=saved, replicas=done, failed=failed,
                            served_name=name)
        log.info("adapter %s on %d replica(s) in %.2fs", name, len(endpoints), report.seconds)
        return report

    async def _load(self, client: httpx.AsyncClient, url: str, name: str, path: Path, version: int) -> None:
        body = {"lora_name": name, "lora_path": str(path.resolve())}
        r = await client.post(f"{url}/v1/load_lora_adapter", json=body)
        if r.status_code != 200:
            raise RuntimeError(f"{url} refused adapter {name}: {r.status_code} {r.text[:300]}")
        (await client.post(f"{url}/collective_rpc", json=version_rpc(version, adapter=name))).raise_for_status()
        held = self.loaded.setdefault(url, [])
        held.append(name)
        while len(held) > 2:  # the newest serves, the previous finishes what was routed to it
            old = held.pop(0)
            r = await client.post(f"{url}/v1/unload_lora_adapter", json={"lora_name": old})
            if r.status_code != 200:
                log.warning("%s kept adapter %s: %s", url, old, r.text[:200])

    def _prune(self, keep: set[str]) -> None:
        for directory in sorted(p for p in self.shared_dir.glob("v*") if p.is_dir())[:-2]:
            if adapter_name(self.served_model_name, int(directory.name[1:])) not in keep:
                shutil.rmtree(directory, ignore_errors=True)

    async def aclose(self) -> None:
        await self.registry.aclose()
