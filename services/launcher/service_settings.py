"""A service of a run config read as its own settings model, the one its process will start with.

A service in a run config carries ``args`` (flags as a user writes them) and ``settings`` (values by
field name, typed; what the launcher decides itself goes there: a policy's model and served name,
``rlstack up --model``). Both become the process's command line in one place, ``command_args``, when
it starts; before that, ``resolve`` reads a service's settings through the service's own pydantic
model, exactly as the process will (its flags, its env, this process's env). Nothing reads a flag
back out of an argument list by hand.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator, Mapping, Sequence
from types import SimpleNamespace
from typing import TYPE_CHECKING, Any

from pydantic import ValidationError
from pydantic_settings import SettingsError

from rlstack.common.setting_names import flag_name
from rlstack.launcher.settings_models import (
    SETTINGS,
    setting_paths,
    setting_text,
    settings_class,
)

if TYPE_CHECKING:
    from rlstack.launcher.config import ServiceSpec

__all__ = ["SETTINGS", "ServiceSettingsError", "as_flags", "command_args", "resolve", "resolve_settings", "settings_class",
           "stand_in_addresses"]


def as_flags(settings: Mapping[str, Any], addresses: Mapping[str, Any] | None = None) -> list[str]:
    """``--field-name value`` for each setting by path (``setting_paths``; a group's as ``--group.field``):
    text formatted with the run's addresses (``{run_dir}``),
    ``True``/``False`` as ``--x``/``--no-x``, ``None`` as ``null`` (every setting's "off"), lists and
    maps as JSON (never formatted: their braces are data)."""
    out: list[str] = []
    for field, value in settings.items():
        if isinstance(value, bool):
            out.append(flag_name(field, negated=not value))
        elif isinstance(value, str) and addresses is not None:
            out += [flag_name(field), value.format(**addresses)]
        else:
            out += [flag_name(field), setting_text(value)]
    return out


def command_args(spec: ServiceSpec, addresses: Mapping[str, Any]) -> list[str]:
    """The flags ``python -m <module>`` starts with: the config's ``args``, then its ``settings``. A config
    gives a setting once (``ServiceSpec``); what ``rlstack up`` sets over it (a model, a family: single
    values) comes last, and a single value given twice takes the last."""
    paths = setting_paths(settings_class(spec.module), spec.settings, warn=False) if spec.settings else {}
    return [a.format(**addresses) for a in spec.args] + as_flags(paths, addresses)


def stand_in_addresses(services: Sequence[ServiceSpec], run_dir: str = "runs/dryrun") -> dict[str, Any]:
    """Addresses for each service before ports are picked: settings are checked for their values, not
    for which port is free."""
    out: dict[str, Any] = {"run_dir": run_dir}
    for n, spec in enumerate(services):
        port = spec.port or 20000 + n
        extra = {name: 21000 + 10 * n + i for i, name in enumerate(spec.extra_ports)}
        out[spec.name] = SimpleNamespace(port=port, url=f"http://127.0.0.1:{port}", **extra)
    return out


@contextlib.contextmanager
def environment(env: Mapping[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in env}
    os.environ.update(env)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def resolve_settings(module: str, args: list[str], env: Mapping[str, str]) -> Any:  # noqa: ANN401 - a ServiceSettings
    """The settings ``python -m <module> <args>`` would start with under ``env`` (raises ValidationError,
    or pydantic-settings' SettingsError for an unknown flag)."""
    with environment(env):
        return settings_class(module).from_cli(args, exit_on_error=False)


class ServiceSettingsError(ValueError):
    """A service whose flags or settings its own model refuses; one line naming the service and the fields."""


def problems(exc: ValidationError | SettingsError) -> str:
    """A settings model's refusal in one line, each field by name."""
    if isinstance(exc, SettingsError):
        return str(exc)
    return "; ".join(f"{'.'.join(map(str, e['loc'])) or 'settings'}: {e['msg']}" for e in exc.errors())


def resolve(spec: ServiceSpec, addresses: Mapping[str, Any]) -> Any:  # noqa: ANN401 - a ServiceSettings
    """A service's settings as its process will read them: its command line and its env over this
    process's env (which the process inherits). Raises ``ServiceSettingsError``."""
    env = {k: v.format(**addresses) for k, v in spec.env.items()}
    try:
        return resolve_settings(spec.module, command_args(spec, addresses), env)
    except (ValidationError, SettingsError) as exc:
        raise ServiceSettingsError(f"{spec.name}: {problems(exc)}") from None
