"""Env server settings (env prefix ``RLSTACK_ENV_``, or the same fields as flags)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import Field, HttpUrl, SecretStr
from pydantic_settings import SettingsConfigDict

from rlstack.common.settings import ServiceSettings


class EnvSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="RLSTACK_ENV_", cli_prog_name="rlstack.envs")

    port: int = Field(default=8300, ge=0, le=65535)
    task: Literal["arithmetic", "gsm8k"] = "arithmetic"
    """Which task this server runs."""
    dataset_path: Path | None = None
    """gsm8k: a local JSONL of question/answer rows; unset tries Hugging Face, then the bundled samples."""
    name: str = "arithmetic"
    """Name registered with the batcher (Atropos' desired_name)."""
    batcher_url: HttpUrl = HttpUrl("http://127.0.0.1:8000")
    batcher_token: SecretStr | None = None
    proxy_url: HttpUrl = HttpUrl("http://127.0.0.1:4000")
    trial_key_secret: SecretStr | None = None
    """Secret shared with the proxy to mint this env's trial key; open proxies need none."""
    registry_url: HttpUrl | None = None
    """Read to stamp groups with the oldest weight version being served."""
    run_id: str = Field(default="local", pattern=r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")
    served_model: str = "policy"
    group_size: int = Field(default=8, ge=1, le=256)
    max_tokens: int = Field(default=16, ge=1)
    temperature: float = Field(default=1.0, ge=0)
    workers: int = Field(default=4, ge=1, le=256)
    """Rollouts in flight at once."""
    max_token_length: int = Field(default=2048, ge=16)
    max_batches_offpolicy: int = Field(default=2, ge=1)
    """Pause producing once this many batches wait in the batcher (status-driven throttling)."""
    difficulty: int = Field(default=1, ge=1, le=3)
    max_operand: int = Field(default=20, ge=1)
    format_reward: float = Field(default=0.0, ge=0, le=1)
    seed: int = 0
    heldout_size: int = Field(default=64, ge=0)
    """Problems kept out of training and answered greedily by POST /evaluate."""
    sandbox_reaper: bool = False
    """In a cluster: delete this server's sandbox pods once finished for a grace period, or past the TTL."""
    sandbox_ttl_seconds: float = Field(default=7200.0, gt=0)
    sandbox_grace_seconds: float = Field(default=300.0, ge=0)
    """Finished sandboxes stay this long so their logs can be read."""
    sandbox_reap_interval_seconds: float = Field(default=30.0, gt=0)
    kube_api_url: str | None = None
    """API server to use instead of the in-cluster or kubeconfig one (``kubectl proxy``, tests)."""
    kube_namespace: str | None = None
    """Where sandboxes live; unset = this pod's own namespace."""
    pod_name: str | None = None
    """This server's pod (downward API): owner of its sandboxes, which then die with it."""
    pod_uid: str | None = None
