"""Sandbox pods: one pod per agent trial, labelled ``harbor-run=<run>``/``harbor-trial=<trial>``.

The manager runs inside an env server's pod. Its sandboxes name that pod as owner, so the
garbage collector removes them when the env server goes; the reaper removes finished ones and
any that outlive a TTL while it lives. Sandboxes may live in a namespace of their own (the
chart's ``sandboxes.namespace``, Pod Security ``restricted``): an owner reference cannot cross
namespaces (the garbage collector would take the owner for gone and delete the pod at once), so
there the owner is a label and the reaper also deletes the pods of env servers that are gone.
Every call here is one the chart's sandbox-manager Roles grant (create/get/list/watch/delete
pods) and nothing more: the chart tests replay this code against an API emulator and compare.
Each goes through ``ApiCalls``: counted, retried on 429 and 5xx with back-off, creates paced.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import re
from datetime import UTC, datetime
from typing import Literal

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.resources.core_v1 import Pod
from pydantic import BaseModel, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

from rlstack.common.trial_keys import agent_env  # noqa: F401 - where sandboxes find the proxy
from rlstack.episodes.sandboxes.api_calls import ApiCalls
from rlstack.episodes.sandboxes.pod_watch import PodGone

log = logging.getLogger(__name__)

LABEL_VALUE = r"^[A-Za-z0-9]([A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$"
FINISHED = ("Succeeded", "Failed")
LOCKED_DOWN = {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
ROOT_CAPABILITIES = ("CHOWN", "DAC_OVERRIDE", "FOWNER", "FSETID", "KILL", "SETGID", "SETUID", "NET_BIND_SERVICE")
"""What a task image that runs as root keeps (all on Pod Security baseline's list): enough for
``apt-get install`` and other users' files, nothing that reaches past the container. Such a pod
cannot be ``restricted`` (runAsNonRoot): its namespace must allow ``baseline``."""
OWNER_UID_LABEL = "rlstack.dev/owner-uid"
OWNER_NAME_ANNOTATION = "rlstack.dev/owner-name"


class SandboxGone(PodGone, RuntimeError):
    """The sandbox pod was deleted (by the reaper, a user or node loss) before it finished."""


class SandboxOwner(BaseModel):
    """The env server's own pod (downward API ``metadata.name``/``metadata.uid``)."""

    name: str
    uid: str


class SandboxSpec(BaseModel):
    """What one trial's sandbox runs; the run comes from the manager."""

    trial: str = Field(pattern=LABEL_VALUE)
    image: str = Field(min_length=1)
    command: list[str] = Field(min_length=1)
    env: dict[str, str] = Field(default_factory=dict)
    cpu: str = "1"
    memory: str = "2Gi"
    run_as_user: int = Field(default=1000, ge=1)
    deadline_seconds: int = Field(default=3600, ge=1)
    """Kubernetes fails the pod after this long (activeDeadlineSeconds)."""
    container_name: str = "agent"
    working_dir: str | None = None
    init_containers: list[dict] = Field(default_factory=list)
    """Run in order before the main container (a trial: workspace, then agent; the verifier is main)."""
    volumes: list[dict] = Field(default_factory=list)
    volume_mounts: list[dict] = Field(default_factory=list)
    """Of the main container."""
    image_pull_policy: str | None = None
    identity: tuple[int, int] | None = None
    """(uid, gid) the image runs as (a task's image, from the lock file); None: the env server's own
    (``SandboxPodSecurity.identity``). uid 0 gets the root profile (``root_context``)."""
    writable_root: bool = False
    """A task's image: the agent may change anything in it (``/etc``, installed packages)."""
    labels: dict[str, str] = Field(default_factory=dict)
    """Beside the manager's own (a warm pool's pod: its pool)."""


class SandboxPodSecurity(BaseSettings):
    """How every sandbox pod is locked down (``RLSTACK_SANDBOX_POD_*``; the chart sets them from
    ``sandboxes.pod``). Each trial's directories on the shared claim are made by the env server,
    so the sandbox runs as the env server's own user and group: fsGroup is not applied on
    hostPath or NFS-style volumes, and where it is, every pod would re-chown the whole claim."""

    model_config = SettingsConfigDict(env_prefix="RLSTACK_SANDBOX_POD_", extra="forbid")

    run_as_user: int | None = Field(default=None, ge=1)
    """Unset: this process's uid when it is not root, else the spec's ``run_as_user``."""
    run_as_group: int | None = Field(default=None, ge=0)
    """Unset: this process's gid when the uid is its own, else the uid."""
    fs_group: int | None = Field(default=None, ge=0)
    """Off by default (see above); set it only for volumes that honour it and are not shared."""
    read_only_root_filesystem: bool = True
    """The agent writes only /app, /tmp and /logs/agent (volumes), never the image."""
    runtime_class_name: str | None = None
    """A sandboxing runtime for untrusted code, e.g. ``gvisor`` (runsc) or ``kata``."""
    ephemeral_storage: str | None = "4Gi"
    """Limit (and request) of the node's disk one sandbox may use: logs, emptyDirs, writable layers."""
    empty_dir_size_limit: str | None = "2Gi"
    """``sizeLimit`` of every emptyDir without one (/app, /tmp)."""
    level: Literal["restricted", "baseline"] = "restricted"
    """The Pod Security level sandbox pods must pass (the chart's ``sandboxes.podSecurity``):
    ``restricted`` refuses a task whose image runs as root; ``baseline`` runs it as root with
    ``ROOT_CAPABILITIES`` only."""
    cpu_request: str | None = None
    """The CPU a sandbox asks the scheduler for; its limit stays the task's ``cpus``. Unset: the
    task's ``cpus`` (Guaranteed). A small node (the chart's values-cpu.yaml: 2 cores) cannot
    place one pod per concurrent trial at a whole core each, and mostly-idle agents do not need it."""

    memory_request: str | None = None
    """The memory a sandbox asks the scheduler for; its limit stays the task's ``memory_mb``. Unset:
    the task's (2 GiB when it sets none). A small node cannot book 2 GiB for each of 16 idle agents."""

    def identity(self, spec_user: int) -> tuple[int, int]:
        own = os.getuid()
        user = self.run_as_user or (own if own != 0 else spec_user)
        group = self.run_as_group if self.run_as_group is not None else (os.getgid() if user == own else user)
        return user, group


class SandboxPlacement(BaseSettings):
    """Where the env server itself runs (``RLSTACK_SANDBOX_*``; the chart sets it from the downward API)."""

    model_config = SettingsConfigDict(env_prefix="RLSTACK_SANDBOX_", extra="ignore")

    owner_namespace: str | None = None
    """The env server's own namespace. Sandboxes elsewhere carry their owner as a label, not an
    owner reference, which cannot cross namespaces."""


class SandboxOutcome(BaseModel):
    name: str
    phase: str
    exit_code: int | None = None
    reason: str | None = None
    container: str | None = None
    """The container that ended it: an init container that failed, else the main one."""


class SandboxManager:
    def __init__(self, client: AsyncClient, namespace: str, run: str, *, run_label: str = "harbor-run",
                 trial_label: str = "harbor-trial", owner: SandboxOwner | None = None,
                 ttl_seconds: float = 7200, finished_grace_seconds: float = 300,
                 pod_security: SandboxPodSecurity | None = None, placement: SandboxPlacement | None = None,
                 api_calls: ApiCalls | None = None) -> None:
        if not re.match(LABEL_VALUE, run):
            raise ValueError(f"run {run!r} is not a valid label value")
        self.client, self.namespace, self.run = client, namespace, run
        self.pod_security = pod_security if pod_security is not None else SandboxPodSecurity()
        """Given, or read from ``RLSTACK_SANDBOX_POD_*`` (the chart's ``sandboxes.pod``)."""
        self.run_label, self.trial_label, self.owner = run_label, trial_label, owner
        self.owner_namespace = (placement if placement is not None else SandboxPlacement()).owner_namespace
        self.cross_namespace = owner is not None and self.owner_namespace not in (None, namespace)
        """Sandboxes in another namespace than their env server: owned through a label."""
        self.ttl_seconds, self.finished_grace_seconds = ttl_seconds, finished_grace_seconds
        self.api = api_calls or ApiCalls()
        """Every request below goes through it: counted, retried on 429/5xx, creates paced."""

    def pod_name(self, trial: str) -> str:
        """Deterministic, so a retried launch finds its pod instead of starting a second one."""
        base = re.sub(r"[^a-z0-9-]+", "-", f"sbx-{self.run}-{trial}".lower()).strip("-")
        if len(base) <= 63 and base == f"sbx-{self.run}-{trial}":
            return base
        digest = hashlib.sha256(f"{self.run}/{trial}".encode()).hexdigest()[:10]
        return f"{base[:52].rstrip('-')}-{digest}"

    def manifest(self, spec: SandboxSpec) -> dict:
        meta: dict = {"name": self.pod_name(spec.trial), "namespace": self.namespace,
                      "labels": {**spec.labels, self.run_label: self.run, self.trial_label: spec.trial,
                                 "app.kubernetes.io/component": "sandbox", "app.kubernetes.io/managed-by": "rlstack"}}
        if self.cross_namespace:
            meta["labels"][OWNER_UID_LABEL] = self.owner.uid
            # No controller can own it here: tell the cluster-autoscaler it may evict it (a trial is retried).
            meta["annotations"] = {OWNER_NAME_ANNOTATION: self.owner.name, "cluster-autoscaler.kubernetes.io/safe-to-evict": "true"}
        elif self.owner is not None:
            # controller: true, or drains refuse the pod and the cluster-autoscaler never empties its node.
            # No blockOwnerDeletion: setting it needs update on the owner's finalizers, which we do not grant.
            meta["ownerReferences"] = [{"apiVersion": "v1", "kind": "Pod", "name": self.owner.name, "uid": self.owner.uid,
                                        "controller": True}]
        sec = self.pod_security
        user, group = spec.identity or sec.identity(spec.run_as_user)
        pod_security = {"runAsNonRoot": user != 0, "runAsUser": user, "runAsGroup": group,
                        "seccompProfile": {"type": "RuntimeDefault"}}
        if sec.fs_group is not None:
            pod_security["fsGroup"] = sec.fs_group
        locked = {**LOCKED_DOWN, "readOnlyRootFilesystem": sec.read_only_root_filesystem and not spec.writable_root}
        if user == 0:
            locked["capabilities"] = {"drop": ["ALL"], "add": list(ROOT_CAPABILITIES)}
        pull = {"imagePullPolicy": spec.image_pull_policy} if spec.image_pull_policy else {}
        volumes = [{**v, "emptyDir": {"sizeLimit": sec.empty_dir_size_limit, **v["emptyDir"]}}
                   if "emptyDir" in v and sec.empty_dir_size_limit else v for v in spec.volumes]
        return {
            "apiVersion": "v1", "kind": "Pod", "metadata": meta,
            "spec": {
                "restartPolicy": "Never",
                "activeDeadlineSeconds": spec.deadline_seconds,
                "automountServiceAccountToken": False,  # an agent must not reach the API server
                "enableServiceLinks": False,
                **({"runtimeClassName": sec.runtime_class_name} if sec.runtime_class_name else {}),
                "securityContext": pod_security,
                "containers": [{
                    "name": spec.container_name, "image": spec.image, **pull, "command": spec.command,
                    "env": [{"name": k, "value": v} for k, v in sorted(spec.env.items())],
                    "resources": self.resources(spec),
                    "securityContext": locked,
                    **({"workingDir": spec.working_dir} if spec.working_dir else {}),
                    **({"volumeMounts": spec.volume_mounts} if spec.volume_mounts else {}),
                }],
                **({"initContainers": [{"resources": self.resources(spec), "securityContext": locked, **c}
                                       for c in spec.init_containers]} if spec.init_containers else {}),
                **({"volumes": volumes} if volumes else {}),
            },
        }

    def resources(self, spec: SandboxSpec) -> dict:
        sized = {"cpu": spec.cpu, "memory": spec.memory}
        if self.pod_security.ephemeral_storage:
            sized["ephemeral-storage"] = self.pod_security.ephemeral_storage
        requests = dict(sized)
        if self.pod_security.cpu_request:
            requests["cpu"] = self.pod_security.cpu_request
        if self.pod_security.memory_request:
            requests["memory"] = self.pod_security.memory_request
        return {"requests": requests, "limits": dict(sized)}

    async def launch(self, spec: SandboxSpec) -> str:
        pod = Pod.from_dict(self.manifest(spec))
        try:
            await self.api.call("create", lambda: self.client.create(pod, namespace=self.namespace))
            log.info("sandbox %s created for trial %s", pod.metadata.name, spec.trial)
        except ApiError as exc:
            if exc.status.code != 409:  # 409: an earlier attempt landed (its answer lost), or a retried launch
                raise
            existing = await self.api.call("get", lambda: self.client.get(Pod, pod.metadata.name, namespace=self.namespace))
            if (existing.metadata.labels or {}).get(self.trial_label) != spec.trial:
                raise
            log.info("sandbox %s already exists; reusing it", pod.metadata.name)
        return pod.metadata.name

    async def wait(self, name: str, timeout: float | None = None) -> SandboxOutcome:
        """Until the pod has Succeeded or Failed; :class:`SandboxGone` if it is deleted first."""
        async with asyncio.timeout(timeout):
            pod = await self._get(name)
            if pod is None:
                raise SandboxGone(name)
            if pod.status and pod.status.phase in FINISHED:
                return outcome(pod)
            async for kind, seen in self.client.watch(Pod, namespace=self.namespace, fields={"metadata.name": name},
                                                       resource_version=pod.metadata.resourceVersion):
                if kind == "DELETED":
                    raise SandboxGone(name)
                if seen.status and seen.status.phase in FINISHED:
                    return outcome(seen)
        raise SandboxGone(name)  # the watch ended without an answer

    async def logs(self, name: str, tail_lines: int | None = None) -> str:
        lines = [line async for line in self.client.log(name, namespace=self.namespace, tail_lines=tail_lines)]
        return "".join(lines)

    async def delete(self, name: str) -> bool:
        try:
            await self.api.call("delete", lambda: self.client.delete(Pod, name, namespace=self.namespace))
            return True
        except ApiError as exc:
            if exc.status.code == 404:
                return False
            raise

    async def list(self) -> list[Pod]:
        async def listed() -> list[Pod]:
            return [p async for p in self.client.list(Pod, namespace=self.namespace, labels={self.run_label: self.run})]

        pods = await self.api.call("list", listed)
        if self.owner is None:
            return pods
        return [p for p in pods if owner_uid(p) == self.owner.uid]

    async def reap(self, now: datetime | None = None) -> list[str]:
        """Delete this manager's sandboxes that finished a grace period ago or outlived the TTL."""
        now = now or datetime.now(UTC)
        reaped = []
        for pod in await self.list():
            age = (now - pod.metadata.creationTimestamp).total_seconds()
            ended = finished_at(pod)
            done_for = (now - ended).total_seconds() if ended else None
            if age > self.ttl_seconds or (done_for is not None and done_for > self.finished_grace_seconds):
                if await self.delete(pod.metadata.name):
                    reaped.append(pod.metadata.name)
        if self.cross_namespace:
            reaped += await self.reap_orphans()
        if reaped:
            log.info("reaped %d sandbox pod(s): %s", len(reaped), ", ".join(reaped[:5]))
        return reaped

    async def reap_orphans(self) -> list[str]:
        """In a sandbox namespace, the garbage collector's part: delete the run's sandboxes whose env
        server pod is gone (deleted, or replaced under the same name)."""
        owners: dict[str, bool] = {}
        reaped = []
        for pod in [p async for p in self.client.list(Pod, namespace=self.namespace, labels={self.run_label: self.run})]:
            uid = (pod.metadata.labels or {}).get(OWNER_UID_LABEL)
            name = (pod.metadata.annotations or {}).get(OWNER_NAME_ANNOTATION)
            if not uid or not name or uid == self.owner.uid:
                continue
            if uid not in owners:
                owner = await self._get(name, self.owner_namespace)
                owners[uid] = owner is not None and owner.metadata.uid == uid
            if not owners[uid] and await self.delete(pod.metadata.name):
                reaped.append(pod.metadata.name)
        return reaped

    async def reap_forever(self, interval_seconds: float) -> None:
        while True:
            try:
                await self.reap()
            except Exception:  # the API server may be briefly away; try again next round
                log.exception("sandbox reaping failed")
            await asyncio.sleep(interval_seconds)

    async def _get(self, name: str, namespace: str | None = None) -> Pod | None:
        try:
            return await self.client.get(Pod, name, namespace=namespace or self.namespace)
        except ApiError as exc:
            if exc.status.code == 404:
                return None
            raise


def owner_uid(pod: Pod) -> str | None:
    """The env server pod a sandbox belongs to: its owner reference, or in a sandbox namespace its label."""
    for ref in pod.metadata.ownerReferences or []:
        if ref.kind == "Pod":
            return ref.uid
    return (pod.metadata.labels or {}).get(OWNER_UID_LABEL)


def outcome(pod: Pod) -> SandboxOutcome:
    container, terminated = _failed_init(pod) or (None, _terminated(pod))
    if terminated is not None and container is None:
        container = next((s.name for s in (pod.status.containerStatuses or []) if s.state and s.state.terminated), None)
    return SandboxOutcome(name=pod.metadata.name, phase=pod.status.phase if pod.status else "Unknown",
                          exit_code=terminated.exitCode if terminated else None, container=container,
                          reason=(terminated.reason if terminated else None) or (pod.status.reason if pod.status else None))


def _failed_init(pod: Pod):  # noqa: ANN202 - (name, ContainerStateTerminated) | None
    """The init container that ended the pod (non-zero exit): the main container never ran."""
    for status in (pod.status.initContainerStatuses if pod.status else None) or []:
        if status.state and status.state.terminated and status.state.terminated.exitCode != 0:
            return status.name, status.state.terminated
    return None


def finished_at(pod: Pod) -> datetime | None:
    """When a finished pod ended; its creation time when the kubelet did not say."""
    if not (pod.status and pod.status.phase in FINISHED):
        return None
    terminated = _terminated(pod)
    return (terminated.finishedAt if terminated else None) or pod.metadata.creationTimestamp


def _terminated(pod: Pod):  # noqa: ANN202
    for status in (pod.status.containerStatuses if pod.status else None) or []:
        if status.state and status.state.terminated:
            return status.state.terminated
    return None


async def run_once(manager: SandboxManager, spec: SandboxSpec, timeout: float, keep: bool = False) -> tuple[SandboxOutcome, str]:
    """Launch, wait, read the logs, delete (unless ``keep``): one trial from start to finish."""
    name = await manager.launch(spec)
    try:
        result = await manager.wait(name, timeout)
        return result, await manager.logs(name)
    finally:
        if not keep:
            await manager.delete(name)
