"""A run config's ``policies:`` block made into each service's settings, once, before anything starts.

A config of several policies names each policy's model once, in the block, and tags the replicas
and the trainer that belong to it (``policy: lead``); this module gives each tagged service its
served name, model and family, lays out a run directory per policy (``{run_dir}/policies/<p>``:
its metrics, summary, checkpoints and published weights), and hands the table to the services that
are shared (the proxy and env servers route and split by it, the batcher keeps a queue per policy).
A config with no block is returned as it is: one policy, the settings it always had.
"""

from __future__ import annotations

from typing import Any

from rlstack.common.policies import PolicyTable, declared_family
from rlstack.common.renamed_settings import renamed_argv
from rlstack.common.setting_names import flag_name
from rlstack.launcher.config import PolicyDecl, RunConfig, ServiceSpec
from rlstack.launcher.settings_models import setting_paths, settings_class

INFERENCE, TRAINER = "rlstack.inference", "rlstack.trainer"
SHARED = {"rlstack.proxy": "routes", "rlstack.envs": "routes", "rlstack.batcher": "names"}
"""The shared services that take the table: the proxy and env servers as routes (JSON), the batcher as names."""
OWNED = {INFERENCE: ("served_model_name", "model", "model_family", "weights_dir"),
         TRAINER: ("served_model_name", "model", "batcher_policy", "run_dir", "sync.weights_dir")}
"""The settings (by path) the block decides for a tagged service; a tagged service that sets one itself
(as a flag or a setting, by its old name too) is refused."""


class PolicyConfigError(ValueError):
    """A run config whose policies cannot be started as written; one line naming the policy and the fix."""


def policy_dir(name: str) -> str:
    """Where a policy's trainer writes (metrics.jsonl, summary.json, checkpoints, weights/)."""
    return "{run_dir}/policies/" + name


def table(config: RunConfig) -> PolicyTable | None:
    return PolicyTable(tuple(p.route() for p in config.policies)) if config.policies else None


def check(config: RunConfig) -> None:
    """Every policy has replicas and exactly one trainer, every replica and trainer belongs to one
    declared policy, and each declared family is what its model directory says. Raises
    ``PolicyConfigError``; ``ModelFamilyError`` for a family the directory contradicts."""
    if not config.policies:
        tagged = [s.name for s in config.services if s.policy is not None]
        if tagged:
            raise PolicyConfigError(f"services {tagged} name a policy, but the config declares no policies: block")
        return
    names = [p.name for p in config.policies]
    for spec in config.services:
        if spec.policy is not None and spec.policy not in names:
            raise PolicyConfigError(f"service {spec.name!r}: policy {spec.policy!r} is not one of the declared {names}")
        if spec.policy is None and spec.module in (INFERENCE, TRAINER):
            raise PolicyConfigError(f"service {spec.name!r} ({spec.module}) names no policy; with several policies each "
                                    f"replica and trainer says which it serves or trains (policy: one of {names})")
        if spec.policy is not None:
            model = settings_class(spec.module)
            args, given = renamed_argv(spec.args, model.renamed, warn=False), setting_paths(model, spec.settings, warn=False)
            if owned := [flag_name(f) for f in OWNED.get(spec.module, ()) if _has(args, flag_name(f)) or f in given]:
                raise PolicyConfigError(f"service {spec.name!r}: {', '.join(owned)} come from policy {spec.policy!r}'s "
                                        "declaration; leave them out of its args and settings")
    for p in config.policies:
        replicas = [s.name for s in config.services if s.policy == p.name and s.module == INFERENCE]
        trainers = [s.name for s in config.services if s.policy == p.name and s.module == TRAINER]
        if not replicas:
            raise PolicyConfigError(f"policy {p.name!r} has no replicas: tag an {INFERENCE} service `policy: {p.name}`")
        if len(trainers) != 1:
            raise PolicyConfigError(f"policy {p.name!r} has {len(trainers)} trainers ({trainers}); it needs exactly one "
                                    f"{TRAINER} service tagged `policy: {p.name}`")
        if p.family is not None:  # undeclared, the replica's own check (``preflight.check_replicas``) tells it
            declared_family(p.name, p.model, p.family)


def _has(args: list[str], name: str) -> bool:
    return any(a == name or a.startswith(name + "=") for a in args)


def _settings(spec: ServiceSpec, decl: PolicyDecl) -> dict[str, Any]:
    here = policy_dir(decl.name)
    family = {"model_family": decl.family} if decl.family else {}
    if spec.module == INFERENCE:
        return {"served_model_name": decl.name, "model": decl.model, **family, "weights_dir": here + "/weights"}
    if spec.module == TRAINER:
        return {"served_model_name": decl.name, "model": decl.model, "batcher_policy": decl.name,
                "run_dir": here, "sync.weights_dir": here + "/weights"}
    return {}


def expand(config: RunConfig) -> RunConfig:
    """The config with the block's settings on every service (checked first: ``check``)."""
    check(config)
    routes = table(config)
    if routes is None:
        return config
    by_name = {p.name: p for p in config.policies}
    shared = {"routes": [r.model_dump(exclude_defaults=True) for r in routes.root], "names": routes.names()}
    services = []
    for spec in config.services:
        settings = dict(spec.settings)
        if spec.policy is not None:
            settings |= _settings(spec, by_name[spec.policy])
        elif spec.module in SHARED and not _has(spec.args, "--policies") and "policies" not in settings:
            settings["policies"] = shared[SHARED[spec.module]]
        services.append(spec.model_copy(update={"settings": settings}))
    return config.model_copy(update={"services": services})
