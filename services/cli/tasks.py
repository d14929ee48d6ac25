"""Task images: ``rlstack tasks build`` (every task's environment image, and images.lock.json) and
``rlstack tasks base`` (a Debian bookworm base image from Debian's packages, for hosts without a registry)."""

from __future__ import annotations

import argparse
import logging
import sys
from pathlib import Path

log = logging.getLogger("rlstack")


def _base_map_item(text: str) -> tuple[str, str]:
    source, sep, target = text.partition("=")
    if not sep or not source.strip() or not target.strip():
        raise argparse.ArgumentTypeError(f"{text!r}: expected FROM=TO, e.g. debian:bookworm-slim=localhost/debian:bookworm-slim")
    return source.strip(), target.strip()


def _settings(args: argparse.Namespace):  # noqa: ANN202 - ImageSettings, imported lazily
    """Defaults < ``RLSTACK_TASKS_*`` env vars < flags; ``--base-map`` entries add to the env's map."""
    from rlstack.episodes.images.config import ImageSettings

    env = ImageSettings()
    overrides = {key: value for key in ("builder", "jobs", "cache_dir", "build_timeout_sec", "network")
                 if (value := getattr(args, key, None)) is not None}
    if getattr(args, "base_map", None):
        overrides["base_map"] = {**env.base_map, **dict(args.base_map)}
    return ImageSettings(**overrides)


def cmd_build(args: argparse.Namespace) -> int:
    from rlstack.episodes.harbor.dataset import DatasetError
    from rlstack.episodes.harbor.task import TaskError
    from rlstack.episodes.images.dataset import build_dataset

    settings = _settings(args)
    try:
        result = build_dataset(args.dataset, settings, push=args.push, progress=not args.no_progress, lock_path=args.lock)
    except (DatasetError, TaskError) as exc:
        log.error("%s", exc)
        return 2
    for failure in result.failures:
        print(f"\n{failure}", file=sys.stderr)
    if args.values_out is not None:
        write_prepull_values(result.lock_path, args.values_out)
    rebuilt = sum(b.rebuilt for b in result.built)
    print(f"{len(result.built)} image(s) ready ({rebuilt} built, {len(result.built) - rebuilt} up to date), "
          f"{len(result.failures)} failed; lock: {result.lock_path}", file=sys.stderr)
    return 1 if result.failures else 0


def write_prepull_values(lock_path: Path, out: Path) -> None:
    """A values file for the chart: every locked image (pushed refs by digest) pulled onto the nodes
    by ``sandboxes.prepull``; ``helm install ... -f`` it beside the others."""
    import yaml

    from rlstack.episodes.images.lock import ImageLock

    lock = ImageLock.load(lock_path)
    images = sorted({entry.pull_ref for entry in lock.images.values()})
    local = [ref for ref in images if ref.startswith("localhost/")]
    if local:
        log.warning("%d image(s) are not pushed (%s...): only nodes that already have them can run their trials; "
                    "build with --push REGISTRY", len(local), local[0])
    values = {"sandboxes": {"prepull": {"enabled": True, "images": images}}}
    out.write_text(f"# Written by rlstack tasks build from {lock_path}: the task images to pull onto every node.\n"
                   + yaml.safe_dump(values, sort_keys=False))


def cmd_base(args: argparse.Namespace) -> int:
    import time

    from rlstack.episodes.images.base import BaseImageError, build_base_image

    start = time.monotonic()
    try:
        image_id = build_base_image(_settings(args), args.tag, suite=args.suite, mirror=args.mirror, force=args.force)
    except BaseImageError as exc:
        log.error("%s", exc)
        return 1
    print(f"{args.tag} {image_id} ({time.monotonic() - start:.0f}s)")
    return 0


def _add_common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--builder", choices=["podman", "buildah"], default=None, help="default: podman (RLSTACK_TASKS_BUILDER)")
    parser.add_argument("--cache-dir", dest="cache_dir", type=Path, default=None,
                        help="build logs and unpacked filesystems; default .cache/task-images (RLSTACK_TASKS_CACHE_DIR)")


def register(sub: argparse._SubParsersAction) -> None:
    tasks = sub.add_parser("tasks", help="build the images of a Harbor dataset's task environments")
    group = tasks.add_subparsers(dest="tasks_command", required=True)

    build = group.add_parser("build", help="build every task's image (unchanged ones are reused) and write images.lock.json")
    build.add_argument("dataset", type=Path, help="a directory of Harbor tasks (or one task directory)")
    build.add_argument("--push", metavar="REGISTRY", help="also push each image to REGISTRY/rlstack-task/NAME and lock it by digest")
    build.add_argument("--jobs", type=int, default=None, help="images built at once; default 2 (RLSTACK_TASKS_JOBS)")
    build.add_argument("--base-map", dest="base_map", metavar="FROM=TO", type=_base_map_item, action="append",
                       help="build FROM (a Dockerfile's base or a docker_image; without @sha256 it matches any digest) "
                            "from TO, a local or mirrored image; repeatable, added to RLSTACK_TASKS_BASE_MAP (JSON)")
    build.add_argument("--lock", type=Path, default=None, help="the lock file; default DATASET/images.lock.json")
    build.add_argument("--build-timeout-sec", dest="build_timeout_sec", type=float, default=None,
                       help="seconds one image's build may take; default 1800 (RLSTACK_TASKS_BUILD_TIMEOUT_SEC)")
    build.add_argument("--network", choices=["host", "none"], default=None, help="network of RUN steps; default host")
    build.add_argument("--no-progress", action="store_true", help="no progress bar")
    build.add_argument("--values-out", dest="values_out", type=Path, default=None, metavar="PATH",
                       help="also write a chart values file that pre-pulls every image (sandboxes.prepull); default: none")
    _add_common(build)
    build.set_defaults(func=cmd_build)

    base = group.add_parser("base", help="build a Debian bookworm base image with debootstrap (root), for FROM "
                            "debian:bookworm-slim via --base-map debian:bookworm-slim=localhost/debian:bookworm-slim")
    base.add_argument("--tag", default="localhost/debian:bookworm-slim", help="the image's name")
    base.add_argument("--suite", default="bookworm", help="the Debian release debootstrap installs")
    base.add_argument("--mirror", default="http://deb.debian.org/debian", help="the Debian mirror packages come from")
    base.add_argument("--force", action="store_true", help="build again even if the tag exists")
    _add_common(base)
    base.set_defaults(func=cmd_base)
