"""How a setting's path is spelled as a flag and as an env var (pydantic-settings' conventions), in one
place for the services, the launcher, the rename table and the chart's table."""

from __future__ import annotations

NESTED = "__"
"""pydantic-settings' delimiter between a group and its field in an env var name."""


def flag_name(path: str, negated: bool = False) -> str:
    """A setting's command-line flag (kebab case, a group's field after a dot):
    ``model`` -> ``--model``, ``packing.row_tokens`` -> ``--packing.row-tokens``."""
    return ("--no-" if negated else "--") + path.replace("_", "-")


def env_name(prefix: str, path: str) -> str:
    """A setting's env var: ``RLSTACK_TRAINER_`` and ``packing.row_tokens`` -> ``RLSTACK_TRAINER_PACKING__ROW_TOKENS``."""
    return (prefix + path.replace(".", NESTED)).upper()
