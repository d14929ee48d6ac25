"""What a real `helm install` on a GPU cluster needs, checked on the rendered objects: the model
on the volume before anything loads it, GPUs and /dev/shm for tensor parallelism, rollouts and
drains that cannot wait forever, a trainer that frees its GPU, one source of truth for the
sandbox label and account, the scheduling knobs, scale-out objects and the helm test."""

from __future__ import annotations

import inspect
import json
import os
import subprocess
import sys

import yaml

from tests.conftest import REPO
from tests.k8s.conftest import CHART, VALUES, by_kind, helm, render
from tests.k8s.pod_security import restricted_violations
from tests.k8s.test_chart import component, workloads


def objects(*args: str, values: str = "values.yaml") -> list[dict]:
    return [o for o in yaml.safe_load_all(render(values, *args)) if o]


def container(pod: dict) -> dict:
    return pod["spec"]["containers"][0]


def env_of(pod: dict) -> dict[str, str | None]:
    return {e["name"]: e.get("value") for e in container(pod)["env"]}


def model_job(objs: list[dict]) -> dict:
    [job] = [j for j in by_kind(objs, "Job") if j["metadata"]["labels"]["app.kubernetes.io/component"] == "model"]
    return job


# --- item 1 / 7: the model reaches the volume before a replica or the trainer starts ---

def test_model_job_downloads_from_the_hub_and_loaders_wait_for_its_marker():
    objs = objects("--set", "model.source.hub.tokenSecret=hf")
    pod = model_job(objs)["spec"]["template"]
    env = {e["name"]: e for e in container(pod)["env"]}
    assert env["RLSTACK_MODEL_SOURCE"]["value"] == "hub" and env["RLSTACK_MODEL_HUB_ID"]["value"] == "Qwen/Qwen2.5-0.5B-Instruct"
    model_dir = env["RLSTACK_MODEL_DIR"]["value"]
    assert model_dir.startswith("/data/models/policy-")  # one directory per source (test_upgrades.py)
    assert env["HF_TOKEN"]["valueFrom"]["secretKeyRef"] == {"name": "hf", "key": "token"}
    script = next(c for c in by_kind(objs, "ConfigMap") if c["metadata"]["name"].endswith("-model-fetch"))
    assert script["data"]["fetch_model.py"] == (CHART / "files" / "fetch_model.py").read_text().rstrip("\n")
    pods = workloads(objs)
    for name in ("inference", "trainer"):
        [wait] = pods[name]["spec"]["initContainers"]
        assert wait["command"][-1] == f"{model_dir}/.rlstack-model.json"  # the marker fetch_model writes last
        assert env_of(pods[name])[f"RLSTACK_{name.upper()}_MODEL"] == model_dir
        assert wait["image"] == container(pods[name])["image"]  # no extra image to pull (kind: pullPolicy Never)


def test_cpu_values_build_the_demo_model_in_the_job_and_every_pod_passes_the_restricted_profile():
    """A namespace under Pod Security ``restricted`` admits every pod values-cpu.yaml makes (a
    hostPath model source was refused there); the hostPath source stays an option, and is named."""
    objs = objects(values="values-cpu.yaml")
    pod = model_job(objs)["spec"]["template"]["spec"]
    assert env_of({"spec": pod})["RLSTACK_MODEL_SOURCE"] == "demo"
    assert {v["name"] for v in pod["volumes"]} == {"shared", "script"}
    specs = [(o["kind"], o["metadata"]["name"], o["spec"]["template"]["spec"]) for o in by_kind(objs, "Deployment") + by_kind(objs, "Job")]
    specs += [("Pod", o["metadata"]["name"], o["spec"]) for o in by_kind(objs, "Pod")]  # helm test hooks
    assert len(specs) >= 7
    for kind, name, spec in specs:
        assert restricted_violations(spec) == [], (kind, name)
    with_host = model_job(objects("--set", "model.source.type=hostPath", "--set", "model.source.hostPath=/m", values="values-cpu.yaml"))
    assert any("hostPath" in v for v in restricted_violations(with_host["spec"]["template"]["spec"]))


def test_kind_gpu_values_name_a_model_something_provides():
    objs = objects(values="values-kind-gpu.yaml")
    env = env_of(model_job(objs)["spec"]["template"])
    assert env["RLSTACK_MODEL_SOURCE"] == "hub" and env["RLSTACK_MODEL_DIR"].startswith("/data/models/Qwen2.5-0.5B-Instruct-")


def test_model_source_none_renders_no_job_and_waits_for_the_config():
    objs = objects("--set", "model.source.type=none")
    assert not [j for j in by_kind(objs, "Job") if j["metadata"]["labels"]["app.kubernetes.io/component"] == "model"]
    assert workloads(objs)["inference"]["spec"]["initContainers"][0]["command"][-1] == "/data/models/policy/config.json"


def test_fetch_model_builds_the_demo_model_with_rlstack(tmp_path):
    dest = tmp_path / "volume" / "models" / "demo"
    env = {**os.environ, "RLSTACK_MODEL_DIR": str(dest), "RLSTACK_MODEL_SOURCE": "demo", "RLSTACK_MODEL_DEMO_STEPS": "2"}
    run = subprocess.run([sys.executable, str(CHART / "files" / "fetch_model.py")], env=env, capture_output=True, text=True, timeout=600)
    assert run.returncode == 0, run.stderr
    assert json.loads((dest / ".rlstack-model.json").read_text()) == {"source": "demo", "steps": "2"}
    assert (dest / "config.json").is_file() and (dest / "rlstack-warm-start.json").is_file()
    assert not dest.with_name("demo.partial").exists()


def test_fetch_model_copies_once_and_writes_the_marker_last(tmp_path):
    source = tmp_path / "demo"
    source.mkdir()
    (source / "config.json").write_text("{}")
    (source / "model.safetensors").write_text("w")
    dest = tmp_path / "volume" / "models" / "demo"  # the parent does not exist on a fresh volume
    env = {"RLSTACK_MODEL_DIR": str(dest), "RLSTACK_MODEL_SOURCE": "copy", "RLSTACK_MODEL_COPY_FROM": str(source)}
    run = subprocess.run([sys.executable, str(CHART / "files" / "fetch_model.py")], env=env, capture_output=True, text=True)
    assert run.returncode == 0, run.stderr
    assert (dest / "model.safetensors").read_text() == "w"
    assert json.loads((dest / ".rlstack-model.json").read_text()) == {"source": "copy", "from": str(source)}
    (source / "model.safetensors").write_text("changed")
    again = subprocess.run([sys.executable, str(CHART / "files" / "fetch_model.py")], env=env, capture_output=True, text=True)
    assert "already holds" in again.stdout and (dest / "model.safetensors").read_text() == "w"
    env["RLSTACK_MODEL_COPY_FROM"] = str(source) + "/"  # another source into a finished directory: refused, model kept
    bad = subprocess.run([sys.executable, str(CHART / "files" / "fetch_model.py")], env=env, capture_output=True, text=True)
    assert bad.returncode != 0 and "never replaced" in bad.stderr and (dest / "model.safetensors").read_text() == "w"
    (source / "config.json").unlink()
    env["RLSTACK_MODEL_DIR"] = str(dest) + "-other"  # not a model: refused, nothing left in place
    bad = subprocess.run([sys.executable, str(CHART / "files" / "fetch_model.py")], env=env, capture_output=True, text=True)
    assert bad.returncode != 0 and "config.json" in bad.stderr and not (tmp_path / "volume" / "models" / "demo-other").exists()


# --- item 2 / 3: python3, liveness on the sidecar, load timeout = startup window ---

def test_replica_liveness_is_the_sidecars_healthz_and_its_load_timeout_covers_the_startup_window():
    from rlstack.inference.config import InferenceSettings

    for values in VALUES:
        for name, pod in workloads(objects(values=values)).items():
            if component(name) != "inference":
                continue
            c = container(pod)
            ports = {p["name"]: p["containerPort"] for p in c["ports"]}
            assert c["livenessProbe"]["httpGet"] == {"path": "/healthz", "port": "http"}
            assert ports["http"] == int(env_of(pod)["RLSTACK_INFERENCE_PORT"]) != ports["vllm"]  # the sidecar, not vLLM
            window = c["startupProbe"]["periodSeconds"] * c["startupProbe"]["failureThreshold"]
            assert float(env_of(pod)["RLSTACK_INFERENCE_STARTUP_TIMEOUT_SECONDS"]) == window
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())["inference"]["startupProbe"]
    assert InferenceSettings.model_fields["startup_timeout_seconds"].default >= defaults["periodSeconds"] * defaults["failureThreshold"]


# --- item 4: NetworkPolicies ---

def test_sandbox_dns_reaches_nodelocal_dnscache_and_vllm_metrics_can_be_closed():
    objs = objects()
    policies = {p["metadata"]["name"].removeprefix("rl-rlstack-"): p["spec"] for p in by_kind(objs, "NetworkPolicy")}
    dns = policies["sandboxes"]["egress"][1]["to"]
    assert {"ipBlock": {"cidr": "169.254.20.10/32"}} in dns
    assert any(p.get("podSelector", {}).get("matchLabels") == {"k8s-app": "kube-dns"} for p in dns)
    scrape = [r for r in policies["inference"]["ingress"] if any("namespaceSelector" in p for p in r["from"])]
    assert {p["port"] for r in scrape for p in r["ports"]} == {8200, 8001}
    closed = {p["metadata"]["name"]: p["spec"] for p in by_kind(objects("--set", "networkPolicies.scrapeVllmMetrics=false"), "NetworkPolicy")}
    scrape = [r for r in closed["rl-rlstack-inference"]["ingress"] if any("namespaceSelector" in p for p in r["from"])]
    assert {p["port"] for r in scrape for p in r["ports"]} == {8200}


# --- item 5: tensor / pipeline parallelism ---

def test_tensor_and_pipeline_parallel_request_their_gpus_and_a_memory_backed_shm():
    pod = workloads(objects("--set", "inference.tensorParallelSize=4", "--set", "inference.pipelineParallelSize=2"))["inference"]
    c = container(pod)
    assert c["resources"]["limits"]["nvidia.com/gpu"] == 8
    assert env_of(pod)["RLSTACK_INFERENCE_TENSOR_PARALLEL_SIZE"] == "4"
    assert json.loads(env_of(pod)["RLSTACK_INFERENCE_EXTRA_VLLM_ARGS"]) == ["--pipeline-parallel-size", "2"]
    shm = next(v for v in pod["spec"]["volumes"] if v["name"] == "dshm")
    assert shm["emptyDir"] == {"medium": "Memory", "sizeLimit": "8Gi"}
    assert {"name": "dshm", "mountPath": "/dev/shm"} in c["volumeMounts"]
    cpu = workloads(objects(values="values-cpu.yaml"))["inference"]
    assert "nvidia.com/gpu" not in container(cpu)["resources"]["limits"]
    refused = helm("template", "rl", str(CHART), "-f", str(CHART / "values-cpu.yaml"), "--set", "inference.tensorParallelSize=2")
    assert refused.returncode != 0 and "needs inference.device=cuda" in refused.stderr


# --- item 6: one source of truth for the sandbox label and account ---

def test_sandbox_label_is_the_one_the_code_sets_and_an_existing_account_is_only_bound():
    from rlstack.episodes.sandboxes.pods import SandboxManager

    objs = objects()
    policy = next(p for p in by_kind(objs, "NetworkPolicy") if p["metadata"]["name"].endswith("-sandboxes"))
    code_label = inspect.signature(SandboxManager).parameters["run_label"].default
    assert policy["spec"]["podSelector"]["matchExpressions"][0]["key"] == code_label
    refused = helm("template", "rl", str(CHART), "--set", "sandboxes.runLabel=mine")
    assert refused.returncode != 0 and "runLabel" in refused.stderr  # no value that the code would ignore

    objs = objects("--set", "sandboxes.serviceAccount.create=false", "--set", "sandboxes.serviceAccount.name=team-runner")
    assert "team-runner" not in {sa["metadata"]["name"] for sa in by_kind(objs, "ServiceAccount")}
    binding = next(b for b in by_kind(objs, "RoleBinding") if b["metadata"]["name"].endswith("sandbox-manager"))
    assert binding["subjects"][0]["name"] == "team-runner"
    assert workloads(objs)["env-arithmetic"]["spec"]["serviceAccountName"] == "team-runner"
    missing = helm("template", "rl", str(CHART), "--set", "sandboxes.serviceAccount.create=false")
    assert missing.returncode != 0 and "sandboxes.serviceAccount.name" in missing.stderr


# --- item 7: images, auth Secret ---

def test_images_take_a_registry_prefix_and_the_chart_can_create_the_auth_secret():
    objs = objects("--set", "imageRegistry=registry.example.com/team/", "--set", "auth.create=true")
    assert container(workloads(objs)["inference"])["image"] == "registry.example.com/team/rlstack/vllm:0.1.0"
    [hook] = [j for j in by_kind(objs, "Job") if j["metadata"]["name"] == "rl-rlstack-auth-init"]  # test_auth_secret.py
    refs = {e["valueFrom"]["secretKeyRef"]["name"] for pod in workloads(objs).values() for e in container(pod)["env"]
            if "secretKeyRef" in e.get("valueFrom", {})}
    assert refs == {"rl-rlstack-auth"} and "rl-rlstack-auth" in container(hook["spec"]["template"])["command"]
    unnamed = helm("template", "rl", str(CHART), "--set", "auth.existingSecret=")
    assert unnamed.returncode != 0 and "auth.create=true" in unnamed.stderr


# --- item 9: upgrades and drains ---

def test_rollouts_never_need_a_spare_gpu_or_time_out_during_a_model_load():
    for values in VALUES:
        replicas = [d for d in by_kind(objects(values=values), "Deployment") if d["metadata"]["labels"]["app.kubernetes.io/component"] == "inference"]
        assert replicas
        for inference in replicas:  # one Deployment per policy
            assert inference["spec"]["strategy"]["rollingUpdate"]["maxSurge"] == 0
            startup = container(inference["spec"]["template"])["startupProbe"]
            assert inference["spec"]["progressDeadlineSeconds"] > startup["periodSeconds"] * startup["failureThreshold"]


def test_disruption_budgets_never_block_a_drain():
    for values in VALUES:
        objs = objects(values=values)
        for pdb in by_kind(objs, "PodDisruptionBudget"):
            selector = pdb["spec"]["selector"]["matchLabels"]
            [deployment] = [d for d in by_kind(objs, "Deployment") if d["spec"]["selector"]["matchLabels"] == selector]
            assert "minAvailable" not in pdb["spec"] and pdb["spec"]["maxUnavailable"] >= 1
            assert deployment["spec"]["replicas"] > 1, (values, pdb["metadata"]["name"])


def test_trainer_is_a_job_that_exits_when_done_and_a_deployment_on_request():
    objs = objects()
    [job] = [j for j in by_kind(objs, "Job") if j["metadata"]["labels"]["app.kubernetes.io/component"] == "trainer"]
    pod = job["spec"]["template"]
    assert pod["spec"]["restartPolicy"] == "OnFailure" and env_of(pod)["RLSTACK_TRAINER_EXIT_WHEN_DONE"] == "true"
    assert container(pod)["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert job["metadata"]["name"] == job["metadata"]["name"][:63]
    changed = [j["metadata"]["name"] for j in by_kind(objects("--set", "trainer.env.RLSTACK_TRAINER_STEPS=5"), "Job")]
    assert job["metadata"]["name"] in changed  # the Job is the run, whatever its settings (test_upgrades.py)
    deployment = objects("--set", "trainer.workload=Deployment")
    trainer = next(d for d in by_kind(deployment, "Deployment") if d["metadata"]["name"].endswith("-trainer"))
    assert trainer["spec"]["strategy"] == {"type": "Recreate"}
    assert env_of(trainer["spec"]["template"])["RLSTACK_TRAINER_EXIT_WHEN_DONE"] == "false"


# --- scheduling knobs, scale-out, helm test ---

def test_scheduling_knobs_reach_every_pod_and_a_component_overrides_them():
    objs = objects("--set", "podDefaults.priorityClassName=rl-batch", "--set", "podDefaults.podLabels.team=rl",
                   "--set", "inference.runtimeClassName=nvidia", "--set", "inference.priorityClassName=rl-serving",
                   "--set", "podDefaults.extraEnv[0].name=HTTPS_PROXY", "--set", "podDefaults.extraEnv[0].value=http://proxy:3128",
                   "--set", "trainer.topologySpreadConstraints[0].maxSkew=1",
                   "--set", "trainer.topologySpreadConstraints[0].topologyKey=kubernetes.io/hostname",
                   "--set", "trainer.topologySpreadConstraints[0].whenUnsatisfiable=DoNotSchedule",
                   "--set", "imagePullSecrets[0].name=regcred")
    pods = workloads(objs)
    for name, pod in pods.items():
        assert pod["metadata"]["labels"]["team"] == "rl"
        assert pod["spec"]["priorityClassName"] == ("rl-serving" if name == "inference" else "rl-batch")
        assert pod["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
        assert env_of(pod)["HTTPS_PROXY"] == "http://proxy:3128"
    assert pods["inference"]["spec"]["runtimeClassName"] == "nvidia" and "runtimeClassName" not in pods["proxy"]["spec"]
    assert pods["trainer"]["spec"]["topologySpreadConstraints"][0]["topologyKey"] == "kubernetes.io/hostname"


def test_autoscalers_target_the_deployments_and_leave_replicas_to_them():
    objs = objects("--set", "inference.autoscaling.enabled=true", "--set", "inference.autoscaling.keda.serverAddress=http://prom:9090",
                   "--set", "proxy.autoscaling.enabled=true")
    deployments = {d["metadata"]["name"]: d for d in by_kind(objs, "Deployment")}
    [scaled] = by_kind(objs, "ScaledObject")
    assert scaled["spec"]["scaleTargetRef"]["name"] in deployments and "replicas" not in deployments[scaled["spec"]["scaleTargetRef"]["name"]]["spec"]
    trigger = scaled["spec"]["triggers"][0]
    assert trigger["type"] == "prometheus" and "vllm:num_requests_waiting" in trigger["metadata"]["query"]
    assert trigger["metadata"]["threshold"] == "8" and trigger["metadata"]["serverAddress"] == "http://prom:9090"
    [hpa] = by_kind(objs, "HorizontalPodAutoscaler")
    assert hpa["spec"]["scaleTargetRef"]["name"] == "rl-rlstack-proxy" and "replicas" not in deployments["rl-rlstack-proxy"]["spec"]
    hpa_objs = objects("--set", "inference.autoscaling.enabled=true", "--set", "inference.autoscaling.type=hpa")
    [hpa] = by_kind(hpa_objs, "HorizontalPodAutoscaler")
    assert hpa["spec"]["metrics"][0]["pods"]["metric"]["name"] == "vllm_num_requests_waiting"
    no_prometheus = helm("template", "rl", str(CHART), "--set", "inference.autoscaling.enabled=true")
    assert no_prometheus.returncode != 0 and "serverAddress" in no_prometheus.stderr


ENV_AUTOSCALED = """
envs:
  - name: arith
    port: 8300
    env: {RLSTACK_ENV_TASK: arithmetic}
    autoscaling:
      enabled: true
      minReplicas: 1
      maxReplicas: 4
      targetQueueSequences: 128
      sequencesPerPod: 32
      keda: {serverAddress: "http://prom:9090", pollingInterval: 30, cooldownPeriod: 300}
"""


def test_env_servers_scale_on_the_batcher_queue_shortfall(tmp_path):
    values = tmp_path / "envs.yaml"
    values.write_text(ENV_AUTOSCALED)
    objs = objects("-f", str(values))
    [scaled] = by_kind(objs, "ScaledObject")
    env = next(d for d in by_kind(objs, "Deployment") if d["metadata"]["name"] == "rl-rlstack-env-arith")
    assert scaled["spec"]["scaleTargetRef"]["name"] == "rl-rlstack-env-arith" and "replicas" not in env["spec"]
    trigger = scaled["spec"]["triggers"][0]["metadata"]
    assert trigger["query"] == 'clamp_min(128 - sum(rlstack_batcher_queue_sequences{namespace="rl"}), 0)'
    assert trigger["threshold"] == "32"
    exported = "".join(p.read_text() for p in (REPO / "services" / "batcher").glob("*.py"))
    assert '"queue_sequences"' in exported  # the batcher exports rlstack_batcher_queue_sequences (prefix + name)
    values.write_text(ENV_AUTOSCALED.replace('"http://prom:9090"', '""'))
    missing = helm("template", "rl", str(CHART), "-f", str(values))
    assert missing.returncode != 0 and "envs[arith].autoscaling.keda.serverAddress" in missing.stderr


def test_autoscaler_objects_validate_strictly(tmp_manifest):
    tmp_manifest.write_text(render("values.yaml", "--set", "inference.autoscaling.enabled=true", "--set", "inference.autoscaling.type=hpa",
                                   "--set", "proxy.autoscaling.enabled=true"))
    for version in ("1.31.0", "1.35.0"):
        done = subprocess.run([sys.executable, "-m", "kubernetes_validate", "--strict", "--quiet", "-k", version, str(tmp_manifest)],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr


def test_helm_test_runs_doctor_with_a_trial_key_for_the_path_its_ping_uses():
    from rlstack.ops import doctor

    objs = objects()
    [pod] = by_kind(objs, "Pod")
    assert pod["metadata"]["annotations"]["helm.sh/hook"] == "test"
    script = container(pod)["command"][-1]
    assert "rlstack trial-key --run doctor --trial ping" in script and '--trial-key "$key"' in script
    assert "/trials/doctor/ping/" in inspect.getsource(doctor.check_ping)  # the run/trial the key must name
    env = {e["name"]: e for e in container(pod)["env"]}
    assert env["RLSTACK_PROXY_TRIAL_KEY_SECRET"]["valueFrom"]["secretKeyRef"]["key"] == "trial-key-secret"
    assert env["PROXY_URL"]["value"] == "http://rl-rlstack-proxy:4000"
