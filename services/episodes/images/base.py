"""A Debian bookworm base image made from Debian's own packages, for hosts that reach no registry.

``debootstrap --variant=minbase`` (no python, no node: what ``debian:bookworm-slim`` holds), apt's
caches emptied, then imported as one layer. With ``--base-map
debian:bookworm-slim=localhost/debian:bookworm-slim`` a task's ``FROM debian:bookworm-slim`` builds
here. debootstrap needs root.
"""

from __future__ import annotations

import os
import shutil
import subprocess
from pathlib import Path

from rlstack.episodes.images.config import ImageSettings
from rlstack.episodes.images.engine import Engine

DEFAULT_TAG = "localhost/debian:bookworm-slim"
LOCAL_BASE_MAP: dict[str, str] = {"debian:bookworm-slim": DEFAULT_TAG}
"""The base map that builds ``FROM debian:bookworm-slim`` (any digest) from the image made here."""
LOCAL_BASE_MAP = {"debian:bookworm-slim": DEFAULT_TAG}
"""The base map that makes ``FROM debian:bookworm-slim`` build on the image made here."""
MIRROR = "http://deb.debian.org/debian"
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# What the official image's /etc/apt/apt.conf.d/docker-clean does: no .deb kept after an install.
APT_CLEAN = ('DPkg::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb /var/cache/apt/archives/partial/*.deb '
             '/var/cache/apt/*.bin || true"; };\nAPT::Update::Post-Invoke { "rm -f /var/cache/apt/archives/*.deb '
             '/var/cache/apt/archives/partial/*.deb /var/cache/apt/*.bin || true"; };\nBinary::apt::APT::Keep-Downloaded-Packages "false";\n')


HOST_CA = Path("/etc/ssl/certs/ca-certificates.crt")


class BaseImageError(RuntimeError):
    """The base image could not be made; the message says which step and why."""


def build_base_image(settings: ImageSettings, tag: str = DEFAULT_TAG, *, suite: str = "bookworm",
                     mirror: str = MIRROR, force: bool = False, ca_bundle: Path | None = HOST_CA) -> str:
    """The image id of ``tag``, built first unless it exists (``force``: built again).

    ``ca_bundle``: certificates the image trusts besides Debian's (this host's bundle by default),
    as ``/usr/local/share/ca-certificates/rlstack-host.crt``: a task that installs Debian's
    ca-certificates then trusts what this host trusts, so its build reaches an HTTPS index through
    a proxy that re-signs TLS (as this machine's does, and many companies' do). None: Debian's alone.
    """
    engine = Engine(settings)
    if not force and engine.exists(tag):
        return engine.inspect(tag).id
    if shutil.which("debootstrap") is None:
        raise BaseImageError("debootstrap is not installed (Debian: apt-get install debootstrap; `make setup-images`)")
    if os.geteuid() != 0:
        raise BaseImageError("debootstrap needs root: run `sudo rlstack tasks base`")
    work = settings.cache_dir / "base" / f".debootstrap-{os.getpid()}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    log = settings.cache_dir / "logs" / "base.log"
    try:
        argv = ["debootstrap", "--variant=minbase", suite, str(work), mirror]
        try:
            code = engine.run_logged(argv, log, timeout=settings.build_timeout_sec)
        except subprocess.TimeoutExpired:
            raise BaseImageError(f"debootstrap did not finish in {settings.build_timeout_sec:.0f}s (log: {log})") from None
        if code != 0:
            tail = "\n".join(log.read_text(errors="replace").splitlines()[-20:])
            raise BaseImageError(f"debootstrap {suite} from {mirror} failed ({code}); log {log}:\n{tail}")
        _clean(work)
        if ca_bundle is not None and ca_bundle.is_file():
            _trust(work, ca_bundle)
        return engine.import_rootfs(work, tag, cmd=["bash"], env={"PATH": PATH})
    finally:
        shutil.rmtree(work, ignore_errors=True)


def _clean(root: Path) -> None:
    """apt's downloaded packages and lists, debootstrap's log and this host's name and resolver go."""
    for pattern in ("var/cache/apt/archives/*.deb", "var/cache/apt/archives/partial/*", "var/cache/apt/*.bin",
                    "var/lib/apt/lists/*", "var/log/bootstrap.log", "var/log/dpkg.log", "var/log/apt/*"):
        for path in root.glob(pattern):
            if path.is_file() or path.is_symlink():
                path.unlink()
    (root / "etc" / "apt" / "apt.conf.d").mkdir(parents=True, exist_ok=True)
    (root / "etc" / "apt" / "apt.conf.d" / "docker-clean").write_text(APT_CLEAN)
    (root / "etc" / "hostname").write_text("localhost\n")
    resolv = root / "etc" / "resolv.conf"
    if resolv.is_file() and not resolv.is_symlink():
        resolv.write_text("")  # the container runtime mounts its own


def _trust(root: Path, bundle: Path) -> None:
    """Debian's update-ca-certificates (run when a task installs ca-certificates) adds every ``.crt``
    under /usr/local/share/ca-certificates to the system bundle; pip in a task's venv reads that
    bundle through /etc/pip.conf."""
    local = root / "usr" / "local" / "share" / "ca-certificates"
    local.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(bundle, local / "rlstack-host.crt")
    (root / "etc" / "pip.conf").write_text("[global]\ncert = /etc/ssl/certs/ca-certificates.crt\n")
