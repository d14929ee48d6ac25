"""Which image a trial of a task runs in, and its unpacked filesystem: what a sandbox asks for.

A trial's filesystem is the image's own layers, stacked read-only under the trial's overlay: with
podman's overlay store (the default for root) they are the store's layer directories as they are,
so tasks that share a base share it on disk and nothing is copied; with another store the image is
unpacked once per digest (``rootfs.unpacked_rootfs``). A task's image comes from the lock file ``rlstack tasks build`` wrote (``--image-lock``, else the
dataset's ``images.lock.json``), checked against the task as it is now; without an entry it is
built here (``build_missing``), never silently replaced by the host's tools. The answer is kept per
task and environment digest, so a dataset's trials ask the builder once per task, and a task that
cannot have an image fails every one of its trials the same way (an ``infra_error``, never a reward).
"""

from __future__ import annotations

import threading
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from rlstack.episodes.harbor.task import HarborTask
from rlstack.episodes.images.builder import build_task_image
from rlstack.episodes.images.config import ImageSettings
from rlstack.episodes.images.digest import environment_digest
from rlstack.episodes.images.engine import Engine, ImageConfig, ToolError
from rlstack.episodes.images.lock import ImageLock, ImageLockError, LockEntry, default_lock_path
from rlstack.episodes.images.rootfs import RootFSError, unpacked_rootfs
from rlstack.episodes.images.user import ImageUserError, home_of, numeric_user


class TaskImageError(RuntimeError):
    """A task has no image a trial can run in; the message names the task and the fix."""


class TaskImage(BaseModel):
    """One task's image as a sandbox uses it: the reference it records, the tree it overlays."""

    model_config = ConfigDict(frozen=True)

    task: str
    ref: str
    """``ref@image id``: what result.json names."""
    image_id: str
    lowers: list[Path]
    """The image's filesystem as overlay lower directories, topmost first."""
    config: ImageConfig
    user: str = "0:0"
    """``uid:gid`` its ``USER`` names (``images.user``): what a trial's phases run as."""
    home: str = "/root"
    """That user's home in the image's ``/etc/passwd``: ``HOME`` unless the image's ENV sets one."""

    @property
    def identity(self) -> tuple[int, int]:
        uid, gid = self.user.split(":")
        return int(uid), int(gid)


class TaskImages:
    """Task -> ``TaskImage``, from the lock file or a build, unpacked once per image; thread-safe."""

    def __init__(self, settings: ImageSettings, lock_path: Path | None = None, build_missing: bool = True) -> None:
        self.settings, self.lock_path, self.build_missing = settings, lock_path, build_missing
        self._known: dict[tuple[str, str], TaskImage | TaskImageError] = {}
        self._locks: dict[str, threading.Lock] = {}
        self._guard = threading.Lock()

    def rootfs(self, task: HarborTask) -> TaskImage:
        key = (task.name, environment_digest(task))
        with self._guard:
            lock = self._locks.setdefault(task.name, threading.Lock())
        with lock:
            if key not in self._known:
                try:
                    self._known[key] = self._resolve(task)
                except TaskImageError as exc:
                    self._known[key] = exc
            found = self._known[key]
        if isinstance(found, TaskImageError):
            raise found
        return found

    def _lock_file(self, task: HarborTask) -> Path | None:
        if self.lock_path is not None:
            return self.lock_path
        for candidate in (default_lock_path(task.path.parent), default_lock_path(task.path)):
            if candidate.is_file():
                return candidate
        return None

    def _entry(self, task: HarborTask) -> LockEntry | None:
        path = self._lock_file(task)
        if path is None:
            return None
        try:
            lock = ImageLock.load(path)
            if task.name not in lock.images and self.build_missing:
                return None  # built here, as if there were no lock file
            return lock.resolve(task)
        except ImageLockError as exc:
            raise TaskImageError(str(exc)) from None

    def _resolve(self, task: HarborTask) -> TaskImage:
        entry = self._entry(task)
        if entry is not None:
            try:
                image = self._layers(entry.image_id)
            except (RootFSError, ToolError) as exc:
                where = f" (pull {entry.pushed_ref} first)" if entry.pushed_ref else ""
                raise TaskImageError(f"task {task.name}: the lock file names {entry.ref} ({entry.image_id}), which is not "
                                     f"here{where}: {exc}; run rlstack tasks build {task.path.parent} again") from None
            ref = entry.ref
        elif self.build_missing:
            try:
                built = build_task_image(task, self.settings)
                image = self._layers(built.image_id)
            except Exception as exc:  # noqa: BLE001 - ImageBuildError, RootFSError, a missing builder: all name the task
                raise TaskImageError(str(exc) if task.name in str(exc) else f"task {task.name}: {exc}") from None
            ref = built.ref
        else:
            raise TaskImageError(f"task {task.name} has no image in the lock file and building is off: "
                                 f"run rlstack tasks build {task.path.parent}")
        return image.model_copy(update={"task": task.name, "ref": f"{ref}@{image.image_id}"})

    def _layers(self, image_id: str) -> TaskImage:
        """The store's own layer directories when podman keeps them as overlay layers, else the unpacked tree."""
        info = Engine(self.settings).inspect(image_id)
        if info.layers and all(layer.is_dir() for layer in info.layers):
            lowers, config = info.layers, info.config
        else:
            tree = unpacked_rootfs(image_id, self.settings)
            lowers, config = [tree.path], tree.config
        try:
            user = numeric_user(config.user if config.user != "root" else None, lowers)
        except ImageUserError as exc:
            raise TaskImageError(f"image {image_id}: {exc}") from None
        return TaskImage(task="", ref="", image_id=info.id, lowers=lowers, config=config, user=user,
                         home=home_of(user, lowers))
