"""`pip check`, failing only on problems that were not there before.

A vLLM base image may ship with `pip check` complaints of its own (a CPU build without the
torchvision its metadata names, say): those are the base's, and the image build must not stop on
them. What rlstack's layer adds must still fail the build.
Usage: python3 pip_check_new.py --save BASELINE   (before installing)
       python3 pip_check_new.py BASELINE          (after: exit 1 on any new line)
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path


def problems() -> set[str]:
    done = subprocess.run([sys.executable, "-m", "pip", "check"], capture_output=True, text=True)
    return {line.strip() for line in done.stdout.splitlines() if line.strip() and not line.startswith("No broken")}


def new_problems(before: set[str], after: set[str]) -> list[str]:
    return sorted(after - before)


def main(argv: list[str]) -> int:
    if argv[:1] == ["--save"]:
        Path(argv[1]).write_text("".join(f"{p}\n" for p in sorted(problems())))
        return 0
    before = set(Path(argv[0]).read_text().splitlines())
    added = new_problems(before, problems())
    for line in added:
        print(f"new pip check problem: {line}", file=sys.stderr)
    return 1 if added else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
