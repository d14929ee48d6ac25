"""Every service has an ingress NetworkPolicy naming who may call it (issue 22, item 10), read on
the rendered chart: who each policy admits, evaluated against the labels of every rendered pod
and of a sandbox pod as the sandbox manager makes it."""

from __future__ import annotations

import yaml

from rlstack.episodes.sandboxes.pods import SandboxManager, SandboxSpec
from tests.k8s.conftest import by_kind, render
from tests.k8s.test_chart import component, workloads


def admits(peer: dict, labels: dict) -> bool:
    if "namespaceSelector" in peer or "ipBlock" in peer:
        return False  # other namespaces (metrics scrapers) or addresses, not a pod of this namespace
    selector = peer.get("podSelector", {})
    if any(labels.get(k) != v for k, v in selector.get("matchLabels", {}).items()):
        return False
    return all((e["key"] in labels) == (e["operator"] == "Exists") for e in selector.get("matchExpressions", []))


def callers(policy: dict, pods: dict[str, dict]) -> set[str]:
    """The components (a policy's replicas and trainer as theirs) of the pods ``policy`` admits."""
    return {component(name) for name, labels in pods.items() for rule in policy["spec"]["ingress"] for peer in rule.get("from", [])
            if admits(peer, labels)}


def test_every_service_admits_only_its_callers_and_sandboxes_reach_only_the_proxy(rendered):
    values, objects = rendered
    pods = {name: pod["metadata"]["labels"] for name, pod in workloads(objects).items()}
    helm_test = next(o for o in by_kind(objects, "Pod") if o["metadata"]["labels"]["app.kubernetes.io/component"] == "test")
    pods["test"] = helm_test["metadata"]["labels"]
    sandbox = SandboxManager(None, "rl", "run").manifest(SandboxSpec(trial="t", image="a", command=["x"]))  # type: ignore[arg-type]
    pods["sandbox"] = sandbox["metadata"]["labels"]
    envs = {n for n in pods if n.startswith("env-")}
    policies = {}
    for p in by_kind(objects, "NetworkPolicy"):
        selected = [n for n, labels in pods.items() if admits({"podSelector": p["spec"]["podSelector"]}, labels)]
        for name in selected:  # by component: every policy's replicas (and trainers) under one NetworkPolicy
            policies.setdefault(component(name), []).append(p)
    assert set(policies) >= {"registry", "batcher", "proxy", "inference", "trainer", *envs}, values

    def admitted(component: str) -> set[str]:
        return set().union(*(callers(p, pods) for p in policies[component]))

    assert admitted("batcher") == {"trainer", "test", *envs}
    assert admitted("registry") == {"inference", "proxy", "trainer", "test", *envs}
    assert admitted("proxy") == {"sandbox", "test", "proxy", *envs}  # proxy pods pass a trial's end on to each other
    assert all(admitted(e) == {"trainer"} for e in envs)
    assert "sandbox" not in set().union(*(admitted(c) for c in policies if c not in ("proxy", "sandbox")))


def test_no_policies_when_switched_off_and_notes_warn_where_enforcement_is_not_a_given():
    off = [o for o in yaml.safe_load_all(render("values.yaml", "--set", "networkPolicies.enabled=false")) if o]
    assert not by_kind(off, "NetworkPolicy")
    from tests.k8s.conftest import CHART, helm

    notes = helm("install", "rl", str(CHART), "--dry-run", "--namespace", "rl", "--set", "auth.create=true").stdout
    assert "NetworkPolicies are only as good as the network plugin" in notes and "rlstack doctor" in notes
    unprotected = helm("install", "rl", str(CHART), "--dry-run", "--namespace", "rl", "--set", "auth.create=true",
                       "--set", "networkPolicies.enabled=false").stdout
    assert "WARNING: networkPolicies.enabled=false" in unprotected
