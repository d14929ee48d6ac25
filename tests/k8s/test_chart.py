"""The Helm chart, checked as far as no API server allows: lint, schema validation for
Kubernetes 1.31 and 1.35, and the relationships between rendered objects that a schema cannot
see (selectors, ports, probes, security, RBAC, NetworkPolicies)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
import yaml

from tests.k8s.conftest import CHART, VALUES, by_kind, helm, render


def selects(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def workloads(objects: list[dict]) -> dict[str, dict]:
    """Pod templates of the services (Deployments, and the trainer when it is a Job), by component, and
    a declared policy's replicas and trainer by ``<component>/<policy>``."""
    out = {}
    for o in by_kind(objects, "Deployment") + by_kind(objects, "Job"):
        if "helm.sh/hook" in o["metadata"].get("annotations", {}):
            continue  # the auth Secret's one-time hook, not a service
        template = o["spec"]["template"]
        if template["spec"]["containers"][0]["command"][:2] == ["python3", "-m"]:
            labels = template["metadata"]["labels"]
            policy = labels.get("rlstack.dev/policy")
            out[labels["app.kubernetes.io/component"] + (f"/{policy}" if policy else "")] = template
    return out


def component(workload: str) -> str:
    """``inference/lead`` -> ``inference``: a key of ``workloads`` without its policy."""
    return workload.split("/")[0]


def test_helm_lint_strict_passes_for_every_values_file():
    for values in VALUES:
        done = helm("lint", "--strict", str(CHART), "-f", str(CHART / values))
        assert done.returncode == 0, done.stdout + done.stderr


@pytest.mark.parametrize("version", ["1.31.0", "1.35.0"])
@pytest.mark.parametrize("values", VALUES)
def test_rendered_objects_validate_strictly(values, version, tmp_manifest):
    tmp_manifest.write_text(render(values))
    done = subprocess.run([sys.executable, "-m", "kubernetes_validate", "--strict", "--quiet", "-k", version, str(tmp_manifest)],
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr


def test_every_service_selects_a_deployment_and_its_ports_exist(rendered):
    _, objects = rendered
    pods = workloads(objects)
    assert set(map(component, pods)) >= {"registry", "batcher", "proxy", "inference", "trainer"}
    assert any(n.startswith("env-") for n in pods)
    for svc in by_kind(objects, "Service"):
        targets = [p for p in pods.values() if selects(svc["spec"]["selector"], p["metadata"]["labels"])]
        assert len(targets) == 1, svc["metadata"]["name"]
        ports = {p["name"]: p["containerPort"] for p in targets[0]["spec"]["containers"][0]["ports"]}
        for port in svc["spec"]["ports"]:
            if svc["metadata"]["name"] == "rl-rlstack-eval":  # the trainer's stable alias of the first env server
                assert port["port"] == 80 and port["targetPort"] in ports
                continue
            assert ports[port["targetPort"]] == port["port"]


def test_deployments_select_their_own_pods_and_probe_real_ports(rendered):
    _, objects = rendered
    for d in by_kind(objects, "Deployment"):
        pod = d["spec"]["template"]
        assert selects(d["spec"]["selector"]["matchLabels"], pod["metadata"]["labels"])
        for c in pod["spec"]["containers"]:
            names = {p["name"] for p in c["ports"]}
            for probe in ("livenessProbe", "readinessProbe", "startupProbe"):
                if probe in c:
                    assert c[probe]["httpGet"]["port"] in names
            assert c["readinessProbe"]["httpGet"]["path"] == "/readyz" and c["livenessProbe"]["httpGet"]["path"] == "/healthz"
            # python3: the vLLM image has no `python` (and the others have both).
            assert c["command"][:2] == ["python3", "-m"] and c["command"][2].startswith("rlstack.")


def test_every_container_is_locked_down_and_sized(rendered):
    _, objects = rendered
    pods = [(o, o["spec"]["template"]["spec"]) for o in by_kind(objects, "Deployment") + by_kind(objects, "Job")]
    pods += [(o, o["spec"]) for o in by_kind(objects, "Pod")]  # the helm test
    for d, spec in pods:
        assert spec["securityContext"]["runAsNonRoot"] is True
        assert spec["securityContext"]["seccompProfile"]["type"] == "RuntimeDefault"
        for c in spec["containers"] + spec.get("initContainers", []):
            sc = c["securityContext"]
            assert sc["allowPrivilegeEscalation"] is False and sc["capabilities"]["drop"] == ["ALL"]
            assert c["resources"]["requests"] and c["resources"]["limits"]
            assert {"app.kubernetes.io/name", "app.kubernetes.io/instance", "app.kubernetes.io/component"} <= set(d["metadata"]["labels"])


def test_gpu_values_request_gpus_and_inference_waits_for_the_model(rendered):
    values, objects = rendered
    replicas = [p for name, p in workloads(objects).items() if component(name) == "inference"]
    assert replicas
    for pod in replicas:
        container = pod["spec"]["containers"][0]
        gpus = container["resources"]["limits"].get("nvidia.com/gpu")
        assert (gpus is None) == (values == "values-cpu.yaml")
        startup = container["startupProbe"]
        assert startup["httpGet"]["path"] == "/readyz" and startup["periodSeconds"] * startup["failureThreshold"] >= 600
        env = {e["name"]: e.get("value") for e in container["env"]}
        assert env["RLSTACK_INFERENCE_ADVERTISE_URL"].startswith("http://$(POD_IP):")


def test_secrets_are_referenced_never_inlined(rendered):
    values, objects = rendered
    # No Secret object at all: with auth.create (the kind values) a hook makes the release's own once.
    assert by_kind(objects, "Secret") == []
    for d in by_kind(objects, "Deployment") + by_kind(objects, "Job"):
        for e in d["spec"]["template"]["spec"]["containers"][0]["env"]:
            if e["name"].endswith(("_TOKEN", "_SECRET")):  # not MAX_TOKENS
                assert "secretKeyRef" in e["valueFrom"], e["name"]


def test_rbac_is_namespaced_and_bound_only_to_the_sandbox_manager_and_registry(rendered):
    """What each Role grants is compared with the client code's calls in test_rbac_matches_client."""
    _, objects = rendered
    assert not by_kind(objects, "ClusterRole") and not by_kind(objects, "ClusterRoleBinding")
    creates = (yaml.safe_load((CHART / rendered[0]).read_text()) or {}).get("auth", {}).get("create")
    hooks = {"rl-rlstack-auth-init"} if creates else set()  # auth.create: the Secret's hook
    assert {r["metadata"]["name"] for r in by_kind(objects, "Role")} == {"rl-rlstack-sandbox-manager", "rl-rlstack-registry"} | hooks
    assert all(rule["apiGroups"] == [""] for r in by_kind(objects, "Role") for rule in r["rules"])
    deployments = {name: pod["spec"] for name, pod in workloads(objects).items()}
    envs = [name for name in deployments if name.startswith("env-")]
    assert envs and all(deployments[e]["serviceAccountName"] == "rl-rlstack-sandbox-manager" for e in envs)
    assert deployments["registry"]["serviceAccountName"] == "rl-rlstack-registry"
    assert all(spec.get("automountServiceAccountToken") is False for name, spec in deployments.items()
               if name not in (*envs, "registry"))
    others = [o["spec"]["template"]["spec"] for o in by_kind(objects, "Job") if o["metadata"]["name"] != "rl-rlstack-auth-init"]
    others += [o["spec"] for o in by_kind(objects, "Pod")]
    assert others and all(spec["automountServiceAccountToken"] is False for spec in others)  # model Job, trainer Job, helm test
    for hook in [o for o in by_kind(objects, "Job") if o["metadata"]["name"] == "rl-rlstack-auth-init"]:
        assert hook["spec"]["template"]["spec"]["serviceAccountName"] == "rl-rlstack-auth-init"  # its own hook-scoped account


def test_network_policies_select_what_they_claim(rendered):
    _, objects = rendered
    pods = {name: pod["metadata"]["labels"] for name, pod in workloads(objects).items()}
    policies = {p["metadata"]["name"].removeprefix("rl-rlstack-"): p["spec"] for p in by_kind(objects, "NetworkPolicy")}

    sandbox = policies["sandboxes"]
    assert sandbox["podSelector"]["matchExpressions"] == [{"key": "harbor-run", "operator": "Exists"}]
    from rlstack.episodes.sandboxes.pods import SandboxManager, SandboxSpec

    made = SandboxManager(None, "rl", "run").manifest(SandboxSpec(trial="t", image="a", command=["x"]))  # type: ignore[arg-type]
    assert "harbor-run" in made["metadata"]["labels"]  # what the sandbox manager creates is what the policy confines
    assert not any("harbor-run" in labels for labels in pods.values())  # no rlstack service is caught by it
    proxy_rule, dns_rule = sandbox["egress"]
    assert [n for n, labels in pods.items() if selects(proxy_rule["to"][0]["podSelector"]["matchLabels"], labels)] == ["proxy"]
    assert {p["port"] for p in dns_rule["ports"]} == {53}

    inference = policies["inference"]
    assert {component(n) for n, labels in pods.items() if selects(inference["podSelector"]["matchLabels"], labels)} == {"inference"}

    def allowed(rule: dict) -> set[str]:
        return {component(n) for n, labels in pods.items() for peer in rule["from"] if "podSelector" in peer and "namespaceSelector" not in peer
                and selects(peer["podSelector"]["matchLabels"], labels)}

    # vLLM's port (completions and the unauthenticated dev routes): the pods that call it, no others.
    vllm_rules = [r for r in inference["ingress"] if any(p["port"] == 8001 for p in r.get("ports", []))]
    assert set().union(*map(allowed, vllm_rules)) == {"proxy", "registry"}
    # Every port: the trainer (weight sync: NCCL/gloo pick their own ports) and the other replicas (one NCCL group).
    any_port = [r for r in inference["ingress"] if "ports" not in r]
    assert len(any_port) == 1 and allowed(any_port[0]) == {"trainer", "inference"}
    # Everyone else in the release (env servers, batcher) reaches only the sidecar's port (health, metrics).
    release_wide = [r for r in inference["ingress"]
                    if any(peer.get("podSelector", {}).get("matchLabels", {}).keys() == {"app.kubernetes.io/instance", "app.kubernetes.io/name"}
                           for peer in r["from"])]
    assert [[p["port"] for p in r["ports"]] for r in release_wide] == [[8200]]


def test_a_trials_calls_stay_on_one_proxy_pod_and_its_end_reaches_every_pod(rendered):
    """Token-in keeps a trial's threads in the proxy pod that served its calls: the Service keeps each
    client (a sandbox pod, one trial) on one pod, and the pod that takes the env's end finds the others."""
    _, objects = rendered
    services = {s["metadata"]["name"]: s["spec"] for s in by_kind(objects, "Service")}
    assert services["rl-rlstack-proxy"]["sessionAffinity"] == "ClientIP"
    peers = services["rl-rlstack-proxy-peers"]
    assert peers["clusterIP"] == "None" and peers["selector"] == services["rl-rlstack-proxy"]["selector"]
    env = {e["name"]: e.get("value") for e in workloads(objects)["proxy"]["spec"]["containers"][0]["env"]}
    assert env["RLSTACK_PROXY_PEERS_DNS"] == "rl-rlstack-proxy-peers"
    policies = {p["metadata"]["name"]: p["spec"] for p in by_kind(objects, "NetworkPolicy")}
    if "rl-rlstack-proxy" in policies:  # the pods reach each other's port
        proxy_labels = workloads(objects)["proxy"]["metadata"]["labels"]
        assert any(selects(peer.get("podSelector", {}).get("matchLabels", {"-": "-"}), proxy_labels)
                   for rule in policies["rl-rlstack-proxy"]["ingress"] for peer in rule["from"] if "namespaceSelector" not in peer)


def test_proxy_pods_request_a_core_per_worker(rendered):
    """LiteLLM's per-call work holds one core per proxy process: a pod runs ``proxy.workers`` processes
    and asks the scheduler for at least that many cores (docs/performance.md#sizing-the-control-plane)."""
    values_file, objects = rendered
    values = yaml.safe_load((CHART / "values.yaml").read_text())["proxy"]
    values.update(yaml.safe_load((CHART / values_file).read_text()).get("proxy") or {})
    proxy = workloads(objects)["proxy"]["spec"]["containers"][0]
    env = {e["name"]: e.get("value") for e in proxy["env"]}
    assert env["RLSTACK_PROXY_WORKERS"] == str(values["workers"])
    assert cores(proxy["resources"]["limits"]["cpu"]) >= values["workers"]
    if values_file == "values.yaml":
        assert cores(proxy["resources"]["requests"]["cpu"]) >= values["workers"] >= 2


def cores(quantity: str | int) -> float:
    text = str(quantity)
    return float(text[:-1]) / 1000 if text.endswith("m") else float(text)


def test_dashboards_ship_in_a_sidecar_configmap(rendered):
    _, objects = rendered
    configmap = next(c for c in by_kind(objects, "ConfigMap") if c["metadata"]["name"].endswith("-dashboards"))
    assert configmap["metadata"]["labels"]["grafana_dashboard"] == "1"
    assert set(configmap["data"]) == {"training.json", "batcher.json", "inference.json", "proxy.json", "sandboxes.json"}
    for text in configmap["data"].values():
        assert json.loads(text)["panels"]


def test_service_monitor_renders_when_enabled():
    text = render("values.yaml", "--set", "serviceMonitor.enabled=true")
    assert "kind: ServiceMonitor" in text


def test_every_setting_the_chart_passes_is_one_the_service_reads(rendered, monkeypatch):
    """pydantic-settings ignores unknown env vars, so a misspelt one would silently do nothing."""
    import importlib

    settings_class = {"registry": "RegistrySettings", "batcher": "BatcherSettings", "envs": "EnvSettings",
                      "inference": "InferenceSettings", "proxy": "ProxySettings", "trainer": "TrainerSettings"}
    for name, pod in workloads(rendered[1]).items():
        d = {"metadata": {"name": name}}
        container = pod["spec"]["containers"][0]
        service = container["command"][-1].removeprefix("rlstack.")
        cls = getattr(importlib.import_module(f"rlstack.{service}.config"), settings_class[service])
        prefix = cls.model_config["env_prefix"]
        ours = [e for e in container["env"] if e["name"].startswith(prefix)]
        assert ours, d["metadata"]["name"]
        for e in ours:
            field, _, inner = e["name"].removeprefix(prefix).lower().partition("__")  # a group's: GROUP__FIELD
            known = field in cls.model_fields and (not inner or inner in cls.model_fields[field].annotation.model_fields)
            assert known, f"{d['metadata']['name']}: {e['name']} is not a setting of {cls.__name__}"
        with monkeypatch.context() as m:
            for e in ours:  # what the kubelet would substitute: downward-API fields, $(VAR) references
                m.setenv(e["name"], e.get("value", "from-a-secret-or-field").replace("$(POD_IP)", "10.0.0.1").replace("$(POD_NAME)", "pod-0"))
            cls()


def test_wandb_key_comes_from_a_secret_and_the_chart_refuses_a_project_without_one():
    text = render("values.yaml", "--set", "trainer.wandb.project=rl-runs", "--set", "trainer.wandb.apiKeySecret=wandb")
    trainer = workloads([d for d in yaml.safe_load_all(text) if d])["trainer"]
    env = {e["name"]: e for e in trainer["spec"]["containers"][0]["env"]}
    assert env["RLSTACK_TRAINER_WANDB_PROJECT"]["value"] == "rl-runs"
    assert env["WANDB_API_KEY"]["valueFrom"]["secretKeyRef"] == {"name": "wandb", "key": "api-key"}
    refused = helm("template", "rl", str(CHART), "--set", "trainer.wandb.project=rl-runs")
    assert refused.returncode != 0 and "trainer.wandb.apiKeySecret" in refused.stderr


def trainer_env(*extra: str) -> list[dict]:
    text = render("values.yaml", *extra)
    return workloads([d for d in yaml.safe_load_all(text) if d])["trainer"]["spec"]["containers"][0]["env"]


def test_the_trainer_packs_rows_by_default_and_pads_them_when_asked():
    def pack(env: list[dict]) -> list[str]:
        return [e["value"] for e in env if e["name"] in ("RLSTACK_TRAINER_PACKING__ROW_TOKENS", "RLSTACK_TRAINER_PACK_TOKENS")]

    assert pack(trainer_env()) == ["16384"]
    assert pack(trainer_env("--set", "trainer.packTokens=32768")) == ["32768"]
    assert pack(trainer_env("--set", "trainer.packTokens=null")) == []  # padded micro-batches
    assert pack(trainer_env("--set", "trainer.env.RLSTACK_TRAINER_PACKING__ROW_TOKENS=8192")) == ["8192"]  # one entry: trainer.env wins
    assert pack(trainer_env("--set", "trainer.env.RLSTACK_TRAINER_PACK_TOKENS=8192")) == ["8192"]  # by its old name too
    refused = helm("template", "rl", str(CHART), "--set", "trainer.packTokens=8")
    assert refused.returncode != 0 and "packTokens" in refused.stderr


def test_the_trainer_shares_prefixes_by_default_and_not_when_asked():
    def share(env: list[dict]) -> list[str]:
        return [e["value"] for e in env if e["name"] in ("RLSTACK_TRAINER_PACKING__SHARE_PREFIX", "RLSTACK_TRAINER_SHARE_PREFIX")]

    assert share(trainer_env()) == ["64"]
    assert share(trainer_env("--set", "trainer.sharePrefix=512")) == ["512"]
    assert share(trainer_env("--set", "trainer.sharePrefix=null")) == ["null"]  # off (the trainer's own default is on)
    assert share(trainer_env("--set", "trainer.env.RLSTACK_TRAINER_PACKING__SHARE_PREFIX=128")) == ["128"]
    assert share(trainer_env("--set", "trainer.env.RLSTACK_TRAINER_SHARE_PREFIX=128")) == ["128"]  # by its old name too
    refused = helm("template", "rl", str(CHART), "--set", "trainer.sharePrefix=0")
    assert refused.returncode != 0 and "sharePrefix" in refused.stderr


def test_prometheus_rule_alerts_on_mismatch_quarantine_stalls_and_silent_envs():
    import yaml

    [rule] = [o for o in yaml.safe_load_all(render("values.yaml", "--set", "prometheusRule.enabled=true",
                                                    "--set", "prometheusRule.mismatchKlThreshold=0.2")) if o and o["kind"] == "PrometheusRule"]
    alerts = {r["alert"]: r for g in rule["spec"]["groups"] for r in g["rules"]}
    assert alerts["RlstackTrainingInferenceMismatch"]["expr"] == "rlstack_trainer_mismatch_kl > 0.2"
    assert alerts["RlstackReplicaQuarantined"]["expr"] == "rlstack_registry_endpoints_quarantined > 0"
    assert "{{ $value }}" in alerts["RlstackReplicaQuarantined"]["annotations"]["summary"]
    assert alerts["RlstackRunStalled"]["expr"] == "rlstack_batcher_stalled == 1" and alerts["RlstackRunStalled"]["for"] == "1m"
    assert alerts["RlstackEnvWentSilent"]["expr"] == "increase(rlstack_batcher_env_leases_expired_total[15m]) > 0"
    assert alerts["RlstackSandboxImagePullFailing"]["expr"] == "increase(rlstack_sandbox_pool_pull_failures_total[15m]) > 0"
    assert "{{ $labels.image }}" in alerts["RlstackSandboxImagePullFailing"]["annotations"]["summary"]
    assert 'code="429"' in alerts["RlstackSandboxApiThrottled"]["expr"]
    assert "PrometheusRule" not in render("values.yaml")


def test_agent_values_run_trials_as_pods_on_the_shared_trials_volume():
    objects = [o for o in yaml.safe_load_all(render("values-agent.yaml")) if o]
    env = next(d for d in by_kind(objects, "Deployment") if d["metadata"]["name"].endswith("env-agent"))
    spec = env["spec"]["template"]["spec"]
    values = {e["name"]: e.get("value") for e in spec["containers"][0]["env"]}
    assert values["RLSTACK_ENV_TASK"] == "harbor" and values["RLSTACK_ENV_SANDBOX__BACKEND"] == "kubernetes"
    assert values["RLSTACK_ENV_TRIALS_DIR"] == "/data/trials" and values["RLSTACK_ENV_SANDBOX__TRIALS_SUBPATH"] == "trials"
    # the trial journal: on the volume (it outlives the pod), outside the subpath trial pods mount (an
    # agent that could write a "ready" line would post a group of its own making)
    assert values["RLSTACK_ENV_JOURNAL_DIR"] == "/data/env-journal"
    claim = next(v["persistentVolumeClaim"]["claimName"] for v in spec["volumes"] if "persistentVolumeClaim" in v)
    assert values["RLSTACK_ENV_SANDBOX__CLAIM"] == claim  # trial pods mount the claim the env server reads
    assert values["RLSTACK_ENV_SANDBOX__IMAGE"] == spec["containers"][0]["image"]
    assert spec["serviceAccountName"].endswith("sandbox-manager")
    proxy = next(d for d in by_kind(objects, "Deployment") if d["metadata"]["name"].endswith("-proxy"))
    proxy_env = {e["name"]: e.get("value") for e in proxy["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert proxy_env["RLSTACK_PROXY_TRIALS_DIR"] == values["RLSTACK_ENV_TRIALS_DIR"]  # JSONL and results meet


def test_every_registry_client_sends_the_registry_token(rendered):
    """The registry checks reads too: the proxy (its own setting), the trainer and env servers (the
    variable every RegistryClient falls back to) and helm test's doctor all get the service token."""
    _, objects = rendered
    pods = workloads(objects)
    var = {"proxy": "RLSTACK_PROXY_REGISTRY_TOKEN", "trainer": "RLSTACK_REGISTRY_TOKEN", "inference": "RLSTACK_INFERENCE_REGISTRY_TOKEN"}
    wanted = {n: var.get(component(n), "RLSTACK_REGISTRY_TOKEN") for n in pods if component(n) in var or n.startswith("env-")}
    [test] = [o for o in by_kind(objects, "Pod") if o["metadata"]["labels"]["app.kubernetes.io/component"] == "test"]
    containers = {name: pods[name]["spec"]["containers"][0] for name in wanted} | {"test": test["spec"]["containers"][0]}
    wanted |= {"test": "RLSTACK_REGISTRY_TOKEN"}
    for name, var in wanted.items():
        env = {e["name"]: e for e in containers[name]["env"]}
        assert env[var]["valueFrom"]["secretKeyRef"]["key"] == "service-token", (name, var)
    assert "RLSTACK_BATCHER_TOKEN" in {e["name"] for e in containers["test"]["env"]}


def test_proxy_reads_its_registry_token_from_an_explicit_setting(monkeypatch):
    from rlstack.proxy.config import ProxySettings

    monkeypatch.setenv("RLSTACK_PROXY_REGISTRY_TOKEN", "tok")
    assert ProxySettings().registry_token.get_secret_value() == "tok"
