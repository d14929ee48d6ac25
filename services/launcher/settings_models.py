"""Which settings model each service the launcher starts reads (the one table), and how a setting is
spelled on a command line or in an env var: below the run config (which checks a service's
``settings:`` against them), the code that resolves them and the chart's table."""

from __future__ import annotations

import importlib
import json
from typing import TYPE_CHECKING, Any

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


def flag_name(field: str, negated: bool = False) -> str:
    """A setting's command-line flag (pydantic-settings' kebab case): ``pack_tokens`` -> ``--pack-tokens``."""
    return ("--no-" if negated else "--") + field.replace("_", "-")


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
