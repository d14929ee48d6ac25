"""``python -m rlstack.episodes.bundle build [--out DIR] [--agents a,b]``: build the agent bundle
(a no-op when nothing it is built from changed) and print its manifest; ``image [--bundle DIR]``:
the bundle as an image for trial pods (once per bundle digest), and print its ref."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

from rlstack.episodes.bundle.build import DEFAULT_AGENTS, DEFAULT_OUT, build_bundle
from rlstack.episodes.bundle.image import REPOSITORY, build_bundle_image
from rlstack.episodes.bundle.loader import BundleBuildError
from rlstack.episodes.images.config import ImageSettings
from rlstack.episodes.images.engine import ToolError


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rlstack.episodes.bundle")
    commands = parser.add_subparsers(dest="command", required=True)
    build = commands.add_parser("build", help="build the bundle to mount at /opt/rlstack")
    build.add_argument("--out", type=Path, default=DEFAULT_OUT)
    build.add_argument("--agents", default=",".join(DEFAULT_AGENTS), help=f"comma-separated, of: {', '.join(DEFAULT_AGENTS)}")
    build.add_argument("--keep-interpreter", default="", help="agents left on the image's glibc (not patched)")
    build.add_argument("--no-verify", action="store_true", help="do not run each program once under bubblewrap")
    build.add_argument("--force", action="store_true", help="rebuild even if the stamp is current")
    image = commands.add_parser("image", help="the bundle as an image (FROM scratch) for trial pods on a cluster")
    image.add_argument("--bundle", type=Path, default=DEFAULT_OUT)
    image.add_argument("--repository", default=REPOSITORY, help="image name without the tag (the tag: the bundle's digest)")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(name)s %(message)s", stream=sys.stderr)

    if args.command == "image":
        try:
            print(build_bundle_image(args.bundle, ImageSettings(), args.repository))
        except (ToolError, OSError, ValueError) as exc:
            print(f"agent bundle image: {exc}", file=sys.stderr)
            return 1
        return 0
    split = lambda text: [a.strip() for a in text.split(",") if a.strip()]  # noqa: E731
    try:
        manifest = build_bundle(args.out, split(args.agents), keep_interpreter=split(args.keep_interpreter),
                                verify_programs=False if args.no_verify else None, force=args.force)
    except (BundleBuildError, FileNotFoundError, ValueError) as exc:
        print(f"agent bundle: {exc}", file=sys.stderr)
        return 1
    print(manifest.model_dump_json(indent=2, exclude={"libraries"}))
    return 0


if __name__ == "__main__":
    sys.exit(main())
