"""One Harbor task directory, checked once when it is loaded.

::

    <task>/task.toml          timeouts, resources, metadata (schema 1.0 or 1.1)
    <task>/instruction.md     what the agent is asked to do
    <task>/environment/       Dockerfile (or [environment].docker_image) plus the files of /app
    <task>/tests/test.sh      the verifier: writes /logs/verifier/reward.txt or reward.json
    <task>/solution/solve.sh  optional reference solution

A broken task fails here with a message naming the file and field, not halfway through a
trial; sandboxes and env servers only ever see a loaded ``HarborTask``.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

from pydantic import BaseModel, ConfigDict, ValidationError

from rlstack.episodes.harbor.config import TaskConfig

# Files that describe how to build the image, not what goes into /app.
BUILD_FILES = frozenset({"Dockerfile", ".dockerignore", "docker-compose.yaml", "docker-compose.yml"})
TABLES = frozenset({"task", "metadata", "agent", "verifier", "environment"})


class TaskError(ValueError):
    """A task directory that cannot be used; the message names the path and what is wrong."""


class HarborTask(BaseModel):
    model_config = ConfigDict(frozen=True)

    name: str
    """``[task].name`` (schema 1.1), else the directory name."""
    path: Path
    config: TaskConfig
    instruction: str

    @property
    def short_name(self) -> str:
        """The name without its ``org/``, safe in trial ids and Kubernetes labels."""
        return re.sub(r"[^A-Za-z0-9._-]+", "-", self.name.rsplit("/", 1)[-1]).strip("-._") or "task"

    @property
    def environment_dir(self) -> Path:
        return self.path / "environment"

    @property
    def tests_dir(self) -> Path:
        return self.path / "tests"

    @property
    def solution_dir(self) -> Path | None:
        return self.path / "solution" if (self.path / "solution" / "solve.sh").is_file() else None

    def workspace_files(self) -> list[Path]:
        """Top-level entries of ``environment/`` that make up /app (everything but build files)."""
        if not self.environment_dir.is_dir():
            return []
        return sorted(p for p in self.environment_dir.iterdir() if p.name not in BUILD_FILES)

    @classmethod
    def load(cls, path: Path | str) -> HarborTask:
        path = Path(path).resolve()
        if not path.is_dir():
            raise TaskError(f"{path}: not a task directory")
        config = _read_config(path / "task.toml")
        instruction_path = path / "instruction.md"
        if not instruction_path.is_file():
            raise TaskError(f"{path}: no instruction.md (the agent's instruction)")
        instruction = instruction_path.read_text()
        if not instruction.strip():
            raise TaskError(f"{instruction_path}: empty instruction")
        if not (path / "tests" / "test.sh").is_file():
            raise TaskError(f"{path}: no tests/test.sh (the verifier that writes /logs/verifier/reward.txt)")
        if config.environment.docker_image is None and not (path / "environment" / "Dockerfile").is_file():
            raise TaskError(f"{path}: neither environment/Dockerfile nor [environment].docker_image in task.toml")
        if (path / "solution").is_dir() and not (path / "solution" / "solve.sh").is_file():
            raise TaskError(f"{path}: solution/ has no solve.sh")
        name = config.task.name if config.task else path.name
        return cls(name=name, path=path, config=config, instruction=instruction)


def _read_config(path: Path) -> TaskConfig:
    if not path.is_file():
        raise TaskError(f"{path.parent}: no task.toml")
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as exc:
        raise TaskError(f"{path}: not valid TOML: {exc}") from None
    try:
        return TaskConfig.model_validate(data)
    except ValidationError as exc:
        raise TaskError(f"{path}: " + "; ".join(_describe(err) for err in exc.errors())) from None


def _describe(error: dict) -> str:
    """``[agent].timeout_sec: Input should be greater than 0`` from one pydantic error."""
    loc = [str(part) for part in error["loc"]]
    message = error["msg"].removeprefix("Value error, ")
    if not loc:
        return message
    if len(loc) == 1:
        return f"[{loc[0]}]: {message}" if loc[0] in TABLES else f"{loc[0]}: {message}"
    return f"[{loc[0]}].{'.'.join(loc[1:])}: {message}"
