"""``rlstack tasks``: flags parsed without importing the builders, env vars merged under them."""

from __future__ import annotations

import argparse

import pytest

from rlstack.cli import tasks


def _parse(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="rlstack")
    tasks.register(parser.add_subparsers(dest="command", required=True))
    return parser.parse_args(list(argv))


def test_build_flags_override_env_and_extend_its_base_map(monkeypatch, tmp_path):
    monkeypatch.setenv("RLSTACK_TASKS_BASE_MAP", '{"debian:bookworm-slim": "env/deb", "ubuntu:24.04": "env/ubu"}')
    monkeypatch.setenv("RLSTACK_TASKS_JOBS", "3")
    args = _parse("tasks", "build", str(tmp_path), "--base-map", "debian:bookworm-slim=localhost/debian:bookworm-slim",
                  "--base-map", "alpine:3=localhost/alpine:3", "--push", "reg.example:5000", "--cache-dir", str(tmp_path / "c"))
    settings = tasks._settings(args)
    assert settings.base_map == {"debian:bookworm-slim": "localhost/debian:bookworm-slim", "ubuntu:24.04": "env/ubu",
                                 "alpine:3": "localhost/alpine:3"}
    assert settings.jobs == 3 and settings.cache_dir == tmp_path / "c"
    assert (args.push, args.lock, args.func) == ("reg.example:5000", None, tasks.cmd_build)
    assert tasks._settings(_parse("tasks", "build", "ds", "--jobs", "8")).jobs == 8


def test_bad_base_map_items_are_refused(capsys):
    with pytest.raises(SystemExit):
        _parse("tasks", "build", "ds", "--base-map", "debian:bookworm-slim")
    assert "expected FROM=TO" in capsys.readouterr().err


def test_base_defaults():
    args = _parse("tasks", "base")
    assert (args.tag, args.suite, args.force, args.func) == ("localhost/debian:bookworm-slim", "bookworm", False, tasks.cmd_base)
