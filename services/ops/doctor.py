"""``rlstack doctor``: the health chain, local or in a cluster, each failure with a likely cause.

Order matters: proxy alive -> a real completion through the proxy -> replicas registered and
ready (with weight versions) -> batcher queue and step -> GPUs (where nvidia-smi exists) ->
sandbox pods of a run (through the Kubernetes API, with the kubeconfig or in-cluster identity). A check that fails says what that symptom
usually means and what to do, so the first red line is where to look.

A run of several policies (``--policies``) gets the completion, replica and batcher checks once
per policy, each line naming its policy, and one more line for replicas registered under a name
no policy declares (the proxy routes nothing to them).
"""

from __future__ import annotations

import asyncio
import os
import re
import secrets
import shutil
import subprocess
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING

import httpx
from pydantic import BaseModel, Field, HttpUrl, field_validator

from rlstack.common.auth import bearer
from rlstack.common.batcher_client import BatcherClient, BatcherRefused
from rlstack.common.contracts.atropos import Status
from rlstack.common.contracts.progress import ProgressReport
from rlstack.common.contracts.registry import Endpoint, EndpointList
from rlstack.common.names import POLICY_NAME, SERVED_MODEL_NAME
from rlstack.common.registry_client import RegistryClient
from rlstack.ops.checks import Check
from rlstack.ops.restart_loops import check_local_restarts, check_pod_restarts

if TYPE_CHECKING:
    from lightkube.resources.core_v1 import Pod

BATCHER_TOKEN_ENV = "RLSTACK_BATCHER_TOKEN"
"""Where doctor finds the batcher's token when none is given (the chart's helm test sets it)."""


class DoctorConfig(BaseModel):
    proxy_url: HttpUrl = HttpUrl("http://127.0.0.1:4000")
    registry_url: HttpUrl = HttpUrl("http://127.0.0.1:8100")
    batcher_url: HttpUrl = HttpUrl("http://127.0.0.1:8000")
    served_model_name: str = SERVED_MODEL_NAME
    policies: list[str] | None = None
    """The run's policies (each its replicas' served name), the batcher's first first; None: one,
    ``served_model_name``, checked as it always was (lines named without a policy)."""
    trial_key: str | None = None
    batcher_token: str | None = Field(default_factory=lambda: os.environ.get(BATCHER_TOKEN_ENV) or None)
    """The batcher's bearer token (it checks reads too); the registry's comes from $RLSTACK_REGISTRY_TOKEN."""
    run_prefix: str | None = None
    """Check the sandbox pods labelled harbor-run=<prefix> (needs cluster access)."""
    namespace: str | None = None
    kube_api_url: str | None = None
    """API server URL (e.g. ``kubectl proxy``); unset = in-cluster or kubeconfig."""
    timeout_s: float = 30.0
    stuck_after_s: float = 600.0
    leaked_after_s: float = 900.0
    """A finished sandbox still there this long after it ended was not reaped (the reaper's grace is 300 s)."""
    run_dir: Path | None = None
    """A local run's directory (``rlstack up``): its ``restarts.json`` names a service in a restart loop."""
    probe_image: str | None = None
    """Check that NetworkPolicies are enforced: a pod labelled as a sandbox, in this image (python3), tries
    vLLM's port on a registered replica; it must not get through (needs create/watch/delete on pods)."""

    @field_validator("policies")
    @classmethod
    def _named_once(cls, value: list[str] | None) -> list[str] | None:
        if value is None:
            return None
        if not value:
            raise ValueError("at least one policy")
        if bad := [name for name in value if not re.fullmatch(POLICY_NAME, name)]:
            raise ValueError(f"{bad} are not policy names (a served name: letters, digits, '.', '_', '-')")
        if len(set(value)) < len(value):
            raise ValueError(f"each policy once; got {value}")
        return value

    @property
    def policy_names(self) -> list[str]:
        return self.policies if self.policies is not None else [self.served_model_name]

    def named(self, check: str, policy: str) -> str:
        """A check's line name: with its policy when the run declares its policies."""
        return check if self.policies is None else f"{check} ({policy})"




def _url(base: HttpUrl, path: str) -> str:
    return str(base).rstrip("/") + path


def explain(exc: Exception, service: str) -> str:
    if isinstance(exc, httpx.ConnectError):
        if service == "proxy":
            return "connection refused: the proxy is not running or not reachable (port-forward? Service name?)"
        return f"connection refused: {service} is down or its URL is wrong"
    if isinstance(exc, httpx.TimeoutException):
        return f"{service} timed out: overloaded, or a replica is stuck generating (check vLLM's waiting requests)"
    return f"{type(exc).__name__}: {exc}"


def check_proxy_alive(c: DoctorConfig, client: httpx.Client) -> Check:
    try:
        r = client.get(_url(c.proxy_url, "/healthz"))
        return Check("proxy alive", r.status_code == 200, f"HTTP {r.status_code}")
    except httpx.HTTPError as exc:
        return Check("proxy alive", False, type(exc).__name__, explain(exc, "proxy"))


def check_ping(c: DoctorConfig, client: httpx.Client, policy: str | None = None) -> Check:
    """A completion of ``policy`` (the first's for none) through the proxy: its name is always one it answers."""
    model = policy or c.policy_names[0]
    name = c.named("completion through proxy", model)
    headers = bearer(c.trial_key or "doctor")
    body = {"model": model, "messages": [{"role": "user", "content": "ping"}], "max_tokens": 4}
    try:
        start = time.perf_counter()
        r = client.post(_url(c.proxy_url, "/trials/doctor/ping/v1/chat/completions"), json=body, headers=headers)
    except httpx.HTTPError as exc:
        return Check(name, False, type(exc).__name__, explain(exc, "proxy"))
    took = time.perf_counter() - start
    if r.status_code == 200:
        return Check(name, True, f"{model!r} answered in {took:.2f}s")
    remedies = {
        401: "trial key refused: mint one with `rlstack trial-key` and the proxy's secret (--trial-key)",
        403: "trial key names another run or trial than the path",
        404: "model-name mismatch: the proxy serves another name; compare --served-model with the replicas' served name",
        400: "the proxy refused the request shape (see detail)",
        503: "no replica ready behind the proxy: check the registry line below",
    }
    if r.status_code == 404 and c.policies is not None:
        remedies[404] = (f"the proxy does not answer {model!r}: start it with the run's policies (--policies) or compare "
                         "doctor's --policies with the proxy's")
    return Check(name, False, f"HTTP {r.status_code}: {r.text[:160]}", remedies.get(r.status_code, "see the proxy's log"))


async def _registered(c: DoctorConfig, policy: str | None = None, every: bool = False) -> EndpointList:
    """The replicas of ``policy`` (the first's for none); ``every``: of every served name."""
    registry = RegistryClient(str(c.registry_url), timeout=c.timeout_s)
    try:
        return await registry.list(model=None if every else policy or c.policy_names[0])
    finally:
        await registry.aclose()


async def _batcher_status(c: DoctorConfig, policy: str | None = None) -> tuple[Status, ProgressReport | None]:
    """``policy``: that policy's queue and trainer (``?policy=``); None: the batcher's first, asked as Atropos asks."""
    batcher = BatcherClient(str(c.batcher_url), c.batcher_token, timeout=c.timeout_s)
    try:
        status = await batcher.status(policy)
        try:
            progress = await batcher.progress(policy)
        except BatcherRefused:  # an Atropos server: no /progress
            progress = None
        return status, progress
    finally:
        await batcher.aclose()


def check_replicas(c: DoctorConfig, client: httpx.Client, policy: str | None = None) -> Check:
    """The replicas of ``policy`` (the first's for none)."""
    policy = policy or c.policy_names[0]
    name = c.named("replicas registered", policy)
    try:
        ours = asyncio.run(_registered(c, policy)).endpoints
    except httpx.HTTPError as exc:
        return Check(name, False, type(exc).__name__, explain(exc, "registry"))
    return judge_replicas(ours, name)


def judge_replicas(ours: list[Endpoint], name: str = "replicas registered") -> Check:
    """The replicas of one served name (one policy): registered, ready, one model family, one weight version."""
    ready = [e for e in ours if e.ready]
    detail = ", ".join(f"{e.id} v{e.weight_version} {e.labels.get('model_family', 'family ?')}{'' if e.ready else ' (not ready)'}"
                       for e in ours) or "none"
    if not ours:
        return Check(name, False, detail,
                     "no replica registered: replicas still loading (sidecar /readyz), or they cannot reach the registry URL")
    if not ready:
        return Check(name, False, detail,
                     "registered but not ready: the registry cannot reach vLLM's URL or /v1/models lacks the model (advertise URL? NetworkPolicy?)")
    families = {e.labels["model_family"] for e in ready if "model_family" in e.labels}
    if len(families) > 1:
        return Check(name, False, detail,
                     f"replicas of one served name hold different model families {sorted(families)}: their tokens do not mix; "
                     "serve one model per name (docs/model-families.md)")
    versions = {e.weight_version for e in ready}
    note = "" if len(versions) == 1 else f"; replicas disagree on the weight version {sorted(versions)} (a sync in progress, or one failed)"
    return Check(name, True, f"{len(ready)}/{len(ours)} ready: {detail}{note}")


def check_undeclared_replicas(c: DoctorConfig) -> Check:
    """Replicas registered under a served name no policy declares: the proxy routes no call to them."""
    try:
        every = asyncio.run(_registered(c, every=True)).endpoints
    except httpx.HTTPError as exc:
        return Check("replicas of no policy", False, type(exc).__name__, explain(exc, "registry"))
    return judge_undeclared(every, c.policy_names)


def judge_undeclared(endpoints: list[Endpoint], policies: list[str]) -> Check:
    strays = [e for e in endpoints if e.model not in policies]
    if not strays:
        return Check("replicas of no policy", True, f"every registered replica serves one of {policies}")
    detail = ", ".join(f"{e.id} serves {e.model!r}" for e in strays)
    return Check("replicas of no policy", False, detail,
                 f"no policy of {policies} declares these names, so the proxy routes no call to them: start them with a "
                 "policy's --served-model-name (a run config: tag them `policy: <name>`), or declare their name as a policy")


def check_batcher(c: DoctorConfig, client: httpx.Client, policy: str | None = None) -> Check:
    """The batcher's queue and trainer of ``policy`` (with declared policies, ``?policy=``), else its first."""
    ask = policy or (c.policy_names[0] if c.policies is not None else None)
    name = c.named("batcher", ask or "")
    try:
        status, progress = asyncio.run(_batcher_status(c, ask))
    except (httpx.HTTPError, BatcherRefused) as exc:
        return Check(name, False, type(exc).__name__, explain(exc, "batcher"))
    if progress is None:
        return Check(name, True, f"step {status.current_step}, {status.queue_size} group(s) waiting")
    return judge_progress(progress, name)


def judge_progress(report: ProgressReport, name: str = "batcher") -> Check:
    """A starved trainer with no env producing for it is a stalled run: say which numbers decide it."""
    if report.stalled:
        holding = [e for e in report.envs if e.connected and e.live and e.holding_back is not None]
        silent = [e for e in report.envs if e.connected and not e.live]
        if holding and len(holding) == len([e for e in report.envs if e.connected and e.live]):
            remedy = ("every live env holds back: check their hold-back settings against the trainer's batch "
                      "(max_batches_offpolicy, max_staleness) and the weights the batcher gives them")
        elif not [e for e in report.envs if e.connected and e.live]:
            remedy = "no env is polling the batcher: are the env servers running and able to reach it?"
        else:
            remedy = "envs are live but no group has arrived: read the env servers' logs (proxy, replicas, sandboxes)"
        if silent:
            remedy += f"; {len(silent)} env(s) went silent (killed?) and no longer count"
        return Check(name, False, f"run stalled: {report.describe()}", remedy)
    return Check(name, True, f"step {report.step}; {report.describe()}")


def check_gpus() -> Check | None:
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return None
    out = subprocess.run([smi, "--query-gpu=index,utilization.gpu,memory.used,memory.total", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, timeout=30)
    if out.returncode != 0:
        return Check("GPUs", False, out.stderr.strip()[:160], "nvidia-smi failed: driver or device plugin problem")
    rows = [[int(float(x)) for x in line.split(",")] for line in out.stdout.strip().splitlines()]
    idle_full = [r[0] for r in rows if r[1] == 0 and r[2] > 0.8 * r[3]]
    detail = "; ".join(f"gpu{r[0]} {r[1]}% util {r[2]}/{r[3]} MiB" for r in rows)
    if idle_full:
        return Check("GPUs", False, detail, f"GPU(s) {idle_full} full and idle: generation stalled, usually sandboxes stuck waiting (see pods)")
    return Check("GPUs", True, detail)


def check_sandboxes(c: DoctorConfig, now: datetime | None = None) -> Check | None:
    if c.run_prefix is None:
        return None
    import asyncio

    from rlstack.episodes.sandboxes.pods import SandboxManager
    from rlstack.kube.connection import connect

    async def listing() -> list[Pod]:
        client = connect(c.kube_api_url, c.namespace)
        try:
            return await SandboxManager(client, c.namespace or client.namespace, c.run_prefix).list()
        finally:
            await client.close()

    try:
        pods = asyncio.run(listing())
    except Exception as exc:  # noqa: BLE001 - no kubeconfig, refused, forbidden: all read the same way here
        return Check("sandbox pods", False, f"{type(exc).__name__}: {str(exc)[:160]}", "cannot list pods: kubeconfig, API server URL or RBAC")
    return judge_sandboxes(pods, c.stuck_after_s, c.leaked_after_s, now or datetime.now(UTC))


def judge_sandboxes(pods: list[Pod], stuck_after_s: float, leaked_after_s: float, now: datetime) -> Check:
    from rlstack.episodes.sandboxes.pods import finished_at
    from rlstack.episodes.sandboxes.pool import POOL_LABEL, pull_failure

    stuck, leaked, unpulled = [], [], {}
    for pod in pods:
        phase = pod.status.phase if pod.status else None
        failure = pull_failure(pod)
        if failure is not None:
            unpulled.setdefault(pod.spec.containers[0].image if pod.spec else "?", failure)
        if phase == "Pending" and (now - pod.metadata.creationTimestamp).total_seconds() > stuck_after_s:
            stuck.append(pod.metadata.name)
        ended = finished_at(pod)
        if ended is not None and (now - ended).total_seconds() > leaked_after_s:
            leaked.append(pod.metadata.name)
    warm = sum(1 for p in pods if POOL_LABEL in (p.metadata.labels or {}))
    detail = (f"{len(pods)} pod(s) ({warm} warm, waiting for a claim), {len(stuck)} stuck pending, "
              f"{len(leaked)} finished long ago but not deleted, {len(unpulled)} image(s) not pulled")
    if unpulled:
        image, why = next(iter(unpulled.items()))
        return Check("sandbox pods", False, detail, f"image {image} cannot be pulled ({why[:120]}): check the lock file's "
                     "reference (rlstack tasks build --push) and the nodes' pull credentials; its warm pool is stopped")
    if stuck:
        return Check("sandbox pods", False, detail, f"stuck: {stuck[:5]}: no room on nodes or an image pull failing (kubectl describe)")
    if leaked:
        return Check("sandbox pods", False, detail, f"leaked: {leaked[:5]}: the env server's reaper is not running (or cannot delete pods)")
    return Check("sandbox pods", True, detail)


BLOCK_PROVISIONERS = ("ebs.csi.aws.com", "kubernetes.io/aws-ebs", "pd.csi.storage.gke.io", "kubernetes.io/gce-pd",
                      "disk.csi.azure.com", "kubernetes.io/azure-disk", "rancher.io/local-path", "kubernetes.io/cinder",
                      "cinder.csi.openstack.org", "kubernetes.io/no-provisioner", "topolvm.io")
"""Provisioners of block devices: ReadWriteOnce only, so a ReadWriteMany claim on them never binds."""
DEFAULT_CLASS = "storageclass.kubernetes.io/is-default-class"


def check_claims(c: DoctorConfig, now: datetime | None = None) -> Check | None:
    """The namespace's claims (with cluster access, i.e. --run-prefix): one Pending for long says
    why, usually ReadWriteMany asked of the default class, a block class that cannot give it."""
    if c.run_prefix is None:
        return None
    from lightkube.core.exceptions import ApiError
    from lightkube.resources.core_v1 import PersistentVolumeClaim
    from lightkube.resources.storage_v1 import StorageClass

    from rlstack.kube.connection import connect

    async def fetch() -> tuple[list, list | None]:
        client = connect(c.kube_api_url, c.namespace)
        try:
            claims = [x async for x in client.list(PersistentVolumeClaim, namespace=c.namespace or client.namespace)]
            try:
                classes = [x async for x in client.list(StorageClass)]
            except ApiError:  # reading cluster-scoped classes may be forbidden: judge without them
                classes = None
            return claims, classes
        finally:
            await client.close()

    try:
        claims, classes = asyncio.run(fetch())
    except Exception as exc:  # noqa: BLE001 - no kubeconfig, refused, forbidden
        return Check("volume claims", False, f"{type(exc).__name__}: {str(exc)[:160]}", "cannot list claims: kubeconfig, API server URL or RBAC")
    return judge_claims(claims, classes, c.stuck_after_s, now or datetime.now(UTC))


def judge_claims(claims: list, classes: list | None, pending_after_s: float, now: datetime) -> Check:
    by_name = {sc.metadata.name: sc for sc in classes or []}
    default = next((sc for sc in classes or [] if (sc.metadata.annotations or {}).get(DEFAULT_CLASS) == "true"), None)
    stuck = []
    for pvc in claims:
        phase = pvc.status.phase if pvc.status else None
        if phase != "Pending" or (now - pvc.metadata.creationTimestamp).total_seconds() < pending_after_s:
            continue
        name, wanted = pvc.metadata.name, pvc.spec.storageClassName
        sc = by_name.get(wanted) if wanted else default
        rwx = "ReadWriteMany" in (pvc.spec.accessModes or [])
        if classes is not None and not wanted and wanted != "" and default is None:
            why = "no storage class named and the cluster has no default: set sharedStorage.storageClass"
        elif classes is not None and wanted and sc is None:
            why = f"storage class {wanted!r} does not exist (kubectl get storageclass)"
        elif rwx and sc is not None and sc.provisioner in BLOCK_PROVISIONERS:
            why = (f"ReadWriteMany asked of class {sc.metadata.name!r} ({sc.provisioner}), a block class that gives ReadWriteOnce "
                   "only: set sharedStorage.storageClass to a ReadWriteMany class (EFS, Filestore, Azure Files, NFS, CephFS)")
        elif rwx and wanted is None:
            why = "ReadWriteMany asked of the default class, which usually cannot give it: name a ReadWriteMany class (sharedStorage.storageClass)"
        elif sc is not None and sc.volumeBindingMode == "WaitForFirstConsumer":
            why = "its class binds only once a pod using it is scheduled: look at why those pods are Pending"
        else:
            why = f"kubectl describe pvc {name}: its events name the provisioner's error"
        stuck.append(f"{name}: {why}")
    detail = f"{len(claims)} claim(s), {len(stuck)} pending for over {pending_after_s:.0f}s"
    if stuck:
        return Check("volume claims", False, detail, "; ".join(stuck[:3]))
    return Check("volume claims", True, detail)


PROBE = """
import socket, sys
try:
    socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=float(sys.argv[3])).close()
except OSError as exc:
    print("blocked:", exc)
    sys.exit(3)
print("connected")
"""
PROBE_RUN = "doctor-netpol"


def check_network_policies(c: DoctorConfig) -> Check | None:
    """A pod the sandbox NetworkPolicy confines must not reach vLLM's port (its dev routes change
    weights with no authentication). A plugin that ignores NetworkPolicies (EKS's VPC CNI without
    network policy enabled, GKE Standard without enforcement, kind's kindnet before 0.24) lets it through."""
    if c.probe_image is None:
        return None
    from urllib.parse import urlsplit

    from rlstack.episodes.sandboxes.pods import SandboxManager, SandboxSpec, run_once
    from rlstack.kube.connection import connect

    try:
        endpoints = asyncio.run(_registered(c)).endpoints
    except Exception as exc:  # noqa: BLE001
        return Check("network policies", False, f"no replica to probe: {explain(exc, 'registry')}", "fix the registry first")
    if not endpoints:
        return Check("network policies", False, "no registered replica to probe", "start the replicas first")
    target = urlsplit(str(endpoints[0].url))
    wait = 5

    async def probe() -> tuple[int | None, str]:
        client = connect(c.kube_api_url, c.namespace)
        try:
            manager = SandboxManager(client, c.namespace or client.namespace, PROBE_RUN)
            spec = SandboxSpec(trial=f"probe-{secrets.token_hex(4)}", image=c.probe_image, cpu="100m", memory="128Mi",
                               command=["python3", "-c", PROBE, target.hostname or "", str(target.port or 80), str(wait)],
                               deadline_seconds=120)
            outcome, _ = await run_once(manager, spec, timeout=c.timeout_s + 120)
            return outcome.exit_code, outcome.phase
        finally:
            await client.close()

    try:
        code, phase = asyncio.run(probe())
    except Exception as exc:  # noqa: BLE001 - no kubeconfig, forbidden, image pull: all mean no verdict
        return Check("network policies", False, f"probe pod failed: {type(exc).__name__}: {str(exc)[:160]}",
                     "cannot run the probe pod: kubeconfig, RBAC (create/watch/delete pods) or the image")
    where = f"{target.hostname}:{target.port}"
    if code == 0:
        return Check("network policies", False, f"a sandbox-labelled pod reached vLLM at {where}",
                     "NetworkPolicies are NOT enforced: enable them in the network plugin (EKS: VPC CNI enableNetworkPolicy; "
                     "GKE: network policy enforcement or Dataplane V2) or install one that enforces them (Calico, Cilium)")
    if code == 3:
        return Check("network policies", True, f"a sandbox-labelled pod could not reach vLLM at {where}")
    return Check("network policies", False, f"probe pod ended {phase} with exit code {code}", "kubectl describe the probe pod")


def run_checks(c: DoctorConfig) -> list[Check]:
    with httpx.Client(timeout=c.timeout_s) as client:
        checks = [check_proxy_alive(c, client)]
        checks += [check_ping(c, client, p) for p in c.policy_names]
        checks += [check_replicas(c, client, p) for p in c.policy_names]
        if c.policies is not None:
            checks.append(check_undeclared_replicas(c))
        checks += [check_batcher(c, client, p if c.policies is not None else None) for p in c.policy_names]
    checks += [x for x in (check_gpus(), check_claims(c), check_sandboxes(c), check_network_policies(c),
                           check_local_restarts(c.run_dir)) if x is not None]
    if c.run_prefix is not None:  # cluster access: the release's pods
        checks.append(check_pod_restarts(c.kube_api_url, c.namespace))
    return checks
