"""Datasets: every task of a directory, every broken one reported at once."""

from __future__ import annotations

import pytest

from rlstack.episodes.harbor import DatasetError, load_dataset
from tests.helpers.harbor_tasks import write_task


def test_loads_each_task_directory_and_skips_templates(tmp_path):
    for name in ("b-task", "a-task", "_template", ".hidden"):
        write_task(tmp_path / name)
    (tmp_path / "README.md").write_text("not a task")
    dataset = load_dataset(tmp_path)
    assert [t.short_name for t in dataset.tasks] == ["a-task", "b-task"]
    assert dataset.get("test/a-task") is dataset.get("a-task")
    with pytest.raises(KeyError):
        dataset.get("c-task")


def test_a_single_task_directory_is_a_dataset_of_one(tmp_path):
    assert len(load_dataset(write_task(tmp_path / "only"))) == 1


def test_every_broken_task_is_reported_at_once(tmp_path):
    write_task(tmp_path / "good")
    write_task(tmp_path / "untested", test_sh=None)
    write_task(tmp_path / "bad-timeout", toml='version = "1.0"\n[agent]\ntimeout_sec = 0\n')
    with pytest.raises(DatasetError) as err:
        load_dataset(tmp_path)
    message = str(err.value)
    assert "2 broken task(s)" in message
    assert "untested: no tests/test.sh" in message and "[agent].timeout_sec" in message


def test_duplicate_names_and_empty_datasets_are_refused(tmp_path):
    toml = 'schema_version = "1.1"\n[task]\nname = "{org}/same"\n'
    write_task(tmp_path / "one", toml=toml.format(org="a"))
    write_task(tmp_path / "two", toml=toml.format(org="b"))
    with pytest.raises(DatasetError, match="task name 'same' also used"):
        load_dataset(tmp_path)
    (tmp_path / "empty").mkdir()
    with pytest.raises(DatasetError, match="no tasks"):
        load_dataset(tmp_path / "empty")
