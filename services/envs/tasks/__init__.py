"""Single-turn tasks, each one module that registers itself: adding a task touches one file.

A task module (a file in this package, or any installed package's module named by an
``rlstack.tasks`` entry point) declares its options as a pydantic model and registers a builder::

    class EchoOptions(BaseModel):
        model_config = ConfigDict(extra="forbid")
        word: str = "hi"

    @register("echo", EchoOptions)
    def build(options: EchoOptions, context: TaskContext) -> Task: ...

``--task echo --task-options '{"word": "yo"}'`` then runs it: the env server validates the options
against that model at start-up (a wrong or unknown field is an error naming
``task_options.<field>``) and talks to the result only through the four-method ``Task`` protocol.
Discovery is lazy (the first lookup imports this package's modules and the entry points), so a
service that never asks for a task imports none.
"""

from __future__ import annotations

import importlib
import logging
import pkgutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from importlib.metadata import entry_points
from typing import Any, Protocol, TypeVar

from pydantic import BaseModel, Field

log = logging.getLogger(__name__)
ENTRY_POINT_GROUP = "rlstack.tasks"
"""Packages outside rlstack add tasks by naming a module here (``[project.entry-points."rlstack.tasks"]``)."""


class Task(Protocol):
    def stream(self) -> Iterator[Any]:
        """Training problems, endless (the runner draws one per group)."""
        ...

    def heldout(self) -> list[Any]:
        """Problems kept out of ``stream``, answered by POST /evaluate."""
        ...

    def messages(self, problem: Any) -> list[dict[str, str]]: ...

    def score(self, completion: str, problem: Any) -> float: ...


class TaskContext(BaseModel):
    """What the env server decides for every task: the seed and the size of the held-out set."""

    seed: int = 0
    heldout_size: int = Field(default=0, ge=0)


Options = TypeVar("Options", bound=BaseModel)


@dataclass(frozen=True)
class TaskPlugin:
    name: str
    options: type[BaseModel]
    build: Callable[[Any, TaskContext], Task]
    module: str


_registered: dict[str, TaskPlugin] = {}
_discovered = False


def register(name: str, options: type[Options]) -> Callable[[Callable[[Options, TaskContext], Task]], Callable[[Options, TaskContext], Task]]:
    """Make ``name`` a task; ``options`` must forbid extra fields, so a typo is refused, not ignored."""
    if options.model_config.get("extra") != "forbid":
        raise TypeError(f"task {name!r}: {options.__name__} must set model_config = ConfigDict(extra='forbid')")

    def add(build: Callable[[Options, TaskContext], Task]) -> Callable[[Options, TaskContext], Task]:
        held = _registered.get(name)
        if held is not None and held.module != build.__module__:
            raise ValueError(f"task {name!r} is registered twice: by {held.module} and by {build.__module__}")
        _registered[name] = TaskPlugin(name=name, options=options, build=build, module=build.__module__)
        return build

    return add


def _discover() -> None:
    global _discovered
    if _discovered:
        return
    _discovered = True
    for module in pkgutil.iter_modules(__path__, f"{__name__}."):
        importlib.import_module(module.name)
    for point in entry_points(group=ENTRY_POINT_GROUP):
        point.load()  # importing the module runs its @register


def registered() -> dict[str, TaskPlugin]:
    """Every task this installation has, by name (this package's modules and the entry points)."""
    _discover()
    return dict(_registered)


def plugin(name: str) -> TaskPlugin:
    tasks = registered()
    if name not in tasks:
        raise ValueError(f"task {name!r} is not registered (known: {', '.join(sorted(tasks))}); a task registers itself "
                         f"with rlstack.envs.tasks.register, in this package or through an {ENTRY_POINT_GROUP!r} entry point")
    return tasks[name]


def build_task(name: str, options: BaseModel, context: TaskContext) -> Task:
    return plugin(name).build(options, context)
