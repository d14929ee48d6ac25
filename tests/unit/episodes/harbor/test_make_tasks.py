"""The shipped dataset is exactly what its generator writes, and every task can be judged."""

from __future__ import annotations

from pathlib import Path

import pytest

from rlstack.episodes.harbor import load_dataset
from rlstack.episodes.harbor.make_tasks import main
from tests.conftest import REPO

SHIPPED = REPO / "examples" / "tasks"


def tree(root: Path) -> dict[str, tuple[bytes, bool]]:
    """The dataset's files; not the lock file a build on this machine writes beside them (ignored by git)."""
    return {str(p.relative_to(root)): (p.read_bytes(), bool(p.stat().st_mode & 0o100))
            for p in sorted(root.rglob("*")) if p.is_file() and p.name != "images.lock.json"}


def test_examples_tasks_is_the_generators_output(tmp_path):
    main(["--out", str(tmp_path)])
    assert tree(tmp_path) == tree(SHIPPED), "examples/tasks is stale: run python -m rlstack.episodes.harbor.make_tasks"


def test_shipped_tasks_load_and_each_has_a_reference_solution():
    dataset = load_dataset(SHIPPED)
    assert 12 <= len(dataset) <= 30
    for task in dataset.tasks:
        assert task.solution_dir is not None, task.name
        assert task.name.startswith("rlstack/")
        assert task.config.agent.timeout_sec is not None


def test_generated_training_sets_cycle_the_families_and_seeds_draw_differently():
    from rlstack.episodes.harbor.make_tasks import generate

    tasks = generate(8, seed=3, families=("sum-numbers", "uppercase"))
    assert [t.name for t in tasks[:3]] == ["sum-numbers-s3-0", "uppercase-s3-1", "sum-numbers-s3-2"]
    assert tasks[0].files != generate(1, seed=4, families=("sum-numbers",))[0].files
    with pytest.raises(ValueError, match="unknown task families"):
        generate(2, seed=3, families=("juggling",))
