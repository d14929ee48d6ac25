"""``rlstack doctor``'s restart checks: a service that keeps dying is named, with how it died.

Locally ``rlstack up`` writes ``<run>/restarts.json``; in a cluster the kubelet counts restarts
in each pod's container statuses. Either way a service still dying after several restarts in a
row is in a restart loop, and restarting it again will not help: its log says why.
"""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import TYPE_CHECKING

from rlstack.ops.checks import Check

if TYPE_CHECKING:
    from lightkube.models.core_v1 import Pod

LOOP_AFTER = 3
"""Deaths in a row from which a service is in a restart loop (the launcher's default allows 5)."""


def check_local_restarts(run_dir: Path | None) -> Check | None:
    """The run's ``restarts.json`` (``runs/latest`` by default); None when there is no run to look at."""
    if run_dir is None or not run_dir.is_dir():
        return None
    path = run_dir / "restarts.json"
    return judge_local_restarts(json.loads(path.read_text()) if path.exists() else {}, run_dir)


def judge_local_restarts(restarts: dict, run_dir: Path) -> Check:
    looping = {name: r for name, r in restarts.items() if int(r.get("in_a_row", 0)) >= LOOP_AFTER}
    detail = ", ".join(f"{name} restarted {r['restarts']}x (exits {r['exit_codes'][-3:]})" for name, r in restarts.items())
    if looping:
        names = sorted(looping)
        return Check("service restarts", False, detail,
                     f"{names} in a restart loop: read {run_dir}/logs/{names[0]}.log, above its last "
                     "'rlstack up: restart' line")
    return Check("service restarts", True, detail or f"none in {run_dir.name}")


def check_pod_restarts(kube_api_url: str | None, namespace: str | None) -> Check:
    from lightkube.resources.core_v1 import Pod as PodResource

    from rlstack.kube.connection import connect

    async def listing() -> list[Pod]:
        client = connect(kube_api_url, namespace)
        try:
            return [p async for p in client.list(PodResource, namespace=namespace or client.namespace,
                                                 labels={"app.kubernetes.io/part-of": "rlstack"})]
        finally:
            await client.close()

    try:
        pods = asyncio.run(listing())
    except Exception as exc:  # noqa: BLE001 - no kubeconfig, refused, forbidden
        return Check("pod restarts", False, f"{type(exc).__name__}: {str(exc)[:160]}", "cannot list pods: kubeconfig, API server URL or RBAC")
    return judge_pod_restarts(pods)


def judge_pod_restarts(pods: list[Pod]) -> Check:
    looping, restarted = [], []
    for pod in pods:
        for status in (pod.status.containerStatuses or []) if pod.status else []:
            if not status.restartCount:
                continue
            waiting = status.state.waiting.reason if status.state and status.state.waiting else None
            last = status.lastState.terminated if status.lastState else None
            how = f"exit {last.exitCode} ({last.reason})" if last else "no last state"
            line = f"{pod.metadata.name}/{status.name} restarted {status.restartCount}x, last {how}"
            restarted.append(line)
            if waiting == "CrashLoopBackOff" or status.restartCount >= LOOP_AFTER and not status.ready:
                looping.append(line)
    detail = f"{len(pods)} pod(s); " + ("; ".join(restarted[:5]) if restarted else "no restarts")
    if looping:
        return Check("pod restarts", False, detail,
                     f"in a restart loop: {looping[0]}: kubectl logs --previous {looping[0].split('/')[0]}")
    return Check("pod restarts", True, detail)
