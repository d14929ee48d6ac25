"""Which settings model each service the launcher starts reads (the one table), a run config's settings
by path, and a setting's value as text: below the run config (which checks a service's ``settings:``
against them), the code that resolves them and the chart's table. Flag and env var names are
``common.setting_names``'."""

from __future__ import annotations

import importlib
import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from rlstack.common.renamed_settings import renamed_data

if TYPE_CHECKING:
    from rlstack.common.settings import ServiceSettings

SETTINGS = {
    "rlstack.registry": "rlstack.registry.config:RegistrySettings", "rlstack.batcher": "rlstack.batcher.config:BatcherSettings",
    "rlstack.inference": "rlstack.inference.config:InferenceSettings", "rlstack.proxy": "rlstack.proxy.config:ProxySettings",
    "rlstack.trainer": "rlstack.trainer.config:TrainerSettings", "rlstack.envs": "rlstack.envs.config:EnvSettings",
}
"""Each service's settings model, by the module the launcher starts (settings modules import no
HTTP client, torch or vLLM: reading them is cheap)."""


def settings_class(module: str) -> type[ServiceSettings]:
    target, _, name = SETTINGS[module].partition(":")
    return getattr(importlib.import_module(target), name)


def setting_paths(model: type[BaseModel], values: Mapping[str, Any], prefix: str = "", warn: bool = True) -> dict[str, Any]:
    """Settings by path (``packing.row_tokens``), whether given as a group (``packing: {row_tokens: 512}``),
    as a dotted key or by an old flat name (moved, warned). Raises ValueError naming a key the model lacks."""
    values = renamed_data(dict(values), getattr(model, "renamed", {}), warn) if not prefix else values
    out: dict[str, Any] = {}
    for key, value in values.items():
        head, dot, rest = key.partition(".")
        field = model.model_fields.get(head)
        if field is None:
            raise ValueError(f"{prefix}{head} not a setting")
        group = field.annotation if isinstance(field.annotation, type) and issubclass(field.annotation, BaseModel) else None
        if group is not None and dot:
            out |= setting_paths(group, {rest: value}, f"{prefix}{head}.")
        elif group is not None and isinstance(value, Mapping):
            out |= setting_paths(group, value, f"{prefix}{head}.")
        elif dot:
            raise ValueError(f"{prefix}{key} not a setting")  # a dot after a field that is no group
        else:
            out[prefix + key] = value
    return out


def setting_text(value: Any) -> str:  # noqa: ANN401 - a setting's value
    """A setting's value as a flag's argument or an env var carries it: ``null`` for None (every
    setting's off), ``true``/``false``, JSON for lists and maps."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (list, tuple, dict)):
        return json.dumps(value)
    return str(value)
