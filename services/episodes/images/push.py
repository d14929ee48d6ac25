"""A built task image pushed to a registry and named by its digest, for clusters that pull it.

The pushed ref is ``REGISTRY/rlstack-task/NAME@sha256:...`` (the digest from ``--digestfile``):
pods pull exactly the image that was built, whatever later happens to the tag.
"""

from __future__ import annotations

import subprocess
import tempfile
from pathlib import Path

from rlstack.episodes.harbor.task import HarborTask
from rlstack.episodes.images.builder import BuiltImage, ImageBuildError
from rlstack.episodes.images.config import ImageSettings
from rlstack.episodes.images.digest import TAG_HEX, repository_name
from rlstack.episodes.images.engine import Engine


def push_image(task: HarborTask, built: BuiltImage, registry: str, settings: ImageSettings) -> str:
    """Pushes ``built`` to ``REGISTRY/rlstack-task/<name>:<tag>``; returns the ref by digest."""
    repository = f"{registry.rstrip('/')}/rlstack-task/{repository_name(task)}"
    destination = f"{repository}:{built.env_digest[:TAG_HEX]}"
    engine = Engine(settings)
    with tempfile.TemporaryDirectory(prefix="rlstack-push-") as tmp:
        digestfile = Path(tmp) / "digest"
        log = settings.cache_dir / "logs" / f"push-{repository_name(task)}.log"
        log.unlink(missing_ok=True)
        try:
            code = engine.run_logged(engine.push_argv(built.ref, destination, digestfile), log, settings.build_timeout_sec)
        except subprocess.TimeoutExpired:
            code = -1
        digest = digestfile.read_text().strip() if digestfile.is_file() else ""
    if code != 0 or not digest.startswith("sha256:"):
        lines = log.read_text(errors="replace").splitlines() if log.exists() else []
        errors = [line for line in lines if line.startswith("Error")] or lines[-1:] or ["no digest written"]
        raise ImageBuildError(task.name, "push", "\n".join(lines[-40:]),
                              f"check that {registry} is reachable and that you are logged in ({settings.builder} login {registry})",
                              reason=f"push of {built.ref} to {destination} failed ({errors[-1][:300]})", log_path=log)
    return f"{repository}@{digest}"
