"""FakeObjectsApiServer: an HTTP-level stand-in for the Kubernetes API server's plain objects.

No API server can run here (no container engine, no kind). FakeKubeApiServer
(tests/helpers/fake_kube_api.py) plays the pod API; this fake plays the objects that are only
read or created, never watched: Secrets and PersistentVolumeClaims in a namespace, StorageClasses
cluster-wide. It answers get, list and create as kube-apiserver does (404/409 ``Status`` bodies,
``stringData`` folded into base64 ``data`` as the server does on write) and records each request
as the RBAC verb the real server would authorise, so tests compare the code's calls with a Role.

It is a fake: no admission, no authentication, no validation beyond a name.
"""

from __future__ import annotations

import base64
import copy
import json
import uuid
from datetime import UTC, datetime

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from rlstack.common.ports import free_port
from tests.helpers.serving import BackgroundServer

KINDS = {"secrets": ("v1", "Secret"), "persistentvolumeclaims": ("v1", "PersistentVolumeClaim"),
         "storageclasses": ("storage.k8s.io/v1", "StorageClass")}


def _status(code: int, reason: str, message: str) -> JSONResponse:
    return JSONResponse({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                         "message": message, "reason": reason, "code": code}, status_code=code)


class FakeObjectsApiServer:
    """Secrets, claims (namespaced) and storage classes (cluster-scoped) on 127.0.0.1."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict] = {}  # (resource, namespace or "", name)
        self.requests: list[tuple[str, str, str]] = []  # (verb, resource, namespace)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self._server: BackgroundServer | None = None

    def start(self) -> FakeObjectsApiServer:
        app = Starlette(routes=[
            Route("/api/v1/namespaces/{ns}/{resource}", self._collection, methods=["GET", "POST"]),
            Route("/api/v1/namespaces/{ns}/{resource}/{name}", self._item, methods=["GET"]),
            Route("/apis/storage.k8s.io/v1/{resource}", self._collection, methods=["GET", "POST"]),
            Route("/apis/storage.k8s.io/v1/{resource}/{name}", self._item, methods=["GET"]),
        ])
        self._server = BackgroundServer(app, self.port, lifespan="off", name="fake-objects-api").start()
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()

    def put(self, resource: str, obj: dict, namespace: str = "") -> None:
        """Seed an object as if someone had created it (no request recorded)."""
        self._store(resource, namespace, copy.deepcopy(obj))

    def get(self, resource: str, name: str, namespace: str = "") -> dict | None:
        return copy.deepcopy(self.objects.get((resource, namespace, name)))

    def verbs(self) -> set[tuple[str, str]]:
        return {(resource, verb) for verb, resource, _ in self.requests}

    def _store(self, resource: str, ns: str, obj: dict) -> dict:
        api_version, kind = KINDS[resource]
        meta = obj.setdefault("metadata", {})
        meta.update(uid=str(uuid.uuid4()), creationTimestamp=datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
                    resourceVersion="1", **({"namespace": ns} if ns else {}))
        obj.update(apiVersion=api_version, kind=kind)
        if "stringData" in obj:  # the API server stores stringData as data, base64-encoded
            data = obj.setdefault("data", {})
            data.update({k: base64.b64encode(v.encode()).decode() for k, v in obj.pop("stringData").items()})
        self.objects[(resource, ns, meta["name"])] = obj
        return obj

    async def _collection(self, request: Request) -> Response:
        resource, ns = request.path_params["resource"], request.path_params.get("ns", "")
        if resource not in KINDS:
            return _status(404, "NotFound", f"the server could not find the requested resource ({resource})")
        self.requests.append(("create" if request.method == "POST" else "list", resource, ns))
        if request.method == "POST":
            obj = json.loads(await request.body())
            name = obj.get("metadata", {}).get("name")
            if not name:
                return _status(422, "Invalid", "metadata.name: Required value")
            if (resource, ns, name) in self.objects:
                return _status(409, "AlreadyExists", f'{resource} "{name}" already exists')
            return JSONResponse(copy.deepcopy(self._store(resource, ns, obj)), status_code=201)
        api_version, kind = KINDS[resource]
        items = [copy.deepcopy(o) for (r, n, _), o in self.objects.items() if r == resource and n == ns]
        return JSONResponse({"kind": f"{kind}List", "apiVersion": api_version, "metadata": {"resourceVersion": "1"}, "items": items})

    async def _item(self, request: Request) -> Response:
        resource, ns, name = request.path_params["resource"], request.path_params.get("ns", ""), request.path_params["name"]
        self.requests.append(("get", resource, ns))
        obj = self.objects.get((resource, ns, name))
        if obj is None:
            return _status(404, "NotFound", f'{resource} "{name}" not found')
        return JSONResponse(copy.deepcopy(obj))
