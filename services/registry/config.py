"""Registry settings (env prefix ``RLSTACK_REGISTRY_``, or the same fields as flags)."""

from __future__ import annotations

from pydantic import Field, SecretStr
from pydantic_settings import SettingsConfigDict

from rlstack.common.settings import ServiceSettings


class RegistrySettings(ServiceSettings):
    model_config = SettingsConfigDict(env_prefix="RLSTACK_REGISTRY_", cli_prog_name="rlstack.registry")

    port: int = Field(default=8100, ge=0, le=65535)
    """TCP port to listen on."""
    default_ttl_seconds: float = Field(default=15.0, gt=0, le=3600)
    """An endpoint that sends no heartbeat for this long is removed."""
    probe_interval_seconds: float = Field(default=2.0, gt=0, le=300)
    """How often each endpoint's /v1/models is checked."""
    probe_timeout_seconds: float = Field(default=2.0, gt=0, le=60)
    """Time allowed for one probe."""
    probe_failure_threshold: int = Field(default=3, ge=1, le=100)
    """Timed-out or 5xx probes in a row that take a ready endpoint out of routing (a refused
    connection or a missing model takes it out at once), like a readinessProbe's failureThreshold."""
    probe_api_key: SecretStr | None = None
    """Bearer key the replicas expect (vLLM --api-key)."""
    max_endpoints: int = Field(default=256, ge=1, le=100_000)
    """Most endpoints held at once; a new one past it gets 429 (each is probed every interval)."""
    max_watch_seconds: float = Field(default=60.0, gt=0, le=600)
    """Longest a watch request is held open."""
    kube_watch_pods: bool = False
    """Watch inference pods and drop a replica as soon as its pod is deleted or ends (in a cluster)."""
    kube_api_url: str | None = None
    """API server to use instead of the in-cluster or kubeconfig one (``kubectl proxy``, tests)."""
    kube_namespace: str | None = None
    """Namespace of the inference pods; unset = the registry pod's own."""
    kube_replica_selector: dict[str, str] = Field(default_factory=lambda: {"app.kubernetes.io/component": "inference"})
    """Labels that select inference pods (JSON in the environment)."""
