"""How task images are built (``RLSTACK_TASKS_*`` env vars, or ``rlstack tasks build`` flags).

Two builders are supported, podman and buildah; both keep images in the same local store. On a
cluster, build wherever podman or buildah runs with ``rlstack tasks build DATASET --push REGISTRY``:
the lock file then carries each image as ``REGISTRY/rlstack-task/NAME@sha256:...``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

_DIGEST = re.compile(r"@sha256:[0-9a-f]{64}$")


class ImageSettings(BaseSettings):
    model_config = SettingsConfigDict(env_prefix="RLSTACK_TASKS_", extra="forbid", validate_default=True,
                                      use_attribute_docstrings=True)

    builder: Literal["podman", "buildah"] = "podman"
    """The tool that builds, pulls, pushes and unpacks images (podman and buildah are supported)."""
    base_map: dict[str, str] = Field(default_factory=dict)
    """A ``FROM`` reference as a Dockerfile writes it (``debian:bookworm-slim``, or pinned
    ``debian:bookworm-slim@sha256:...``), or a task's ``docker_image``, mapped to a local or mirrored
    image. A key without a digest also matches that reference pinned to any digest. Env var: JSON,
    ``RLSTACK_TASKS_BASE_MAP='{"debian:bookworm-slim": "localhost/debian:bookworm-slim"}'``."""
    jobs: int = Field(default=2, ge=1, le=32)
    """Images built at once."""
    build_timeout_sec: float = Field(default=1800, gt=0, le=24 * 3600)
    """One image's build (or pull) is stopped and reported as failed after this long."""
    cache_dir: Path = Path(".cache/task-images")
    """Build logs and unpacked root filesystems (``rootfs/<image id>/``); relative to the current directory."""
    network: Literal["host", "none"] = "host"
    """Network of the build's RUN steps: ``host`` (package installs reach their mirrors) or ``none``."""
    runtime: str | None = "runc"
    """OCI runtime of RUN steps (``--runtime``); unset: the builder's default. runc works where crun
    cannot drive the host's cgroups."""
    ulimits: list[str] = Field(default_factory=lambda: ["nofile=1024:1024", "nproc=1024:1024"])
    """``--ulimit`` of RUN steps: explicit limits, since some hosts refuse to raise them for a container."""

    @field_validator("cache_dir")
    @classmethod
    def _absolute(cls, value: Path) -> Path:
        return value.expanduser().absolute()

    @field_validator("base_map")
    @classmethod
    def _refs(cls, value: dict[str, str]) -> dict[str, str]:
        for key, target in value.items():
            if not key.strip() or not target.strip():
                raise ValueError(f"base_map: empty reference in {key!r} -> {target!r}")
        return {key.strip(): target.strip() for key, target in value.items()}

    def map_ref(self, ref: str) -> str | None:
        """The image ``ref`` is mapped to, or None. ``docker.io/library/`` and an implied ``:latest``
        are ignored on both sides; a key without a digest matches the ref with any digest."""
        wanted = canonical_ref(ref)
        keys = {canonical_ref(key): target for key, target in self.base_map.items()}
        if wanted in keys:
            return keys[wanted]
        if _DIGEST.search(wanted):
            return keys.get(canonical_ref(unpinned(wanted)))
        return None


def canonical_ref(ref: str) -> str:
    """``docker.io/library/debian`` -> ``debian:latest``: the spellings of one Docker Hub image made equal."""
    ref = ref.strip()
    for prefix in ("docker.io/library/", "index.docker.io/library/", "docker.io/", "index.docker.io/"):
        if ref.startswith(prefix):
            ref = ref.removeprefix(prefix)
            break
    if not _DIGEST.search(ref) and not _has_tag(ref):
        ref += ":latest"
    return ref


def _has_tag(ref: str) -> bool:
    """A ``:tag`` after the last path component (a registry's ``host:port/`` is not a tag)."""
    return ":" in _DIGEST.sub("", ref).rsplit("/", 1)[-1]


def unpinned(ref: str) -> str:
    """The reference without its ``@sha256:`` digest: the base map key that matches it whatever the digest."""
    return _DIGEST.sub("", ref.strip())
