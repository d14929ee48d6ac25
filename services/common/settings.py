"""Settings shared by every service: pydantic-settings with a YAML file, env vars and CLI flags.

Precedence is defaults < ``--config file.yaml`` (field names as keys) < env vars
(``RLSTACK_<SERVICE>_<FIELD>``) < CLI flags (``--field-name``): a checked-in file holds a run's
shape, a container's env and a developer's flags override it, and ``--dry-run`` prints the result.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Sequence
from contextvars import ContextVar
from pathlib import Path
from typing import Any, ClassVar, Literal, Self

from pydantic import Field, SecretStr, model_validator
from pydantic_settings import (
    BaseSettings,
    PydanticBaseSettingsSource,
    SettingsConfigDict,
    YamlConfigSettingsSource,
)

from rlstack.common.names import SERVED_MODEL_NAME
from rlstack.common.renamed_settings import (
    RenamedEnvSource,
    RenamedSource,
    renamed_argv,
)

LogLevel = Literal["debug", "info", "warning", "error"]
_CONFIG_FILE: ContextVar[Path | None] = ContextVar("rlstack_config_file", default=None)


class ServiceSettings(BaseSettings):
    """Fields every service has; subclasses set ``env_prefix`` and add their own."""

    model_config = SettingsConfigDict(
        extra="forbid",
        validate_default=True,
        cli_kebab_case=True,
        cli_implicit_flags=True,
        env_parse_none_str="null",  # every setting's "off" is spelled null: in YAML, as a flag and as an env var
        env_nested_delimiter="__",  # a group's field as an env var: RLSTACK_TRAINER_PACKING__ROW_TOKENS
        cli_prog_name="rlstack",
        use_attribute_docstrings=True,
    )

    host: str = "127.0.0.1"
    """Interface to bind; 0.0.0.0 inside a container."""
    port: int = Field(default=8000, ge=0, le=65535)
    """TCP port to listen on."""
    log_level: LogLevel = "info"
    """Minimum level of log lines."""
    log_format: Literal["text", "json"] = "text"
    """One line per event; json for log collectors."""
    auth_token: SecretStr | None = None
    """Bearer token the registry, batcher and trainer require on every route, reads too (their lists name the run's replicas
    and groups), and the env server on /evaluate; /healthz, /readyz and /metrics stay open. Unset: no auth."""
    config: Path | None = None
    """YAML file of settings (field names as keys); env vars and flags override what it says."""
    dry_run: bool = False
    """Print the resolved settings as JSON and exit."""
    failure_exit_delay_seconds: float = Field(default=2.0, ge=0, le=600)
    """After a background loop dies: how long /healthz answers 503 with the cause before the process exits 1."""

    renamed: ClassVar[dict[str, str]] = {}
    """Old flat setting -> its ``group.field`` now; the old name still works, warned (``common.renamed_settings``)."""

    @classmethod
    def settings_customise_sources(cls, settings_cls: type[BaseSettings], init_settings: PydanticBaseSettingsSource,
                                   env_settings: PydanticBaseSettingsSource, dotenv_settings: PydanticBaseSettingsSource,
                                   file_secret_settings: PydanticBaseSettingsSource) -> tuple[PydanticBaseSettingsSource, ...]:
        """The config file, when one is named, ranks below env vars (flags rank above all: pydantic-settings puts them first)."""
        sources: tuple[PydanticBaseSettingsSource, ...] = (init_settings, env_settings, dotenv_settings, file_secret_settings)
        path = _CONFIG_FILE.get()
        if path is not None:
            sources = (*sources, YamlConfigSettingsSource(settings_cls, yaml_file=path))
        if cls.renamed:  # old flat names, each in its own source's rank (common.renamed_settings)
            sources = tuple(RenamedEnvSource(settings_cls) if s is env_settings else RenamedSource(settings_cls, s)
                            for s in sources)
        return sources

    @classmethod
    def from_cli(cls, argv: Sequence[str] | None = None, exit_on_error: bool = True) -> Self:
        """Resolve defaults, the config file, env vars and flags (flags win).

        ``exit_on_error=False``: an unknown flag raises ``SettingsError`` instead of exiting (``rlstack dryrun``).
        """
        args = renamed_argv(sys.argv[1:] if argv is None else argv, cls.renamed)
        path = cls._config_file(args)
        if path is not None and not path.is_file():
            raise SystemExit(f"--config: {path} is not a file")
        token = _CONFIG_FILE.set(path)
        try:
            return cls(_cli_parse_args=args, _cli_exit_on_error=exit_on_error)
        finally:
            _CONFIG_FILE.reset(token)

    @classmethod
    def _config_file(cls, args: list[str]) -> Path | None:
        """``--config`` must be known before the sources are built, so it is read from the flags and env first."""
        for i, arg in enumerate(args):
            if arg == "--config" and i + 1 < len(args):
                return Path(args[i + 1])
            if arg.startswith("--config="):
                return Path(arg.partition("=")[2])
        prefix = cls.model_config.get("env_prefix", "")
        value = os.environ.get(f"{prefix}CONFIG")
        return Path(value) if value else None

    def dump_json(self) -> str:
        """Resolved settings with secrets masked, for --dry-run and startup logs."""
        return self.model_dump_json(indent=2)


class PolicySettings(ServiceSettings):
    """A service that addresses the policy by its served name: the env servers and the trainer."""

    served_model_name: str = SERVED_MODEL_NAME
    """The name the replicas serve the policy under (vLLM's --served-model-name; one name in every
    service): what the registry is asked for, and what calls and syncs are addressed to."""
    served_model: str | None = Field(default=None, exclude=True)
    """Old name of ``served_model_name``, still accepted (flag, env var, config key)."""

    @model_validator(mode="after")
    def _served_model_is_served_model_name(self) -> Self:
        """``served_model`` (flag, env var, config key) was this setting's name; it still sets it."""
        return fold_served_model(self)


def fold_served_model(settings: Any) -> Any:
    """Moves the old ``served_model`` onto ``served_model_name`` (the one name now); both set and
    different is a mistake worth naming."""
    old = getattr(settings, "served_model", None)
    if old is not None:
        if "served_model_name" in settings.model_fields_set and settings.served_model_name != old:
            raise ValueError(f"served_model: the old name of served_model_name, which says {settings.served_model_name!r}")
        settings.served_model_name, settings.served_model = old, None
    return settings
