"""The ``rlstack`` command. Each command group has a module with its commands and their flags:

    stack    up, ledger                                   run a stack of services locally
    models   make-tiny-model, make-demo-model, ...         build policies and their tasks
    trials   trial, sandbox, trial-key                     one trial, here or in a pod
    tasks    tasks build, tasks base                       task images: built, locked, a Debian base
    checks   doctor, dryrun                                look before and while a run goes

Commands import their heavy parts lazily so ``rlstack --help`` answers at once.
"""

from __future__ import annotations

import argparse
import sys

from rlstack.cli import checks, models, stack, tasks, trials
from rlstack.common.logs import configure_logging

GROUPS = (stack, models, trials, tasks, checks)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="rlstack", description="RL post-training stack: local orchestration and tools")
    parser.add_argument("--log-level", default="info", choices=["debug", "info", "warning", "error"])
    sub = parser.add_subparsers(dest="command", required=True)
    for group in GROUPS:
        group.register(sub)
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    configure_logging(args.log_level)
    sys.exit(args.func(args))
