"""Which weight versions sampled a call's tokens, read off the replica that answered it.

vLLM labels every token it samples with its engine's weight version: the replica's sidecar sets
the label when the model loads, every in-place sync moves it while generation is paused
(``trainer.sync``). The registry's view of a replica's version lags by up to a heartbeat and says
nothing of a request that straddles a sync, so nothing here reads the registry:

- on the token-in path, ``/inference/v1/generate`` answers each choice's version spans;
- on the one-hop path (``/v1/chat/completions``, which has no spans), the relay reads the label
  (``GET /weight_info``) just before and just after the call: labels only move forward, so equal
  labels mean one version sampled every token, and different ones that the call may span both;
- under LoRA sync the call names its adapter, whose weights never change under that name.

A choice's versions are a sorted list: one entry is exact; several mean its tokens span a sync.
None: unknown (a replica without a numeric label).
"""

from __future__ import annotations

from typing import Any

from rlstack.common.names import adapter_version


def label(value: Any) -> int | None:
    """vLLM's label as a version: our sidecars and syncs write decimal integers; vLLM's own
    ``"default"`` (a replica nobody labelled) is unknown."""
    text = str(value) if value is not None else ""
    return int(text) if text.isdecimal() else None


def from_spans(spans: list[dict[str, Any]] | None) -> list[int] | None:
    """A generate choice's ``weight_versions`` spans ({version, start, end}) as its sorted versions."""
    if not spans:
        return None
    versions = [label(span.get("version")) for span in spans]
    if any(v is None for v in versions):
        return None
    return sorted(set(versions))  # type: ignore[arg-type]


def bracketed(before: int | None, after: int | None) -> list[int] | None:
    """The versions a call may have been sampled by, from the label read before and after it."""
    if before is None or after is None:
        return None
    return [before] if before == after else sorted({before, after})


def of_adapter(model: Any) -> int | None:
    """Under LoRA sync, the version the adapter a call names carries: exact for every token it samples."""
    return adapter_version(str(model)) if model else None


def stamp(answer: dict[str, Any], versions: list[list[int] | None]) -> dict[str, Any]:
    """Each choice of a chat completion carries its versions (``weight_versions``), for the client."""
    for choice, found in zip(answer.get("choices") or [], versions, strict=False):
        if found is not None:
            choice["weight_versions"] = found
    return answer
