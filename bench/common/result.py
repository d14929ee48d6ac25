"""One result format for every benchmark: a JSON line naming the bench, when and where it ran, the
arguments it ran with, its own figures, and each ratio against the baseline it measured in the same run.

The last line a benchmark prints to stdout is this line (``emit``), and ``--json-out`` appends it to
a file: a stored result says on its own what produced it. ``figures`` is the bench's own shape (what
its plot or its docs table reads); ``ratios`` are the headline claims, by name.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import orjson
from pydantic import BaseModel, Field

from bench.common.harness import REPO


class Machine(BaseModel):
    """Where it ran: figures from another CPU or GPU are not comparable."""

    cpu: str
    cores: int
    gpu: str | None = None
    python: str


class BenchResult(BaseModel):
    bench: str
    """The module: ``batcher`` for ``python -m bench.batcher``."""
    at: datetime = Field(default_factory=lambda: datetime.now(UTC))
    commit: str | None = None
    machine: Machine
    args: dict[str, Any] = {}
    figures: dict[str, Any]
    ratios: dict[str, float] = {}
    """The headline ratios against the baseline measured in the same run, each named for what it divides
    (``fsync_single_groups_per_s_over_atropos``; ``checked_over_baseline``: step time with the check over without)."""


def _cpu() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.partition(":")[2].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _gpu() -> str | None:
    if "torch" not in sys.modules:  # a bench that never imported torch ran on no GPU
        return None
    torch = sys.modules["torch"]
    return torch.cuda.get_device_name(0) if torch.cuda.is_available() else None


def _commit() -> str | None:
    try:
        done = subprocess.run(["git", "rev-parse", "--short=12", "HEAD"], cwd=REPO, capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return done.stdout.strip() or None


def _jsonable(value: object) -> object:
    return str(value) if isinstance(value, Path) else value


def result(bench: str, args: argparse.Namespace | None, figures: dict[str, Any], ratios: dict[str, float] | None = None) -> BenchResult:
    machine = Machine(cpu=_cpu(), cores=os.cpu_count() or 1, gpu=_gpu(), python=platform.python_version())
    given = {k: _jsonable(v) for k, v in vars(args).items() if k != "json_out"} if args is not None else {}
    return BenchResult(bench=bench, commit=_commit(), machine=machine, args=given, figures=figures, ratios=ratios or {})


def emit(bench: str, args: argparse.Namespace | None, figures: dict[str, Any], ratios: dict[str, float] | None = None) -> BenchResult:
    """Print the result line (stdout's last) and append it to ``args.json_out`` when given."""
    line = result(bench, args, figures, ratios)
    text = orjson.dumps(line.model_dump(), default=str, option=orjson.OPT_SERIALIZE_NUMPY).decode()  # NaN: null
    print(text, flush=True)
    out = getattr(args, "json_out", None)
    if out is not None:
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("a") as f:
            f.write(text + "\n")
    return line


def figures_of(line: dict[str, Any]) -> dict[str, Any]:
    """A stored line's figures, whether written in this format or before it (the bench's own dict)."""
    return line["figures"] if "figures" in line and "machine" in line else line


def stored_figures(path: Path) -> list[dict[str, Any]]:
    """Every result's figures in a stored file: lines of this format, or one JSON document or JSON
    lines a bench wrote before it. A file with no result is an error, not an empty plot."""
    text = path.read_text()
    try:
        lines = [json.loads(text)]
    except ValueError:
        lines = [json.loads(line) for line in text.splitlines() if line.strip()]
    if not lines:
        raise ValueError(f"{path}: no result in it")
    return [figures_of(line) for line in lines]
