"""Proxy settings (env prefix ``RLSTACK_PROXY_``, or the same fields as flags)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, HttpUrl, PrivateAttr, SecretStr, model_validator
from pydantic_settings import SettingsConfigDict

from rlstack.common.names import ID_PATTERN, SERVED_MODEL_NAME
from rlstack.common.policies import PolicyRoute, PolicyTable, single
from rlstack.common.settings import ServiceSettings


class ProxySettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="RLSTACK_PROXY_", cli_prog_name="rlstack.proxy")

    port: int = Field(default=4000, ge=0, le=65535)
    """LiteLLM's usual port."""
    registry_url: HttpUrl = HttpUrl("http://127.0.0.1:8100")
    """Where replicas are discovered."""
    served_model_name: str = SERVED_MODEL_NAME
    """The replicas' served name; claude-*, hosted_vllm/<name> and <name> all map onto it. With
    ``policies``, unused."""
    policies: tuple[PolicyRoute, ...] = ()
    """A run of several policies (JSON: ``[{"name": "lead", "served_names": ["claude-sonnet-*"]}, ...]``):
    each call goes to the replicas of the policy that claims the model it names, never another's.
    Unset: one policy, ``served_model_name`` (``common.policies.single``)."""
    _table: PolicyTable = PrivateAttr()
    registry_token: SecretStr | None = None
    """The registry's bearer token (reads need it when the registry checks tokens); unset = $RLSTACK_REGISTRY_TOKEN."""
    replica_api_key: SecretStr | None = None
    """Key the replicas require (vLLM --api-key)."""
    trial_key_secret: SecretStr | None = None
    """HMAC secret for trial keys; unset = open mode (identity from the path prefix or 'default')."""
    trials_dir: Path = Path("data/trials")
    """Trajectory files go to <trials-dir>/<run>/<trial>/litellm-trajectory.<writer-id>.jsonl."""
    writer_id: str | None = Field(default=None, pattern=ID_PATTERN)
    """Names this process's trajectory files; unset = <hostname>-<pid>, unique per process and pod
    (with several workers each appends its pid)."""
    workers: int = Field(default=1, ge=1, le=64)
    """Proxy processes sharing the port (LiteLLM's per-call CPU work uses one core per process)."""
    master_key: SecretStr | None = None
    """LiteLLM's admin key (its management routes); a random one per process when unset."""
    watch_timeout_seconds: float = Field(default=10.0, gt=0, le=300)
    """Long-poll length of the registry watch."""
    num_retries: int = Field(default=2, ge=0, le=10)
    """Retries of a failed upstream call (on another replica once the failed one cools down)."""
    request_timeout_seconds: float = Field(default=600.0, gt=0)
    """Upper bound on one upstream call."""
    default_max_context: int = Field(default=32768, ge=16)
    """Context length assumed when a replica does not report max_model_len."""
    max_tokens_cap: int | None = Field(default=None, ge=1)
    """Operator cap on max_tokens per call (short rollouts, fast tests); unset = the context decides."""
    sticky_routing: bool = True
    """Pin each trial to one replica (prefix-cache hits); off = every call goes least-busy."""
    stream_mode: Literal["shim", "litellm"] = "shim"
    """shim: one non-streaming upstream call re-emitted as SSE (keeps token ids); litellm: LiteLLM's
    own streaming (token ids are lost; kept for comparison in bench/proxy.py)."""
    token_in: bool = True
    """Send each trial's continued calls on its threads' exact ids (render, generate, derender on the
    replica; vLLM with --enable-scale-out). Off: LiteLLM calls /v1/chat/completions, which re-renders
    the history from text (kept for comparison in bench/proxy.py)."""
    peer_urls: list[HttpUrl] = Field(default_factory=list)
    """Other proxy pods that may have served a trial's calls: the trial's end is passed on to each, which
    waits until its own calls of the trial are logged and forgets the trial's threads (``peers``)."""
    peers_dns: str | None = Field(default=None, max_length=253)
    """A DNS name whose every address is a proxy pod (the chart's headless Service), looked up at each
    trial's end and reached on ``port``; adds to ``peer_urls``."""
    replica_wait_seconds: float = Field(default=10.0, ge=0, le=300)
    """A call that finds no ready replica waits this long for one before its 503 (a replica
    re-registering or missing probes leaves routing for seconds; a failed call can cost a trial)."""
    min_completion_tokens: int = Field(default=16, ge=1)
    """Smallest max_tokens left after clamping; below it the prompt is too long (400)."""

    @model_validator(mode="after")
    def _one_policy_table(self) -> ProxySettings:
        """The table made once, here: claims two policies share are refused before anything is served."""
        if self.policies and "served_model_name" in self.model_fields_set \
                and self.served_model_name not in {p.name for p in self.policies}:
            raise ValueError(f"served_model_name: {self.served_model_name!r} is not one of policies "
                             f"({', '.join(p.name for p in self.policies)}); with policies, leave it unset")
        self._table = PolicyTable(self.policies) if self.policies else single(self.served_model_name)
        return self

    @property
    def policy_table(self) -> PolicyTable:
        return self._table
