"""``manifest.json``: what a built agent bundle holds, written last by the builder and read by the
compatibility check before a task's first trial (and by whoever copies the bundle into a pod).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

MANIFEST_NAME = "manifest.json"
MANIFEST_FORMAT = 1

NEEDS_PATTERN = re.compile(r"^(any|glibc>=(\d+)\.(\d+))$")


class AgentEntry(BaseModel):
    """One agent program in the bundle."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    program: str
    """Absolute path inside the container (under ``/opt/rlstack``)."""
    version: str
    """The release bundled (npm package version, CPython and rlstack versions)."""
    needs: str = "any"
    """What the image's libc must be: ``any`` (the program brings its libc or is static) or
    ``glibc>=2.N`` (it still uses the image's loader and libc)."""
    image_programs: tuple[str, ...] = ()
    """Programs the agent runs from the image itself (its shell tool's ``bash``, a ``/bin/sh``
    launcher); ``bash|zsh``: either will do."""
    version_argv: tuple[str, ...] = ()
    """A command that runs the program and exits 0: the build's and the tests' smoke check."""

    @field_validator("needs")
    @classmethod
    def _needs(cls, value: str) -> str:
        if not NEEDS_PATTERN.match(value):
            raise ValueError(f"needs must be 'any' or 'glibc>=X.Y', not {value!r}")
        return value

    @property
    def min_glibc(self) -> tuple[int, int] | None:
        match = NEEDS_PATTERN.match(self.needs)
        return (int(match.group(2)), int(match.group(3))) if match and match.group(2) else None


class BundleManifest(BaseModel):
    """The bundle as a whole: for which machine, with which libc, which agents, how big."""

    model_config = ConfigDict(extra="forbid")

    format: Literal[1] = MANIFEST_FORMAT
    mount: str
    """Where it must be mounted (the patched programs name this path)."""
    arch: str
    """``uname -m`` of the machine that built it; the image's must match."""
    glibc: str
    """The glibc release in ``lib/`` (the loader and libc every patched program uses)."""
    agents: dict[str, AgentEntry]
    digest: str = Field(pattern=r"^sha256:[0-9a-f]{64}$")
    """Content digest of every file, link and mode in the bundle except this manifest."""
    size_bytes: int = Field(ge=0)
    files: int = Field(ge=0)
    inputs: str
    """Digest of what it was built from (sources' sizes and times, the builder's code): equal
    inputs make a rebuild a no-op."""
    libraries: dict[str, str] = {}
    """Each library in ``lib/`` and the host file it was copied from."""
    verified: bool = False
    """Every agent's ``version_argv`` ran, with the bundle mounted at ``mount``, at build time."""

    def agent(self, name: str) -> AgentEntry:
        try:
            return self.agents[name]
        except KeyError:
            raise KeyError(f"the agent bundle has no {name!r} (it has {', '.join(sorted(self.agents))}); "
                           f"rebuild it with `python -m rlstack.episodes.bundle build --agents ...`") from None


def load_manifest(bundle: Path) -> BundleManifest:
    return BundleManifest.model_validate_json((bundle / MANIFEST_NAME).read_text())


def write_manifest(bundle: Path, manifest: BundleManifest) -> None:
    (bundle / MANIFEST_NAME).write_text(manifest.model_dump_json(indent=2) + "\n")
