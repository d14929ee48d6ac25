"""Registry wire types: what an inference replica announces and what watchers receive."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, HttpUrl, model_validator

from rlstack.common.names import ID_PATTERN

ENDPOINT_ID_PATTERN = ID_PATTERN


class EndpointRegistration(BaseModel):
    """Body of ``PUT /v1/endpoints/{id}``; sending it again is the heartbeat."""

    model_config = ConfigDict(extra="forbid")

    url: HttpUrl
    """Base URL of the OpenAI-compatible server (no /v1 suffix)."""
    model: str = Field(min_length=1)
    """The name the server lists at /v1/models; readiness waits for it."""
    weight_version: int = Field(default=0, ge=0)
    """Policy version currently loaded."""
    dp_rank: int | None = Field(default=None, ge=0)
    """Data-parallel rank of this replica, if it has one."""
    labels: dict[str, str] = Field(default_factory=dict)
    """Free-form selectors (node, zone, pod name)."""
    ttl_seconds: float | None = Field(default=None, gt=0, le=3600)
    """Expire after this long without a heartbeat; the registry's default when unset."""
    instance_id: str | None = Field(default=None, max_length=128)
    """Changes whenever the server behind the endpoint restarts (a quarantine ends with it)."""

    @model_validator(mode="before")
    @classmethod
    def _no_alias_names(cls, data: Any) -> Any:
        """``served_model_names`` was a field no one set; sidecars of earlier releases still send it
        empty, which a rolling upgrade must accept. A replica serves one name, ``model``."""
        if isinstance(data, dict) and "served_model_names" in data:
            if data["served_model_names"]:
                raise ValueError("served_model_names: no longer part of the registration; a replica serves one "
                                 "name, its `model` (register one endpoint per served name)")
            data = {k: v for k, v in data.items() if k != "served_model_names"}
        return data


class Endpoint(EndpointRegistration):
    """A registered endpoint as the registry sees it."""

    id: str
    ready: bool
    """True once the registry itself saw ``model`` listed at ``url``/v1/models."""
    registered_at: float
    last_heartbeat: float
    expires_at: float
    last_probe_at: float | None = None
    probe_error: str | None = None
    quarantine: str | None = None
    """Why the trainer took this endpoint out of routing (it served weights other than those it was
    sent); not ready until a later sync passes or the server restarts."""


class Quarantine(BaseModel):
    """Body of ``PUT /v1/endpoints/{id}/quarantine``."""

    model_config = ConfigDict(extra="forbid")

    reason: str = Field(min_length=1, max_length=2000)


class EndpointList(BaseModel):
    revision: int
    """Bumped on every change that a watcher would care about."""
    endpoints: list[Endpoint]
