"""The replica's sidecar app: launches vLLM, registers once the model is loaded, heartbeats,
and on shutdown deregisters *before* stopping vLLM so no proxy routes to a dying server.

If vLLM exits on its own, the sidecar deregisters, then its supervised loop fails: /healthz
turns 503 and the process exits 1, so Kubernetes restarts the pod (vLLM with it)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import shutil
import tempfile
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

import httpx
from fastapi import FastAPI
from prometheus_client import CollectorRegistry, Gauge

from rlstack.common.contracts.registry import EndpointRegistration
from rlstack.common.model_families import resolve_family
from rlstack.common.registry_client import RegistryClient
from rlstack.common.server import create_app
from rlstack.common.supervise import Supervisor
from rlstack.inference.command import vllm_command
from rlstack.inference.config import InferenceSettings
from rlstack.inference.published import Published, latest_published
from rlstack.inference.replica import VllmProcess
from rlstack.inference.weight_state import STATE_DIR_ENV, read_weight_state

log = logging.getLogger(__name__)
EXIT_CHECK_SECONDS = 0.5


class Replica:
    def __init__(self, settings: InferenceSettings) -> None:
        self.settings = settings
        self.start_from = latest_published(settings.weights_dir)
        """The newest version the trainer published, if any: a restarted replica serves it, not the base."""
        full = self.start_from if self.start_from is not None and self.start_from.kind == "full" else None
        argv, env = vllm_command(settings, weights=str(full.path) if full else None)
        self.state_dir = Path(tempfile.mkdtemp(prefix="rlstack-weight-state-"))
        """Where vLLM's workers write the version they hold (``worker_extension``); read every beat."""
        env[STATE_DIR_ENV] = str(self.state_dir)
        api_key = settings.api_key.get_secret_value() if settings.api_key else None
        self.vllm = VllmProcess(argv, env, str(settings.advertise_url), settings.served_model_name, api_key)
        self.weight_version = full.version if full else settings.weight_version
        self.adapter: str | None = None
        """The lora adapter serving the policy (lora sync mode); the proxy routes to it."""
        self.registered = False
        token = settings.registry_token.get_secret_value() if settings.registry_token else None
        self.registry = RegistryClient(str(settings.registry_url), token) if settings.registry_url else None
        self.failed: str | None = None
        self.instance_id = uuid.uuid4().hex
        """New with every start: the registry ends a quarantine when the replica restarts."""
        self.model_family = resolve_family(settings.model, settings.model_family).name
        """Registered as a label, so ``rlstack doctor`` names each replica's family."""

    def registration(self) -> EndpointRegistration:
        s = self.settings
        labels = {"device": s.device, "model_family": self.model_family, **({"adapter": self.adapter} if self.adapter else {})}
        if self.vllm.max_model_len:
            labels["max_model_len"] = str(self.vllm.max_model_len)
        return EndpointRegistration(
            url=s.advertise_url, model=s.served_model_name, weight_version=self.weight_version, dp_rank=s.dp_rank,
            labels=labels, ttl_seconds=3 * s.heartbeat_seconds,
            instance_id=self.instance_id,
        )

    async def run(self) -> None:
        """Start vLLM, wait for the model, then register and heartbeat until cancelled.

        Raises when vLLM fails to load or exits (after deregistering): the supervisor then
        fails the sidecar, since a sidecar without its vLLM must be restarted, not kept alive.
        """
        self.vllm.start()
        try:
            await self.vllm.wait_loaded(self.settings.startup_timeout_seconds)
            if self.start_from is not None and self.start_from.kind == "adapter":
                await self._load_adapter(self.start_from)
        except (RuntimeError, TimeoutError) as exc:
            self.failed = str(exc)
            raise
        await self._label_weights()
        if self.start_from is not None:
            log.info("serving published weights v%d (%s, %s)", self.weight_version, self.start_from.kind, self.start_from.path)
        while True:
            if self.vllm.exited is not None:
                self.failed = f"vLLM exited with {self.vllm.exited}"
                await self.deregister()
                raise RuntimeError(self.failed)
            # Beats start a period apart: a slow answer from the registry must not push the next past the lease.
            next_beat = asyncio.get_running_loop().time() + self.settings.heartbeat_seconds
            self.read_weight_state()
            await self._heartbeat()
            await self._sleep_while_vllm_runs(until=next_beat)

    async def _load_adapter(self, published: Published) -> None:
        """lora sync: the newest adapter, under the name the trainer gives that version, before registering."""
        from rlstack.common.names import adapter_name

        name = adapter_name(self.settings.served_model_name, published.version)
        body = {"lora_name": name, "lora_path": str(published.path.resolve())}
        async with httpx.AsyncClient(timeout=600, headers=self.vllm.headers) as client:
            r = await client.post(f"{self.vllm.base_url}/v1/load_lora_adapter", json=body)
        if r.status_code != 200:
            raise RuntimeError(f"vLLM refused the published adapter {published.path}: {r.status_code} {r.text[:300]}")
        self.weight_version, self.adapter = published.version, name

    async def _label_weights(self) -> None:
        """vLLM labels every token it samples with its engine's weight version ("default" at start); from
        here it is the version this replica loaded, so the proxy reads the sampling version off the
        replica itself. Syncs move it on (``trainer.sync``)."""
        async with httpx.AsyncClient(timeout=30, headers=self.vllm.headers) as client:
            r = await client.post(f"{self.vllm.base_url}/update_weight_version", json={"new_version": str(self.weight_version)})
        if r.status_code != 200:
            raise RuntimeError(f"vLLM refused its weight version label: {r.status_code} {r.text[:300]}")

    async def _heartbeat(self) -> None:
        if self.registry is not None:
            try:
                await self.registry.put(self.settings.replica_id, self.registration())
                if not self.registered:
                    log.info("registered %s as %s", self.settings.advertise_url, self.settings.replica_id)
                self.registered = True
            except Exception as exc:  # the registry may restart; keep serving, retry next beat
                log.warning("heartbeat failed: %s", exc)

    async def _sleep_while_vllm_runs(self, until: float) -> None:
        """Wait for the next beat (a loop time), but notice vLLM's exit within half a second: the proxy
        must stop routing to it."""
        loop = asyncio.get_running_loop()
        while self.vllm.exited is None and (left := until - loop.time()) > 0:
            await asyncio.sleep(min(EXIT_CHECK_SECONDS, left))

    def read_weight_state(self) -> None:
        """The version (and lora adapter) the trainer stored with the weights, as the workers wrote it."""
        state = read_weight_state(self.state_dir)
        if state is not None:
            self.weight_version, self.adapter = state

    async def deregister(self) -> None:
        if self.registry is not None and self.registered:
            try:
                await self.registry.delete(self.settings.replica_id)
                log.info("deregistered %s", self.settings.replica_id)
            except Exception as exc:
                log.warning("deregistration failed (the TTL will expire it): %s", exc)
            self.registered = False


def build_app(settings: InferenceSettings) -> FastAPI:
    registry = CollectorRegistry()
    replica = Replica(settings)
    Gauge("rlstack_inference_model_loaded", "1 once vLLM lists the model", registry=registry).set_function(lambda: float(replica.vllm.loaded))
    Gauge("rlstack_inference_registered", "1 while registered in the registry", registry=registry).set_function(lambda: float(replica.registered))
    Gauge("rlstack_inference_weight_version", "Policy version loaded", registry=registry).set_function(lambda: replica.weight_version)
    Gauge("rlstack_inference_load_seconds", "Seconds from vLLM start to model listed", registry=registry).set_function(
        lambda: replica.vllm.load_seconds or 0.0
    )

    supervisor = Supervisor("inference", settings.failure_exit_delay_seconds)

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            async with supervisor:
                supervisor.start("replica", replica.run())
                yield
        finally:
            await replica.deregister()
            code = await asyncio.to_thread(replica.vllm.stop)
            log.info("vLLM stopped (exit %s)", code)
            shutil.rmtree(replica.state_dir, ignore_errors=True)
            if replica.registry is not None:
                await replica.registry.aclose()

    def ready() -> tuple[bool, dict]:
        detail = {"model_loaded": replica.vllm.loaded, "registered": replica.registered, "vllm_url": str(settings.advertise_url),
                  "vllm_pid": replica.vllm.proc.pid if replica.vllm.proc else None}
        if replica.failed:
            detail["error"] = replica.failed
        # Ready means serving *and* discoverable: with a registry configured, registered too.
        discoverable = replica.registered or replica.registry is None
        return replica.vllm.loaded and replica.vllm.exited is None and discoverable, detail

    app = create_app(service="inference", registry=registry, ready=ready, supervisor=supervisor, lifespan=lifespan)
    app.state.replica = replica
    return app
