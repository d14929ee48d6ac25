"""A trial's filesystem in its task's image: the image's tree read-only below, the trial's changes above.

The image is unpacked once per digest (``rlstack.episodes.images.rootfs``); each trial gets an
overlay of it whose upper directory is the trial's own. The agent's phase and then the verifier's
mount the same layers, so whatever the agent changed anywhere (``/etc``, an installed package,
``/app``) is what the verifier sees, as in a container; the next trial starts from the image again.

Each phase mounts its overlay inside a mount namespace of its own (``unshare --mount``): the mount
exists only while that phase's processes do, and a crashed env server leaves no mount behind. The
same launcher moves itself into the phase's cgroups first, then execs bubblewrap with the merged
tree as its root.
"""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from rlstack.episodes.bundle.paths import PYTHON
from rlstack.episodes.sandboxes.bwrap import Bind

LAUNCH = ('for d in $RLSTACK_CGROUPS; do echo $$ > "$d/cgroup.procs" || exit 125; done; unset RLSTACK_CGROUPS; '
          '"$1" -t overlay overlay -o "lowerdir=$2,upperdir=$3,workdir=$4" "$5" || exit 125; shift 5; exec "$@"')
"""Exit 125 before the sandbox exists: no ``child-pid`` on bubblewrap's status pipe, an infra error."""


@dataclass(frozen=True)
class TrialLayers:
    """The per-trial directories of one overlay: changes (upper), overlayfs' scratch (work), mount point."""

    root: Path

    @property
    def upper(self) -> Path:
        return self.root / "upper"

    @property
    def work(self) -> Path:
        return self.root / "work"

    @property
    def merged(self) -> Path:
        return self.root / "merged"

    @classmethod
    def make(cls, parent: Path, prefix: str) -> TrialLayers:
        parent.mkdir(parents=True, exist_ok=True)
        layers = cls(Path(tempfile.mkdtemp(prefix=prefix, dir=parent)))
        for path in (layers.upper, layers.work, layers.merged):
            path.mkdir()
        return layers

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def launcher_argv(*, unshare: str, mount: str, lowers: Sequence[Path], layers: TrialLayers,
                  sandbox: Sequence[str]) -> list[str]:
    """``sandbox`` (a bubblewrap argv rooted at ``layers.merged``) run over the mounted overlay of
    ``lowers`` (the image's layers, topmost first) and the trial's own upper directory."""
    return [unshare, "--mount", "--propagation", "private", "--", "/bin/sh", "-c", LAUNCH, "sh",
            mount, ":".join(str(p) for p in lowers), str(layers.upper), str(layers.work), str(layers.merged), *sandbox]


def image_bwrap_argv(bwrap: str, *, root: Path, binds: Sequence[Bind], command: Sequence[str], chdir: str,
                     status_fd: int, block_fd: int | None, unshare_net: bool,
                     identity: tuple[int, int] = (0, 0)) -> list[str]:
    """bubblewrap with the trial's merged tree as ``/``: the image's own /tmp, /etc and /app (the
    agent's changes live there), a fresh /proc and /dev, the trial's binds on top.

    ``identity`` other than root (the image's ``USER``): bubblewrap still sets up as root, and the
    bundle's ``become`` then drops to it, with only the two capabilities that takes."""
    uid, gid = identity
    argv = [bwrap, "--bind", str(root), "/", "--dev", "/dev", "--proc", "/proc"]
    for bind in binds:  # mount points' parents 0755, as a runtime makes them (bubblewrap's own are 0700)
        parts = Path(bind.target).parts
        for depth in range(2, len(parts)):
            argv += ["--perms", "0755", "--dir", str(Path(*parts[:depth]))]
        argv += ["--bind" if bind.writable else "--ro-bind", str(bind.source), bind.target]
    # A WORKDIR with nothing copied into it is not in the image's layers: a container runtime makes it at start.
    argv += ["--dir", chdir, "--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--hostname", "sandbox",
             "--cap-drop", "ALL", "--chdir", chdir, "--json-status-fd", str(status_fd)]
    if unshare_net:
        argv.append("--unshare-net")
    if block_fd is not None:
        argv += ["--block-fd", str(block_fd)]
    if uid == 0:
        return [*argv, "--", *command]
    become = [PYTHON, "-I", "-m", "rlstack.episodes.inside.become", str(uid), str(gid), "--"]
    return [*argv, "--cap-add", "CAP_SETUID", "--cap-add", "CAP_SETGID", "--", *become, *command]
