"""An image's filesystem as a plain directory, unpacked once per image id, for the local sandbox.

``<cache_dir>/rootfs/<image id hex>/rootfs/`` holds the tree (owners, modes and setuid bits kept
when running as root; device nodes skipped where they cannot be made) and ``config.json`` beside
it the image's working directory, environment and user. The sandbox mounts the tree read-only under
each trial, so it is never changed after it appears: it is unpacked into a temporary directory in
the same parent and renamed into place, under a file lock, so concurrent callers never see half a tree.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
import shutil
import stat
import subprocess
from collections.abc import Iterator
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from rlstack.episodes.images.config import ImageSettings
from rlstack.episodes.images.engine import Engine, ImageConfig, ToolError

__all__ = ["ImageConfig", "RootFS", "RootFSError", "has_shell", "resolve_inside", "unpacked_rootfs"]

_IMAGE_ID = re.compile(r"^(sha256:)?[0-9a-f]{64}$")
# tar lines that only say a device node or its mode could not be made (no CAP_MKNOD): the sandbox gives its own /dev.
_DEVICE_NOISE = re.compile(r"Cannot mknod|Exiting with failure status due to previous errors")


class RootFSError(RuntimeError):
    """An image's filesystem could not be unpacked; the message names the image and why."""


class RootFS(BaseModel):
    model_config = ConfigDict(frozen=True)

    image_id: str
    """``sha256:<hex>``."""
    path: Path
    """The filesystem tree (``.../rootfs/<hex>/rootfs``); never written after it appears."""
    config: ImageConfig

    def has_shell(self) -> bool:
        return has_shell(self.path)


def unpacked_rootfs(image: str, settings: ImageSettings) -> RootFS:
    """The filesystem of ``image`` (a ref or an image id), unpacked on first use."""
    parent = settings.cache_dir / "rootfs"
    if _IMAGE_ID.match(image) and (found := _load(parent / image.removeprefix("sha256:"))):
        return found
    engine = Engine(settings)
    try:
        info = engine.inspect(image)
    except ToolError as exc:
        raise RootFSError(f"image {image!r} is not in the local store: {exc}") from None
    final = parent / info.hex
    if found := _load(final):
        return found
    parent.mkdir(parents=True, exist_ok=True)
    with _locked(parent / f".{info.hex}.lock"):
        if found := _load(final):
            return found
        for stale in parent.glob(f".tmp-{info.hex}-*"):
            remove_tree(stale)  # left by a caller that died: we hold the lock, nobody else writes there
        tmp = parent / f".tmp-{info.hex}-{os.getpid()}"
        (tmp / "rootfs").mkdir(parents=True)
        try:
            _extract(engine, info.id, tmp / "rootfs")
            rootfs = RootFS(image_id=info.id, path=final / "rootfs", config=info.config)
            (tmp / "config.json").write_text(rootfs.model_dump_json(indent=2))
            os.rename(tmp, final)
        except BaseException:
            remove_tree(tmp)
            raise
    return rootfs


def _load(directory: Path) -> RootFS | None:
    """The tree is complete once its directory exists: the rename is the last step."""
    config = directory / "config.json"
    if not config.is_file():
        return None
    return RootFS.model_validate_json(config.read_text()).model_copy(update={"path": directory / "rootfs"})


def _extract(engine: Engine, image_id: str, dest: Path) -> None:
    owner = ["--same-owner"] if os.geteuid() == 0 else ["--no-same-owner"]
    with engine.filesystem_tar(image_id) as stream:
        done = subprocess.run(["tar", "-C", str(dest), "-x", "-p", "--numeric-owner", *owner, "-f", "-"],
                              stdin=stream, capture_output=True, text=True)
    if done.returncode != 0:
        errors = [line for line in done.stderr.splitlines() if line.strip() and not _DEVICE_NOISE.search(line)]
        if errors:
            raise RootFSError(f"unpacking {image_id} into {dest} failed: " + "\n".join(errors[-20:]))


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[None]:
    with path.open("a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def remove_tree(path: Path) -> None:
    """Removes an unpacked tree even where the image made directories read-only (not root)."""
    def writable_then_retry(func, target, _exc):  # noqa: ANN001
        with contextlib.suppress(OSError):
            os.chmod(os.path.dirname(target), 0o700)
            func(target)

    if path.exists():
        shutil.rmtree(path, onerror=writable_then_retry)


def resolve_inside(root: Path, path: str, max_links: int = 40) -> Path | None:
    """Where ``path`` (absolute, inside the image) lands in the tree at ``root``, symlinks followed as
    the image would follow them: an absolute target starts again at ``root``, ``..`` stops there.
    None on a loop."""
    parts = [p for p in path.split("/") if p]
    current = root
    while parts:
        part = parts.pop(0)
        if part == ".":
            continue
        if part == "..":
            current = current.parent if current != root else current
            continue
        candidate = current / part
        if candidate.is_symlink():
            max_links -= 1
            if max_links < 0:
                return None
            target = os.readlink(candidate)
            if target.startswith("/"):
                current = root
            parts = [p for p in target.split("/") if p] + parts
            continue
        current = candidate
    return current


def has_shell(root: Path) -> bool:
    """``/bin/sh`` is an executable file in the tree at ``root``: every trial phase runs through it."""
    sh = resolve_inside(root, "/bin/sh")
    if sh is None:
        return False
    with contextlib.suppress(OSError):
        info = sh.lstat()
        return stat.S_ISREG(info.st_mode) and bool(info.st_mode & 0o111)
    return False
