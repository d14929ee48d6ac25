"""Sandbox backend settings, chosen by ``type``: ``local`` (bubblewrap) or ``kubernetes`` (a pod per trial)."""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from rlstack.episodes.images.config import ImageSettings


def default_hidden_paths() -> list[Path]:
    """What no agent reads unless asked: home directories (keys, tokens, shell history), and in the
    checkout the runs (other trials, checkpoints), the generated datasets and the example tasks'
    tests and solutions."""
    from rlstack.episodes.sandboxes.bwrap import runtime_paths

    checkout = runtime_paths()[1]
    tasks = checkout / "examples" / "tasks"
    return [Path("/home"), Path("/root"), Path.home(), checkout / "runs", checkout / "data",
            *sorted(tasks.glob("*/tests")), *sorted(tasks.glob("*/solution"))]


def _default_bundle() -> Path:
    from rlstack.episodes.sandboxes.bwrap import runtime_paths

    return runtime_paths()[1] / ".cache" / "agent-bundle"


class LocalSandboxConfig(BaseModel):
    """Trials as bubblewrap-sandboxed child processes on this host."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["local"] = "local"
    environment: Literal["image", "host"] = "image"
    """``image``: each trial in its task's image (from the lock file, or built; unpacked once per
    digest, layered per trial); ``host``: the host's tools, an explicit choice said loudly per run."""
    image_lock: Path | None = None
    """The lock file (task -> image by digest) from ``rlstack tasks build``; unset: the dataset's
    ``images.lock.json`` when there is one."""
    build_missing: bool = True
    """Build a task's image when the lock file has none for it (podman/buildah on this host)."""
    images: ImageSettings = Field(default_factory=ImageSettings)
    """How task images are built and where they are unpacked (``rlstack.episodes.images.config.ImageSettings``)."""
    bundle_dir: Path = Field(default_factory=_default_bundle)
    """The agent bundle (``make setup-agent-bundle``), bound read-only at /opt/rlstack in task images."""
    limits: Literal["enforce", "record"] = "enforce"
    """``[environment]`` cpus/memory_mb in task images: ``enforce`` (a cgroup per phase; a host that
    cannot make one fails the trial as infra_error) or ``record`` (noted in result.json only)."""
    verifier_internet: bool = False
    """Let a verifier whose task sets ``allow_internet`` reach the network (images only); off, no verifier does."""
    work_dir: Path | None = None
    """Parent of the per-trial workspaces (/app); unset: a directory under the system temp dir."""
    bwrap: str = "bwrap"
    """The bubblewrap binary (Debian package ``bubblewrap``)."""
    kill_grace_sec: float = Field(default=2.0, ge=0, le=60)
    """Between SIGTERM and SIGKILL when a phase times out."""
    keep_workspaces: bool = False
    """Leave each trial's workspace on disk after the trial (debugging)."""
    hide_paths: list[Path] = Field(default_factory=default_hidden_paths)
    """Host paths covered by an empty tmpfs (besides the trial's dataset and other trials, always
    hidden); default ``default_hidden_paths()``. The agent's runtime stays visible inside them."""
    network: Literal["proxy", "host"] = "proxy"
    """``proxy``: the sandbox has its own network namespace and reaches only the proxy named by
    the agent's ``*_BASE_URL`` (``netbridge``); ``host``: the host's network, every loopback service."""
    path: str = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
    """PATH inside the sandbox unless the agent's environment sets its own."""


class WarmPoolConfig(BaseModel):
    """Pods of the upcoming tasks' images started ahead of their trials (``sandboxes/pool.py``)."""

    model_config = ConfigDict(extra="forbid")

    max_total: int = Field(default=0, ge=0)
    """Warm pods at most, over every image; 0: no pool, every trial creates its pod (cold)."""
    max_per_image: int = Field(default=8, ge=1)
    """Warm pods at most of one task image (one group of 8 trials of one task at once, by default)."""
    idle_seconds: float = Field(default=600, gt=0)
    """A warm pod nobody claims exits after this long; the pool hands none out in its last
    ``claim_margin_seconds``, so a claim never races its exit."""
    claim_margin_seconds: float = Field(default=60, ge=0)
    trim_after_seconds: float = Field(default=120, ge=0)
    """A warm pod beyond what the next groups need is deleted after idling this long."""
    max_starting: int = Field(default=8, ge=1)
    """Warm pods starting at once, at most: the pool fills and refills in the background, and on the
    second real node a refill of 64 pods started beside a burst's 64 trials put their starts at
    6 s p50 instead of 1.3 s (docs/kubernetes.md#warm-pools)."""
    ready_timeout_seconds: float = Field(default=300, gt=0)
    """A warm pod not running this long after its creation (no room on a node, a pod sandbox that
    cannot be made, an image still pulling) is deleted, counted as lost, and replaced."""
    trial_seconds: int = Field(default=3600, ge=1)
    """The longest trial a warm pod is given after its claim (its activeDeadlineSeconds is
    ``idle_seconds`` + this)."""

    @property
    def enabled(self) -> bool:
        return self.max_total > 0


class KubernetesSandboxConfig(BaseModel):
    model_config = ConfigDict(extra="forbid")

    type: Literal["kubernetes"] = "kubernetes"
    environment: Literal["image", "host"] = "image"
    """``image``: each trial pod runs its task's image (from the lock file), the agent bundle copied
    in by an init container; ``host``: every phase in ``image`` (the chart's trainer image), for
    tasks that declare no image."""
    image: str | None = Field(default=None, min_length=1)
    """``host``: runs every phase; needs bash, python3 with rlstack, and the agent (the chart's env image)."""
    bundle_image: str | None = Field(default=None, min_length=1)
    """``image``: the agent bundle's image (``python -m rlstack.episodes.bundle image``)."""
    bundle_source: Literal["copy", "volume"] = "copy"
    """``copy``: an init container copies the bundle's core and the trial's agent into an emptyDir
    (any cluster); ``volume``: an image volume mounts it as it is (Kubernetes' ImageVolume feature:
    1.33+ with the gate, containerd 2.1+ or CRI-O 1.31+), no copy per pod."""
    image_lock: Path | None = None
    """``image``: the lock file ``rlstack tasks build`` wrote; unset: the dataset's ``images.lock.json``."""
    image_pull_policy: Literal["IfNotPresent", "Always", "Never"] = "IfNotPresent"
    claim_name: str = Field(min_length=1)
    """The RWX PersistentVolumeClaim that holds the trials directory (the chart's shared storage)."""
    trials_dir: Path
    """Where this env server sees the trials directory (its own mount of the claim)."""
    trials_subpath: str
    """The same directory as a path inside the claim (``trials`` when the claim is mounted at /data
    and the trials live in /data/trials)."""
    python: str = "python"
    """``host``: the Python with rlstack in ``image``."""
    kill_grace_sec: float = Field(default=2.0, ge=0, le=60)
    deadline_slack_sec: int = Field(default=300, ge=0)
    """activeDeadlineSeconds = agent timeout + verifier timeout + this (image pull, scheduling)."""
    run_as_user: int = Field(default=1000, ge=1)
    keep_pods: bool = False
    """Leave finished pods for the reaper instead of deleting them at once (debugging)."""
    pool: WarmPoolConfig = Field(default_factory=WarmPoolConfig)
    """``image``: warm pods per task image, claimed by trials; off unless ``pool.max_total`` > 0
    (``host`` has none: its pods are cheap to start, one image the node already holds)."""

    @model_validator(mode="after")
    def _images_named(self) -> KubernetesSandboxConfig:
        if self.environment == "host" and self.image is None:
            raise ValueError("environment host needs image (the image every phase runs in)")
        if self.environment == "image" and self.bundle_image is None:
            raise ValueError("environment image needs bundle_image (python -m rlstack.episodes.bundle image builds it)")
        return self


SandboxConfig = LocalSandboxConfig | KubernetesSandboxConfig
