"""Print rlstack's dependencies (and those of the named extras) from pyproject.toml, one a line.

The Dockerfiles install these in a layer of their own before the source is copied, so a code
change rebuilds only the last, small layer instead of reinstalling torch and transformers.
Usage: python3 image_requirements.py pyproject.toml [extra,extra...]
"""

from __future__ import annotations

import sys
import tomllib


def requirements(pyproject: str, extras: list[str]) -> list[str]:
    with open(pyproject, "rb") as f:
        project = tomllib.load(f)["project"]
    optional = project.get("optional-dependencies", {})
    unknown = [e for e in extras if e not in optional]
    if unknown:
        raise SystemExit(f"no such extras in {pyproject}: {unknown}")
    return [*project["dependencies"], *(d for e in extras for d in optional[e])]


if __name__ == "__main__":
    extras = [e for e in (sys.argv[2] if len(sys.argv) > 2 else "").split(",") if e]
    print("\n".join(requirements(sys.argv[1], extras)))
