"""``rlstack dryrun`` on a chart values file reads the model where the chart gets it from
(``model.source``), not ``model.path`` on a volume this machine lacks; when that cannot be read,
the one line it prints names ``--model-dir``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from rlstack.ops.chart_model import chart_model
from tests.conftest import REPO

RLSTACK = str(Path(sys.executable).with_name("rlstack"))
VALUES = REPO / "charts" / "rlstack" / "values.yaml"


def dryrun(*args: str) -> subprocess.CompletedProcess[str]:
    # Offline, so the Hub lookup fails at once: what a machine without the Hub sees
    return subprocess.run([RLSTACK, "dryrun", *args], capture_output=True, text=True, timeout=300, cwd=REPO,
                          env={**os.environ, "HF_HUB_OFFLINE": "1", "COLUMNS": "400"})


def findings(stdout: str) -> dict[str, tuple[str, str]]:
    """The printed table read back: check -> (ok, detail), a detail wrapped over lines joined again."""
    rows: dict[str, tuple[str, str]] = {}
    check = ""
    for line in stdout.splitlines():
        cells = [c.strip() for c in line.split("│")[1:-1]]
        if len(cells) != 3:
            continue
        if cells[0]:
            check = cells[0]
            rows[check] = (cells[1], cells[2])
        elif check:
            rows[check] = (rows[check][0], f"{rows[check][1]} {cells[2]}")
    return rows


def test_the_default_values_read_the_hub_repo_and_name_model_dir():
    result = dryrun(str(VALUES))
    ok, detail = findings(result.stdout)["model config"]
    assert ok == "NO" and detail.startswith("Qwen/Qwen2.5-0.5B-Instruct:") and "pass --model-dir DIR" in detail
    assert "/data/models/policy" not in detail and "Repo id must be" not in result.stdout + result.stderr


def test_model_dir_reads_a_local_copy(tiny_model):
    result = dryrun(str(VALUES), "--model-dir", str(tiny_model))
    table = findings(result.stdout)
    assert "model config" not in table and table["decoder-only causal LM"][0] == "yes"


@pytest.mark.parametrize(("source", "expected"), [
    ({"type": "hub", "hub": {"id": "org/model", "revision": "v2"}}, ("org/model", "v2")),
    ({"type": "hostPath", "hostPath": "/models/m"}, ("/models/m", None)),
    ({"type": "demo"}, ("/data/models/policy", None)),
    ({"type": "claim", "claim": {"name": "pvc"}}, ("/data/models/policy", None)),
])
def test_each_source_names_what_is_read_and_the_fix(source, expected):
    where = chart_model({"model": {"path": "/data/models/policy", "source": source}})
    assert (where.model, where.revision) == expected and "--model-dir" in where.hint
