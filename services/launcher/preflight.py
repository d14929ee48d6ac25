"""What ``rlstack up`` checks before it starts anything: every replica's model family can be told
and its vLLM has the family's parsers. A model that fails here would otherwise fail minutes later,
after the registry and the batcher are up, inside a replica's log.

Each replica is read through its own settings model (``service_settings.resolve``), as the process
will read itself; what ``rlstack up`` decides (``--model``, ``--model-family``) is set as a typed
setting, never spliced into an argument list.
"""

from __future__ import annotations

from rlstack.common.model_families import ModelFamily, check_parsers, resolve_family
from rlstack.launcher.config import RunConfig
from rlstack.launcher.service_settings import resolve, stand_in_addresses

INFERENCE, TRAINER = "rlstack.inference", "rlstack.trainer"


def with_settings(config: RunConfig, modules: tuple[str, ...], **values: object) -> RunConfig:
    """The config with ``values`` set on every service of ``modules`` (over what its args or settings said)."""
    services = [s.model_copy(update={"settings": {**s.settings, **values}}) if s.module in modules else s for s in config.services]
    return config.model_copy(update={"services": services})


def with_model_family(config: RunConfig, family: str) -> RunConfig:
    """``rlstack up --model-family F``: every replica serves its model as family F (whatever its config said)."""
    return with_settings(config, (INFERENCE,), model_family=family)


def with_model(config: RunConfig, model: str) -> RunConfig:
    """``rlstack up --model DIR``: the replicas serve, and the trainer trains, ``DIR`` instead of the
    model the config names (a demo policy built on another family's tokenizer, say)."""
    return with_settings(config, (INFERENCE, TRAINER), model=model)


def check_replicas(config: RunConfig) -> dict[str, ModelFamily]:
    """Each replica's family, by service name; raises ``ModelFamilyError`` (one line, with the fix)."""
    addresses = stand_in_addresses(config.services)
    families = {}
    for spec in config.services:
        if spec.module != INFERENCE:
            continue
        settings = resolve(spec, addresses)
        family = resolve_family(settings.model, settings.model_family)
        check_parsers(family, spec.python, settings.tool_call_parser, settings.reasoning_parser)
        families[spec.name] = family
    return families
