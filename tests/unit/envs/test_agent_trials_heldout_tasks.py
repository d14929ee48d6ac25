"""The agent env's held-out split: tasks kept out of training for POST /evaluate."""

from __future__ import annotations

import itertools

import pytest

from rlstack.envs.config import EnvSettings
from rlstack.envs.harbor_tasks import HarborTasks
from rlstack.episodes.harbor.dataset import Dataset, load_dataset
from tests.conftest import REPO

DATASET = load_dataset(REPO / "examples" / "tasks")


def names(tasks) -> set[str]:  # noqa: ANN001
    return {t.short_name for t in tasks}


def test_held_out_tasks_never_enter_the_training_stream():
    tasks = HarborTasks(DATASET, seed=3, heldout_size=5)
    held = names(tasks.heldout())
    assert len(held) == 5
    streamed = names(itertools.islice(tasks.stream(), 10 * len(DATASET)))
    assert streamed == names(DATASET.tasks) - held  # every training task, each epoch, and none held out


def test_the_split_is_the_same_for_every_seed_and_moves_little_when_tasks_are_added():
    held = names(HarborTasks(DATASET, seed=0, heldout_size=5).heldout())
    assert names(HarborTasks(DATASET, seed=99, heldout_size=5).heldout()) == held
    fewer = Dataset(root=DATASET.root, tasks=DATASET.tasks[:-3])
    kept = names(HarborTasks(fewer, seed=0, heldout_size=5).heldout())
    assert len(kept & held) >= 5 - 3  # removing three tasks changes at most the three slots they held


def test_nothing_is_held_out_unless_asked():
    assert EnvSettings(task="harbor", tasks_dir=DATASET.root).heldout_size == 0
    assert EnvSettings().heldout_size == 64  # single-turn tasks keep their default
    assert HarborTasks(DATASET, seed=0).heldout() == []


def test_holding_out_every_task_is_refused_by_name():
    with pytest.raises(ValueError, match=f"heldout_size: holding out {len(DATASET)} of the {len(DATASET)} tasks"):
        HarborTasks(DATASET, seed=0, heldout_size=len(DATASET))
