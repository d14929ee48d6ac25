"""``images.lock.json``: which image each task of a dataset runs in, written by ``rlstack tasks build``.

Trials read images from here, never build them. ``resolve`` re-hashes the task's environment, so a
task edited after its build is refused with the command that fixes it instead of running on a
stale image. Written atomically (temp file + rename): a reader sees the old lock or the new one.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from rlstack.episodes.harbor.task import HarborTask
from rlstack.episodes.images.digest import environment_digest

LOCK_NAME = "images.lock.json"


class ImageLockError(LookupError):
    """A task has no usable image in the lock; the message names the task and the command that fixes it."""


class LockEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    ref: str
    """The local ref (``localhost/rlstack-task/NAME:TAG``, or the task's mapped ``docker_image``)."""
    image_id: str
    """``sha256:<hex>``: the local image, and its unpacked filesystem's directory name."""
    env_digest: str
    """``digest.environment_digest`` of the task when its image was built."""
    pushed_ref: str | None = None
    """``REGISTRY/rlstack-task/NAME@sha256:...`` after ``--push``: what a cluster pulls."""
    user: str = Field(default="0:0", pattern=r"^\d+:\d+$")
    """``uid:gid`` the image's ``USER`` names (``images.user``): a trial pod runs as it."""

    @property
    def pull_ref(self) -> str:
        """What a trial pod names: the pushed ref by digest, else the local ref (a node that has it)."""
        return self.pushed_ref or self.ref

    @property
    def recorded_ref(self) -> str:
        """What a trial's ``result.json`` names: the pulled ref, with the local image id when it has no digest."""
        return self.pull_ref if "@" in self.pull_ref else f"{self.pull_ref}@{self.image_id}"

    @property
    def runs_as_root(self) -> bool:
        return self.user.partition(":")[0] == "0"


class ImageLock(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: Literal[1] = 1
    dataset: str | None = None
    """The dataset directory it was built from, for the fix in error messages."""
    images: dict[str, LockEntry] = Field(default_factory=dict)
    """By task name (``[task].name``, else the directory name)."""

    def resolve(self, task: HarborTask) -> LockEntry:
        """The task's image, checked against the task as it is now."""
        dataset = self.dataset or str(task.path.parent)
        entry = self.images.get(task.name)
        if entry is None:
            raise ImageLockError(f"task {task.name} has no image in the lock file: run rlstack tasks build {dataset}")
        if entry.env_digest != environment_digest(task):
            raise ImageLockError(f"task {task.name} changed after its image was built: "
                                 f"run rlstack tasks build {dataset} again")
        return entry

    def write(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
        try:
            with os.fdopen(fd, "w") as f:
                f.write(self.model_dump_json(indent=2) + "\n")
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o644)
            os.replace(tmp, path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise

    @classmethod
    def load(cls, path: Path) -> ImageLock:
        if not path.is_file():
            raise ImageLockError(f"{path}: no lock file: run rlstack tasks build {path.parent}")
        try:
            return cls.model_validate_json(path.read_text())
        except ValueError as exc:
            raise ImageLockError(f"{path}: not a valid image lock ({exc}): run rlstack tasks build {path.parent} again") from None


def default_lock_path(dataset_dir: Path) -> Path:
    """``<dataset>/images.lock.json`` (a single-task dataset: inside the task directory, outside ``environment/``)."""
    return Path(dataset_dir) / LOCK_NAME
