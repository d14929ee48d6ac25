"""Render the Helm chart with the real helm binary (fetched by `make setup-k8s`) once per values file."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import REPO

CHART = REPO / "charts" / "rlstack"
HELM = REPO / ".cache" / "k8s" / "bin" / "helm"
VALUES = sorted(p.name for p in CHART.glob("values*.yaml"))


RWX_CLASS = "rwx-example"
"""values.yaml leaves the ReadWriteMany class to the installer (the chart refuses the cluster's default,
usually a block class); every install names one, and so do these renders unless a test sets storage."""


def _names_a_class(args: tuple[str, ...]) -> bool:
    if any("sharedStorage" in a for a in args):
        return True
    files = [Path(args[i + 1]) for i, a in enumerate(args[:-1]) if a == "-f"]
    return any((yaml.safe_load(f.read_text()) or {}).get("sharedStorage", {}).get("storageClass") for f in files)


def helm(*args: str) -> subprocess.CompletedProcess:
    if not HELM.exists():
        pytest.fail("no helm: run `make setup-k8s`")
    if args and args[0] in ("template", "lint", "install") and not _names_a_class(args):
        args = (*args, "--set", f"sharedStorage.storageClass={RWX_CLASS}")
    return subprocess.run([str(HELM), *args], capture_output=True, text=True, timeout=120)


def render(values: str, *extra: str) -> str:
    done = helm("template", "rl", str(CHART), "--namespace", "rl", "-f", str(CHART / values), *extra)
    assert done.returncode == 0, done.stderr
    return done.stdout


@pytest.fixture(scope="session", params=VALUES)
def rendered(request) -> tuple[str, list[dict]]:
    text = render(request.param)
    return request.param, [doc for doc in yaml.safe_load_all(text) if doc]


def by_kind(objects: list[dict], kind: str) -> list[dict]:
    return [o for o in objects if o["kind"] == kind]


def objects_of(values: str, *more: str) -> list[dict]:
    """The objects the chart renders with ``values`` and then each of ``more`` layered on it."""
    extra = [a for v in more for a in ("-f", str(CHART / v))]
    return [o for o in yaml.safe_load_all(render(values, *extra)) if o]


def env_of(objects: list[dict], kind: str, suffix: str) -> dict[str, str | None]:
    """The first container's env (name -> value) of the one ``kind`` object named ``...suffix``."""
    [w] = [o for o in by_kind(objects, kind) if o["metadata"]["name"].endswith(suffix)]
    return {e["name"]: e.get("value") for e in w["spec"]["template"]["spec"]["containers"][0]["env"]}


@pytest.fixture
def tmp_manifest(tmp_path) -> Path:
    return tmp_path / "manifest.yaml"

