"""One task's image: built from its Dockerfile, or its ``docker_image`` found or pulled.

The image is tagged with the environment's digest, so one that exists is reused as it is. Base
images are checked (and pulled) before the build, so an unreachable registry is reported as the
base map entry it needs rather than a podman error halfway through. Every failure is an
``ImageBuildError``: the task, the failing Dockerfile step, the log's tail and a fix. An image
without ``/bin/sh`` is refused, since every trial phase runs through it.
"""

from __future__ import annotations

import re
import subprocess
import tempfile
import time
from pathlib import Path

from pydantic import BaseModel, ConfigDict

from rlstack.episodes.harbor.task import HarborTask
from rlstack.episodes.images.base import DEFAULT_TAG as LOCAL_BASE
from rlstack.episodes.images.config import ImageSettings, unpinned
from rlstack.episodes.images.digest import REPOSITORY, environment_digest, image_ref
from rlstack.episodes.images.dockerfile import has_unresolved_base, rewrite_bases
from rlstack.episodes.images.engine import Engine, ImageInfo, ToolError
from rlstack.episodes.images.rootfs import RootFSError, has_shell, remove_tree, unpacked_rootfs
from rlstack.episodes.images.user import ImageUserError, numeric_user

TAIL_LINES = 40
_STEP = re.compile(r"^STEP (\d+/\d+): (.*)$")


class BuiltImage(BaseModel):
    model_config = ConfigDict(frozen=True)

    task: str
    ref: str
    """What a trial runs: the built ``localhost/rlstack-task/...`` tag, or the task's (mapped) ``docker_image``."""
    image_id: str
    """``sha256:<hex>``."""
    env_digest: str
    user: str = "0:0"
    """The image's ``USER`` as ``uid:gid`` (``images.user``)."""
    rebuilt: bool
    """Built (or pulled) by this call; False when it was already in the local store."""
    seconds: float


class ImageBuildError(RuntimeError):
    """A task's image could not be made: which task, at which step, the log's tail and what to do."""

    def __init__(self, task: str, step: str, log_tail: str, fix: str, *, reason: str | None = None,
                 log_path: Path | None = None) -> None:
        self.task, self.step, self.log_tail, self.fix = task, step, log_tail, fix
        self.reason = reason or f"failed at {step}"
        self.log_path = log_path
        super().__init__(str(self))

    def __str__(self) -> str:
        text = f"task {self.task}: {self.reason}: {self.fix}"
        if self.log_tail:
            text += "\n" + "\n".join("    " + line for line in self.log_tail.splitlines())
        return text


def build_task_image(task: HarborTask, settings: ImageSettings) -> BuiltImage:
    """The task's image, built unless its ref already exists; raises ``ImageBuildError``."""
    start = time.monotonic()
    engine = Engine(settings)
    digest = environment_digest(task)
    if task.config.environment.docker_image:
        image, pulled = _given_image(engine, task, task.config.environment.docker_image, settings)
        info = engine.inspect(image)
        _require_shell(task, image, info, settings, engine, ours=False)
        return BuiltImage(task=task.name, ref=image, image_id=info.id, env_digest=digest,
                          user=_user(task, image, info, engine), rebuilt=pulled,
                          seconds=time.monotonic() - start)
    ref = image_ref(task, digest)
    rebuilt = not engine.exists(ref)
    if rebuilt:
        _build(engine, task, ref, settings)
    info = engine.inspect(ref)
    _require_shell(task, ref, info, settings, engine, ours=True)
    return BuiltImage(task=task.name, ref=ref, image_id=info.id, env_digest=digest,
                      user=_user(task, ref, info, engine), rebuilt=rebuilt,
                      seconds=time.monotonic() - start)


def _user(task: HarborTask, ref: str, info: ImageInfo, engine: Engine) -> str:
    """The image's USER in numbers, read from its own files (the store's layers, else mounted)."""
    try:
        if not info.config.user or info.config.user.partition(":")[0] in ("0", "root"):
            return numeric_user(info.config.user if info.config.user not in (None, "root") else None, [])
        if info.layers:
            return numeric_user(info.config.user, info.layers)
        with engine.mounted(ref) as root:
            return numeric_user(info.config.user, [root])
    except (ImageUserError, ToolError) as exc:
        raise ImageBuildError(task.name, "USER", "", "name a user the image defines, or a numeric uid[:gid]",
                              reason=str(exc)) from None


def _build(engine: Engine, task: HarborTask, ref: str, settings: ImageSettings) -> None:
    dockerfile = task.environment_dir / "Dockerfile"
    text = dockerfile.read_text()
    rewritten, uses = rewrite_bases(text, settings.map_ref)
    seen: set[str] = set()
    for use in uses:
        if use.image not in seen:
            seen.add(use.image)
            _ensure(engine, task, use.image, use.written, settings, step=f"FROM {use.written} (Dockerfile line {use.line})")
    log = _log_path(settings, ref)
    log.unlink(missing_ok=True)
    with tempfile.TemporaryDirectory(prefix="rlstack-dockerfile-") as tmp:
        mapped = Path(tmp) / "Dockerfile"
        mapped.write_text(rewritten)
        argv = engine.build_argv(mapped, task.environment_dir, ref, pull_never=not has_unresolved_base(text))
        try:
            code = engine.run_logged(argv, log, timeout=settings.build_timeout_sec)
        except subprocess.TimeoutExpired:
            step, tail = _step_and_tail(log)
            raise ImageBuildError(task.name, step, tail, "make the step faster or raise --build-timeout-sec "
                                  "(RLSTACK_TASKS_BUILD_TIMEOUT_SEC)", reason=f"build did not finish in "
                                  f"{settings.build_timeout_sec:.0f}s (at {step})", log_path=log) from None
    if code != 0:
        step, tail = _step_and_tail(log)
        raise ImageBuildError(task.name, step, tail, f"fix that step of {dockerfile} and build again (full log: {log})",
                              log_path=log)


def _given_image(engine: Engine, task: HarborTask, written: str, settings: ImageSettings) -> tuple[str, bool]:
    """A ``docker_image`` task's image (mapped), pulled when it is not local; True when pulled."""
    image = settings.map_ref(written) or written
    if engine.exists(image):
        return image, False
    _ensure(engine, task, image, written, settings, step=f"docker_image {written}")
    return image, True


def _ensure(engine: Engine, task: HarborTask, image: str, written: str, settings: ImageSettings, *, step: str) -> None:
    """``image`` is in the local store afterwards, or an ``ImageBuildError`` names the base map entry it needs."""
    if engine.exists(image):
        return
    what = "base image" if step.startswith("FROM") else "docker_image"
    shown = f"'{written}'" + (f" (mapped to '{image}')" if image != written else "")
    key = unpinned(written)
    if image.startswith("localhost/"):
        how = "run `rlstack tasks base`" if image == LOCAL_BASE else f"build or load {image} here"
        raise ImageBuildError(task.name, step, "", f"{how}, or map it to another image with --base-map {key}=REF "
                              "(or RLSTACK_TASKS_BASE_MAP)", reason=f"{what} {shown} is not in the local image store")
    log = _log_path(settings, f"pull-{task.short_name}-{image}")
    log.unlink(missing_ok=True)
    try:
        code = engine.run_logged(engine.pull_argv(image), log, timeout=settings.build_timeout_sec)
    except subprocess.TimeoutExpired:
        code = -1
    if code != 0:
        lines = log.read_text(errors="replace").splitlines() if log.exists() else []
        errors = [line for line in lines if line.startswith("Error")] or lines[-1:] or ["timed out"]
        raise ImageBuildError(task.name, step, "\n".join(lines[-TAIL_LINES:]),
                              f"map it to a local or mirrored image with --base-map {key}=REF (or RLSTACK_TASKS_BASE_MAP)",
                              reason=f"{what} {shown} cannot be pulled ({errors[-1][:300]})", log_path=log)


def _require_shell(task: HarborTask, ref: str, info: ImageInfo, settings: ImageSettings, engine: Engine, *,
                   ours: bool) -> None:
    """Looked up in the store's own mount (no copy); unpacked once where the store cannot be mounted (rootless)."""
    unpacked: Path | None = None
    try:
        with engine.mounted(info.hex) as root:
            ok = has_shell(root)
    except ToolError:
        try:
            unpacked = unpacked_rootfs(info.id, settings).path
        except RootFSError as exc:
            raise ImageBuildError(task.name, "unpack", str(exc), "check the local image store (podman images)",
                                  reason=f"the filesystem of {ref} could not be read") from None
        ok = has_shell(unpacked)
    if not ok:
        if unpacked is not None:
            remove_tree(unpacked.parent)  # no trial will ever run in it
        if ours:
            engine.remove(ref)  # else the next build would find the tag and skip the check
        raise ImageBuildError(task.name, "check /bin/sh", "", "base the image on one that has a shell "
                              "(e.g. debian:bookworm-slim): every trial phase runs through /bin/sh",
                              reason=f"image {ref} has no /bin/sh")


def _step_and_tail(log: Path) -> tuple[str, str]:
    """The last ``STEP n/m: INSTRUCTION`` podman or buildah printed, and the log's last lines."""
    lines = log.read_text(errors="replace").splitlines() if log.exists() else []
    step = next((f"STEP {m[1]}: {m[2]}" for line in reversed(lines) if (m := _STEP.match(line))), "before the first step")
    return step, "\n".join(lines[-TAIL_LINES:])


def _log_path(settings: ImageSettings, name: str) -> Path:
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", name.removeprefix(REPOSITORY + "/"))
    return settings.cache_dir / "logs" / f"{slug}.log"
