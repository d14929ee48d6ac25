"""Every option of every ``rlstack`` command says what it does and shows its default in ``--help``;
``rlstack --version`` is the installed package's version."""

from __future__ import annotations

import argparse
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

from rlstack.cli import build_parser, main

RLSTACK = str(Path(sys.executable).with_name("rlstack"))


def commands(parser: argparse.ArgumentParser, prefix: tuple[str, ...] = ()) -> dict[tuple[str, ...], argparse.ArgumentParser]:
    """Every command and sub-command, by the words that invoke it."""
    found = {prefix: parser}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, child in action.choices.items():
                found |= commands(child, (*prefix, name))
    return found


COMMANDS = commands(build_parser())


@pytest.mark.parametrize("words", sorted(COMMANDS), ids=lambda w: " ".join(w) or "rlstack")
def test_every_option_has_help_and_its_default_shown(words, capsys):
    with pytest.raises(SystemExit) as done:
        main([*words, "--help"])
    assert done.value.code == 0
    text = " ".join(capsys.readouterr().out.split())  # argparse wraps lines
    for action in COMMANDS[words]._actions:
        if isinstance(action, argparse._HelpAction | argparse._VersionAction | argparse._SubParsersAction):
            continue
        name = action.option_strings[0] if action.option_strings else action.dest
        assert action.help, f"rlstack {' '.join(words)} {name}: no help"
        default = action.default
        if default is None or default is False or not (action.option_strings or action.nargs in ("?", "*")):
            continue
        shown = ",".join(map(str, default)) if isinstance(default, list | tuple) else str(default)
        assert f"(default: {shown})" in text or ("default" in action.help.lower() and shown in text), \
            f"rlstack {' '.join(words)} {name}: default {shown} not shown"


def test_version_comes_from_the_package_metadata():
    result = subprocess.run([RLSTACK, "--version"], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0 and result.stdout.strip() == f"rlstack {version('rlstack')}"
