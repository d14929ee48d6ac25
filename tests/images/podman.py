"""Podman plumbing for the image smoke tests: a Debian base made with debootstrap, builds, runs.

No registry is reachable here, so the base image (Debian bookworm with python3) is built from
debootstrap and imported. It carries this machine's CA bundle and pip settings (find-links to
the local wheels, mounted read-only at build time) so builds reach PyPI the way the host does;
that is test scaffolding, the Dockerfiles themselves are unchanged. This sandbox refuses
setrlimit for containers unless the limits are lowered explicitly, and crun cannot drive its
hybrid cgroups: hence runc and the explicit ulimits.
"""

from __future__ import annotations

import contextlib
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path

from tests.conftest import REPO

BASE = "localhost/rlstack-base:bookworm"
ROOTFS = REPO / ".cache" / "images" / "rootfs"
PODMAN = ["podman", "--runtime", "runc"]
LIMITS = ["--ulimit", "nofile=1024:1024", "--ulimit", "nproc=1024:1024"]
HOST_WHEELS = Path("/opt/wheels")


def run(*args: str, timeout: float = 1800, check: bool = True) -> subprocess.CompletedProcess:
    done = subprocess.run(list(args), capture_output=True, text=True, timeout=timeout)
    if check and done.returncode != 0:
        raise RuntimeError(f"{' '.join(args[:4])} ... failed ({done.returncode}):\n{done.stdout[-3000:]}\n{done.stderr[-3000:]}")
    return done


def missing_tools() -> list[str]:
    return [tool for tool in ("podman", "runc", "debootstrap") if shutil.which(tool) is None]


def ensure_base() -> str:
    if run(*PODMAN, "image", "exists", BASE, check=False).returncode == 0:
        return BASE
    if not (ROOTFS / "usr" / "bin" / "python3").exists():
        shutil.rmtree(ROOTFS, ignore_errors=True)
        ROOTFS.parent.mkdir(parents=True, exist_ok=True)
        run("debootstrap", "--variant=minbase", "--include=python3,python3-venv,ca-certificates", "bookworm", str(ROOTFS),
            "http://deb.debian.org/debian")
    (ROOTFS / "usr" / "bin" / "python").unlink(missing_ok=True)
    (ROOTFS / "usr" / "bin" / "python").symlink_to("python3")
    shutil.copy("/etc/ssl/certs/ca-certificates.crt", ROOTFS / "etc" / "ssl" / "certs" / "ca-certificates.crt")
    (ROOTFS / "etc" / "pip.conf").write_text(
        "[global]\ncert = /etc/ssl/certs/ca-certificates.crt\nfind-links = /opt/wheels\ndisable-pip-version-check = true\n")
    for deb in (ROOTFS / "var" / "cache" / "apt" / "archives").glob("*.deb"):
        deb.unlink()
    tar = subprocess.Popen(["tar", "-C", str(ROOTFS), "-c", "."], stdout=subprocess.PIPE)
    subprocess.run([*PODMAN, "import", "-", BASE], stdin=tar.stdout, check=True, capture_output=True, timeout=600)
    tar.wait()
    return BASE


def build(dockerfile: str, tag: str, *build_args: str) -> str:
    """``--layers=false`` keeps no image per step or stage, only the final one: each run used to leave
    its images behind (the tagged ones and every build stage's, ~2.6 GB on disk), until a machine that
    runs the suite often had no disk left."""
    mounts = ["-v", f"{HOST_WHEELS}:/opt/wheels:ro"] if HOST_WHEELS.is_dir() else []
    args = [arg for pair in build_args for arg in ("--build-arg", pair)]
    run(*PODMAN, "build", "--network=host", "--layers=false", *LIMITS, *mounts,
        "--build-arg", f"BASE_IMAGE={ensure_base()}", *args, "-f", str(REPO / dockerfile), "-t", tag, str(REPO))
    return tag


@contextlib.contextmanager
def removed_after(tag: str) -> Iterator[str]:
    """The image, removed again afterwards (whether or not the test passed)."""
    try:
        yield tag
    finally:
        run(*PODMAN, "rmi", "-f", tag, check=False)


if __name__ == "__main__":  # the suite's background build (tests/helpers/prebuild.py): DOCKERFILE TAG [ARG=VALUE ...]
    import sys

    build(sys.argv[1], sys.argv[2], *sys.argv[3:])
