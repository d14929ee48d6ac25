"""The command line every benchmark shares: its description from the module's docstring, and where
its result line goes besides stdout (``--json-out``)."""

from __future__ import annotations

import argparse
from pathlib import Path


def bench_parser(doc: str | None, **kwargs: object) -> argparse.ArgumentParser:
    """A benchmark's parser: the docstring's first line as the description, the rest (its usage and
    what it measures) under ``--help`` as written, and ``--json-out``."""
    text = (doc or "").strip()
    summary, _, rest = text.partition("\n")
    parser = argparse.ArgumentParser(description=summary, epilog=rest.strip() or None,
                                     formatter_class=argparse.RawDescriptionHelpFormatter, **kwargs)  # type: ignore[arg-type]
    parser.add_argument("--json-out", type=Path, default=None,
                        help="also append the result line (bench.common.result) to this JSONL file")
    return parser
