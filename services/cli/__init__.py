"""The ``rlstack`` command. Each command group has a module with its commands and their flags:

    stack    up, ledger                                   run a stack of services locally
    models   make-tiny-model, make-demo-model, ...         build policies and their tasks
    trials   trial, sandbox, trial-key                     one trial, here or in a pod
    tasks    tasks build, tasks base                       task images: built, locked, a Debian base
    checks   doctor, dryrun                                look before and while a run goes

Commands import their heavy parts lazily so ``rlstack --help`` answers at once. A user's mistake
is one line on stderr and exit 2 (``errors``); ``--debug`` shows the traceback instead.
"""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, version

from rlstack.cli import checks, models, stack, tasks, trials
from rlstack.cli.errors import UserError, one_line
from rlstack.cli.help import Parser
from rlstack.common.logs import configure_logging

GROUPS = (stack, models, trials, tasks, checks)


def _version() -> str:
    try:
        return version("rlstack")
    except PackageNotFoundError:  # run from a source tree that was never installed
        return "unknown (not installed)"


def build_parser() -> Parser:
    parser = Parser(prog="rlstack", description="RL post-training stack: local orchestration and tools")
    parser.add_argument("--version", action="version", version=f"rlstack {_version()}")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"],
                        help="least severe log line shown")
    parser.add_argument("--debug", action="store_true", help="on an error, show the full traceback instead of one line")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND", parser_class=Parser)
    for group in GROUPS:
        group.register(sub)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    configure_logging(args.log_level)
    try:
        code = args.func(args)
    except Exception as exc:
        if args.debug:
            raise
        print(one_line(exc, f"rlstack {args.command}"), file=sys.stderr)
        code = 2 if isinstance(exc, UserError) else 1
    sys.exit(code)
