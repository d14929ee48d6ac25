"""Which model ``rlstack dryrun`` reads for a chart values file. The chart loads ``model.path`` on
its shared volume, which the machine running dryrun seldom has; ``model.source`` says where the
model comes from (a Hub repo, a node directory, the demo build), so that is read instead."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from pydantic import BaseModel


class ChartModel(BaseModel):
    """What ``AutoConfig`` reads for the values file, and what to tell the user when it cannot."""

    model: str
    """A local directory or a Hugging Face repo id."""
    revision: str | None = None
    """The Hub revision (``model.source.hub.revision``); None for a directory."""
    hint: str = ""
    """The fix when ``model`` cannot be read: always names ``--model-dir``."""


def chart_model(values: dict[str, Any]) -> ChartModel:
    model = values.get("model") or {}
    path = str(model.get("path") or "")
    source = model.get("source") or {}
    kind = source.get("type") or "none"
    if path and Path(path).is_dir():  # run where the volume is mounted
        return ChartModel(model=path)
    hub = source.get("hub") or {}
    if kind == "hub" and hub.get("id"):
        return ChartModel(model=hub["id"], revision=hub.get("revision") or None,
                          hint=f"no Hub here? pass --model-dir DIR, a local copy of {hub['id']} (model.source.hub.id)")
    if kind == "hostPath" and source.get("hostPath"):
        return ChartModel(model=source["hostPath"],
                          hint="the node's model.source.hostPath is not on this machine: pass --model-dir DIR, a local copy")
    if kind == "demo":
        return ChartModel(model=path, hint="the chart builds the tiny demo model (model.source.type demo): "
                                           "pass --model-dir models/demo after `rlstack make-demo-model`")
    return ChartModel(model=path, hint=f"model.source.type {kind}: the model is at {path or 'model.path'} on the chart's "
                                       "volume only: pass --model-dir DIR, a local copy")
