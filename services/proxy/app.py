"""Wires the proxy. A model call's path from an agent to vLLM and back, and where each step lives:

1. ``ProxyApp._dispatch`` (here), behind ``common.body_guard``'s bounded body: health, metrics and a
   trial's end go to the ops routes (6.); every other path is a model call, for the edge (at a stop,
   ``edge/gone.py`` cancels a call whose caller has hung up instead of waiting for it).
2. ``edge/front.py``: the trial from ``/trials/<run>/<trial>/...`` into ``names.TRIAL_HEADER``, the
   key checked (``edge/auth.py``, LiteLLM's custom auth, which LiteLLM runs again), the body's shape
   (``edge/bodies.py``), the model name mapped onto the served one, ``max_tokens`` clamped,
   count_tokens answered, a streaming call made as one plain call re-emitted as events (``edge/sse.py``).
3. LiteLLM's proxy app translates the call (Anthropic or OpenAI) and routes it over the replicas
   that ``routing/discovery.py`` keeps in its router from the registry; ``routing/hooks.py``'s
   pre-call hook asks for token ids and logprobs and pins the trial to one replica.
4. With token-in (the default), every deployment is ``relay/tokenin.py``'s loopback listener
   (``names.RELAY_PREFIX``): the call that continues one of the trial's threads (``relay/threads.py``;
   heads other processes logged are taken up by ``relay/thread_log.py``) goes to vLLM as exact ids,
   and every call learns from the replica which weight versions sampled it (``relay/versions.py``).
5. Back through LiteLLM, ``routing/hooks.py``'s success or failure callback makes the call's
   ``TrajectoryRecord`` (with the relay's outcome: splice, segment, versions); ``records/writer.py``'s
   one thread appends it to the trial's JSONL.
6. A trial's end (``POST /trials/<run>/<trial>/end``, ``end_trial`` here): this process and every
   peer pod (``records/peers.py``) wait for the trial's records, flush them and forget its threads.

State, all per process: the replicas (``replicas.py``'s ``ReplicaView``, filled by ``routing/discovery.py``; a trial's replica follows from them),
calls in flight (``routing/hooks.py``), the trials' threads and each call's outcome (``relay/tokenin.py``), open files
(``records/writer.py``). LiteLLM's proxy keeps its router and custom-auth hook as module globals of
``litellm.proxy.proxy_server``; this is the one place that sets them.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
from collections.abc import AsyncIterator
from typing import Any

import httpx
from fastapi import HTTPException
from prometheus_client import CollectorRegistry
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route
from starlette.types import Receive, Scope, Send

from rlstack.common.auth import bearer
from rlstack.common.body_guard import BodyGuard
from rlstack.common.contracts.trajectory import read_trajectory
from rlstack.common.contracts.trial_end import TrialEnd, end_token_ok
from rlstack.common.logs import configure_logging
from rlstack.common.metrics import RequestLatencyMiddleware, metrics_response
from rlstack.common.registry_client import RegistryClient
from rlstack.common.server import health_response, readiness_response
from rlstack.common.supervise import Supervisor
from rlstack.common.trial_keys import TRIAL_PATH, mint
from rlstack.proxy.config import ProxySettings
from rlstack.proxy.edge.auth import TrialAuth
from rlstack.proxy.edge.front import FrontMiddleware, Refused
from rlstack.proxy.edge.gone import CancelGoneOnStop
from rlstack.proxy.litellm_tuning import freeze_startup_heap, skip_absent_opentelemetry
from rlstack.proxy.metrics import ProxyMetrics
from rlstack.proxy.records.peers import PEER_SCOPE, Peers
from rlstack.proxy.records.writer import TrajectoryWriter
from rlstack.proxy.relay.thread_log import ThreadLog
from rlstack.proxy.relay.tokenin import TokenInUpstream
from rlstack.proxy.replicas import ReplicaView
from rlstack.proxy.routing.discovery import Discovery
from rlstack.proxy.routing.hooks import HEALTH_RUN, RLStackHooks

log = logging.getLogger(__name__)
OPS_PATHS = {"/healthz", "/readyz", "/metrics", "/health/readiness", "/health/ping"}
HEALTH_TRIAL = "ping"
END_WAIT_SECONDS = 30.0


class ProxyApp:
    def __init__(self, settings: ProxySettings) -> None:
        skip_absent_opentelemetry()
        import litellm
        from litellm.proxy import proxy_server

        self.settings = settings
        self.litellm, self.proxy_server = litellm, proxy_server
        self.registry = CollectorRegistry()
        self.metrics = ProxyMetrics(self.registry)
        self.view = ReplicaView(settings.policy_table, settings.default_max_context)
        api_key = settings.replica_api_key.get_secret_value() if settings.replica_api_key else None
        self.registry_client = RegistryClient(str(settings.registry_url), settings.registry_token.get_secret_value() if settings.registry_token else None)
        writer_id = writer_id_for(settings)
        self.token_in = TokenInUpstream(
            self.view, api_key, settings.request_timeout_seconds, ThreadLog(settings.trials_dir, writer_id),
            self.metrics.threads_adopted.inc) if settings.token_in else None
        self.discovery = Discovery(self.registry_client, self.view, self._apply, api_key, settings.request_timeout_seconds,
                                   settings.watch_timeout_seconds, relay=self.token_in)
        self.writer = TrajectoryWriter(settings.trials_dir, writer_id, self.metrics.trajectory_lines)
        self.hooks = RLStackHooks(self.view, self.discovery, self.writer, self.metrics, sticky=settings.sticky_routing,
                                  token_in=self.token_in)
        secret = settings.trial_key_secret.get_secret_value() if settings.trial_key_secret else None
        self.auth = TrialAuth(secret)
        self.peers = Peers([str(u) for u in settings.peer_urls], settings.peers_dns, settings.port, END_WAIT_SECONDS + 10)
        self.front = FrontMiddleware(proxy_server.app, settings.policy_table, self.view.urls, self.view.context,
                                     settings.min_completion_tokens, api_key, settings.max_tokens_cap,
                                     stream_shim=settings.stream_mode == "shim", authorize=self._authorize,
                                     exact_downstream=self.token_in is not None,
                                     replica_wait_seconds=settings.replica_wait_seconds)
        self.calls = CancelGoneOnStop(self.front)
        self.warm = False
        self.supervisor = Supervisor("proxy", settings.failure_exit_delay_seconds)
        self.supervisor.on_stopping(self.calls.stopping)
        self.ops = Starlette(routes=[
            Route("/healthz", self.healthz), Route("/readyz", self.readyz), Route("/health/readiness", self.readyz),
            Route("/metrics", self.metrics_route), Route("/health/ping", self.ping),
            Route("/trials/{run}/{trial}/end", self.end_trial, methods=["POST"]),
        ], lifespan=self.lifespan)
        self.state = self.ops.state  # run_service reads the exit code from state.supervisor
        self.state.supervisor = self.supervisor
        self.metrics.replicas_ready.set_function(lambda: float(len(self.view.endpoints)))
        # Bounded, timely bodies for every route (LiteLLM's own set no limit): gzip inflated at most to
        # the limit, a body shorter than its length a 408, a lone surrogate escape a 422.
        self.asgi = RequestLatencyMiddleware(BodyGuard(self._dispatch), registry=self.registry, service="proxy")

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        await self.asgi(scope, receive, send)

    async def _dispatch(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan" or scope.get("path") in OPS_PATHS or _is_end(scope):
            await self.ops(scope, receive, send)
        else:
            await self.calls(scope, receive, send)

    def _authorize(self, key: str, path_trial: str | None) -> None:
        """The front layer's check of a model call's trial key: TrialAuth's, as LiteLLM runs it after."""
        try:
            self.auth.identify(key, path_trial)
        except HTTPException as exc:
            raise Refused(exc.status_code, str(exc.detail)) from None

    def _apply(self, deployments: list[dict], fallbacks: list[dict]) -> None:
        router = self.proxy_server.llm_router
        if router is None:
            router = self.litellm.Router(
                model_list=deployments, routing_strategy="least-busy", fallbacks=fallbacks,
                # A transient failure must not cool down a group's only replica; a dead one is
                # dropped by discovery on its first refused connection instead.
                num_retries=self.settings.num_retries, allowed_fails=3, cooldown_time=2,
                timeout=self.settings.request_timeout_seconds, retry_after=0,
            )
            self.proxy_server.llm_router = router
        else:
            router.set_model_list(deployments)
            router.fallbacks = fallbacks
        self.proxy_server.llm_model_list = deployments
        self.metrics.replicas_ready.set(len(self.view.endpoints))

    @contextlib.asynccontextmanager
    async def lifespan(self, app: Any) -> AsyncIterator[None]:
        async with self.proxy_server.app.router.lifespan_context(self.proxy_server.app):
            self.proxy_server.user_custom_auth = self.auth
            self.litellm.callbacks.append(self.hooks)
            self.writer.start()
            if self.token_in is not None:
                await self.token_in.start()
            try:
                async with self.supervisor:
                    self.supervisor.start("discovery", self.discovery.run())
                    self.supervisor.start("warm-up", self._warm_up(), finishes=True)
                    yield
            finally:
                await asyncio.to_thread(self.writer.close)
                if self.token_in is not None:
                    await self.token_in.close()
                await self.registry_client.aclose()
                await self.peers.aclose()
                log.info("proxy stopped; %d trajectory lines written", self.writer.written)

    async def _warm_up(self) -> None:
        """The first calls through LiteLLM pay for lazy imports and client set-up: pay them here,
        through the first policy to have a replica."""
        while not self.view.endpoints:
            await asyncio.sleep(0.2)
        policy = next(iter(self.view.endpoints.values())).model
        for _ in range(3):
            ok, detail = await self._ping(policy)
            if ok:
                break
            log.warning("warm-up ping failed: %s", detail)
            await asyncio.sleep(1)
        freeze_startup_heap()
        self.warm = True
        log.info("proxy warm: %d replica(s)", len(self.view.endpoints))

    async def _ping(self, policy: str | None = None) -> tuple[bool, dict[str, Any]]:
        """A one-token call through the whole proxy to ``policy`` (the first one unless named)."""
        policy = policy or self.view.default_policy
        secret = self.auth.secret
        key = mint(secret, HEALTH_RUN, HEALTH_TRIAL, ttl_seconds=60) if secret else "none"
        body = {"model": policy, "messages": [{"role": "user", "content": "ping"}], "max_tokens": 1}
        transport = httpx.ASGITransport(app=self.front)
        async with httpx.AsyncClient(transport=transport, base_url="http://proxy", timeout=60) as client:
            try:
                r = await client.post(f"/trials/{HEALTH_RUN}/{HEALTH_TRIAL}/v1/chat/completions", json=body,
                                      headers=bearer(key))
            except Exception as exc:  # noqa: BLE001 - report any failure as the ping's result
                return False, {"error": str(exc)}
        detail = {"status": r.status_code, "model": policy}
        if r.status_code != 200:
            detail["error"] = r.text[:300]
        return r.status_code == 200, detail

    async def healthz(self, request: Request) -> JSONResponse:
        return health_response("proxy", self.supervisor)

    async def readyz(self, request: Request) -> JSONResponse:
        """Ready once warm with a replica of any policy: one policy's outage must not take the proxy
        out of its Service for the others' calls (those get a 503 naming their policy)."""
        ready = bool(self.view.endpoints) and self.warm
        policies = {name: sorted(self.view.of(name)) for name in self.view.table.names()}
        return readiness_response(self.supervisor, ready, {"replicas": sorted(self.view.endpoints), "policies": policies,
                                                           "warm": self.warm})

    async def ping(self, request: Request) -> JSONResponse:
        policy = request.query_params.get("policy")
        if policy is not None and policy not in self.view.table.names():
            return JSONResponse({"error": {"message": f"policy: {policy[:100]!r} is not one of {self.view.table.names()}",
                                           "param": "policy"}}, status_code=400)
        ok, detail = await self._ping(policy)
        return JSONResponse({"ok": ok, **detail}, status_code=200 if ok else 503)

    async def end_trial(self, request: Request) -> JSONResponse:
        """The env's signal that a trial is over: here and in every peer, wait for its calls' records,
        flush, forget its threads; then answer every record. A peer's own part: ``?scope=process``."""
        run, trial = request.path_params["run"], request.path_params["trial"]
        presented = request.headers.get("authorization", "").removeprefix("Bearer ").strip()
        if not presented.isascii() or not end_token_ok(self.auth.secret, run, trial, presented):
            return JSONResponse({"error": {"message": "authorization: not this trial's end token", "param": "authorization"}},
                                status_code=401)
        scope = request.query_params.get("scope")
        if scope is not None and scope != PEER_SCOPE:
            return JSONResponse({"error": {"message": f"scope: {PEER_SCOPE!r} or none", "param": "scope"}}, status_code=400)
        if scope == PEER_SCOPE:
            return JSONResponse(TrialEnd(run=run, trial=trial, in_flight=await self._end_here(run, trial)).model_dump(mode="json"))
        in_flight, ended = await asyncio.gather(self._end_here(run, trial), self.peers.end(run, trial, presented))
        ended.records = await asyncio.to_thread(read_trajectory, self.settings.trials_dir / run / trial)
        ended.in_flight += in_flight
        self.metrics.trials_ended.inc()
        return JSONResponse(ended.model_dump(mode="json"))

    async def _end_here(self, run: str, trial: str) -> int:
        """This process's part of a trial's end; the calls it was still logging when the wait ran out."""
        in_flight = await self.hooks.wait_logged(run, trial, END_WAIT_SECONDS)
        await asyncio.to_thread(self.writer.flush)
        if self.token_in is not None:
            self.token_in.end_trial(f"{run}/{trial}")
        return in_flight

    async def metrics_route(self, request: Request):  # noqa: ANN201
        self.metrics.flush_gc()
        return metrics_response(self.registry)


def _is_end(scope: Scope) -> bool:
    if scope.get("type") != "http" or not scope.get("path", "").endswith("/end"):
        return False
    match = TRIAL_PATH.match(scope["path"])
    return bool(match) and match["rest"] == "/end"


def writer_id_for(settings: ProxySettings) -> str:
    """``<hostname>-<pid>`` by default: a pod's name is its hostname, so no two proxy processes anywhere
    share one. A set ``writer_id`` is used as is with one worker and gets the pid appended with several."""
    if settings.writer_id and settings.workers == 1:
        return settings.writer_id
    base = settings.writer_id or "".join(c if c.isalnum() or c in "._-" else "-" for c in socket.gethostname()) or "proxy"
    return f"{base[:100]}-{os.getpid()}"


def worker_app() -> ProxyApp:
    """uvicorn's factory in each process of ``--workers N``: spawned with the parent's argv and environment.

    A worker whose loop dies stops itself as SIGTERM would; uvicorn's manager starts a new one.
    """
    settings = ProxySettings.from_cli()
    configure_logging(settings.log_level, settings.log_format)
    app = ProxyApp(settings)
    app.supervisor.stop_process = lambda: os.kill(os.getpid(), signal.SIGTERM)
    return app
