"""Which image a task's trial pod runs, from the lock file alone: the cluster never builds.

The env server on a cluster cannot build or inspect images; ``rlstack tasks build`` did both and
wrote the answers (reference by digest once pushed, the image's user in numbers) into the lock
file. A task missing from it, or changed since, is refused before the first trial with the
command that fixes it, and every trial of such a task is an ``infra_error``, never a reward.
"""

from __future__ import annotations

import threading
from pathlib import Path

from rlstack.episodes.harbor.task import HarborTask
from rlstack.episodes.images.digest import environment_digest
from rlstack.episodes.images.lock import ImageLock, ImageLockError, LockEntry, default_lock_path


class LockedImages:
    """Task -> ``LockEntry``, read once per lock file and checked per task and environment digest."""

    def __init__(self, lock_path: Path | None = None) -> None:
        self.lock_path = lock_path
        self._locks: dict[Path, ImageLock] = {}
        self._known: dict[tuple[str, str], LockEntry | ImageLockError] = {}
        self._guard = threading.Lock()

    def entry(self, task: HarborTask) -> LockEntry:
        """Raises ``ImageLockError`` naming the task and the fix."""
        key = (task.name, environment_digest(task))
        with self._guard:
            if key not in self._known:
                try:
                    self._known[key] = self._lock(task).resolve(task)
                except ImageLockError as exc:
                    self._known[key] = exc
            found = self._known[key]
        if isinstance(found, ImageLockError):
            raise found
        return found

    def _lock(self, task: HarborTask) -> ImageLock:
        path = self.lock_path
        if path is None:
            candidates = (default_lock_path(task.path.parent), default_lock_path(task.path))
            path = next((p for p in candidates if p.is_file()), candidates[0])
        if path not in self._locks:
            self._locks[path] = ImageLock.load(path)
        return self._locks[path]
