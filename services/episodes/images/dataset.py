"""Every task image of a dataset, built in parallel, with a progress bar, into ``images.lock.json``.

A failing task does not stop the others: each failure is collected (task, step, log tail), the
lock file is written with the images that were made, and the caller exits non-zero. With
``push`` each image also goes to that registry and the lock records it by digest; without it, a
pushed ref from the previous lock is kept while the image is the same.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor, as_completed
from contextlib import nullcontext
from pathlib import Path

from pydantic import BaseModel, ConfigDict
from rich.console import Console
from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from rlstack.episodes.harbor.dataset import load_dataset
from rlstack.episodes.harbor.task import HarborTask
from rlstack.episodes.images.builder import BuiltImage, ImageBuildError, build_task_image
from rlstack.episodes.images.config import ImageSettings
from rlstack.episodes.images.lock import ImageLock, ImageLockError, LockEntry, default_lock_path
from rlstack.episodes.images.push import push_image


class DatasetBuild(BaseModel):
    model_config = ConfigDict(arbitrary_types_allowed=True)

    lock: ImageLock
    lock_path: Path
    built: list[BuiltImage]
    """The tasks that have an image, in dataset order; ``rebuilt`` says which were built just now."""
    failures: list[ImageBuildError]

    @property
    def ok(self) -> bool:
        return not self.failures


def build_dataset(dataset_dir: Path | str, settings: ImageSettings, push: str | None = None, progress: bool = True,
                  lock_path: Path | None = None) -> DatasetBuild:
    """Builds every task's image (up to ``settings.jobs`` at once) and writes the lock file
    (default ``<dataset>/images.lock.json``) with those that succeeded."""
    dataset = load_dataset(dataset_dir)
    lock_path = Path(lock_path) if lock_path else default_lock_path(dataset.root)
    previous = _previous(lock_path)
    results: dict[str, BuiltImage] = {}
    entries: dict[str, LockEntry] = {}
    failures: list[ImageBuildError] = []
    with _bar(progress, len(dataset)) as bar, ThreadPoolExecutor(max_workers=min(settings.jobs, len(dataset))) as pool:
        futures = {pool.submit(_one, task, settings, push, previous.images.get(task.name)): task for task in dataset.tasks}
        for future in as_completed(futures):
            task = futures[future]
            try:
                built, entry = future.result()
            except ImageBuildError as exc:
                failures.append(exc)
                _note(bar, "[red]failed[/]", f"{task.name}: {exc.reason}")
            else:
                results[task.name], entries[task.name] = built, entry
                _note(bar, "[green]built[/]" if built.rebuilt else "up to date", f"{task.name}  {built.ref}  {built.seconds:.1f}s")
    lock = ImageLock(dataset=str(dataset.root), images={t.name: entries[t.name] for t in dataset.tasks if t.name in entries})
    lock.write(lock_path)
    order = [t.name for t in dataset.tasks]
    failures.sort(key=lambda exc: order.index(exc.task) if exc.task in order else len(order))
    return DatasetBuild(lock=lock, lock_path=lock_path, built=[results[n] for n in order if n in results], failures=failures)


def _one(task: HarborTask, settings: ImageSettings, push: str | None, before: LockEntry | None) -> tuple[BuiltImage, LockEntry]:
    try:
        built = build_task_image(task, settings)
        pushed = push_image(task, built, push, settings) if push else None
    except ImageBuildError:
        raise
    except Exception as exc:  # a tool that vanished, a disk that filled: still this task's failure, not the run's
        raise ImageBuildError(task.name, "build", "", "see the message above", reason=f"{type(exc).__name__}: {exc}") from exc
    if pushed is None and before is not None and before.image_id == built.image_id:
        pushed = before.pushed_ref
    return built, LockEntry(ref=built.ref, image_id=built.image_id, env_digest=built.env_digest, pushed_ref=pushed,
                            user=built.user)


def _previous(path: Path) -> ImageLock:
    try:
        return ImageLock.load(path) if path.is_file() else ImageLock()
    except ImageLockError:
        return ImageLock()  # unreadable: rewritten from scratch


class _Bar:
    def __init__(self, total: int) -> None:
        self.progress = Progress(TextColumn("[bold]task images[/]"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                                 console=Console(stderr=True))
        self.task = self.progress.add_task("", total=total)

    def __enter__(self) -> _Bar:
        self.progress.__enter__()
        return self

    def __exit__(self, *exc: object) -> None:
        self.progress.__exit__(*exc)


def _bar(progress: bool, total: int) -> _Bar | nullcontext:
    return _Bar(total) if progress else nullcontext()


def _note(bar: _Bar | None, status: str, text: str) -> None:
    if bar is not None:
        bar.progress.console.print(f"{status} {escape(text)}", highlight=False)
        bar.progress.advance(bar.task)
