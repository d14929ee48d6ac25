"""``rlstack ledger`` proves what became of a run's trials, so it must fail on a run that is not
there and must never write to one: no directory made, no log created or cut. ``make_run_dir``
replaces a stray ``runs/latest`` (one the old ledger used to make) instead of crashing on it."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from rlstack.cli.errors import UserError
from rlstack.cli.stack import make_run_dir

RLSTACK = str(Path(sys.executable).with_name("rlstack"))
TORN = b"\x02\x00\x00"  # the first bytes of a record header a crash cut short


def ledger(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([RLSTACK, "ledger", *args], cwd=cwd, capture_output=True, text=True, timeout=120)


def tree(root: Path) -> dict[str, bytes | None]:
    return {str(p.relative_to(root)): (p.read_bytes() if p.is_file() else None) for p in sorted(root.rglob("*"))}


def test_bare_ledger_in_a_fresh_checkout_fails_and_creates_nothing(tmp_path):
    result = ledger(cwd=tmp_path)
    assert result.returncode == 2 and "runs/latest: no such run directory" in result.stderr, result.stderr
    assert list(tmp_path.iterdir()) == []


def test_a_run_without_its_files_is_an_error_naming_them(tmp_path):
    (tmp_path / "run" / "trials").mkdir(parents=True)
    before = tree(tmp_path)
    result = ledger("run", cwd=tmp_path)
    assert result.returncode == 2 and result.stdout == "", result.stdout
    assert "lacks env-journal, batcher/batcher.wal, metrics.jsonl" in result.stderr
    assert tree(tmp_path) == before  # the old ledger created batcher/batcher.wal here


def test_a_whole_run_is_audited_without_a_byte_changed(tmp_path):
    run = tmp_path / "run"
    for folder in ("trials", "env-journal", "batcher"):
        (run / folder).mkdir(parents=True)
    (run / "metrics.jsonl").write_text("")
    (run / "batcher" / "batcher.wal").write_bytes(TORN)  # the batcher cuts a torn tail when it starts; the ledger must not
    before = tree(tmp_path)
    result = ledger(str(run), cwd=tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["lost_trials"] == []
    assert tree(tmp_path) == before


@pytest.mark.parametrize("stray", ["empty directory", "file"])
def test_make_run_dir_replaces_a_latest_that_is_not_a_link(tmp_path, stray):
    latest = tmp_path / "latest"
    latest.mkdir() if stray == "empty directory" else latest.write_text("")
    run_dir = make_run_dir(tmp_path, "demo")
    assert latest.is_symlink() and latest.resolve() == run_dir.resolve()


def test_make_run_dir_refuses_to_drop_a_latest_holding_files(tmp_path):
    (tmp_path / "latest").mkdir()
    (tmp_path / "latest" / "metrics.jsonl").write_text("{}\n")
    with pytest.raises(UserError, match=r"latest is a directory with files in it.*mv .*latest .*latest\.old"):
        make_run_dir(tmp_path, "demo")
    assert (tmp_path / "latest" / "metrics.jsonl").read_text() == "{}\n" and sorted(tmp_path.iterdir()) == [tmp_path / "latest"]
