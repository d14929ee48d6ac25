"""FakeKubeApiServer: an HTTP-level stand-in for the Kubernetes API server, pods only.

No API server can run on our machines (no container engine, no kind), so the Kubernetes client
code (sandbox manager, the registry's pod watcher, doctor) talks real HTTP on loopback to this
fake instead. It speaks the core/v1 pod paths the way kube-apiserver does (list with
resourceVersion, watch as newline-delimited events, replay from a resourceVersion, 404/409
``Status`` bodies, pods/log) and records each request as the RBAC verb the real server would
authorise, so tests can compare what the code does with what the chart's Roles grant.

Tests also play an API server under load or in trouble: :meth:`fail_next` makes the next requests
of a verb answer an error (429 with ``Retry-After``, 5xx, 403), before or after taking effect;
:meth:`compact` forgets the events so far, so a watch from an older resourceVersion is answered
``410 Expired`` as kube-apiserver answers it (a 200 stream with one ERROR event); and
:meth:`drop_watches` ends every open watch, cleanly (the server's timeout) or by cutting the
connection. ``request_times`` says when each request came (``time.monotonic``).

It is a fake: no admission, no scheduling, no authentication, no rate limit of its own. Tests play
the kubelet with :meth:`set_status`.
"""

from __future__ import annotations

import asyncio
import copy
import json
import threading
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from datetime import UTC, datetime

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from starlette.routing import Route

from rlstack.common.ports import free_port
from tests.helpers.serving import BackgroundServer


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _status(code: int, reason: str, message: str) -> JSONResponse:
    return JSONResponse({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                         "message": message, "reason": reason, "code": code}, status_code=code)


REASONS = {403: "Forbidden", 404: "NotFound", 409: "Conflict", 429: "TooManyRequests", 500: "InternalError",
           503: "ServiceUnavailable", 504: "Timeout"}
"""The ``reason`` kube-apiserver gives with each code (any other code: InternalError)."""


@dataclass
class Failure:
    """What :meth:`FakeKubeApiServer.fail_next` makes a request answer."""

    code: int
    retry_after: int | None = None
    after_commit: bool = False

    def answer(self) -> JSONResponse:
        body = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": f"injected by the test: {self.code}", "reason": REASONS.get(self.code, "InternalError"),
                "code": self.code}
        headers = {}
        if self.retry_after is not None:  # as the server's priority-and-fairness filter answers
            body["details"] = {"retryAfterSeconds": self.retry_after}
            headers["Retry-After"] = str(self.retry_after)
        return JSONResponse(body, status_code=self.code, headers=headers)


class DroppedWatch(Exception):
    """Raised inside a watch stream to cut its connection (``drop_watches(abrupt=True)``)."""


def _matches_labels(selector: str | None, labels: dict[str, str]) -> bool:
    """Equality (``k=v``, ``k==v``), inequality (``k!=v``), existence (``k``, ``!k``) terms."""
    for term in filter(None, (selector or "").split(",")):
        if "!=" in term:
            k, v = term.split("!=", 1)
            if labels.get(k) == v:
                return False
        elif "=" in term:
            k, v = term.replace("==", "=").split("=", 1)
            if labels.get(k) != v:
                return False
        elif term.startswith("!"):
            if term[1:] in labels:
                return False
        elif term not in labels:
            return False
    return True


def _matches_fields(selector: str | None, pod: dict) -> bool:
    for term in filter(None, (selector or "").split(",")):
        k, v = term.replace("==", "=").split("=", 1)
        actual = {"metadata.name": pod["metadata"]["name"], "metadata.namespace": pod["metadata"]["namespace"],
                  "status.phase": pod.get("status", {}).get("phase")}.get(k)
        if actual != v:
            return False
    return True


class FakeKubeApiServer:
    """Pods in any namespace, served on 127.0.0.1 from a background thread."""

    def __init__(self) -> None:
        self.pods: dict[tuple[str, str], dict] = {}
        self.logs: dict[tuple[str, str], str] = {}
        self.events: list[tuple[int, str, dict]] = []  # (resourceVersion, type, object)
        self.requests: list[tuple[str, str, str]] = []  # (verb, resource, namespace)
        self.request_times: list[tuple[str, float]] = []  # (verb, time.monotonic()) of each request
        self.revision = 0
        self.compacted = 0
        """Events up to this resourceVersion are forgotten (:meth:`compact`)."""
        self.open_watches = 0
        self._failures: dict[str, list[Failure]] = {}
        self._failures_lock = threading.Lock()
        self._drops = 0
        self._drop_abrupt = False
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._loop: asyncio.AbstractEventLoop | None = None
        self._changed = asyncio.Event()  # bound to the server's loop when first awaited there
        self._server: BackgroundServer | None = None

    # --- what tests call -------------------------------------------------------------------

    def start(self) -> FakeKubeApiServer:
        app = Starlette(routes=[
            Route("/api/v1/namespaces/{ns}/pods", self._collection, methods=["GET", "POST"]),
            Route("/api/v1/namespaces/{ns}/pods/{name}", self._item, methods=["GET", "DELETE"]),
            Route("/api/v1/namespaces/{ns}/pods/{name}/log", self._log, methods=["GET"]),
        ])
        self._server = BackgroundServer(app, self.port, lifespan="off", name="fake-kube-api").start()
        self._loop = self._server.loop
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop(force=True)  # open watches never end by themselves

    def verbs(self) -> set[tuple[str, str]]:
        return {(resource, verb) for verb, resource, _ in self.requests}

    def add_pod(self, namespace: str, name: str, labels: dict[str, str], phase: str = "Running",
                pod_ip: str | None = None, ready: bool = True) -> dict:
        """Create a pod as a controller would (not recorded as a client request)."""
        pod = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name, "namespace": namespace, "labels": labels},
               "spec": {"containers": [{"name": "main", "image": "scratch"}]}}
        return self._call(self._create(namespace, pod, phase=phase, pod_ip=pod_ip, ready=ready))

    def set_status(self, namespace: str, name: str, phase: str, *, exit_code: int | None = None,
                   pod_ip: str | None = None, ready: bool | None = None, log: str | None = None,
                   created: str | None = None) -> None:
        """Play the kubelet: move a pod to ``phase`` (with a container exit code when it ended)."""
        async def update() -> None:
            pod = self.pods[(namespace, name)]
            status = pod.setdefault("status", {})
            status["phase"] = phase
            if pod_ip:
                status["podIP"] = pod_ip
            if created:
                pod["metadata"]["creationTimestamp"] = created
            if ready is not None:
                status["conditions"] = [{"type": "Ready", "status": "True" if ready else "False"}]
            if exit_code is not None:
                status["containerStatuses"] = [{"name": "main", "ready": False, "restartCount": 0, "image": "scratch",
                                                "imageID": "", "state": {"terminated": {"exitCode": exit_code,
                                                "reason": "Completed" if exit_code == 0 else "Error"}}}]
            if log is not None:
                self.logs[(namespace, name)] = log
            await self._emit("MODIFIED", pod)
        self._call(update())

    def delete_pod(self, namespace: str, name: str) -> None:
        """Delete as a controller or a node failure would (not recorded as a client request)."""
        self._call(self._delete(namespace, name))

    def fail_next(self, verb: str, code: int, times: int = 1, *, retry_after: int | None = None,
                  after_commit: bool = False) -> None:
        """The next ``times`` requests of ``verb`` (create, get, list, watch, delete) answer ``code``
        with a ``Status`` body (and ``Retry-After`` when given). ``after_commit``: the request takes
        effect first and only its answer is lost, as when a server fails after writing to etcd."""
        with self._failures_lock:
            self._failures.setdefault(verb, []).extend(Failure(code, retry_after, after_commit) for _ in range(times))

    def clear_failures(self) -> None:
        with self._failures_lock:
            self._failures.clear()

    def times(self, verb: str) -> list[float]:
        """When each request of ``verb`` came (``time.monotonic()``), in order."""
        return [t for v, t in list(self.request_times) if v == verb]

    def compact(self) -> None:
        """Forget every event so far, as etcd compaction does: a watch from an older resourceVersion
        (opened now, or open and not yet past it) is answered 410 Expired."""
        async def compact() -> None:
            self.compacted = self.revision
            self.events = [e for e in self.events if e[0] > self.compacted]
            self._wake()
        self._call(compact())

    def drop_watches(self, abrupt: bool = False) -> None:
        """End every open watch: cleanly, as the server's own timeout ends one, or ``abrupt``, the
        connection cut mid-stream (the client sees an incomplete response)."""
        async def drop() -> None:
            self._drops += 1
            self._drop_abrupt = abrupt
            self._wake()
        self._call(drop())

    # --- the API ---------------------------------------------------------------------------

    def _call(self, coro):  # noqa: ANN001, ANN202
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    def _record(self, request: Request, verb: str, resource: str) -> Failure | None:
        """Record the request; the failure it is to answer, if the test asked for one."""
        self.request_times.append((verb, time.monotonic()))
        self.requests.append((verb, resource, request.path_params["ns"]))
        with self._failures_lock:
            queued = self._failures.get(verb)
            return queued.pop(0) if queued else None

    def _wake(self) -> None:
        # A fresh Event per change, not a Condition: on Python 3.11, wait_for() timing out on
        # Condition.wait() can leave the lock released under `async with` ("Lock is not acquired").
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

    async def _emit(self, kind: str, pod: dict) -> None:
        self.revision += 1
        pod["metadata"]["resourceVersion"] = str(self.revision)
        self.events.append((self.revision, kind, copy.deepcopy(pod)))
        self._wake()

    async def _create(self, ns: str, pod: dict, phase: str = "Pending", pod_ip: str | None = None,
                      ready: bool = False) -> dict:
        meta = pod.setdefault("metadata", {})
        meta.update(namespace=ns, uid=str(uuid.uuid4()), creationTimestamp=_now())
        pod["status"] = {"phase": phase, "conditions": [{"type": "Ready", "status": "True" if ready else "False"}]}
        if pod_ip:
            pod["status"]["podIP"] = pod_ip
        self.pods[(ns, meta["name"])] = pod
        await self._emit("ADDED", pod)
        return copy.deepcopy(pod)

    async def _delete(self, ns: str, name: str) -> dict | None:
        pod = self.pods.pop((ns, name), None)
        if pod is None:
            return None
        pod["metadata"]["deletionTimestamp"] = _now()
        await self._emit("MODIFIED", pod)  # a graceful delete is seen first as a deletionTimestamp
        await self._emit("DELETED", pod)
        return copy.deepcopy(pod)

    async def _collection(self, request: Request) -> Response:
        ns, q = request.path_params["ns"], request.query_params
        if request.method == "POST":
            failure = self._record(request, "create", "pods")
            if failure is not None and not failure.after_commit:
                return failure.answer()
            pod = json.loads(await request.body())
            name = pod.get("metadata", {}).get("name")
            if not name:
                return _status(422, "Invalid", "metadata.name: Required value")
            if (ns, name) in self.pods:
                return _status(409, "AlreadyExists", f'pods "{name}" already exists')
            created = JSONResponse(await self._create(ns, pod), status_code=201)
            return failure.answer() if failure is not None else created
        selected = [p for (pns, _), p in self.pods.items()
                    if pns == ns and _matches_labels(q.get("labelSelector"), p["metadata"].get("labels", {}))
                    and _matches_fields(q.get("fieldSelector"), p)]
        if q.get("watch") in ("true", "1"):
            if (failure := self._record(request, "watch", "pods")) is not None:
                return failure.answer()
            return StreamingResponse(self._watch(ns, q, selected), media_type="application/json")
        if (failure := self._record(request, "list", "pods")) is not None:
            return failure.answer()
        return JSONResponse({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": str(self.revision)},
                             "items": copy.deepcopy(selected)})

    async def _watch(self, ns: str, q, current: list[dict]) -> AsyncIterator[bytes]:  # noqa: ANN001
        def wanted(obj: dict) -> bool:
            return (obj["metadata"]["namespace"] == ns and _matches_labels(q.get("labelSelector"), obj["metadata"].get("labels", {}))
                    and _matches_fields(q.get("fieldSelector"), obj))

        def expired(version: int) -> bytes:  # kube-apiserver's answer: a 200 stream, one ERROR event
            status = {"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "reason": "Expired",
                      "message": f"too old resource version: {version} ({self.compacted})", "code": 410}
            return (json.dumps({"type": "ERROR", "object": status}) + "\n").encode()

        drops = self._drops
        self.open_watches += 1
        try:
            if q.get("resourceVersion"):
                seen = int(q["resourceVersion"])
            else:  # no version: the current state as ADDED events, then what follows
                seen = self.revision
                for pod in current:
                    yield (json.dumps({"type": "ADDED", "object": pod}) + "\n").encode()
            deadline = asyncio.get_running_loop().time() + float(q.get("timeoutSeconds") or 300)
            while asyncio.get_running_loop().time() < deadline:
                if seen < self.compacted:
                    yield expired(seen)
                    return
                for rv, kind, obj in [e for e in self.events if e[0] > seen]:
                    seen = rv
                    if wanted(obj):
                        yield (json.dumps({"type": kind, "object": obj}) + "\n").encode()
                if self._drops != drops:
                    if self._drop_abrupt:
                        raise DroppedWatch("the test cut this watch's connection")
                    return
                try:
                    await asyncio.wait_for(self._changed.wait(), 0.5)
                except TimeoutError:
                    pass
        finally:
            self.open_watches -= 1

    async def _item(self, request: Request) -> Response:
        ns, name = request.path_params["ns"], request.path_params["name"]
        if request.method == "DELETE":
            failure = self._record(request, "delete", "pods")
            if failure is not None and not failure.after_commit:
                return failure.answer()
            pod = await self._delete(ns, name)
        else:
            failure = self._record(request, "get", "pods")
            if failure is not None and not failure.after_commit:
                return failure.answer()
            pod = copy.deepcopy(self.pods.get((ns, name)))
        if failure is not None:
            return failure.answer()
        if pod is None:
            return _status(404, "NotFound", f'pods "{name}" not found')
        return JSONResponse(pod)

    async def _log(self, request: Request) -> Response:
        ns, name = request.path_params["ns"], request.path_params["name"]
        if (failure := self._record(request, "get", "pods/log")) is not None:
            return failure.answer()
        if (ns, name) not in self.pods:
            return _status(404, "NotFound", f'pods "{name}" not found')
        return PlainTextResponse(self.logs.get((ns, name), ""))
