"""``python -m rlstack.episodes.inside.copy_bundle DEST [AGENT ...]``: the bundle into a pod's volume.

The init container runs the bundle image (the bundle at ``/opt/rlstack``, nothing else) and
copies what a trial needs into the ``emptyDir`` its task-image container then mounts read-only at
``/opt/rlstack``: the core (CPython, the loader and libraries, ``bin/``, the manifest) and only the
named agents' directories, so a trial of the built-in agent copies about 90 MB, not the 1.1 GB of
every CLI. Symlinks are copied as links: ``bin/`` names absolute paths under the mount.
"""

from __future__ import annotations

import argparse
import json
import shutil
import sys
from pathlib import Path

SOURCE = Path("/opt/rlstack")
CORE = ("bin", "lib", "python", "manifest.json")
"""Every trial needs these: the phase driver runs on the bundled CPython."""


def agent_dirs(manifest: dict, agents: list[str]) -> list[str]:
    """The top-level directories of the named agents' programs (``claude-code/claude`` -> ``claude-code``)."""
    known = manifest.get("agents", {})
    unknown = [a for a in agents if a not in known]
    if unknown:
        raise SystemExit(f"copy_bundle: the bundle has no agent {', '.join(unknown)} (it has {', '.join(sorted(known))})")
    found = []
    for agent in agents:
        target = (SOURCE / "bin" / Path(known[agent]["program"]).name).resolve()
        top = target.relative_to(SOURCE.resolve()).parts[0]
        if top not in CORE and top not in found:
            found.append(top)
    return found


def copy(dest: Path, agents: list[str]) -> int:
    manifest = json.loads((SOURCE / "manifest.json").read_text())
    copied = 0
    for name in [*CORE, *agent_dirs(manifest, agents)]:
        source = SOURCE / name
        if source.is_dir():
            shutil.copytree(source, dest / name, symlinks=True, dirs_exist_ok=True)
        else:
            shutil.copy2(source, dest / name, follow_symlinks=False)
        copied += 1
    return copied


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlstack.episodes.inside.copy_bundle", description=__doc__.splitlines()[0])
    parser.add_argument("dest", type=Path, help="the pod's emptyDir, mounted here")
    parser.add_argument("agents", nargs="*", help="bundle agents the trial runs (manifest names); none: the core only")
    args = parser.parse_args(argv)
    copied = copy(args.dest, args.agents)
    print(f"copy_bundle: {copied} entries into {args.dest}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
