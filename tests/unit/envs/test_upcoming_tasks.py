"""The task stream the warm pool reads ahead of: peeking shows the next groups' tasks and never
changes the order the workers draw them in."""

from __future__ import annotations

import itertools

from rlstack.envs.harbor_tasks import HarborTasks, Upcoming
from rlstack.episodes.harbor.dataset import load_dataset
from tests.conftest import REPO

DATASET = load_dataset(REPO / "examples" / "tasks")


def test_peeking_shows_the_next_tasks_and_leaves_the_order_alone():
    plain = [t.short_name for t in itertools.islice(HarborTasks(DATASET, seed=7).stream(), 60)]
    upcoming = Upcoming(HarborTasks(DATASET, seed=7).stream(), window=4)
    drawn = []
    for _ in range(50):
        ahead = [t.short_name for t in upcoming.peek()]
        assert ahead == plain[len(drawn):len(drawn) + 4]  # what the next four groups will run
        drawn.append(next(upcoming).short_name)
    assert drawn == plain[:50]
