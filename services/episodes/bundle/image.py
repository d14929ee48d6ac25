"""The agent bundle as an image, for clusters: ``FROM scratch`` and the bundle at ``/opt/rlstack``.

A trial pod runs its task's image; an init container of this image copies the bundle (its core
and the trial's agent, ``rlstack.episodes.inside.copy_bundle``) into the pod's ``emptyDir`` at
``/opt/rlstack``, or a cluster with image volumes mounts it there as it is. Nothing else is in the
image: the copy runs on the bundle's own CPython. Tagged by the bundle's content digest, so an
unchanged bundle is never rebuilt and a changed one never reuses a tag.
"""

from __future__ import annotations

import logging
import tempfile
from pathlib import Path

from rlstack.episodes.bundle.manifest import load_manifest
from rlstack.episodes.bundle.paths import BUNDLE_MOUNT
from rlstack.episodes.images.config import ImageSettings
from rlstack.episodes.images.engine import Engine, ToolError

log = logging.getLogger(__name__)
REPOSITORY = "localhost/rlstack/agent-bundle"


def bundle_image_ref(bundle_dir: Path, repository: str = REPOSITORY) -> str:
    return f"{repository}:{load_manifest(bundle_dir).digest.removeprefix('sha256:')[:16]}"


def build_bundle_image(bundle_dir: Path, settings: ImageSettings, repository: str = REPOSITORY) -> str:
    """The bundle's image in the local store (built once per bundle digest); returns its ref."""
    ref = bundle_image_ref(bundle_dir, repository)
    engine = Engine(settings)
    if engine.exists(ref):
        return ref
    with tempfile.TemporaryDirectory(prefix="bundle-image-") as scratch:
        containerfile = Path(scratch) / "Containerfile"
        containerfile.write_text(f"FROM scratch\nCOPY . {BUNDLE_MOUNT}/\n")
        log.info("building %s from %s", ref, bundle_dir)
        argv = engine.build_argv(containerfile, bundle_dir.resolve(), ref, pull_never=True)
        try:
            engine.check(argv, timeout=1800)
        except ToolError as exc:
            raise ToolError(f"agent bundle image {ref}: {exc}") from None
    return ref
