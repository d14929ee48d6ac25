"""Batcher settings (env prefix ``RLSTACK_BATCHER_``, or the same fields as flags)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Literal

from pydantic import Field, field_validator
from pydantic_settings import SettingsConfigDict

from rlstack.common.names import POLICY_NAME, SERVED_MODEL_NAME
from rlstack.common.settings import ServiceSettings


class BatcherSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="RLSTACK_BATCHER_", cli_prog_name="rlstack.batcher")

    port: int = Field(default=8000, ge=0, le=65535)
    """Atropos's default port, so existing env configs point here unchanged."""
    data_dir: Path = Path("data/batcher")
    """Where the write-ahead log lives (a PVC in Kubernetes)."""
    durability: Literal["fsync", "flush", "none"] = "fsync"
    """fsync: acknowledge only once on disk (group commit); flush: OS buffers; none: memory only."""
    max_queue_sequences: int = Field(default=16384, ge=1)
    """Queue bound in sequences; past it posts get 503 + Retry-After and nothing is dropped."""
    max_staleness: int | None = Field(default=None, ge=0)
    """Drop groups whose weight_version is older than current_step - max_staleness."""
    compact_min_bytes: int = Field(default=256 * 1024 * 1024, ge=0)
    """Rewrite the log once it is this large and mostly consumed."""
    retry_after_seconds: int = Field(default=1, ge=1, le=60)
    """Retry-After sent with 503 when the queue is full."""
    vocab_size: int | None = Field(default=None, ge=1)
    """Refuse token ids at or above this; a trainer that registers its own ``vocab_size`` overrides it."""
    max_request_bytes: int = Field(default=64 * 1024 * 1024, ge=1024)
    """Largest request body, plain or after gzip inflation (a group of 16 x 32k-token sequences with
    logprobs is about 16 MB of JSON)."""
    request_read_timeout_seconds: float = Field(default=10.0, gt=0, le=600)
    """A body not received in full within this is a 408 (a client that announced more than it sends)."""
    env_lease_seconds: float = Field(default=30.0, gt=0, le=3600)
    """An env that has not polled ``/status-env`` for this long stops taking a share of the weight
    (a killed env never says ``/disconnect-env``); its next poll brings it back."""
    trainer_poll_window_seconds: float = Field(default=10.0, gt=0, le=600)
    """The trainer counts as waiting while its empty ``/batch`` polls are at most this far apart."""
    stall_after_seconds: float = Field(default=300.0, gt=0)
    """A trainer that has waited this long with no env producing for it is a stall: logged with the
    numbers that decide it, counted in ``rlstack_batcher_stalls_total``, alerted on by the chart."""
    policies: list[Annotated[str, Field(pattern=POLICY_NAME)]] = Field(default_factory=lambda: [SERVED_MODEL_NAME], min_length=1)
    """The run's policies, one queue and one trainer each (JSON list). A group or trainer that names
    none is the first's, so Atropos clients, which never name one, use the first."""

    @field_validator("policies")
    @classmethod
    def _named_once(cls, value: list[str]) -> list[str]:
        if len(set(value)) < len(value):
            raise ValueError(f"each policy once; got {value}")
        return value
