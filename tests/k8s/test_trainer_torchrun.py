"""The trainer on every GPU of its pod (torchrun), and over several pods (an Indexed Job with a
static rendezvous on index 0): the rendered objects, the probe script, the refusals, and strict
validation of what the multi-node values render."""

from __future__ import annotations

import http.server
import os
import socket
import subprocess
import sys
import threading

import pytest
import yaml

from tests.k8s.conftest import CHART, by_kind, helm, render

PLAIN = ["python3", "-m", "rlstack.trainer"]


def objects(*args: str) -> list[dict]:
    return [o for o in yaml.safe_load_all(render("values.yaml", *args)) if o]


def trainer_job(objs: list[dict]) -> dict:
    [job] = [j for j in by_kind(objs, "Job") if j["metadata"]["labels"]["app.kubernetes.io/component"] == "trainer"]
    return job


def service(objs: list[dict], name: str) -> dict:
    return next(s for s in by_kind(objs, "Service") if s["metadata"]["name"] == name)


def flag(command: list[str], name: str) -> str:
    return command[command.index(name) + 1]


def selects(selector: dict, labels: dict) -> bool:
    return all(labels.get(k) == v for k, v in selector.items())


def test_one_gpu_keeps_the_plain_process_and_http_probes():
    objs = objects()
    job = trainer_job(objs)
    assert "completionMode" not in job["spec"]
    pod = job["spec"]["template"]["spec"]
    container = pod["containers"][0]
    assert container["command"] == PLAIN
    assert container["livenessProbe"]["httpGet"]["port"] == "http"
    assert "subdomain" not in pod and not any(v["name"] == "dshm" for v in pod["volumes"])
    labels = job["spec"]["template"]["metadata"]["labels"]
    assert not [s for s in by_kind(objs, "Service") if s["spec"].get("clusterIP") == "None" and selects(s["spec"]["selector"], labels)]
    # One pod: only the service policy (its HTTP port), not the peers' every-port one.
    trainer_policies = [p for p in by_kind(objs, "NetworkPolicy") if p["metadata"]["name"].endswith("-trainer")]
    assert all(rule.get("ports") for p in trainer_policies for rule in p["spec"].get("ingress", []))


@pytest.mark.parametrize("workload", ["Job", "Deployment"])
def test_several_gpus_run_one_rank_per_gpu_under_torchrun(workload):
    objs = objects("--set", "trainer.gpus=4", "--set", f"trainer.workload={workload}")
    [owner] = [o for o in by_kind(objs, workload) if o["metadata"]["labels"]["app.kubernetes.io/component"] == "trainer"]
    pod = owner["spec"]["template"]["spec"]
    container = pod["containers"][0]
    command = container["command"]
    assert command[:3] == ["python3", "-m", "torch.distributed.run"] and command[-2:] == ["-m", "rlstack.trainer"]
    assert flag(command, "--nproc-per-node") == "4" and "--nnodes" not in command
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 4
    # One pod: rank 0 (LOCAL_RANK 0) serves the port in this very pod, so the HTTP probes stay.
    assert container["readinessProbe"]["httpGet"] == {"path": "/readyz", "port": "http"}
    dshm = next(v for v in pod["volumes"] if v["name"] == "dshm")
    assert dshm["emptyDir"] == {"medium": "Memory", "sizeLimit": "8Gi"}
    assert {"name": "dshm", "mountPath": "/dev/shm"} in container["volumeMounts"]
    trainer_service = service(objs, "rl-rlstack-trainer")
    assert selects(trainer_service["spec"]["selector"], owner["spec"]["template"]["metadata"]["labels"])


def test_several_nodes_make_an_indexed_job_with_a_static_rendezvous_on_index_0():
    objs = objects("--set", "trainer.nodes=2", "--set", "trainer.gpus=8")
    job = trainer_job(objs)
    spec = job["spec"]
    assert spec["completionMode"] == "Indexed" and spec["completions"] == spec["parallelism"] == 2
    template = spec["template"]
    pod = template["spec"]
    container = pod["containers"][0]
    command = container["command"]
    assert command[:3] == ["python3", "-m", "torch.distributed.run"] and command[-2:] == ["-m", "rlstack.trainer"]
    assert flag(command, "--nproc-per-node") == "8" and flag(command, "--nnodes") == "2"
    # The Job controller sets JOB_COMPLETION_INDEX in every container; the kubelet expands $(VAR) in commands.
    assert flag(command, "--node-rank") == "$(JOB_COMPLETION_INDEX)"
    assert flag(command, "--rdzv-backend") == "static"  # node rank = index, so global rank 0 is on index 0
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 8

    # Index 0's pod is <job>-0 (Indexed Job hostnames), reachable as <job>-0.<subdomain> through the headless Service.
    peers = service(objs, pod["subdomain"])
    assert peers["spec"]["clusterIP"] == "None" and peers["spec"]["publishNotReadyAddresses"] is True
    assert selects(peers["spec"]["selector"], template["metadata"]["labels"])
    assert flag(command, "--master-addr") == f"{job['metadata']['name']}-0.{peers['metadata']['name']}"
    assert flag(command, "--master-port") == str(peers["spec"]["ports"][0]["port"])

    # The trainer's port is served by index 0 alone: its Service selects that pod only.
    trainer_service = service(objs, "rl-rlstack-trainer")
    selector = trainer_service["spec"]["selector"]
    assert selector.pop("batch.kubernetes.io/job-completion-index") == "0"
    assert selects(selector, template["metadata"]["labels"])
    assert [p["targetPort"] for p in trainer_service["spec"]["ports"]] == ["http"]

    # Every index runs the same template: the probes pass on the others and ask the port on index 0,
    # after a startup window as long as the rendezvous may wait for a pod.
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["exec"]["command"][:2] == ["sh", "-c"], probe
    startup = container["startupProbe"]
    assert startup["periodSeconds"] * startup["failureThreshold"] == int(flag(command, "--rdzv-conf").removeprefix("timeout="))


def test_several_nodes_let_the_trainer_pods_reach_each_other_on_every_port():
    objs = objects("--set", "trainer.nodes=3")
    labels = trainer_job(objs)["spec"]["template"]["metadata"]["labels"]

    def chooses(selector: dict) -> bool:  # matchLabels, and the Exists expressions the chart uses
        exists = [e["key"] for e in selector.get("matchExpressions", []) if e["operator"] == "Exists"]
        return selects(selector.get("matchLabels", {}), labels) and all(k in labels for k in exists)

    selecting = [p["spec"] for p in by_kind(objs, "NetworkPolicy") if chooses(p["spec"]["podSelector"])]
    assert len(selecting) == 1 and selecting[0]["policyTypes"] == ["Ingress"]  # egress is not restricted
    rules = selecting[0]["ingress"]
    peers = [r for r in rules if "ports" not in r]
    assert len(peers) == 1 and [selects(f["podSelector"]["matchLabels"], labels) for f in peers[0]["from"]] == [True]
    http = [r for r in rules if "ports" in r]
    assert [[p["port"] for p in r["ports"]] for r in http] == [[8400]]


def test_a_long_release_name_still_gives_index_pods_a_valid_hostname():
    objs = objects("--set", "fullnameOverride=" + "a" * 63, "--set", "trainer.nodes=12")
    job = trainer_job(objs)
    assert len(f"{job['metadata']['name']}-11") <= 63
    assert len(job["spec"]["template"]["spec"]["subdomain"]) <= 63


@pytest.mark.parametrize(("settings", "complaint"), [
    (["trainer.nodes=2", "trainer.workload=Deployment"], "set trainer.workload=Job"),
    (["trainer.nodes=2", "sharedStorage.accessMode=ReadWriteOnce"], "must be ReadWriteMany"),
    (["trainer.gpus=2", "trainer.env.RLSTACK_TRAINER_SYNC__MODE=ipc"], "the chart runs them as separate pods"),
    (["trainer.gpus=2", "trainer.env.RLSTACK_TRAINER_SYNC_MODE=ipc"], "the chart runs them as separate pods"),  # the old name
    (["trainer.nodes=0"], "/trainer/nodes"),
])
def test_impossible_trainer_shapes_are_refused(settings, complaint):
    done = helm("template", "rl", str(CHART), *[a for s in settings for a in ("--set", s)])
    assert done.returncode != 0 and complaint in done.stderr, done.stderr


def test_multi_node_values_lint_and_validate_strictly(tmp_manifest):
    args = ("--set", "trainer.nodes=2", "--set", "trainer.gpus=8", "--set", "serviceMonitor.enabled=false")
    done = helm("lint", "--strict", str(CHART), *args)
    assert done.returncode == 0, done.stdout + done.stderr
    tmp_manifest.write_text(render("values.yaml", *args))
    for version in ("1.31.0", "1.35.0"):
        done = subprocess.run([sys.executable, "-m", "kubernetes_validate", "--strict", "--quiet", "-k", version, str(tmp_manifest)],
                              capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stdout + done.stderr


def test_index_probe_passes_on_other_indexes_and_asks_the_port_on_index_0(tmp_path):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    container = trainer_job(objects("--set", "trainer.nodes=2", "--set", f"trainer.port={port}"))["spec"]["template"]["spec"]["containers"][0]
    liveness = container["livenessProbe"]["exec"]["command"]
    readiness = container["readinessProbe"]["exec"]["command"]

    def probe(command: list[str], index: str) -> int:
        # The kubelet runs exec probes with the container's env; python3 is the image's interpreter.
        env = {**os.environ, "JOB_COMPLETION_INDEX": index, "PATH": f"{os.path.dirname(sys.executable)}:{os.environ['PATH']}"}
        return subprocess.run(command, env=env, capture_output=True, timeout=30).returncode

    assert probe(liveness, "1") == 0  # not index 0: nothing to ask
    assert probe(liveness, "0") != 0  # index 0 with nothing listening

    class Health(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
            self.send_response(200 if self.path == "/healthz" else 503)
            self.end_headers()

        def log_message(self, *args: object) -> None:
            pass

    server = http.server.HTTPServer(("127.0.0.1", port), Health)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        assert probe(liveness, "0") == 0
        assert probe(readiness, "0") != 0  # /readyz answering 503 is not ready
    finally:
        server.shutdown()
        server.server_close()
