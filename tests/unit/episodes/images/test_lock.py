"""images.lock.json: atomic writes, and resolve refusing a missing or changed task with the command that fixes it."""

from __future__ import annotations

import pytest

from rlstack.episodes.harbor.task import HarborTask
from rlstack.episodes.images.digest import environment_digest
from rlstack.episodes.images.lock import ImageLock, ImageLockError, LockEntry, default_lock_path
from tests.helpers.harbor_tasks import write_task


def _entry(task: HarborTask) -> LockEntry:
    return LockEntry(ref="localhost/rlstack-task/a:0123", image_id="sha256:" + "1" * 64, env_digest=environment_digest(task))


def test_resolve_returns_the_entry_of_an_unchanged_task(tmp_path):
    task = HarborTask.load(write_task(tmp_path / "ds" / "a", files={"x.txt": "1"}))
    lock = ImageLock(dataset=str(tmp_path / "ds"), images={task.name: _entry(task)})
    assert lock.resolve(task).ref == "localhost/rlstack-task/a:0123"


def test_resolve_names_a_missing_task_and_the_build_command(tmp_path):
    task = HarborTask.load(write_task(tmp_path / "ds" / "a"))
    with pytest.raises(ImageLockError, match=rf"task test/a has no image .*run rlstack tasks build {tmp_path / 'ds'}$"):
        ImageLock(dataset=str(tmp_path / "ds")).resolve(task)


def test_resolve_refuses_a_task_changed_after_its_build(tmp_path):
    task = HarborTask.load(write_task(tmp_path / "ds" / "a", files={"x.txt": "1"}))
    lock = ImageLock(dataset="/data/ds", images={task.name: _entry(task)})
    (task.environment_dir / "x.txt").write_text("2")
    with pytest.raises(ImageLockError, match="task test/a changed after its image was built: run rlstack tasks build /data/ds again"):
        lock.resolve(task)


def test_write_is_atomic_and_load_round_trips(tmp_path):
    task = HarborTask.load(write_task(tmp_path / "ds" / "a"))
    path = default_lock_path(tmp_path / "ds")
    assert path == tmp_path / "ds" / "images.lock.json"
    lock = ImageLock(dataset=str(tmp_path / "ds"), images={task.name: _entry(task).model_copy(
        update={"pushed_ref": "reg.example/rlstack-task/a@sha256:" + "2" * 64})})
    lock.write(path)
    lock.write(path)  # over an existing one
    assert [p.name for p in path.parent.iterdir() if p.name.startswith(".")] == []
    assert ImageLock.load(path) == lock
    path.write_text('{"version": 2, "images": {}}')
    with pytest.raises(ImageLockError, match="not a valid image lock"):
        ImageLock.load(path)
    with pytest.raises(ImageLockError, match="no lock file"):
        ImageLock.load(tmp_path / "nowhere" / "images.lock.json")


def test_a_trial_records_a_pushed_image_by_its_digest_once_and_a_local_one_with_its_id():
    local = LockEntry(ref="localhost/rlstack-task/t:abc", image_id="sha256:" + "1" * 64, env_digest="e")
    assert local.recorded_ref == "localhost/rlstack-task/t:abc@sha256:" + "1" * 64
    pushed = local.model_copy(update={"pushed_ref": "r:5000/rlstack-task/t@sha256:" + "2" * 64})
    assert pushed.pull_ref == pushed.recorded_ref == "r:5000/rlstack-task/t@sha256:" + "2" * 64


def test_a_locks_user_must_be_numeric():
    with pytest.raises(ValueError, match="user"):
        LockEntry(ref="r", image_id="sha256:" + "1" * 64, env_digest="e", user="agent")
