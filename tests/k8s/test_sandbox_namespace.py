"""Sandboxes in a namespace of their own under Pod Security ``restricted`` (issue 22): the chart's
objects for it, the sandbox pods checked against the profile's rules, and the sandbox manager
against the API emulator with its env server in another namespace (owner as a label, orphans
reaped), down to a real trial run by the fake kubelet in that namespace."""

from __future__ import annotations

import asyncio
import copy
import subprocess
import sys

import pytest
import yaml

from rlstack.episodes.harbor.task import HarborTask
from rlstack.episodes.sandboxes import KubernetesSandboxConfig, build_sandbox
from rlstack.episodes.sandboxes.base import SandboxJob
from rlstack.episodes.sandboxes.pods import (
    OWNER_UID_LABEL,
    SandboxManager,
    SandboxOwner,
    SandboxPlacement,
    SandboxSpec,
)
from rlstack.episodes.trials import AgentSpec, TrialSpec, TrialStatus
from rlstack.kube.connection import connect
from tests.conftest import REPO
from tests.k8s.conftest import CHART, by_kind, helm, render
from tests.k8s.pod_security import restricted_violations

NS, SBX = "rl", "rl-sandboxes"
RUN = "run-ns"
TASK = HarborTask.load(REPO / "examples" / "tasks" / "write-greeting-1")
EFS = ["--set", f"sandboxes.namespace.name={SBX}", "--set", "sandboxes.namespace.claim.volumeSource.csi.driver=efs.csi.aws.com",
       "--set", "sandboxes.namespace.claim.volumeSource.csi.volumeHandle=fs-123"]


def objects(*args: str) -> list[dict]:
    return [o for o in yaml.safe_load_all(render("values-agent.yaml", *args)) if o]


def env_server(objs: list[dict]) -> dict:
    [d] = [d for d in by_kind(objs, "Deployment") if d["metadata"]["name"] == "rl-rlstack-env-agent"]
    return d["spec"]["template"]["spec"]


def test_chart_makes_the_namespace_at_its_pod_security_level_its_claim_and_the_env_servers_role_there():
    objs = objects(*EFS)
    [namespace] = by_kind(objs, "Namespace")
    assert namespace["metadata"]["name"] == SBX
    # values-agent.yaml's example tasks run as root in their images: baseline; restricted otherwise.
    assert namespace["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "baseline"
    [strict] = by_kind(objects(*EFS, "--set", "sandboxes.podSecurity=restricted"), "Namespace")
    assert strict["metadata"]["labels"]["pod-security.kubernetes.io/enforce"] == "restricted"
    assert {"name": "RLSTACK_SANDBOX_POD_LEVEL", "value": "baseline"} in env_server(objs)["containers"][0]["env"]
    [volume] = by_kind(objs, "PersistentVolume")
    [claim] = [c for c in by_kind(objs, "PersistentVolumeClaim") if c["metadata"].get("namespace") == SBX]
    assert volume["spec"]["csi"] == {"driver": "efs.csi.aws.com", "volumeHandle": "fs-123"}
    assert volume["spec"]["persistentVolumeReclaimPolicy"] == "Retain"  # deleting it never deletes the share's data
    assert volume["spec"]["claimRef"] == {"namespace": SBX, "name": claim["metadata"]["name"]}
    assert claim["spec"]["volumeName"] == volume["metadata"]["name"] and claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert claim["spec"]["storageClassName"] == "" == volume["spec"]["storageClassName"]  # bound statically, never provisioned
    spec = env_server(objs)
    env = {e["name"]: e for e in spec["containers"][0]["env"]}
    assert env["RLSTACK_ENV_KUBE__NAMESPACE"]["value"] == SBX
    assert env["RLSTACK_ENV_SANDBOX__CLAIM"]["value"] == claim["metadata"]["name"]
    assert env["RLSTACK_SANDBOX_OWNER_NAMESPACE"]["valueFrom"]["fieldRef"]["fieldPath"] == "metadata.namespace"
    roles = {(r["metadata"].get("namespace"), r["metadata"]["name"]) for r in by_kind(objs, "Role")}
    assert (SBX, "rl-rlstack-sandbox-manager") in roles and (None, "rl-rlstack-sandbox-manager") in roles  # owner pods: get
    [binding] = [b for b in by_kind(objs, "RoleBinding") if b["metadata"].get("namespace") == SBX]
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": spec["serviceAccountName"], "namespace": NS}]
    policies = {p["metadata"]["name"]: p for p in by_kind(objs, "NetworkPolicy")}
    sandboxes = policies["rl-rlstack-sandboxes"]
    assert sandboxes["metadata"]["namespace"] == SBX and sandboxes["spec"]["ingress"] == []
    to_proxy = sandboxes["spec"]["egress"][0]["to"][0]
    assert to_proxy["namespaceSelector"] == {"matchLabels": {"kubernetes.io/metadata.name": NS}}
    assert to_proxy["podSelector"]["matchLabels"]["app.kubernetes.io/component"] == "proxy"
    peers = policies["rl-rlstack-proxy"]["spec"]["ingress"][0]["from"]
    assert {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": SBX}},
            "podSelector": {"matchExpressions": [{"key": "harbor-run", "operator": "Exists"}]}} in peers
    inference = policies["rl-rlstack-inference"]["spec"]["ingress"]
    assert not any("namespaceSelector" in p and SBX in str(p) for rule in inference for p in rule.get("from", []))


def test_an_existing_claim_there_is_used_and_a_namespace_without_one_is_refused():
    objs = objects("--set", f"sandboxes.namespace.name={SBX}", "--set", "sandboxes.namespace.claim.existingClaim=trials",
                   "--set", "sandboxes.namespace.claim.trialsSubPath=rl/trials", "--set", "sandboxes.namespace.create=false")
    assert not by_kind(objs, "PersistentVolume") and not by_kind(objs, "Namespace")
    env = {e["name"]: e.get("value") for e in env_server(objs)["containers"][0]["env"]}
    assert env["RLSTACK_ENV_SANDBOX__CLAIM"] == "trials" and env["RLSTACK_ENV_SANDBOX__TRIALS_SUBPATH"] == "rl/trials"
    refused = helm("template", "rl", str(CHART), "--namespace", NS, "--set", f"sandboxes.namespace.name={SBX}")
    assert refused.returncode != 0 and "sandboxes.namespace.claim" in refused.stderr
    same = helm("template", "rl", str(CHART), "--namespace", NS, "--set", f"sandboxes.namespace.name={NS}", *EFS[2:])
    assert same.returncode != 0 and "the release's own namespace" in same.stderr
    default = {e["name"]: e.get("value") for e in env_server(objects())["containers"][0]["env"]}
    assert default["RLSTACK_ENV_KUBE__NAMESPACE"] == NS and default["RLSTACK_ENV_SANDBOX__CLAIM"] == "rl-rlstack-shared"


@pytest.mark.parametrize("version", ["1.31.0", "1.35.0"])
def test_the_sandbox_namespace_objects_validate_strictly(version, tmp_manifest):
    tmp_manifest.write_text(render("values-agent.yaml", *EFS))
    done = subprocess.run([sys.executable, "-m", "kubernetes_validate", "--strict", "--quiet", "-k", version, str(tmp_manifest)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    lint = helm("lint", "--strict", str(CHART), "-f", str(CHART / "values-agent.yaml"), *EFS)
    assert lint.returncode == 0, lint.stdout + lint.stderr


def trial_pod(api_url: str, tmp_path, namespace: str = SBX) -> dict:
    """The pod the kubernetes trial backend asks for, as the manager writes it."""
    manager = SandboxManager(connect(api_url, namespace), namespace, RUN, owner=SandboxOwner(name="env-0", uid="u-0"),
                             placement=SandboxPlacement(owner_namespace=NS))
    trials = tmp_path / "trials"
    config = KubernetesSandboxConfig(environment="host", image="rlstack:test", claim_name="trials", trials_dir=trials, trials_subpath="trials",
                                     python=sys.executable)
    box = build_sandbox(config, manager)
    job = SandboxJob(run=RUN, trial="t1", task=TASK, agent_command=["true"], agent_env={}, agent_timeout_sec=60,
                     verifier_timeout_sec=30, agent_dir=trials / RUN / "t1" / "agent", verifier_dir=trials / RUN / "t1" / "verifier")
    return manager.manifest(box.spec(job, trials / RUN / "t1"))


def test_sandbox_pods_pass_pod_security_restricted(tmp_path, monkeypatch):
    for name in ("RUN_AS_USER", "RUN_AS_GROUP", "RUNTIME_CLASS_NAME", "READ_ONLY_ROOT_FILESYSTEM"):
        monkeypatch.delenv(f"RLSTACK_SANDBOX_POD_{name}", raising=False)
    pod = trial_pod("http://127.0.0.1:9", tmp_path)
    assert restricted_violations(pod["spec"]) == []
    monkeypatch.setenv("RLSTACK_SANDBOX_POD_READ_ONLY_ROOT_FILESYSTEM", "false")
    monkeypatch.setenv("RLSTACK_SANDBOX_POD_RUNTIME_CLASS_NAME", "gvisor")
    assert restricted_violations(trial_pod("http://127.0.0.1:9", tmp_path)["spec"]) == []  # every sandboxes.pod setting
    probe = SandboxManager(connect("http://127.0.0.1:9", SBX), SBX, "doctor-netpol").manifest(
        SandboxSpec(trial="probe-1", image="img", command=["python3", "-c", "pass"]))
    assert restricted_violations(probe["spec"]) == []  # rlstack doctor's NetworkPolicy probe runs there too
    # The checker itself: each rule a sandbox could break is caught.
    for breach, rule in ((lambda s: s["securityContext"].pop("seccompProfile"), "seccompProfile"),
                         (lambda s: s["securityContext"].update(runAsNonRoot=False), "runAsNonRoot"),
                         (lambda s: s["initContainers"][0]["securityContext"].update(allowPrivilegeEscalation=True), "allowPrivilegeEscalation"),
                         (lambda s: s["containers"][0]["securityContext"]["capabilities"].update(add=["NET_RAW"]), "NET_RAW"),
                         (lambda s: s["volumes"].append({"name": "host", "hostPath": {"path": "/"}}), "hostPath"),
                         (lambda s: s.update(hostNetwork=True), "hostNetwork")):
        spec = copy.deepcopy(pod["spec"])
        breach(spec)
        assert any(rule in v for v in restricted_violations(spec)), rule


def test_a_sandbox_in_another_namespace_is_owned_by_label_and_reaped_when_its_env_server_is_gone(kube_api, tmp_path):
    """An owner reference cannot cross namespaces: the garbage collector would delete the pod at once."""
    pod = trial_pod(kube_api.url, tmp_path)
    assert "ownerReferences" not in pod["metadata"] and pod["metadata"]["labels"][OWNER_UID_LABEL] == "u-0"
    assert pod["metadata"]["annotations"]["cluster-autoscaler.kubernetes.io/safe-to-evict"] == "true"
    same = SandboxManager(connect(kube_api.url, NS), NS, RUN, owner=SandboxOwner(name="env-0", uid="u-0"),
                          placement=SandboxPlacement(owner_namespace=NS))
    assert same.manifest(SandboxSpec(trial="t", image="i", command=["true"]))["metadata"]["ownerReferences"][0]["uid"] == "u-0"

    kube_api.add_pod(NS, "env-0", {"app": "env"})  # this env server
    kube_api.add_pod(NS, "env-1", {"app": "env"})  # a live sibling
    live = {(NS, n): p["metadata"]["uid"] for (ns, n), p in kube_api.pods.items()}

    def manager(uid: str, name: str) -> SandboxManager:
        return SandboxManager(connect(kube_api.url, SBX), SBX, RUN, owner=SandboxOwner(name=name, uid=uid),
                              placement=SandboxPlacement(owner_namespace=NS), ttl_seconds=7200, finished_grace_seconds=300)

    ours, sibling, gone = manager(live[(NS, "env-0")], "env-0"), manager(live[(NS, "env-1")], "env-1"), manager("dead", "env-9")

    async def scenario() -> tuple[list[str], list[str], set[str]]:
        spec = lambda t: SandboxSpec(trial=t, image="i", command=["true"])  # noqa: E731
        await ours.launch(spec("a"))
        await sibling.launch(spec("b"))
        await gone.launch(spec("c"))
        listed = [p.metadata.name for p in await ours.list()]
        reaped = await ours.reap()
        return listed, reaped, {n for (ns, n) in kube_api.pods if ns == SBX}

    kube_api.requests.clear()
    listed, reaped, left = asyncio.run(scenario())
    assert listed == ["sbx-run-ns-a"]  # only its own, by label
    assert reaped == ["sbx-run-ns-c"] and left == {"sbx-run-ns-a", "sbx-run-ns-b"}  # the dead env server's pod only
    verbs = {(verb, ns) for verb, _, ns in kube_api.requests}
    assert {v for v, ns in verbs if ns == SBX} == {"create", "list", "delete"}
    assert {v for v, ns in verbs if ns == NS} == {"get"}  # what the release namespace's Role already grants


def test_a_trial_runs_in_the_sandbox_namespace(kube_api, tmp_path):
    """A real trial (the oracle agent, then the verifier) in a pod the fake kubelet runs in the sandbox
    namespace, its env side told its own namespace the way the chart does."""
    from tests.helpers.env_server_as_user import (
        can_switch_users,
        finish,
        shared_claim,
        start_trials,
    )
    from tests.helpers.fake_kubelet import FakeKubelet

    if not can_switch_users():
        pytest.skip("the env side runs as the chart's user: needs root (as in CI)")
    with shared_claim() as claim, FakeKubelet(kube_api, claim, SBX):
        spec = TrialSpec(run=RUN, trial="oracle", task=TASK, agent=AgentSpec.oracle())
        [result] = finish(start_trials(kube_api.url, SBX, RUN, claim, [spec], env={"RLSTACK_SANDBOX_OWNER_NAMESPACE": NS}))
    assert (result.status, result.reward) == (TrialStatus.OK, 1.0), result.error
    created = [obj for _, kind, obj in kube_api.events if kind == "ADDED"]
    assert [o["metadata"]["namespace"] for o in created] == [SBX]
    assert "ownerReferences" not in created[0]["metadata"] and created[0]["metadata"]["labels"][OWNER_UID_LABEL] == "u-0"
    assert restricted_violations(created[0]["spec"]) == []
