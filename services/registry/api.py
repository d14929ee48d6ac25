"""Registry routes: register/heartbeat, deregister, list with filters, long-poll watch."""

from __future__ import annotations

import time
from typing import Annotated

from fastapi import APIRouter, Depends, HTTPException, Path, Query, Request, Response

from rlstack.common.auth import require_bearer
from rlstack.common.contracts.registry import (
    ENDPOINT_ID_PATTERN,
    Endpoint,
    EndpointList,
    EndpointRegistration,
    Quarantine,
)
from rlstack.registry.service import RegistryService

EndpointId = Annotated[str, Path(pattern=ENDPOINT_ID_PATTERN, description="Stable replica id, e.g. the pod name")]


async def service(request: Request) -> RegistryService:
    return request.app.state.registry


async def writer(request: Request) -> None:
    """Every route (reads too: the table names replicas and their weight versions) needs the token when set."""
    require_bearer(request, request.app.state.registry.settings.auth_token)


def _label_filter(label: list[str]) -> dict[str, str]:
    labels = {}
    for item in label:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise HTTPException(422, detail=[{"loc": ["query", "label"], "msg": f"expected key=value, got {item!r}", "type": "value_error"}])
        labels[key] = value
    return labels


def _missing(endpoint_id: str) -> HTTPException:
    return HTTPException(404, detail=[{"loc": ["path", "endpoint_id"], "msg": f"no endpoint {endpoint_id!r}", "type": "not_found"}])


router = APIRouter(prefix="/v1/endpoints")


@router.put("/{endpoint_id}", response_model=Endpoint, dependencies=[Depends(writer)])
async def put_endpoint(endpoint_id: EndpointId, body: EndpointRegistration, svc: RegistryService = Depends(service)):
    return svc.register(endpoint_id, body, time.time())


@router.delete("/{endpoint_id}", status_code=204, dependencies=[Depends(writer)])
async def delete_endpoint(endpoint_id: EndpointId, svc: RegistryService = Depends(service)) -> Response:
    if not svc.table.remove(endpoint_id):
        raise _missing(endpoint_id)
    return Response(status_code=204)


@router.put("/{endpoint_id}/quarantine", response_model=Endpoint, dependencies=[Depends(writer)])
async def quarantine_endpoint(endpoint_id: EndpointId, body: Quarantine, svc: RegistryService = Depends(service)):
    """The trainer found the endpoint serving weights other than those it sent: stop routing to it."""
    entry = svc.quarantine(endpoint_id, body.reason)
    if entry is None:
        raise _missing(endpoint_id)
    return entry


@router.delete("/{endpoint_id}/quarantine", response_model=Endpoint, dependencies=[Depends(writer)])
async def release_endpoint(endpoint_id: EndpointId, svc: RegistryService = Depends(service)):
    """A later sync passed its check: the prober decides readiness again."""
    entry = svc.release(endpoint_id)
    if entry is None:
        raise _missing(endpoint_id)
    return entry


@router.get("", response_model=EndpointList, dependencies=[Depends(writer)])
async def list_endpoints(
    model: str | None = None,
    ready: bool | None = None,
    label: Annotated[list[str], Query()] = [],  # noqa: B006 - FastAPI copies defaults
    svc: RegistryService = Depends(service),
):
    return svc.snapshot(model, ready, _label_filter(label))


@router.get("/watch", response_model=EndpointList, dependencies=[Depends(writer)])
async def watch_endpoints(
    revision: Annotated[int, Query(ge=0, description="Return once the table is newer than this")] = 0,
    timeout: Annotated[float, Query(gt=0, le=600)] = 30.0,
    model: str | None = None,
    ready: bool | None = None,
    label: Annotated[list[str], Query()] = [],  # noqa: B006
    svc: RegistryService = Depends(service),
):
    labels = _label_filter(label)
    await svc.table.wait_for_change(revision, min(timeout, svc.settings.max_watch_seconds))
    return svc.snapshot(model, ready, labels)


@router.get("/{endpoint_id}", response_model=Endpoint, dependencies=[Depends(writer)])
async def get_endpoint(endpoint_id: EndpointId, svc: RegistryService = Depends(service)):
    entry = svc.table.get(endpoint_id)
    if entry is None:
        raise _missing(endpoint_id)
    return entry
