"""The release's auth Secret, made once if it is absent: the chart's pre-install/pre-upgrade hook.

Why a hook rather than a templated Secret read back with ``lookup``: GitOps tools (Argo CD, and
any ``helm template | kubectl apply``) render without a cluster, so ``lookup`` returns nothing and
every sync would write fresh random tokens, cutting off every service and every trial key already
handed out. A Secret this hook creates is no part of the release's manifest: no render can
change it, upgrades and syncs leave it alone (the hook finds it and exits), and an uninstall keeps
it, so keys already minted stay valid. Argo CD runs Helm hooks as PreSync hooks, so the same Job
covers it. A Secret that exists but lacks a key is an error to fix by hand, never rewritten.

Usage (inside the hook's pod, namespace from its service account):
``python -m rlstack.kube.auth_secret --name rl-rlstack-auth --key service-token:32 --key trial-key-secret:64``
"""

from __future__ import annotations

import argparse
import asyncio
import secrets
import sys

from lightkube import AsyncClient
from lightkube.core.exceptions import ApiError
from lightkube.models.meta_v1 import ObjectMeta
from lightkube.resources.core_v1 import Secret

from rlstack.kube.connection import connect


class SecretIncomplete(RuntimeError):
    """The Secret exists but lacks keys the services read; it is not ours to rewrite."""


async def ensure_secret(client: AsyncClient, namespace: str, name: str, keys: dict[str, int],
                        labels: dict[str, str] | None = None) -> str:
    """``created`` or ``kept``. ``keys`` maps each key to the random bytes its value holds (hex-encoded)."""
    existing = await _get(client, namespace, name)
    if existing is None:
        secret = Secret(metadata=ObjectMeta(name=name, namespace=namespace, labels=labels or {}), type="Opaque",
                        stringData={key: secrets.token_hex(size) for key, size in keys.items()})
        try:
            await client.create(secret, namespace=namespace)
            return "created"
        except ApiError as exc:
            if exc.status.code != 409:  # another hook run made it first: check that one instead
                raise
        existing = await _get(client, namespace, name)
        if existing is None:
            raise RuntimeError(f"Secret {namespace}/{name}: create said it exists, get says it does not")
    missing = sorted(set(keys) - set(existing.data or {}))
    if missing:
        raise SecretIncomplete(f"Secret {namespace}/{name} exists without the key(s) {missing}: add them "
                               f"(kubectl -n {namespace} edit secret {name}) or delete the Secret to have it made again")
    return "kept"


async def _get(client: AsyncClient, namespace: str, name: str) -> Secret | None:
    try:
        return await client.get(Secret, name, namespace=namespace)
    except ApiError as exc:
        if exc.status.code == 404:
            return None
        raise


def _key(text: str) -> tuple[str, int]:
    key, _, size = text.partition(":")
    if not key or not size.isdigit() or not 16 <= int(size) <= 256:
        raise argparse.ArgumentTypeError(f"--key {text!r}: want NAME:BYTES with 16 <= BYTES <= 256")
    return key, int(size)


def _label(text: str) -> tuple[str, str]:
    key, sep, value = text.partition("=")
    if not sep or not key:
        raise argparse.ArgumentTypeError(f"--label {text!r}: want KEY=VALUE")
    return key, value


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlstack.kube.auth_secret", description=__doc__.splitlines()[0])
    parser.add_argument("--name", required=True)
    parser.add_argument("--namespace", help="default: the pod's own (in-cluster) or the kubeconfig's")
    parser.add_argument("--key", type=_key, action="append", required=True, help="NAME:BYTES, e.g. service-token:32")
    parser.add_argument("--label", type=_label, action="append", default=[], help="KEY=VALUE on a created Secret")
    parser.add_argument("--kube-api-url", help="API server URL (kubectl proxy, tests); default: in-cluster or kubeconfig")
    args = parser.parse_args(argv)

    async def run() -> str:
        client = connect(args.kube_api_url, args.namespace)
        try:
            return await ensure_secret(client, args.namespace or client.namespace, args.name, dict(args.key), dict(args.label))
        finally:
            await client.close()

    try:
        what = asyncio.run(run())
    except SecretIncomplete as exc:
        print(exc, file=sys.stderr)
        return 2
    print(f"Secret {args.name}: {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
