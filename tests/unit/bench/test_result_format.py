"""Every benchmark ends on one result line (``bench.common.result``): a real bench run as the docs say
(``python -m bench.<name>``) prints it last and appends the same line to ``--json-out``."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from bench.common.result import BenchResult, stored_figures
from tests.conftest import REPO


def test_a_bench_prints_its_result_line_last_and_keeps_it_with_json_out(tmp_path):
    out = tmp_path / "results" / "mismatch.jsonl"
    argv = [sys.executable, "-m", "bench.mismatch", "--model", str(tmp_path / "tiny"), "--repeats", "1", "--groups", "2",
            "--group-size", "2", "--prompt", "8", "--completion", "8", "--threads", "1", "--json-out", str(out)]
    done = subprocess.run(argv, cwd=REPO, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, done.stderr[-2000:]
    last = done.stdout.strip().splitlines()[-1]
    result = BenchResult.model_validate_json(last)
    assert result.bench == "mismatch" and result.machine.cores >= 1 and result.args["groups"] == 2
    assert result.figures["rows"] == 4 and result.ratios["checked_over_baseline"] > 0
    assert out.read_text().strip() == last  # the same line, kept
    assert stored_figures(out) == [result.figures]


def test_stored_results_of_the_formats_before_read_as_their_figures(tmp_path):
    old_lines = tmp_path / "trainer.jsonl"  # bench/trainer.py's own lines, before the shared format
    old_lines.write_text("\n".join(json.dumps({"shape": s, "paths": {}}) for s in ("a", "b")) + "\n")
    assert [d["shape"] for d in stored_figures(old_lines)] == ["a", "b"]
    old_document = tmp_path / "faults.json"  # bench/faults.py's indented document
    old_document.write_text(json.dumps({"ok": True, "faulted": {}}, indent=1))
    assert stored_figures(old_document) == [{"ok": True, "faulted": {}}]


def test_a_stored_file_with_no_result_is_refused_and_the_plot_exits_non_zero(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    with pytest.raises(ValueError, match="no result in it"):
        stored_figures(empty)
    done = subprocess.run([sys.executable, "-m", "bench.trainer_plot", str(empty), "--out", str(tmp_path / "p.png")], cwd=REPO,
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and "no result in it" in done.stderr and not (tmp_path / "p.png").exists()
