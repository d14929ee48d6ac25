"""One name per meaning across ``rlstack`` commands: the proxy's trial-key secret is
``--trial-key-secret`` and a run's id ``--run-id`` everywhere (the services' own names); the old
spellings ``--secret`` and ``--run`` still parse, unshown. Model families match in any case."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from rlstack.common.trial_keys import verify

RLSTACK = str(Path(sys.executable).with_name("rlstack"))


def rlstack(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([RLSTACK, *args], cwd=cwd, capture_output=True, text=True, timeout=60)


@pytest.mark.parametrize(("command", "new", "old"), [
    ("trial-key", "--trial-key-secret", "--secret"), ("sandbox", "--trial-key-secret", "--secret"),
    ("trial", "--trial-key-secret", None), ("trial-key", "--run-id", "--run"), ("trial", "--run-id", "--run"),
    ("ledger", "--run-id", "--run"),
])
def test_help_shows_one_name(command, new, old):
    words = " ".join(rlstack(command, "--help").stdout.split())
    assert f"{new} " in words
    if old:
        assert f"{old} " not in words and f"{old}," not in words


@pytest.mark.parametrize("spelling", [("--run-id", "--trial-key-secret"), ("--run", "--secret")])
def test_old_and_new_spellings_mint_the_same_identity(spelling):
    run, secret = spelling
    result = rlstack("trial-key", run, "r1", "--trial", "t1", secret, "s3cret")
    assert result.returncode == 0, result.stderr
    identity = verify("s3cret", result.stdout.strip())
    assert (identity.run, identity.trial) == ("r1", "t1")


def test_the_ledger_takes_its_run_id_by_either_name(tmp_path):
    for spelling in ("--run-id", "--run"):  # the volume lacks the run's files: the message names that run's paths
        result = rlstack("ledger", str(tmp_path), spelling, "rel-7")
        assert result.returncode == 2 and "batcher/rel-7/batcher.wal" in result.stderr, result.stderr


@pytest.mark.parametrize("family", ["Qwen3", "QWEN3", "qwen3"])
def test_model_families_match_in_any_case(tmp_path, family):
    # parsing passes; the command then stops on its missing config, not on the family
    result = rlstack("up", "missing.yaml", "--model-family", family, cwd=tmp_path)
    assert result.returncode == 2 and "missing.yaml: no such" in result.stderr and "invalid choice" not in result.stderr


def test_an_unknown_family_is_refused_with_the_choices(tmp_path):
    result = rlstack("up", "missing.yaml", "--model-family", "Qwen9", cwd=tmp_path)
    assert result.returncode == 2 and "invalid choice: 'qwen9'" in result.stderr and "qwen3" in result.stderr
