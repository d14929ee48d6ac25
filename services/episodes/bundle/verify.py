"""Run each bundled program once, mounted where it will be, before the bundle is published.

A patched program can only be tried at its final path (its loader is ``/opt/rlstack/lib/...``),
so bubblewrap mounts the staged bundle there over the host's root, with an empty environment:
a patchelf that broke a binary fails the build, not a trial. Where bubblewrap cannot run (an
image build without user namespaces) the check is skipped and the manifest says ``verified: false``.
"""

from __future__ import annotations

import shutil
import subprocess
from collections.abc import Mapping, Sequence
from pathlib import Path

from rlstack.episodes.bundle.loader import BundleBuildError
from rlstack.episodes.bundle.manifest import AgentEntry
from rlstack.episodes.bundle.paths import BUNDLE_MOUNT

CLEAN_ENV = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp", "LANG": "C.UTF-8"}


def bwrap_argv(rootfs: Path | None, bundle: Path, *, binds: Sequence[tuple[Path, str]] = (), share_net: bool = False,
               env: Mapping[str, str] | None = None, bwrap: str = "bwrap") -> list[str]:
    """bubblewrap with ``rootfs`` (or the host's root) read-only as ``/``, the bundle read-only at
    the mount, writable ``binds`` (host dir, path inside; the path must exist in the rootfs), a
    fresh /tmp, no network unless ``share_net``, and no environment but ``CLEAN_ENV`` and ``env``."""
    root = str(rootfs) if rootfs is not None else "/"
    argv = [bwrap, "--ro-bind", root, "/", "--tmpfs", str(Path(BUNDLE_MOUNT).parent), "--ro-bind", str(bundle), BUNDLE_MOUNT,
            "--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp", "--unshare-all", "--die-with-parent", "--clearenv"]
    if share_net:
        argv.append("--share-net")
    for host, inside in binds:
        argv += ["--bind", str(host), inside]
    for key, value in {**CLEAN_ENV, **(env or {})}.items():
        argv += ["--setenv", key, value]
    return argv + ["--"]


def can_sandbox(bwrap: str = "bwrap") -> bool:
    if shutil.which(bwrap) is None:
        return False
    return subprocess.run([bwrap, "--ro-bind", "/", "/", "--unshare-all", "--", "true"],
                          capture_output=True).returncode == 0


def verify(bundle: Path, agents: dict[str, AgentEntry], timeout: float = 120) -> None:
    """Each agent's ``version_argv`` exits 0 inside the sandbox, or the build fails saying which."""
    for name, entry in agents.items():
        done = subprocess.run([*bwrap_argv(None, bundle), *entry.version_argv], capture_output=True, text=True,
                              timeout=timeout)
        if done.returncode != 0:
            raise BundleBuildError(f"{name}: {' '.join(entry.version_argv)} exited {done.returncode} in the bundle: "
                                   f"{(done.stderr or done.stdout).strip()[-800:]}")
