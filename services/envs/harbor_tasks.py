"""The Harbor dataset as the agent env draws it: a seeded endless stream of training tasks, and
the held-out tasks that only POST /evaluate runs."""

from __future__ import annotations

import hashlib
import itertools
import random
from collections import deque
from collections.abc import Iterator
from pathlib import Path

from rlstack.episodes.harbor.dataset import Dataset, load_dataset
from rlstack.episodes.harbor.task import HarborTask


class NoHeldOutTasks(LookupError):
    """POST /evaluate on an env that holds no tasks out (``heldout_size`` 0)."""


class HarborTasks:
    """The dataset as an endless stream: every training task once per epoch, in a seeded order.

    ``heldout_size`` tasks never enter the stream; POST /evaluate runs them. They are the tasks
    whose names hash lowest: the same split for every seed, and adding tasks moves few of them.
    """

    def __init__(self, dataset: Dataset, seed: int, heldout_size: int = 0) -> None:
        if heldout_size and heldout_size >= len(dataset):
            raise ValueError(f"heldout_size: holding out {heldout_size} of the {len(dataset)} tasks in "
                             f"{dataset.root} leaves none to train on")
        ranked = sorted(dataset.tasks, key=lambda t: hashlib.sha256(t.short_name.encode()).hexdigest())
        held = {t.short_name for t in ranked[:heldout_size]}
        self.dataset, self.seed = dataset, seed
        self.training = [t for t in dataset.tasks if t.short_name not in held]
        self._heldout = [t for t in dataset.tasks if t.short_name in held]

    @classmethod
    def load(cls, tasks_dir: Path, seed: int, heldout_size: int = 0) -> HarborTasks:
        return cls(load_dataset(tasks_dir), seed, heldout_size)

    def stream(self) -> Iterator[HarborTask]:
        rng = random.Random(self.seed)
        for _ in itertools.count():
            order = list(self.training)
            rng.shuffle(order)
            yield from order

    def heldout(self) -> list[HarborTask]:
        return list(self._heldout)


class Upcoming(Iterator[HarborTask]):
    """A task stream that shows its next ``window`` tasks: the tasks of the groups that start next,
    which the kubernetes sandbox's warm pool starts pods for before they are drawn."""

    def __init__(self, stream: Iterator[HarborTask], window: int) -> None:
        self._stream, self._ahead = stream, deque[HarborTask]()
        self.window = window

    def __next__(self) -> HarborTask:
        self._fill()
        return self._ahead.popleft()

    def peek(self) -> list[HarborTask]:
        self._fill()
        return list(self._ahead)[: self.window]

    def _fill(self) -> None:
        while len(self._ahead) < self.window + 1:
            self._ahead.append(next(self._stream))

