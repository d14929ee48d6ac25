"""Run configs (YAML under examples/): which services to start, with what flags, in what order.

Arguments and env values may name other services' addresses as ``{batcher.url}`` or
``{registry.port}``; ports left unset are picked free on loopback.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from rlstack.common.names import POLICY_NAME
from rlstack.common.policies import PolicyRoute, PolicyTable
from rlstack.common.renamed_settings import renamed_argv
from rlstack.common.setting_names import flag_name
from rlstack.launcher.settings_models import SETTINGS, setting_paths, settings_class

SERVICE_NAME = r"^[a-z][a-z0-9_-]{0,40}$"


class RestartPolicy(BaseModel):
    """What a Deployment does for a container that dies: start it again, waiting longer each time."""

    model_config = ConfigDict(extra="forbid")

    max_restarts: int = Field(default=5, ge=0, le=1000)
    """Restarts allowed in a row; one more death ends the run as a restart loop. 0: never restart."""
    backoff_s: float = Field(default=1.0, ge=0, le=300)
    """Wait before the first restart; doubled for each further one in a row."""
    max_backoff_s: float = Field(default=30.0, ge=0, le=3600)
    reset_after_s: float = Field(default=300.0, gt=0, le=86_400)
    """A service that stayed up this long has its count of restarts in a row reset."""


class ServiceSpec(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=SERVICE_NAME)
    """Unique name; also the log file's name and the placeholder prefix."""
    module: str = Field(pattern=r"^rlstack\.[a-z_.]+$")
    """Started as ``python -m <module>``."""
    args: list[str] = Field(default_factory=list)
    """Flags as on a command line; ``{service.url}`` and ``{run_dir}`` name addresses."""
    settings: dict[str, Any] = Field(default_factory=dict)
    """Values of the service's own settings model by field name (``model: models/demo``,
    ``pack_tokens: null``), checked against that model when the config is read and made flags only
    when the process starts (``launcher.service_settings``). One given both here and as a flag in ``args`` is
    refused (a list flag given twice adds up rather than being replaced)."""
    env: dict[str, str] = Field(default_factory=dict)
    port: int | None = Field(default=None, ge=1, le=65535)
    """Fixed port; a free one when unset. Passed as --port."""
    ready_path: str = "/readyz"
    """Polled until it answers 200 before the next service starts."""
    ready_timeout_s: float = Field(default=120.0, gt=0, le=3600)
    extra_ports: list[str] = Field(default_factory=list)
    """More free ports this service needs, named; ``{<service>.<name>}`` gives the number (e.g. vLLM's own port)."""
    python: str | None = None
    """Interpreter to start it with (a per-image venv such as .venv-vllm/bin/python); this one when unset."""
    status_path: str | None = None
    """JSON progress (step/steps/...) drawn as a live line while the run waits on this service."""
    restart: RestartPolicy = Field(default_factory=RestartPolicy)
    """Brought back on the same port when it dies (the ``until`` service too, unless it exits 0)."""
    policy: str | None = Field(default=None, pattern=POLICY_NAME)
    """With a ``policies:`` block: the policy this replica serves or this trainer trains; its model,
    served name and directories come from the block (``launcher.policies``)."""

    @model_validator(mode="after")
    def _settings_are_the_services_own(self) -> ServiceSpec:
        if not self.settings:
            return self
        if self.module not in SETTINGS:
            raise ValueError(f"settings: {self.module} has no settings model here; give it args")
        model = settings_class(self.module)
        try:
            paths = setting_paths(model, self.settings)
        except ValueError as exc:
            raise ValueError(f"settings: {exc} of {self.module}") from None
        flags = {a.split("=", 1)[0] for a in renamed_argv(self.args, model.renamed, warn=False) if a.startswith("--")}
        if twice := sorted(k for k in paths if {flag_name(k), flag_name(k, negated=True)} & flags):
            raise ValueError(f"settings: {', '.join(twice)} also given as a flag in args; give each once")
        return self


class PolicyDecl(PolicyRoute):
    """One policy of a run: the names it answers (``PolicyRoute``) and the model it starts from."""

    model: str = Field(min_length=1)
    """The model directory its replicas serve and its trainer trains."""
    family: str | None = None
    """Its model family; unset, read from the directory. One the directory contradicts is refused."""

    def route(self) -> PolicyRoute:
        return PolicyRoute(name=self.name, served_names=self.served_names, responses_names=self.responses_names)


class RunConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(pattern=SERVICE_NAME)
    """Run name; the run directory is runs/<name>-<timestamp>."""
    runs_dir: Path = Path("runs")
    services: list[ServiceSpec] = Field(min_length=1)
    """Started in this order, each gated on the previous one's readiness."""
    until: str | list[str] | None = None
    """The service whose exit ends the run (exit 0: success), or several (a trainer per policy): the run
    ends when every one has exited 0; unset, the stack runs until Ctrl-C."""
    policies: list[PolicyDecl] = Field(default_factory=list)
    """Several policies trained in one run (``launcher.policies``); empty: one, as every service's flags say."""
    auth: bool = True
    """Mint per-run tokens and require them on every service (``launcher.auth``); false: an open stack."""
    stop_grace_s: float = Field(default=60.0, ge=1.0, le=600.0)
    """At the end, how long each service has after its SIGTERM before it is killed (longer than the
    replica sidecar's own 30 s for stopping vLLM)."""

    @field_validator("services")
    @classmethod
    def _unique_names(cls, services: list[ServiceSpec]) -> list[ServiceSpec]:
        names = [s.name for s in services]
        duplicates = sorted({n for n in names if names.count(n) > 1})
        if duplicates:
            raise ValueError(f"service names must be unique, repeated: {duplicates}")
        return services

    @field_validator("policies")
    @classmethod
    def _one_answer_per_name(cls, policies: list[PolicyDecl]) -> list[PolicyDecl]:
        if policies:
            PolicyTable(tuple(p.route() for p in policies))  # names each given once, no name claimed by two
        return policies

    @property
    def until_services(self) -> list[str]:
        return [] if self.until is None else [self.until] if isinstance(self.until, str) else list(self.until)

    @model_validator(mode="after")
    def _until_names_a_service(self) -> RunConfig:
        names = {s.name for s in self.services}
        if unknown := [u for u in self.until_services if u not in names]:
            raise ValueError(f"until names no service: {', '.join(map(repr, unknown))}")
        return self

    @classmethod
    def load(cls, path: Path) -> RunConfig:
        return cls.model_validate(yaml.safe_load(path.read_text()))
