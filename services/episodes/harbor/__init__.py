"""Harbor's task format: task directories (``task.toml``, instruction, environment, tests) and datasets of them."""

from rlstack.episodes.harbor.dataset import Dataset, DatasetError, load_dataset
from rlstack.episodes.harbor.task import HarborTask, TaskError

__all__ = ["Dataset", "DatasetError", "HarborTask", "TaskError", "load_dataset"]
