"""What ``rlstack up`` checks before it starts anything: every replica's model family can be told
and its vLLM has the family's parsers. A model that fails here would otherwise fail minutes later,
after the registry and the batcher are up, inside a replica's log."""

from __future__ import annotations

from rlstack.common.model_families import ModelFamily, check_parsers, resolve_family
from rlstack.launcher.config import RunConfig

INFERENCE = "rlstack.inference"


def flag(args: list[str], name: str) -> str | None:
    """A flag's value in a service's argument list (``--name value`` or ``--name=value``)."""
    for i, arg in enumerate(args):
        if arg == name and i + 1 < len(args):
            return args[i + 1]
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
    return None


def without_flag(args: list[str], name: str) -> list[str]:
    out: list[str] = []
    skip = False
    for arg in args:
        if skip:
            skip = False
        elif arg == name:
            skip = True
        elif not arg.startswith(name + "="):
            out.append(arg)
    return out


def with_model_family(config: RunConfig, family: str) -> RunConfig:
    """``rlstack up --model-family F``: every replica serves its model as family F (whatever its config said)."""
    services = [s.model_copy(update={"args": [*without_flag(s.args, "--model-family"), "--model-family", family]})
                if s.module == INFERENCE else s for s in config.services]
    return config.model_copy(update={"services": services})


def with_model(config: RunConfig, model: str) -> RunConfig:
    """``rlstack up --model DIR``: the replicas serve, and the trainer trains, ``DIR`` instead of the
    model the config names (a demo policy built on another family's tokenizer, say)."""
    services = [s.model_copy(update={"args": [*without_flag(s.args, "--model"), "--model", model]})
                if flag(s.args, "--model") is not None else s for s in config.services]
    return config.model_copy(update={"services": services})


def check_replicas(config: RunConfig) -> dict[str, ModelFamily]:
    """Each replica's family, by service name; raises ``ModelFamilyError`` (one line, with the fix)."""
    families = {}
    for spec in config.services:
        if spec.module != INFERENCE:
            continue
        model = flag(spec.args, "--model") or "models/tiny"
        family = resolve_family(model, flag(spec.args, "--model-family"))
        check_parsers(family, spec.python, flag(spec.args, "--tool-call-parser"), flag(spec.args, "--reasoning-parser"))
        families[spec.name] = family
    return families
