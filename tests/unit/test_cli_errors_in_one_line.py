"""A user's mistake on the ``rlstack`` command line is one line on stderr naming the file, the key
or the fix, exit 2, and no traceback unless ``--debug``: driven through the installed entry point."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

RLSTACK = str(Path(sys.executable).with_name("rlstack"))


def rlstack(*args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([RLSTACK, *args], cwd=cwd, capture_output=True, text=True, timeout=120,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"})


def one_error_line(result: subprocess.CompletedProcess[str]) -> str:
    assert result.returncode == 2, result.stderr
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    return lines[0]


def write_config(path: Path, proxy: str) -> Path:
    path.write_text("name: t\nservices:\n  - name: registry\n    module: rlstack.registry\n"
                    f"  - name: proxy\n    module: rlstack.proxy\n{proxy}")
    return path


@pytest.mark.parametrize("command", ["up", "dryrun"])
def test_a_missing_config_names_the_file(tmp_path, command):
    line = one_error_line(rlstack(command, "missing.yaml", cwd=tmp_path))
    assert line.startswith(f"rlstack {command}: missing.yaml: no such") and str(tmp_path) in line


def test_bare_up_outside_the_repository_says_its_default_is_relative(tmp_path):
    line = one_error_line(rlstack("up", cwd=tmp_path))
    assert "examples/local-foundation.yaml" in line and "relative" in line and "repository root" in line
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("command", ["up", "dryrun"])
def test_a_misspelt_key_is_named_by_its_dotted_path(tmp_path, command):
    write_config(tmp_path / "config.yaml", "    prot: 4000\n")
    assert one_error_line(rlstack(command, "config.yaml", cwd=tmp_path)) == f"rlstack {command}: config.yaml: proxy.prot: unknown key"


def test_a_bad_value_is_named_with_what_was_given(tmp_path):
    write_config(tmp_path / "config.yaml", "    port: 70000\n")
    line = one_error_line(rlstack("up", "config.yaml", cwd=tmp_path))
    assert "config.yaml: proxy.port:" in line and "65535" in line and "70000" in line


def test_a_file_that_is_not_yaml_says_where(tmp_path):
    (tmp_path / "config.yaml").write_text("name: [\n")
    assert "config.yaml: not valid YAML at line 2" in one_error_line(rlstack("up", "config.yaml", cwd=tmp_path))


def test_a_usage_mistake_is_one_line_pointing_at_help(tmp_path):
    line = one_error_line(rlstack("trial-key", "--trial", "t", cwd=tmp_path))
    assert line == "rlstack trial-key: the following arguments are required: --run-id (see rlstack trial-key --help)"


def test_debug_shows_the_traceback(tmp_path):
    result = rlstack("--debug", "up", "missing.yaml", cwd=tmp_path)
    assert result.returncode != 0 and "Traceback" in result.stderr and "UserError" in result.stderr
