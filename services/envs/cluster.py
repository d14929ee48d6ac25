"""The env server's handle on the cluster: a Kubernetes client and the manager of this server's
sandbox pods, built from its settings. Used by the kubernetes trial backend and the reaper;
lightkube is imported only when one of them is configured."""

from __future__ import annotations

from typing import TYPE_CHECKING

from rlstack.envs.config import EnvSettings

if TYPE_CHECKING:
    from lightkube import AsyncClient

    from rlstack.episodes.sandboxes.pods import SandboxManager


def sandbox_manager(settings: EnvSettings) -> tuple[AsyncClient, SandboxManager]:
    from rlstack.episodes.sandboxes.pods import SandboxManager, SandboxOwner
    from rlstack.kube.connection import connect

    client = connect(settings.kube.api_url, settings.kube.namespace)
    owner = SandboxOwner(name=settings.kube.pod_name, uid=settings.kube.pod_uid) if settings.kube.pod_name and settings.kube.pod_uid else None
    manager = SandboxManager(client, settings.kube.namespace or client.namespace, settings.run_id, owner=owner,
                             ttl_seconds=settings.sandbox.ttl_seconds, finished_grace_seconds=settings.sandbox.grace_seconds)
    return client, manager
