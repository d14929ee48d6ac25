"""FakeKubeApiServer: an HTTP-level stand-in for the Kubernetes API server, pods only.

No API server can run on our machines (no container engine, no kind), so the Kubernetes client
code (sandbox manager, the registry's pod watcher, doctor) talks real HTTP on loopback to this
fake instead. It speaks the core/v1 pod paths the way kube-apiserver does (list with
resourceVersion, watch as newline-delimited events, replay from a resourceVersion, 404/409
``Status`` bodies, pods/log) and records each request as the RBAC verb the real server would
authorise, so tests can compare what the code does with what the chart's Roles grant.

It is a fake: no admission, no scheduling, no authentication. Tests play the kubelet with
:meth:`set_status`.
"""

from __future__ import annotations

import asyncio
import copy
import json
import uuid
from collections.abc import AsyncIterator
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
        self.revision = 0
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

    # --- the API ---------------------------------------------------------------------------

    def _call(self, coro):  # noqa: ANN001, ANN202
        return asyncio.run_coroutine_threadsafe(coro, self._loop).result(10)

    def _record(self, request: Request, verb: str, resource: str) -> None:
        self.requests.append((verb, resource, request.path_params["ns"]))

    async def _emit(self, kind: str, pod: dict) -> None:
        self.revision += 1
        pod["metadata"]["resourceVersion"] = str(self.revision)
        self.events.append((self.revision, kind, copy.deepcopy(pod)))
        # A fresh Event per change, not a Condition: on Python 3.11, wait_for() timing out on
        # Condition.wait() can leave the lock released under `async with` ("Lock is not acquired").
        changed, self._changed = self._changed, asyncio.Event()
        changed.set()

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
            self._record(request, "create", "pods")
            pod = json.loads(await request.body())
            name = pod.get("metadata", {}).get("name")
            if not name:
                return _status(422, "Invalid", "metadata.name: Required value")
            if (ns, name) in self.pods:
                return _status(409, "AlreadyExists", f'pods "{name}" already exists')
            return JSONResponse(await self._create(ns, pod), status_code=201)
        selected = [p for (pns, _), p in self.pods.items()
                    if pns == ns and _matches_labels(q.get("labelSelector"), p["metadata"].get("labels", {}))
                    and _matches_fields(q.get("fieldSelector"), p)]
        if q.get("watch") in ("true", "1"):
            self._record(request, "watch", "pods")
            return StreamingResponse(self._watch(ns, q, selected), media_type="application/json")
        self._record(request, "list", "pods")
        return JSONResponse({"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": str(self.revision)},
                             "items": copy.deepcopy(selected)})

    async def _watch(self, ns: str, q, current: list[dict]) -> AsyncIterator[bytes]:  # noqa: ANN001
        def wanted(obj: dict) -> bool:
            return (obj["metadata"]["namespace"] == ns and _matches_labels(q.get("labelSelector"), obj["metadata"].get("labels", {}))
                    and _matches_fields(q.get("fieldSelector"), obj))

        if q.get("resourceVersion"):
            seen = int(q["resourceVersion"])
        else:  # no version: the current state as ADDED events, then what follows
            seen = self.revision
            for pod in current:
                yield (json.dumps({"type": "ADDED", "object": pod}) + "\n").encode()
        deadline = asyncio.get_running_loop().time() + float(q.get("timeoutSeconds") or 300)
        while asyncio.get_running_loop().time() < deadline:
            for rv, kind, obj in [e for e in self.events if e[0] > seen]:
                seen = rv
                if wanted(obj):
                    yield (json.dumps({"type": kind, "object": obj}) + "\n").encode()
            try:
                await asyncio.wait_for(self._changed.wait(), 0.5)
            except TimeoutError:
                pass

    async def _item(self, request: Request) -> Response:
        ns, name = request.path_params["ns"], request.path_params["name"]
        if request.method == "DELETE":
            self._record(request, "delete", "pods")
            pod = await self._delete(ns, name)
        else:
            self._record(request, "get", "pods")
            pod = copy.deepcopy(self.pods.get((ns, name)))
        if pod is None:
            return _status(404, "NotFound", f'pods "{name}" not found')
        return JSONResponse(pod)

    async def _log(self, request: Request) -> Response:
        ns, name = request.path_params["ns"], request.path_params["name"]
        self._record(request, "get", "pods/log")
        if (ns, name) not in self.pods:
            return _status(404, "NotFound", f'pods "{name}" not found')
        return PlainTextResponse(self.logs.get((ns, name), ""))
