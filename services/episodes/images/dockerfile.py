"""A task's Dockerfile with its base images swapped for local or mirrored ones.

Only the image reference of each ``FROM`` (and of ``COPY --from=IMAGE``) is replaced, through the
base map; flags (``--platform=...``), ``AS name``, comments and every other line stay as written.
Build stages named earlier, ``scratch`` and references built from ``ARG``s (``$BASE``) are left
alone: the first two are no images, the last cannot be known before the build.
"""

from __future__ import annotations

import re
from collections.abc import Callable

from pydantic import BaseModel, ConfigDict

_FROM = re.compile(r"^(?P<head>\s*FROM\s+(?:--\S+\s+)*)(?P<ref>[^\s-]\S*)(?P<tail>.*)$", re.IGNORECASE)
_STAGE = re.compile(r"^\s+AS\s+(?P<name>\S+)", re.IGNORECASE)
_COPY_FROM = re.compile(r"^(?P<head>\s*COPY\s+(?:--\S+\s+)*?--from=)(?P<ref>\S+)(?P<tail>.*)$", re.IGNORECASE)


class BaseUse(BaseModel):
    """One image a Dockerfile builds on: as written, and as it will be built from."""

    model_config = ConfigDict(frozen=True)

    line: int
    """1-based line of the Dockerfile."""
    written: str
    image: str
    """The mapped reference, or ``written`` when nothing maps it."""

    @property
    def mapped(self) -> bool:
        return self.image != self.written


def rewrite_bases(text: str, map_ref: Callable[[str], str | None]) -> tuple[str, list[BaseUse]]:
    """The Dockerfile with every external base mapped, and those bases in order of use.
    ``map_ref`` answers the replacement for a reference, or None to keep it."""
    stages: set[str] = set()
    uses: list[BaseUse] = []
    lines = text.splitlines(keepends=True)
    for number, line in enumerate(lines, start=1):
        body, newline = line.rstrip("\r\n"), line[len(line.rstrip("\r\n")):]
        match = _FROM.match(body) or _COPY_FROM.match(body)
        if match is None:
            continue
        ref = match["ref"]
        is_from = match.re is _FROM
        if is_from and (stage := _STAGE.match(match["tail"])):
            stage_name = stage["name"].lower()
        else:
            stage_name = None
        if _external(ref, stages):
            image = map_ref(ref) or ref
            uses.append(BaseUse(line=number, written=ref, image=image))
            lines[number - 1] = match["head"] + image + match["tail"] + newline
        if stage_name:
            stages.add(stage_name)
    return "".join(lines), uses


def _external(ref: str, stages: set[str]) -> bool:
    """An image to fetch, not an earlier stage (by name or index), ``scratch`` or an ``ARG``."""
    return ref.lower() not in stages and ref.lower() != "scratch" and not ref.isdigit() and "$" not in ref


def has_unresolved_base(text: str) -> bool:
    """A ``FROM`` whose image comes from an ``ARG``: only the build knows it."""
    return any((m := _FROM.match(line)) and "$" in m["ref"] for line in text.splitlines())
