"""Where trials run: one ``Sandbox`` protocol and its backends (``local``: bubblewrap on this host,
in each task's image or on the host's tools; ``kubernetes``: a pod per trial)."""

from rlstack.episodes.sandboxes.base import (
    Sandbox,
    SandboxError,
    SandboxJob,
    SandboxOutcome,
    SandboxUnavailable,
)
from rlstack.episodes.sandboxes.config import (
    KubernetesSandboxConfig,
    LocalSandboxConfig,
    SandboxConfig,
    WarmPoolConfig,
)


def build_sandbox(config: SandboxConfig, manager=None, registry=None) -> Sandbox:  # noqa: ANN001 - a kube SandboxManager, a CollectorRegistry
    """The backend named by ``config.type``; ``kubernetes`` also needs the env server's ``SandboxManager``
    (and puts its series, the warm pool's and the API calls', on ``registry``)."""
    if config.type == "local" and config.environment == "image":
        from rlstack.episodes.sandboxes.image import ImageSandbox

        return ImageSandbox(config)
    if config.type == "local":
        from rlstack.episodes.sandboxes.local import LocalSandbox

        return LocalSandbox(config)
    if config.type == "kubernetes":
        from rlstack.episodes.sandboxes.kubernetes import KubernetesSandbox

        if manager is None:
            raise ValueError("the kubernetes sandbox needs a SandboxManager")
        return KubernetesSandbox(manager, config, registry)
    raise ValueError(f"unknown sandbox type {config.type!r}")


__all__ = ["KubernetesSandboxConfig", "LocalSandboxConfig", "WarmPoolConfig", "Sandbox", "SandboxConfig", "SandboxError", "SandboxJob", "SandboxOutcome",
           "SandboxUnavailable", "build_sandbox"]
