"""A dataset: a directory whose sub-directories are Harbor tasks (or one task directory itself).

Loading checks every task and reports every broken one at once, so a dataset is fixed in one
pass rather than one error per restart. Hidden directories and ones starting with ``_``
(templates) are skipped.
"""

from __future__ import annotations

from pathlib import Path

from pydantic import BaseModel, ConfigDict

from rlstack.episodes.harbor.task import HarborTask, TaskError


class DatasetError(ValueError):
    """One or more tasks of a dataset cannot be used; the message lists each."""


class Dataset(BaseModel):
    model_config = ConfigDict(frozen=True)

    root: Path
    tasks: tuple[HarborTask, ...]

    def __len__(self) -> int:
        return len(self.tasks)

    def get(self, name: str) -> HarborTask:
        """By full name (``org/name``) or short name."""
        for task in self.tasks:
            if name in (task.name, task.short_name):
                return task
        raise KeyError(f"no task {name!r} in {self.root}")


def load_dataset(root: Path | str) -> Dataset:
    root = Path(root).resolve()
    if (root / "task.toml").is_file():
        return Dataset(root=root, tasks=(HarborTask.load(root),))
    if not root.is_dir():
        raise DatasetError(f"{root}: not a directory")
    tasks: list[HarborTask] = []
    errors: list[str] = []
    for path in sorted(p for p in root.iterdir() if p.is_dir() and not p.name.startswith((".", "_"))):
        try:
            tasks.append(HarborTask.load(path))
        except TaskError as exc:
            errors.append(str(exc))
    seen: dict[str, Path] = {}
    for task in tasks:
        if task.short_name in seen:
            errors.append(f"{task.path}: task name {task.short_name!r} also used by {seen[task.short_name]}")
        seen.setdefault(task.short_name, task.path)
    if errors:
        raise DatasetError(f"{root}: {len(errors)} broken task(s):\n" + "\n".join(f"  {e}" for e in errors))
    if not tasks:
        raise DatasetError(f"{root}: no tasks (expected sub-directories holding task.toml)")
    return Dataset(root=root, tasks=tuple(tasks))
