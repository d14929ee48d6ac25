"""A task's environment as one content hash, and the image ref named after it.

The image tag is the hash, so an unchanged task is never built twice and a changed byte always
gives a new image; the lock file records the hash, so a task edited after its build is noticed
before a trial runs on a stale image. Symlinks are hashed as their targets' text, never followed:
a link out of the task cannot pull host files into the hash (nor into the build context).
"""

from __future__ import annotations

import hashlib
import os
import re
import stat
from pathlib import Path

from rlstack.episodes.harbor.task import HarborTask

REPOSITORY = "localhost/rlstack-task"
TAG_HEX = 16
_VERSION = b"rlstack-env-digest/1\0"


def environment_digest(task: HarborTask) -> str:
    """sha256 hex of ``environment/`` (each entry's relative path, type, executable bit, bytes or
    link target, in path order) and ``[environment].docker_image``."""
    sha = hashlib.sha256(_VERSION)
    sha.update(b"docker_image\0" + (task.config.environment.docker_image or "").encode() + b"\0")
    root = task.environment_dir
    if root.is_dir() and not root.is_symlink():
        for rel in sorted(_entries(root)):
            _hash_entry(sha, root / rel, rel)
    return sha.hexdigest()


def image_ref(task: HarborTask, digest: str) -> str:
    """``localhost/rlstack-task/<name>:<first 16 hex of the digest>``, the ref a build is tagged with."""
    return f"{REPOSITORY}/{repository_name(task)}:{digest[:TAG_HEX]}"


def repository_name(task: HarborTask) -> str:
    """The short name lowercased; runs of separators collapsed, since a repository path component
    allows only single ``.``/``_`` (or dashes) between alphanumerics."""
    name = re.sub(r"[._-]{2,}", "-", task.short_name.lower()).strip("._-")
    return name or "task"


def _entries(root: Path) -> list[str]:
    """Every path under ``root``, relative, '/'-separated; directories are entered, links are not."""
    found: list[str] = []
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        with os.scandir(root / rel_dir if rel_dir else root) as it:
            for entry in it:
                rel = f"{rel_dir}/{entry.name}" if rel_dir else entry.name
                found.append(rel)
                if entry.is_dir(follow_symlinks=False):
                    stack.append(rel)
    return found


def _hash_entry(sha: hashlib._Hash, path: Path, rel: str) -> None:
    info = path.lstat()
    if stat.S_ISLNK(info.st_mode):
        kind, body = b"l", os.readlink(path).encode()
    elif stat.S_ISDIR(info.st_mode):
        kind, body = b"d", b""
    elif stat.S_ISREG(info.st_mode):
        kind, body = b"f", None
    else:
        kind, body = b"o", b""  # a fifo or socket: its kind counts, it has no bytes
    executable = b"x" if stat.S_ISREG(info.st_mode) and info.st_mode & 0o111 else b"-"
    size = len(body) if body is not None else info.st_size
    sha.update(kind + b"\0" + rel.encode("utf-8", "surrogateescape") + b"\0" + executable + b"\0" + str(size).encode() + b"\0")
    if body is not None:
        sha.update(body)
        return
    with path.open("rb") as f:
        while chunk := f.read(1 << 20):
            sha.update(chunk)
