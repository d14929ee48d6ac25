"""What the first real node (one kubelet, 2 cores; docs/record/real-nodes.md#the-first-node-2026-11-27) found in
values-cpu.yaml: each test fails on the values that were installed there first."""

from __future__ import annotations

from lightkube.utils.quantity import parse_quantity

from tests.k8s.conftest import by_kind, env_of, objects_of

NODE_MILLICORES = 2000
"""The node the CPU values are for: a laptop's kind cluster, or this machine's single kubelet."""


def millicores(quantity: str | int | float) -> int:
    return round(parse_quantity(quantity) * 1000)


def pod_cpu_request(spec: dict) -> int:
    """What the scheduler books for a pod: its containers' sum, or its largest init container if more."""
    def cpu(c: dict) -> int:
        return millicores(c.get("resources", {}).get("requests", {}).get("cpu", 0))
    return max([sum(cpu(c) for c in spec["containers"]), *(cpu(c) for c in spec.get("initContainers", []))])


def booked(objects: list[dict]) -> tuple[int, int]:
    """CPU booked at once by an install (every Deployment's pods, the Jobs, the hook Job, the
    helm test pod), and the largest Deployment pod (a rolling upgrade's surge pod)."""
    total, surge = 0, 0
    for d in by_kind(objects, "Deployment"):
        each = pod_cpu_request(d["spec"]["template"]["spec"])
        total += each * d["spec"].get("replicas", 1)
        surge = max(surge, each)
    total += sum(pod_cpu_request(j["spec"]["template"]["spec"]) for j in by_kind(objects, "Job"))
    total += sum(pod_cpu_request(p["spec"]) for p in by_kind(objects, "Pod"))
    return total, surge


def test_the_cpu_values_fit_one_two_core_node_with_a_rolling_upgrade_under_way():
    """The default requests (a core each for the replica and the trainer) left the replica, the
    batcher and the registry Pending, and then the pre-upgrade hook Job too, so no upgrade could fix it."""
    total, surge = booked(objects_of("values-cpu.yaml"))
    assert total + surge <= NODE_MILLICORES, f"{total}m booked + {surge}m surge on a {NODE_MILLICORES}m node"


def test_the_cpu_agent_values_leave_room_for_every_concurrent_sandbox():
    objects = objects_of("values-cpu.yaml", "values-agent.yaml")
    total, surge = booked(objects)
    settings = env_of(objects, "Deployment", "env-agent")
    sandboxes = int(settings["RLSTACK_ENV_MAX_CONCURRENT_TRIALS"]) * millicores(settings["RLSTACK_SANDBOX_POD_CPU_REQUEST"])
    assert total + surge + sandboxes <= NODE_MILLICORES, f"{total}m + {surge}m surge + {sandboxes}m of sandboxes"


def test_the_sandbox_cpu_request_the_chart_passes_is_the_one_the_sandbox_pods_get(monkeypatch):
    from rlstack.episodes.sandboxes.pods import SandboxPodSecurity

    for name, value in env_of(objects_of("values-cpu.yaml", "values-agent.yaml"), "Deployment", "env-agent").items():
        if name.startswith("RLSTACK_SANDBOX_POD_"):
            monkeypatch.setenv(name, value)
    assert SandboxPodSecurity().cpu_request == "25m"


def test_the_cpu_replica_has_the_dev_shm_vllm_needs():
    """vLLM's shared-memory broadcast ring takes 160 MiB of /dev/shm; the container runtime's
    default is 64 MiB, and the replica died at start-up ("Insufficient space in /dev/shm")."""
    [replica] = [d for d in by_kind(objects_of("values-cpu.yaml"), "Deployment") if d["metadata"]["name"].endswith("inference")]
    spec = replica["spec"]["template"]["spec"]
    [mount] = [m for m in spec["containers"][0].get("volumeMounts", []) if m["mountPath"] == "/dev/shm"]
    [volume] = [v for v in spec["volumes"] if v["name"] == mount["name"]]
    assert volume["emptyDir"]["medium"] == "Memory" and parse_quantity(volume["emptyDir"]["sizeLimit"]) >= 160 * 2**20


def test_every_probe_waits_long_enough_for_a_busy_service(rendered):
    """The kubelet's default 1 s: the proxy's /healthz took up to 1.8 s under a run's load on a
    2-core node, and its liveness probe restarted it mid-run, dropping every group in flight."""
    for kind in ("Deployment", "Job"):
        for w in by_kind(rendered[1], kind):
            for c in w["spec"]["template"]["spec"]["containers"]:
                for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
                    if probe in c:
                        assert c[probe].get("timeoutSeconds", 1) >= 5, f"{w['metadata']['name']}: {probe}"


def test_liveness_waits_for_every_service_to_start(rendered):
    """The proxy took over a minute to start on a busy node; liveness restarted it as it began to serve."""
    for w in by_kind(rendered[1], "Deployment"):
        for c in w["spec"]["template"]["spec"]["containers"]:
            if "livenessProbe" in c:
                startup = c.get("startupProbe")
                assert startup, f"{w['metadata']['name']}: liveness counts from the container's start"
                assert startup["periodSeconds"] * startup["failureThreshold"] >= 300, w["metadata"]["name"]


NODE_MEMORY = 23 * 2**30
"""The second real node's memory (this machine: 23 GiB), where 16 sandboxes booked at 2 GiB left half Pending."""


def test_the_cpu_agent_values_leave_memory_for_every_concurrent_sandbox(monkeypatch):
    from rlstack.episodes.sandboxes.pods import SandboxPodSecurity

    objects = objects_of("values-cpu.yaml", "values-agent.yaml")
    settings = env_of(objects, "Deployment", "env-agent")
    for name, value in settings.items():
        if name.startswith("RLSTACK_SANDBOX_POD_"):
            monkeypatch.setenv(name, value)
    per_sandbox = parse_quantity(SandboxPodSecurity().memory_request or "2Gi")
    services = sum(parse_quantity(c.get("resources", {}).get("requests", {}).get("memory", 0)) * d["spec"].get("replicas", 1)
                   for d in by_kind(objects, "Deployment") for c in d["spec"]["template"]["spec"]["containers"])
    sandboxes = int(settings["RLSTACK_ENV_MAX_CONCURRENT_TRIALS"]) * per_sandbox
    assert services + sandboxes <= NODE_MEMORY, f"{services} of services + {sandboxes} of sandboxes"
