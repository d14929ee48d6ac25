"""Task images for the tests: the Debian base made here (no registry is reachable), the base map
that makes ``FROM debian:bookworm-slim`` resolve to it, the example datasets built, and the agent
bundle's image (trial pods copy the bundle from it).

The builds run once per session, in the background (``tests/helpers/prebuild.py``, job
``task-images``: ``python -m tests.helpers.task_images``); a test that needs them waits for it.
"""

from __future__ import annotations

import sys
from pathlib import Path

from rlstack.episodes.images.base import LOCAL_BASE_MAP
from rlstack.episodes.images.config import ImageSettings
from tests.conftest import REPO

BASE_MAP = LOCAL_BASE_MAP
DATASETS = (REPO / "examples" / "image-tasks", REPO / "examples" / "tasks")
CACHE = REPO / ".cache" / "task-images"
BUNDLE = REPO / ".cache" / "agent-bundle"
PYTHON_IMAGE = ("FROM debian:bookworm-slim\nRUN apt-get update && apt-get install -y --no-install-recommends python3 "
                "&& rm -rf /var/lib/apt/lists/*\nWORKDIR /app\nCOPY . /app/\n")
"""A test task's Dockerfile: the example tasks' own first steps, so their cached layers serve it too."""


def image_settings(**fields) -> ImageSettings:  # noqa: ANN003
    return ImageSettings(base_map=BASE_MAP, cache_dir=CACHE, **fields)


def build_all(datasets: tuple[Path, ...] = DATASETS) -> int:
    """The base, then every dataset's images and lock file; the exit code of the worst build."""
    from rlstack.episodes.bundle.image import build_bundle_image
    from rlstack.episodes.images.base import build_base_image
    from rlstack.episodes.images.dataset import build_dataset

    settings = image_settings()
    build_base_image(settings)
    print(f"agent bundle image: {build_bundle_image(BUNDLE, settings)}", flush=True)
    failed = 0
    for dataset in datasets:
        result = build_dataset(dataset, settings, progress=False)
        for failure in result.failures:
            print(failure, file=sys.stderr)
        failed += len(result.failures)
        print(f"{dataset}: {len(result.built)} images, {sum(b.rebuilt for b in result.built)} built", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(build_all())
