"""Which settings model each service the launcher starts reads: the one table, below the run config
(which checks a service's ``settings:`` against it) and the code that resolves them."""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING

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
