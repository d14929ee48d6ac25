"""Full weights out of a sharded policy, one decoder layer at a time.

Every rank calls ``gathered`` in the same order (each ``full_tensor`` is an all-gather); rank 0
gets one layer's full tensors, writes or sends them, and drops them before the next layer, so
no rank ever holds the whole model (``ipc`` keeps each rank's copy on its GPU and shares it).
``save_gathered`` writes a Hugging Face directory (one safetensors file per layer plus the index), which the ``filesystem`` and ``lora`` modes hand to
the replicas exactly as a ``save_pretrained`` directory; ``broadcast`` sends each layer's tensors
as they come (``layout`` tells the replicas what to expect first). A plain process just calls
``save_pretrained``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

if TYPE_CHECKING:
    from rlstack.trainer.distributed import DistContext

LAYER = re.compile(r"\.layers\.(\d+)\.")


def _unit(name: str) -> str:
    found = LAYER.search(name)
    return f"layer-{int(found.group(1)):05d}" if found else "rest"


def _units(model: torch.nn.Module, trainable_only: bool) -> dict[str, list[tuple[str, Any]]]:
    """State-dict entries grouped by decoder layer, in the order they are gathered and sent."""
    tied = getattr(getattr(model, "config", None), "tie_word_embeddings", False)
    wanted = {n for n, p in model.named_parameters() if p.requires_grad} if trainable_only else None
    units: dict[str, list[tuple[str, Any]]] = {}
    for name, tensor in model.state_dict().items():
        if (tied and name.endswith("lm_head.weight")) or (wanted is not None and name not in wanted):
            continue
        units.setdefault(_unit(name), []).append((name, tensor))
    return dict(sorted(units.items()))


def layout(model: torch.nn.Module) -> list[tuple[str, torch.dtype, list[int]]]:
    """Name, dtype and full shape of every tensor ``gathered`` yields, in that order; no communication
    (a DTensor knows its global shape), so a receiver can be told before the first byte is sent."""
    return [(name, t.dtype, list(t.shape)) for entries in _units(model, False).values() for name, t in entries]


def unit_count(model: torch.nn.Module, trainable_only: bool = False) -> int:
    """How many units ``gathered`` yields (no communication)."""
    return len(_units(model, trainable_only))


def gathered(model: torch.nn.Module, trainable_only: bool = False,
             device: torch.device | None = None) -> Iterator[tuple[str, dict[str, torch.Tensor]]]:
    """``(unit, {name: full tensor})`` per decoder layer, then the rest (embeddings, norm, head).

    Call on every rank. The tensors are fresh CPU copies (only rank 0's are meant to be used),
    or, with ``device``, full tensors on that device on every rank (``ipc`` shares each rank's
    with the replica on its GPU). A tied head is not listed (it is the embedding), as
    ``save_pretrained`` does.
    """
    for unit, entries in _units(model, trainable_only).items():
        full = {}
        for name, tensor in entries:
            t = tensor.full_tensor() if hasattr(tensor, "full_tensor") else tensor
            full[name] = t.detach().to("cpu", copy=True).contiguous() if device is None else t.detach().to(device).contiguous()
        yield unit, full
        del full


def save_gathered(model: Any, path: Path, ctx: DistContext) -> None:  # noqa: ANN401 - a transformers or peft model
    """A Hugging Face model directory (or peft adapter directory) of the current weights on rank 0."""
    if not _has_dtensors(model):
        if ctx.is_main:
            model.save_pretrained(path, safe_serialization=True)
        return
    if hasattr(model, "peft_config"):  # an adapter is small: gather it whole, let peft write its files
        tensors = {k: v for _, unit in gathered(model, trainable_only=True) for k, v in unit.items()}
        if ctx.is_main:
            model.save_pretrained(path, safe_serialization=True, state_dict=tensors)
        return
    from safetensors.torch import save_file

    path = Path(path)
    if ctx.is_main:
        path.mkdir(parents=True, exist_ok=True)
        model.config.save_pretrained(path)
    weight_map: dict[str, str] = {}
    total = 0
    for unit, tensors in gathered(model):
        if not ctx.is_main:
            continue
        filename = f"model-{unit}.safetensors"
        save_file(tensors, str(path / filename), metadata={"format": "pt"})
        weight_map.update(dict.fromkeys(tensors, filename))
        total += sum(t.numel() * t.element_size() for t in tensors.values())
    if ctx.is_main:
        index = {"metadata": {"total_size": total}, "weight_map": dict(sorted(weight_map.items()))}
        (path / "model.safetensors.index.json").write_text(json.dumps(index, indent=2))


def _has_dtensors(model: torch.nn.Module) -> bool:
    return any(hasattr(p, "full_tensor") for p in model.parameters())
