"""Settings that moved into a group keep their old flat names for a release, with a warning naming the new one.

A service's settings class lists its moves once (``renamed``: old flat field -> ``group.field``); the
three ways a setting arrives each honour that one table:

- env vars: ``RenamedEnvSource`` reads ``RLSTACK_TRAINER_PACK_TOKENS`` as ``RLSTACK_TRAINER_PACKING__ROW_TOKENS``;
- flags: ``renamed_argv`` rewrites ``--pack-tokens 512`` to ``--packing.row-tokens 512`` before parsing;
- config-file keys and keyword arguments: ``RenamedSource`` moves ``pack_tokens: 512`` under ``packing``.

Each source is renamed on its own, before pydantic-settings merges them, so an old name keeps its
source's rank: an old env var still loses to a new flag, an old keyword still beats a new env var.

Where the old and the new spelling are both given in one source, the old one wins and the warning says
so: the new one may come from a layer that was upgraded under the user (the chart sets its variables by
their new names, a values file written before the rename overrides them by the old), and for a release
a deployment does what it did. An old name that is also its group's name (``sandbox: kubernetes``,
``agent: claude-code``) is the old spelling only when its value is not an object:
``--sandbox '{"backend": "local"}'`` is the group.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping, Sequence
from typing import Any

from pydantic.fields import FieldInfo
from pydantic_settings import BaseSettings, EnvSettingsSource, PydanticBaseSettingsSource

from rlstack.common.setting_names import env_name, flag_name

log = logging.getLogger("rlstack.settings")


def _is_object(value: object) -> bool:
    return isinstance(value, Mapping) or (isinstance(value, str) and value.lstrip().startswith("{"))


def _moves(old: str, new: str, value: object) -> bool:
    """Whether ``old`` given ``value`` is the old flat setting (not, for a group's own name, the group)."""
    return old != new.partition(".")[0] or not _is_object(value)


def _warn(old: str, new: str, both: bool) -> None:
    tail = f"; {new} is also given, and {old} wins over it for one more release" if both else "; the old name works for one more release"
    log.warning("%s is now %s%s", old, new, tail)


def renamed_data(data: dict[str, Any], renamed: Mapping[str, str], warn: bool = True) -> dict[str, Any]:
    """Config keys or keyword arguments with old flat names moved into their groups."""
    out = dict(data)
    for old, new in renamed.items():
        if old not in out or not _moves(old, new, out[old]):
            continue
        value = out.pop(old)
        group, _, field = new.partition(".")
        block = out.get(group)
        block = dict(block) if isinstance(block, Mapping) else {}
        both = field in block
        block[field] = value
        out[group] = block
        if warn:
            _warn(old, new, both)
    return out


def renamed_argv(args: Sequence[str], renamed: Mapping[str, str], warn: bool = True) -> list[str]:
    """Flags with old flat names rewritten to their groups' (``--x v``, ``--x=v``, ``--no-x``); ``warn=False``
    where the same flags are read again later (the launcher's check of a run config)."""
    flags = {flag_name(old): (old, new) for old, new in renamed.items()}
    negated = {flag_name(old, negated=True): (old, new) for old, new in renamed.items()}
    out: list[str] = []
    for i, arg in enumerate(args):
        name, eq, inline = arg.partition("=")
        if arg in negated:
            old, new = negated[arg]
            out.append(flag_name(new, negated=True))
            if warn:
                _warn(arg, out[-1], False)
            continue
        if name in flags:
            old, new = flags[name]
            value = inline if eq else (args[i + 1] if i + 1 < len(args) else "")
            if _moves(old, new, value):
                out.append(flag_name(new) + (eq + inline if eq else ""))
                if warn:
                    _warn(name, flag_name(new), False)
                continue
        out.append(arg)
    return out


class RenamedEnvSource(EnvSettingsSource):
    """pydantic-settings' env source, reading each old flat variable as its group's new one."""

    def _load_env_vars(self) -> Mapping[str, str | None]:
        env = dict(super()._load_env_vars())
        fold = (lambda n: n) if self.case_sensitive else str.lower
        for old, new in getattr(self.settings_cls, "renamed", {}).items():
            old_var, new_var = env_name(self.env_prefix, old), env_name(self.env_prefix, new)
            if fold(old_var) not in env or not _moves(old, new, env[fold(old_var)]):
                continue
            both = fold(new_var) in env
            env[fold(new_var)] = env.pop(fold(old_var))
            _warn(old_var, new_var, both)
        return env


class RenamedSource(PydanticBaseSettingsSource):
    """Another source (keyword arguments, the config file) with its old flat keys moved into their groups."""

    def __init__(self, settings_cls: type[BaseSettings], inner: PydanticBaseSettingsSource) -> None:
        super().__init__(settings_cls)
        self.inner = inner

    def get_field_value(self, field: FieldInfo, field_name: str) -> tuple[Any, str, bool]:
        return None, field_name, False  # __call__ reads the inner source whole

    def __call__(self) -> dict[str, Any]:
        return renamed_data(self.inner(), getattr(self.settings_cls, "renamed", {}))
