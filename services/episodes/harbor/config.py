"""The ``task.toml`` of a Harbor task, schema 1.0 and 1.1, as typed models.

Schema 1.0 names its version ``version = "1.0"`` and sizes as strings (``memory = "2G"``);
1.1 says ``schema_version``, adds a ``[task]`` table (``name = "org/name"``) and sizes in MB.
Both load into one model. Fields we do not use (network policy, MCP servers, healthchecks of
later Harbor versions) are kept as extras, so newer tasks still load; a field we do use with
a wrong type or value is an error that names it.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

SUPPORTED_MAJOR = "1"
SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([KMGT])i?B?\s*$", re.IGNORECASE)
SIZE_MB = {"K": 1 / 1024, "M": 1, "G": 1024, "T": 1024 * 1024}
TASK_NAME = r"^[A-Za-z0-9][A-Za-z0-9._-]*/[A-Za-z0-9][A-Za-z0-9._-]*$"


def size_to_mb(value: str, field: str) -> int:
    """``"2G"`` -> 2048: schema 1.0's sizes, in the MB that 1.1 uses."""
    match = SIZE.match(value)
    if not match:
        raise ValueError(f"{field} = {value!r} is not a size like '512M' or '2G'")
    return int(float(match[1]) * SIZE_MB[match[2].upper()])


class _Section(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)


class AgentConfig(_Section):
    timeout_sec: float | None = Field(default=None, gt=0)
    """Wall-clock limit for the agent; unset, the trial runner's default applies."""


class VerifierConfig(_Section):
    timeout_sec: float = Field(default=600.0, gt=0)
    """Wall-clock limit for ``tests/test.sh`` (Harbor's default: 600)."""
    env: dict[str, str] = Field(default_factory=dict)
    """Extra environment variables for the verifier."""


class EnvironmentConfig(_Section):
    docker_image: str | None = None
    """A prebuilt image; without it, ``environment/Dockerfile`` describes the image."""
    build_timeout_sec: float = Field(default=600.0, gt=0)
    cpus: int | None = Field(default=None, ge=1)
    memory_mb: int | None = Field(default=None, ge=1)
    storage_mb: int | None = Field(default=None, ge=1)
    gpus: int | None = Field(default=None, ge=0)
    allow_internet: bool | None = None

    @model_validator(mode="before")
    @classmethod
    def _sizes_from_schema_1_0(cls, data: Any) -> Any:
        if not isinstance(data, dict):
            return data
        data = dict(data)
        for old, new in (("memory", "memory_mb"), ("storage", "storage_mb")):
            if old not in data:
                continue
            value = data.pop(old)
            mb = size_to_mb(value, old) if isinstance(value, str) else value
            if new in data and data[new] != mb:
                raise ValueError(f"{old} = {value!r} and {new} = {data[new]!r} disagree")
            data[new] = mb
        return data


class Author(_Section):
    name: str
    email: str | None = None


class TaskInfo(_Section):
    """Schema 1.1's ``[task]`` table: the task's package name in a Harbor registry."""

    name: str
    """``org/name``."""
    version: str | None = None
    description: str = ""
    authors: list[Author] = Field(default_factory=list)
    keywords: list[str] = Field(default_factory=list)

    @field_validator("name")
    @classmethod
    def _org_slash_name(cls, value: str) -> str:
        if not re.match(TASK_NAME, value):
            raise ValueError(f"{value!r} is not 'org/name' (letters, digits, '.', '_', '-')")
        return value


class TaskConfig(_Section):
    """One ``task.toml``."""

    schema_version: str = "1.0"
    task: TaskInfo | None = None
    metadata: dict[str, Any] = Field(default_factory=dict)
    """Free-form: author, difficulty, category, tags."""
    agent: AgentConfig = Field(default_factory=AgentConfig)
    verifier: VerifierConfig = Field(default_factory=VerifierConfig)
    environment: EnvironmentConfig = Field(default_factory=EnvironmentConfig)
    source: str | None = None

    @model_validator(mode="before")
    @classmethod
    def _version_from_schema_1_0(cls, data: Any) -> Any:
        if not isinstance(data, dict) or "version" not in data:
            return data
        data = dict(data)
        version = data.pop("version")
        if "schema_version" in data and str(data["schema_version"]) != str(version):
            raise ValueError(f"version = {version!r} and schema_version = {data['schema_version']!r} disagree")
        data["schema_version"] = str(version)
        return data

    @model_validator(mode="before")
    @classmethod
    def _single_step_only(cls, data: Any) -> Any:
        if isinstance(data, dict) and data.get("steps"):
            raise ValueError("multi-step tasks ([[steps]]) are not supported: give the task one instruction and one tests/")
        return data

    @field_validator("schema_version", mode="before")
    @classmethod
    def _supported(cls, value: Any) -> str:
        value = str(value)
        if value.split(".")[0] != SUPPORTED_MAJOR:
            raise ValueError(f"schema_version {value!r} is not supported (Harbor task schema 1.x)")
        return value
