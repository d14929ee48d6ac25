"""How ``rlstack`` speaks on its command line: every option's default in its help, old spellings of
a renamed option accepted but not shown, and a usage mistake answered in one line."""

from __future__ import annotations

import argparse
import copy
import re
import sys
import textwrap
from typing import Any, NoReturn

HIDDEN_ALIASES = "rlstack_hidden_aliases"


class HelpFormatter(argparse.HelpFormatter):
    """Shows ``(default: X)`` after an option's help unless the help already names its default; an
    option with no default (None) or a switch (False) has nothing to show."""

    def _get_help_string(self, action: argparse.Action) -> str:
        text = action.help or ""
        default = action.default
        if (default is None or default is False or default is argparse.SUPPRESS or "default" in text.lower()
                or not (action.option_strings or action.nargs in ("?", "*"))):
            return text
        shown = ",".join(map(str, default)) if isinstance(default, list | tuple) else default
        return f"{text} (default: {str(shown).replace('%', '%%')})"

    def _split_lines(self, text: str, width: int) -> list[str]:
        """Never at a hyphen: paths and names such as models/agent-demo stay whole, to be copied."""
        return textwrap.wrap(self._whitespace_matcher.sub(" ", text).strip(), width, break_on_hyphens=False)

    def _format_action_invocation(self, action: argparse.Action) -> str:
        hidden = getattr(action, HIDDEN_ALIASES, ())
        if hidden:
            action = copy.copy(action)
            action.option_strings = [s for s in action.option_strings if s not in hidden]
        return super()._format_action_invocation(action)


class Parser(argparse.ArgumentParser):
    """An ``ArgumentParser`` whose sub-commands share its formatter and its one-line errors."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # noqa: ANN401 - ArgumentParser's own
        kwargs.setdefault("formatter_class", HelpFormatter)
        super().__init__(*args, **kwargs)

    def error(self, message: str) -> NoReturn:
        """argparse prints the whole usage first; the mistake and where help is say enough."""
        for alias in self._hidden_aliases():  # "--run-id/--run" names the option by its one shown name
            message = re.sub(rf"/{re.escape(alias)}(?![\w-])", "", message)
        sys.stderr.write(f"{self.prog}: {message} (see {self.prog} --help)\n")
        sys.exit(2)

    def _hidden_aliases(self) -> list[str]:
        return [alias for action in self._actions for alias in getattr(action, HIDDEN_ALIASES, ())]


def add_renamed(parser: argparse.ArgumentParser, name: str, *old: str, **kwargs: Any) -> argparse.Action:  # noqa: ANN401
    """``name`` shown in help; ``old`` spellings still parsed for a release, so scripts keep working."""
    action = parser.add_argument(name, *old, **kwargs)
    setattr(action, HIDDEN_ALIASES, old)
    return action
