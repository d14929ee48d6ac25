"""Two policies in one release (docs/policies.md, docs/kubernetes.md): an inference Deployment and a trainer per
declared policy, one proxy, registry, batcher and set of env servers; and with no policies declared,
every manifest byte for byte what the chart rendered before policies existed (a digest golden).

`python -m tests.k8s.test_chart_policies --write-golden` rewrites the golden from the current chart:
only for a change meant to alter single-policy manifests, in a commit that says so."""

from __future__ import annotations

import hashlib
import json
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.k8s.conftest import CHART, by_kind, helm, objects_of, render

GOLDEN = Path(__file__).with_name("chart_digests.json")

KEDA = ("--set", "inference.autoscaling.enabled=true", "--set", "inference.autoscaling.keda.serverAddress=http://prom:9090")
SINGLE_POLICY_RENDERS: dict[str, tuple[str, ...]] = {
    **{v: (v,) for v in ("values.yaml", "values-agent.yaml", "values-cpu.yaml", "values-gpu-example.yaml", "values-kind-gpu.yaml")},
    "trainer-nodes-2": ("values.yaml", "--set", "trainer.nodes=2"),
    "trainer-gpus-4": ("values.yaml", "--set", "trainer.gpus=4"),
    "trainer-deployment": ("values.yaml", "--set", "trainer.workload=Deployment"),
    "trainer-run-id-kueue": ("values.yaml", "--set", "trainer.runId=r2", "--set", "trainer.kueue.queueName=gpu"),
    "trainer-wandb": ("values.yaml", "--set", "trainer.wandb.project=rl", "--set", "trainer.wandb.apiKeySecret=wandb"),
    "trainer-broadcast": ("values.yaml", "--set", "trainer.env.RLSTACK_TRAINER_SYNC__MODE=broadcast"),
    "inference-keda": ("values.yaml", *KEDA),
    "inference-hpa": ("values.yaml", *KEDA, "--set", "inference.autoscaling.type=hpa", "--set", "proxy.autoscaling.enabled=true"),
    "inference-pp2-no-shm": ("values.yaml", "--set", "inference.pipelineParallelSize=2", "--set", "inference.shmSize="),
    "inference-one-replica": ("values.yaml", "--set", "inference.replicas=1", "--set", "proxy.replicas=1"),
    "model-none": ("values.yaml", "--set", "model.source.type=none"),
    "model-claim": ("values.yaml", "--set", "model.source.type=claim", "--set", "model.source.claim.name=models",
                    "--set", "model.source.claim.subPath=qwen"),
    "model-host-path": ("values.yaml", "--set", "model.source.type=hostPath", "--set", "model.source.hostPath=/models/qwen"),
    "monitoring": ("values.yaml", "--set", "serviceMonitor.enabled=true", "--set", "prometheusRule.enabled=true"),
    "no-envs": ("values.yaml", "--set-json", "envs=[]"),
    "no-network-policies": ("values.yaml", "--set", "networkPolicies.enabled=false", "--set", "helmTest.enabled=false"),
    "fullname-override": ("values-cpu.yaml", "--set", "fullnameOverride=team-a"),
}
"""Every existing values file, and values.yaml with the settings whose branches the per-policy templates
took over (trainer shapes, scalers, model sources, monitoring), each rendered as the tests render."""


def digest(values: str, *extra: str) -> str:
    return hashlib.sha256(render(values, *extra).encode()).hexdigest()


def digests() -> dict[str, str]:
    return {name: digest(*args) for name, args in SINGLE_POLICY_RENDERS.items()}


@pytest.mark.parametrize("case", sorted(SINGLE_POLICY_RENDERS))
def test_with_no_policies_every_manifest_is_what_it_was(case):
    golden = json.loads(GOLDEN.read_text())
    assert digest(*SINGLE_POLICY_RENDERS[case]) == golden[case], (
        f"{case}: the chart renders other single-policy manifests than the golden; render it at the golden's commit "
        "and diff (or, for a change meant to alter them, python -m tests.k8s.test_chart_policies --write-golden)")



def rendered(values: str, *extra: str) -> list[dict]:
    return [o for o in yaml.safe_load_all(render(values, *extra)) if o]


def env(pod: dict) -> dict[str, str | None]:
    return {e["name"]: e.get("value") for e in pod["spec"]["containers"][0]["env"]}


def named(objects: list[dict], kind: str) -> dict[str, dict]:
    return {o["metadata"]["name"]: o for o in by_kind(objects, kind)}


def policies(*entries: dict) -> tuple[str, ...]:
    return ("--set-json", "policies=" + json.dumps(list(entries)))


def selects(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def test_two_policies_have_their_own_replicas_and_trainer_and_share_the_rest():
    objects = objects_of("values-two-policies.yaml")
    deployments, jobs = named(objects, "Deployment"), named(objects, "Job")
    assert set(deployments) == {"rl-rlstack-inference-lead", "rl-rlstack-inference-helper", "rl-rlstack-proxy",
                                "rl-rlstack-registry", "rl-rlstack-batcher", "rl-rlstack-env-agent"}
    replicas = {p: deployments[f"rl-rlstack-inference-{p}"] for p in ("lead", "helper")}
    trainers = {p: jobs[f"rl-rlstack-trainer-{p}"] for p in ("lead", "helper")}
    assert (replicas["lead"]["spec"]["replicas"], replicas["helper"]["spec"]["replicas"]) == (2, 1)
    for p in ("lead", "helper"):
        for workload in (replicas[p], trainers[p]):
            labels = workload["spec"]["template"]["metadata"]["labels"]
            assert labels["rlstack.dev/policy"] == p and labels["app.kubernetes.io/component"] in ("inference", "trainer")
        selector = replicas[p]["spec"]["selector"]["matchLabels"]
        assert selector["rlstack.dev/policy"] == p  # distinct selectors: neither Deployment adopts the other's pods
        other = replicas["helper" if p == "lead" else "lead"]["spec"]["template"]["metadata"]["labels"]
        assert not selects(selector, other)
        served, trained = env(replicas[p]["spec"]["template"]), env(trainers[p]["spec"]["template"])
        assert served["RLSTACK_INFERENCE_SERVED_MODEL_NAME"] == trained["RLSTACK_TRAINER_SERVED_MODEL_NAME"] == p
        assert trained["RLSTACK_TRAINER_BATCHER_POLICY"] == p
        assert trained["RLSTACK_TRAINER_RUN_DIR"] == f"/data/runs/rl/policies/{p}"
        assert served["RLSTACK_INFERENCE_WEIGHTS_DIR"] == trained["RLSTACK_TRAINER_SYNC__WEIGHTS_DIR"] == f"/data/weights/rl/policies/{p}"
        assert served["RLSTACK_INFERENCE_MODEL"] == trained["RLSTACK_TRAINER_MODEL"]
    # Each its own model (lead's block names one; helper keeps the top-level one), fetched by a Job each.
    lead_model, helper_model = (env(replicas[p]["spec"]["template"])["RLSTACK_INFERENCE_MODEL"] for p in ("lead", "helper"))
    assert lead_model.startswith("/data/models/lead-") and helper_model.startswith("/data/models/policy-")
    fetched = {env(j["spec"]["template"])["RLSTACK_MODEL_DIR"] for j in jobs.values()
               if j["metadata"]["labels"]["app.kubernetes.io/component"] == "model"}
    assert fetched == {lead_model, helper_model}
    # Only the first policy's trainer evaluates (the env's held-out score is the team's).
    assert "RLSTACK_TRAINER_EVALUATION__URL" in env(trainers["lead"]["spec"]["template"])
    assert "RLSTACK_TRAINER_EVALUATION__URL" not in env(trainers["helper"]["spec"]["template"])
    # One Service per Deployment and trainer, each selecting its own policy's pods.
    services = named(objects, "Service")
    for p in ("lead", "helper"):
        for kind, workload in (("inference", replicas[p]), ("trainer", trainers[p])):
            assert selects(services[f"rl-rlstack-{kind}-{p}"]["spec"]["selector"], workload["spec"]["template"]["metadata"]["labels"])
    # The shared services: the proxy and env server route by the table, the batcher keeps a queue each.
    from pydantic import TypeAdapter

    from rlstack.common.policies import PolicyRoute, PolicyTable

    proxy, envs, batcher = (env(deployments[f"rl-rlstack-{n}"]["spec"]["template"]) for n in ("proxy", "env-agent", "batcher"))
    assert proxy["RLSTACK_PROXY_POLICIES"] == envs["RLSTACK_ENV_POLICIES"]
    table = PolicyTable(TypeAdapter(tuple[PolicyRoute, ...]).validate_json(proxy["RLSTACK_PROXY_POLICIES"]))
    assert table.names() == ["lead", "helper"]
    assert table.route("claude-sonnet-4-5", "messages") == "lead" and table.route("claude-haiku-4-5", "messages") == "helper"
    assert json.loads(batcher["RLSTACK_BATCHER_POLICIES"]) == ["lead", "helper"]
    assert proxy["RLSTACK_PROXY_SERVED_MODEL_NAME"] == envs["RLSTACK_ENV_SERVED_MODEL_NAME"] == "lead"
    assert envs["RLSTACK_ENV_AGENT__SUB_AGENT_POLICY"] == "helper"
    # The registry watches every policy's replicas; the inference NetworkPolicy covers them all.
    registry = env(deployments["rl-rlstack-registry"]["spec"]["template"])
    watched = json.loads(registry["RLSTACK_REGISTRY_KUBE_REPLICA_SELECTOR"])
    assert all(selects(watched, r["spec"]["template"]["metadata"]["labels"]) for r in replicas.values())
    network = named(objects, "NetworkPolicy")["rl-rlstack-inference"]["spec"]["podSelector"]["matchLabels"]
    assert all(selects(network, r["spec"]["template"]["metadata"]["labels"]) for r in replicas.values())
    # A budget for lead's two replicas, none for helper's one.
    assert set(named(objects, "PodDisruptionBudget")) == {"rl-rlstack-proxy", "rl-rlstack-inference-lead"}
    # helm test's doctor runs its completion, replica and batcher checks per policy (read by the real CLI).
    [test] = by_kind(objects, "Pod")
    script = test["spec"]["containers"][0]["command"][-1]
    for name, value in env(test).items():
        script = script.replace(f'"${name}"', shlex.quote(value or "from-a-secret"))
    from rlstack.cli import build_parser

    args = build_parser().parse_args(shlex.split(script.split("exec rlstack ", 1)[1]))
    assert args.policies == ["lead", "helper"]
    # No name twice.
    assert len({(o["kind"], o["metadata"]["name"]) for o in objects}) == len(objects)


def test_an_explicit_single_policy_is_laid_out_as_a_declared_one():
    """Declaring one policy, even under the top-level served name, is the layout of declared policies
    (as `rlstack up`'s policies: block): suffixed objects, the policy label, a per-policy run directory
    and the table on the shared services, which answer only the names it declares. Everything else is
    what the release renders with no policies."""
    implicit = objects_of("values.yaml")
    explicit = rendered("values.yaml", *policies({"name": "policy"}))
    key = {(o["kind"], o["metadata"]["name"].removesuffix("-policy")): o for o in explicit}
    assert set(key) == {(o["kind"], o["metadata"]["name"]) for o in implicit}
    changed = {(o["kind"], o["metadata"]["name"]) for o in implicit if key[(o["kind"], o["metadata"]["name"])] != o}
    assert changed == {("Deployment", "rl-rlstack-inference"), ("Service", "rl-rlstack-inference"),
                       ("PodDisruptionBudget", "rl-rlstack-inference"), ("Job", "rl-rlstack-trainer"), ("Service", "rl-rlstack-trainer"),
                       ("Deployment", "rl-rlstack-proxy"), ("Deployment", "rl-rlstack-env-arithmetic"),
                       ("Deployment", "rl-rlstack-batcher"), ("Pod", "rl-rlstack-doctor")}
    trainer = env(key[("Job", "rl-rlstack-trainer")]["spec"]["template"])
    assert trainer["RLSTACK_TRAINER_RUN_DIR"] == "/data/runs/rl/policies/policy" and trainer["RLSTACK_TRAINER_BATCHER_POLICY"] == "policy"
    assert env(key[("Deployment", "rl-rlstack-proxy")]["spec"]["template"])["RLSTACK_PROXY_POLICIES"] == '[{"name":"policy"}]'


def test_policies_on_one_model_share_its_job_and_a_policys_blocks_override_the_top_level_ones():
    objects = rendered("values.yaml", "--set", "trainer.evalEvery=10", *policies(
        {"name": "a", "inference": {"replicas": 1, "tolerations": []}, "trainer": {"learningRate": 2e-5, "packTokens": None}},
        {"name": "b", "trainer": {"evalEvery": 5}},
        {"name": "c", "trainer": {"nodes": 2}}))
    models = [j for j in by_kind(objects, "Job") if j["metadata"]["labels"]["app.kubernetes.io/component"] == "model"]
    assert len(models) == 1 and "rlstack.dev/policy" not in models[0]["metadata"]["labels"]
    deployments, jobs = named(objects, "Deployment"), named(objects, "Job")
    a, b = deployments["rl-rlstack-inference-a"]["spec"], deployments["rl-rlstack-inference-b"]["spec"]
    assert (a["replicas"], b["replicas"]) == (1, 2)
    assert "tolerations" not in a["template"]["spec"] and b["template"]["spec"]["tolerations"]  # a list replaced, even by []
    trainers = {p: env(jobs[f"rl-rlstack-trainer-{p}"]["spec"]["template"]) for p in ("a", "b")}
    assert trainers["a"]["RLSTACK_TRAINER_OPTIMISATION__LR"] == "2e-05" and "RLSTACK_TRAINER_PACKING__ROW_TOKENS" not in trainers["a"]  # null turns it off
    assert trainers["b"]["RLSTACK_TRAINER_PACKING__ROW_TOKENS"] == "16384" and "RLSTACK_TRAINER_OPTIMISATION__LR" not in trainers["b"]
    # evalEvery: the first policy's trainer, and one whose own block sets it; the top-level value is the first's.
    assert (trainers["a"]["RLSTACK_TRAINER_EVALUATION__EVERY"], trainers["b"]["RLSTACK_TRAINER_EVALUATION__EVERY"]) == ("10", "5")
    # One policy's trainer over two nodes: its own Indexed Job and peers Service, and the NetworkPolicy that lets
    # trainer pods meet (it selects every policy's trainer, and opens the trainer port as the plain one would).
    indexed = [j for name, j in jobs.items() if name.startswith("rl-rlstack-trainer-c")]
    assert [j["spec"].get("completionMode") for j in indexed] == ["Indexed"]
    assert "rl-rlstack-trainer-c-peers" in named(objects, "Service")
    assert "trainer" in {n.removeprefix("rl-rlstack-") for n in named(objects, "NetworkPolicy")}
    assert len({(o["kind"], o["metadata"]["name"]) for o in objects}) == len(objects)


def test_policies_of_every_shape_validate_strictly(tmp_manifest):
    """Trainers as a Job, an Indexed Job and a Deployment, scalers and budgets per policy: every object
    one the API server takes."""
    keda = {"enabled": True, "keda": {"serverAddress": "http://prom:9090"}}
    tmp_manifest.write_text(render("values-agent.yaml", "--set", "trainer.runId=r2", *policies(
        {"name": "a", "servedNames": ["claude-sonnet-*"], "trainer": {"nodes": 2}},
        {"name": "b", "servedNames": ["claude-haiku-*"], "inference": {"autoscaling": keda}},
        {"name": "c-v2", "responsesNames": ["gpt-*"], "trainer": {"workload": "Deployment", "gpus": 2}})))
    done = subprocess.run([sys.executable, "-m", "kubernetes_validate", "--strict", "--quiet", "-k", "1.35.0", str(tmp_manifest)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    lint = helm("lint", "--strict", str(CHART), "--set", "trainer.runId=r2", *policies({"name": "a"}, {"name": "b"}))
    assert lint.returncode == 0, lint.stdout + lint.stderr


def test_each_policy_scales_on_its_own_replicas_queue():
    keda = {"enabled": True, "minReplicas": 1, "maxReplicas": 3, "keda": {"serverAddress": "http://prom:9090"}}
    objects = rendered("values.yaml", *policies({"name": "a", "inference": {"replicas": 0, "autoscaling": keda}}, {"name": "b"}))
    [scaler] = by_kind(objects, "ScaledObject")
    assert scaler["metadata"]["name"] == scaler["spec"]["scaleTargetRef"]["name"] == "rl-rlstack-inference-a"
    assert 'pod=~"rl-rlstack-inference-a-.*"' in scaler["spec"]["triggers"][0]["metadata"]["query"]
    deployments = named(objects, "Deployment")
    assert "replicas" not in deployments["rl-rlstack-inference-a"]["spec"] and deployments["rl-rlstack-inference-b"]["spec"]["replicas"] == 2
    refused = helm("template", "rl", str(CHART), *policies({"name": "a", "inference": {"autoscaling": {"enabled": True}}}))
    assert refused.returncode != 0 and "policies[a].inference.autoscaling.keda.serverAddress" in refused.stderr


@pytest.mark.parametrize(("entries", "complaint"), [
    ([{"name": "a"}, {"name": "a"}], "policies: a is declared twice"),
    ([{"name": "a", "servedNames": ["claude-*"]}, {"name": "b", "servedNames": ["claude-*"]}], '"claude-*" is claimed by both a and b'),
    ([{"name": "a"}, {"name": "b", "servedNames": ["a"]}], '"a" is claimed by both a and b'),
    ([{"name": "a"}, {"name": "b", "inference": {"replicas": 0}}], "policies[b]: inference.replicas is 0 and inference.autoscaling is off"),
    ([{"name": "p" * 50}], "is longer than 63 characters (a Service name)"),
    ([{"name": "a", "inference": {"device": "cpu", "tensorParallelSize": 2}}], "policies[a]: inference.tensorParallelSize > 1 needs inference.device=cuda"),
    ([{"name": "a", "model": {"path": "/models/a"}}], "policies[a]: model.path (/models/a) must lie under sharedStorage.mountPath"),
    ([{"name": "a b"}], "/policies/0/name"),
    ([{"name": "Lead"}], "policies[Lead]: the chart names the policy's objects after it"),
    ([{"name": "c.v2"}], "lowercase letters, digits and '-' only"),
    ([{"name": "a", "servedNames": ["x", "x"]}], "/policies/0/servedNames"),
    ([{"name": "a", "model": {"servedName": "b"}}], "servedName"),
    ([{"name": "a", "inference": {"vllmPort": 9000}}], "vllmPort"),
    ([{"name": "a", "trainer": {"runId": "r2"}}], "runId"),
    ([{"name": "a", "infrence": {}}], "infrence"),
])
def test_impossible_policies_are_refused_with_their_reason(entries, complaint):
    done = helm("template", "rl", str(CHART), *policies(*entries))
    assert done.returncode != 0 and complaint in done.stderr, done.stderr


def test_a_trainer_name_too_long_for_its_job_is_refused():
    name = "p" * 42  # <fullname>-inference-<name> is 63: fits; the trainer's Job with a runId does not
    assert helm("template", "rl", str(CHART), *policies({"name": name})).returncode == 0
    done = helm("template", "rl", str(CHART), "--set", "trainer.runId=r2345", *policies({"name": name}))
    assert done.returncode != 0 and "its trainer's name rl-rlstack-trainer-r2345-" in done.stderr


def test_the_schemas_policy_name_is_the_services_and_its_blocks_require_nothing():
    from rlstack.common.names import POLICY_NAME

    item = json.loads((CHART / "values.schema.json").read_text())["properties"]["policies"]["items"]
    assert item["properties"]["name"]["pattern"] == POLICY_NAME and item["required"] == ["name"]
    assert "required" not in json.dumps({k: item["properties"][k] for k in ("model", "inference", "trainer")})


def test_the_service_monitor_labels_series_with_their_policy_only_when_policies_are_declared():
    def endpoints(values: str) -> list[dict]:
        [monitor] = by_kind(rendered(values, "--set", "serviceMonitor.enabled=true"), "ServiceMonitor")
        return monitor["spec"]["endpoints"]

    declared = endpoints("values-two-policies.yaml")
    assert [e["port"] for e in declared] == ["http", "vllm"]
    for e in declared:
        assert e["relabelings"] == [{"sourceLabels": ["__meta_kubernetes_pod_label_rlstack_dev_policy"], "targetLabel": "policy"}]
    assert all("relabelings" not in e for e in endpoints("values.yaml"))


def test_notes_list_the_policies():
    notes = helm("install", "rl", str(CHART), "--dry-run=client", "--namespace", "rl", "-f", str(CHART / "values-two-policies.yaml")).stdout
    assert "lead: answers lead, claude-sonnet-*, claude-opus-*" in notes and "helper: answers helper, claude-haiku-*" in notes
    assert "trainer rl-rlstack-trainer-lead (evaluates)" in notes and "/data/runs/rl/policies/helper" in notes
    assert '"model": "lead"' in notes


if __name__ == "__main__":
    if sys.argv[1:] != ["--write-golden"]:
        sys.exit("usage: python -m tests.k8s.test_chart_policies --write-golden")
    GOLDEN.write_text(json.dumps(digests(), indent=2, sort_keys=True) + "\n")
    print(f"wrote {GOLDEN}")
