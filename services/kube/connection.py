"""One way to reach the API server, for every service that needs one."""

from __future__ import annotations

from lightkube import AsyncClient, KubeConfig
from lightkube.config.models import Cluster, User


def connect(api_url: str | None = None, namespace: str | None = None) -> AsyncClient:
    """An async client: ``api_url`` when given (``kubectl proxy``, tests), else in-cluster or kubeconfig.

    Inside a pod, lightkube reads the mounted service-account token and the pod's namespace;
    outside, it reads ``$KUBECONFIG`` or ``~/.kube/config``.
    """
    if api_url:  # an explicit, empty user: lightkube's from_server() leaves none and then refuses to connect
        config = KubeConfig.from_one(cluster=Cluster(server=api_url), user=User(), namespace=namespace)
    else:
        config = KubeConfig.from_env()
    return AsyncClient(config, namespace=namespace, field_manager="rlstack")
