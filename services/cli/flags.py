"""Flags more than one command takes, defined once."""

from __future__ import annotations

import argparse

from rlstack.common.model_families import FAMILIES

MODEL_FAMILY_HELP = ("the model's family: its tokenizer, template and vLLM parsers; unset, read from the model directory "
                     "(docs/model-families.md)")


def add_model_family(parser: argparse.ArgumentParser, help: str = MODEL_FAMILY_HELP) -> None:
    """``--model-family``: ``--families`` already names task families (make_tasks.FAMILIES). Matched
    case-insensitively: the families are named in lower case, users write them as the vendors do (Qwen3)."""
    parser.add_argument("--model-family", dest="model_family", type=str.lower, choices=list(FAMILIES), default=None, help=help)
