"""Keeps LiteLLM's router in step with the registry: ready replicas in, dead ones out.

Each ready replica is one deployment of its policy's group, named as the policy (spread by
LiteLLM's least-busy strategy), and also a pinned group ``<policy>@<replica id>`` for
trial-sticky routing, whose fallback is its policy's group: a pinned replica that dies sends its
trial to another replica of the same policy at once, never to another policy's.
Like a Kubernetes controller, discovery renders the whole desired router state from the
registry (URLs, served names, lora adapters) and re-applies it whenever it differs from the
state last applied: a change of adapter label alone moves the policy to the new adapter.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable
from typing import Protocol

import httpx

from rlstack.common.auth import bearer
from rlstack.common.contracts.registry import Endpoint
from rlstack.common.registry_client import RegistryClient
from rlstack.common.weight_versions import serves
from rlstack.proxy.litellm_tuning import FREE
from rlstack.proxy.replicas import ReplicaView

log = logging.getLogger(__name__)
RECHECK_DELAY_SECONDS = 2.0


RouterState = tuple[list[dict], list[dict]]
"""LiteLLM's deployments and fallbacks: everything routing depends on."""


class Relay(Protocol):
    """Where LiteLLM sends a replica's calls instead of the replica itself (token-in), and its key."""

    token: str

    def api_base(self, replica_id: str) -> str: ...


def model_list(view: ReplicaView, api_key: str | None, timeout: float, relay: Relay | None = None) -> RouterState:
    """Each replica a deployment of its policy's group and of its own pinned group, whose fallback
    is its policy's group: no route, fallback included, leads from one policy to another's replica."""
    deployments, fallbacks = [], []
    for rid, e in view.endpoints.items():
        upstream = e.labels.get("adapter") or e.model  # lora sync: the newest adapter serves the policy
        api_base = relay.api_base(rid) if relay else str(e.url).rstrip("/") + "/v1"
        params = {"model": f"hosted_vllm/{upstream}", "api_base": api_base,
                  "api_key": relay.token if relay else api_key or "none", "timeout": timeout}
        deployments.append({"model_name": e.model, "litellm_params": params, "model_info": {"id": rid, **FREE}})
        deployments.append({"model_name": view.pinned_group(rid), "litellm_params": dict(params), "model_info": {"id": f"{rid}@pinned", **FREE}})
        fallbacks.append({view.pinned_group(rid): [e.model]})
    fallbacks += [{view.pinned_group(rid): [policy]} for rid, policy in view.departed.items()]
    return deployments, fallbacks


class Discovery:
    def __init__(self, registry: RegistryClient, view: ReplicaView, apply: Callable[[list[dict], list[dict]], None],
                 api_key: str | None, timeout: float, watch_timeout: float, relay: Relay | None = None) -> None:
        self.registry, self.view, self.apply = registry, view, apply
        self.relay = relay
        self.api_key, self.timeout, self.watch_timeout = api_key, timeout, watch_timeout
        self.client = httpx.AsyncClient(timeout=5.0)
        self.updates = 0
        self.applied: RouterState = ([], [])
        """The router state LiteLLM has now (none at start); compared with the desired one on every refresh."""
        self._recheck = asyncio.Event()
        self.undeclared: set[str] = set()
        """Served names of registered replicas that no policy declares, warned about once each."""

    async def refresh(self, endpoints: list[Endpoint], revision: int) -> None:
        policies = self.view.table.names()
        ready = {e.id: e for e in sorted(endpoints, key=lambda e: e.id) if e.ready and any(serves(e, p) for p in policies)}
        for e in endpoints:
            if e.model not in policies and e.model not in self.undeclared:
                self.undeclared.add(e.model)
                log.warning("replica %s serves %r, which no policy of this run declares (%s): not routed", e.id, e.model,
                            ", ".join(policies))
        for rid, e in ready.items():
            if rid not in self.view.max_model_len:
                self.view.max_model_len[rid] = await self._max_model_len(e)
        self.view.set_endpoints(ready)  # weight versions may have moved even when routing did not
        self.view.revision = revision
        self._apply_if_changed()

    def _apply_if_changed(self) -> None:
        """Render the desired router state from the view; apply it only if it differs from the applied one."""
        desired = model_list(self.view, self.api_key, self.timeout, self.relay)
        if desired == self.applied:
            return
        self.apply(*desired)
        self.applied = desired
        self.updates += 1
        upstreams = {rid: e.labels.get("adapter") or e.model for rid, e in self.view.endpoints.items()}
        log.info("router updated: %s", upstreams or "no replicas")

    async def _max_model_len(self, e: Endpoint) -> int:
        headers = bearer(self.api_key)
        try:
            data = (await self.client.get(str(e.url).rstrip("/") + "/v1/models", headers=headers)).json()["data"]
            return int(next(m for m in data if m["id"] == e.model).get("max_model_len") or self.view.default_context)
        except (httpx.HTTPError, ValueError, KeyError, StopIteration):
            return self.view.default_context

    async def run(self) -> None:
        revision = 0
        while True:
            try:
                if self._recheck.is_set():
                    # A replica was dropped after a failed call: give the registry's prober a
                    # moment, then take its word (it re-adds a replica that is in fact alive).
                    await asyncio.sleep(RECHECK_DELAY_SECONDS)
                    self._recheck.clear()
                    listed = await self.registry.list()
                else:
                    listed = await self._watch_or_recheck(revision)
                await self.refresh(listed.endpoints, listed.revision)
                revision = listed.revision
            except asyncio.CancelledError:
                raise
            except Exception as exc:  # registry restarting: keep the last view, retry
                log.warning("registry watch failed: %s", exc)
                await asyncio.sleep(1.0)

    async def _watch_or_recheck(self, revision: int):  # noqa: ANN202 - EndpointList
        watch = asyncio.create_task(self.registry.watch(revision, self.watch_timeout))
        recheck = asyncio.create_task(self._recheck.wait())
        try:
            done, _ = await asyncio.wait({watch, recheck}, return_when=asyncio.FIRST_COMPLETED)
        finally:  # on a stop too: an orphaned watch would outlive the registry client
            recheck.cancel()
            if not watch.done():
                watch.cancel()
        if watch in done:
            return watch.result()
        await asyncio.sleep(RECHECK_DELAY_SECONDS)
        self._recheck.clear()
        return await self.registry.list()

    def forget(self, replica_id: str) -> None:
        """Drop a replica that refused a connection, without waiting for the registry to notice.

        A policy's last replica is never dropped this way (LiteLLM's retries and the registry decide),
        and the registry is asked again shortly after, so a false alarm costs seconds, not a replica.
        """
        endpoint = self.view.endpoints.get(replica_id)
        if endpoint is not None and len(self.view.of(endpoint.model)) > 1:
            self.view.set_endpoints({rid: e for rid, e in self.view.endpoints.items() if rid != replica_id})
            log.warning("replica %s refused a connection; routing around it", replica_id)
            self._apply_if_changed()
            self._recheck.set()
