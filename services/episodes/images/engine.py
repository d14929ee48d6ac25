"""The podman and buildah command lines: the one module that runs the image tools.

Both share the local image store, so an image built by one is seen by the other; they differ in
verbs (``podman build`` / ``buildah bud``, ``podman image inspect`` / ``buildah inspect``) and in how a
filesystem is read out (``podman export`` of a created container / ``buildah mount``). Every
other module asks an ``Engine`` and never spells a command itself.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from pydantic import BaseModel, ConfigDict

from rlstack.episodes.images.config import ImageSettings


class ImageConfig(BaseModel):
    """What a container of the image starts with (its OCI config), as a sandbox needs it."""

    model_config = ConfigDict(frozen=True)

    working_dir: str = "/"
    env: dict[str, str] = {}
    user: str | None = None


class ImageInfo(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str
    """``sha256:<64 hex>``."""
    config: ImageConfig
    layers: list[Path] = []
    """With podman's overlay store: the image's layer directories, topmost first (empty otherwise)."""

    @property
    def hex(self) -> str:
        return self.id.removeprefix("sha256:")


class ToolError(RuntimeError):
    """A podman/buildah command failed; the message carries its output's tail."""


class Engine:
    def __init__(self, settings: ImageSettings) -> None:
        self.settings = settings
        self.tool = settings.builder

    # --- queries -------------------------------------------------------------------------------

    def exists(self, ref: str) -> bool:
        argv = ["podman", "image", "exists", ref] if self.tool == "podman" else ["buildah", "inspect", "--type", "image", ref]
        return subprocess.run(argv, capture_output=True, timeout=120).returncode == 0

    def inspect(self, ref: str) -> ImageInfo:
        layers: list[str] = []
        if self.tool == "podman":
            data = json.loads(self.check(["podman", "image", "inspect", ref]))[0]
            image_id, config = data["Id"], data.get("Config") or {}
            driver = data.get("GraphDriver") or {}
            if driver.get("Name") == "overlay":
                layers = [driver["Data"]["UpperDir"], *filter(None, driver["Data"].get("LowerDir", "").split(":"))]
        else:
            data = json.loads(self.check(["buildah", "inspect", "--type", "image", ref]))
            image_id, config = data["FromImageID"], (data.get("OCIv1") or {}).get("config") or {}
        env = dict(item.partition("=")[::2] for item in config.get("Env") or [])
        return ImageInfo(id="sha256:" + image_id.removeprefix("sha256:"), layers=[Path(p) for p in layers],
                         config=ImageConfig(working_dir=config.get("WorkingDir") or "/", env=env, user=config.get("User") or None))

    # --- command lines -------------------------------------------------------------------------

    def build_argv(self, dockerfile: Path, context: Path, tag: str, *, pull_never: bool) -> list[str]:
        """Layers stay on: identical steps of different tasks (a shared ``apt-get install``) are built once.
        ``--force-rm``: a failed step leaves no working container behind (buildah keeps it by default)."""
        verb = ["podman", "build"] if self.tool == "podman" else ["buildah", "bud"]
        argv = [*verb, "--layers", "--force-rm", f"--network={self.settings.network}", *self._runtime_args()]
        if pull_never:
            argv.append("--pull=never")
        return [*argv, "-f", str(dockerfile), "-t", tag, str(context)]

    def pull_argv(self, ref: str) -> list[str]:
        return [self.tool, "pull", ref]

    def push_argv(self, ref: str, destination: str, digestfile: Path) -> list[str]:
        return [self.tool, "push", "--digestfile", str(digestfile), ref, destination]

    def _runtime_args(self) -> list[str]:
        args = ["--runtime", self.settings.runtime] if self.settings.runtime else []
        return args + [arg for limit in self.settings.ulimits for arg in ("--ulimit", limit)]

    # --- running -------------------------------------------------------------------------------

    def check(self, argv: list[str], timeout: float = 600) -> str:
        done = subprocess.run(argv, capture_output=True, text=True, timeout=timeout)
        if done.returncode != 0:
            raise ToolError(f"{' '.join(argv[:4])} failed ({done.returncode}): {(done.stderr or done.stdout).strip()[-2000:]}")
        return done.stdout

    def run_logged(self, argv: list[str], log_path: Path, timeout: float) -> int:
        """Runs ``argv`` with its output appended to ``log_path``; a timeout kills its whole process
        group (a build's RUN steps too) and raises ``subprocess.TimeoutExpired``."""
        log_path.parent.mkdir(parents=True, exist_ok=True)
        with log_path.open("ab") as log:
            log.write(("$ " + " ".join(argv) + "\n").encode())
            log.flush()
            proc = subprocess.Popen(argv, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True)
            try:
                return proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                raise

    def remove(self, ref: str) -> None:
        subprocess.run([self.tool, "rmi", "-f", ref] if self.tool == "podman" else ["buildah", "rmi", "-f", ref],
                       capture_output=True, timeout=300)

    # --- filesystems ---------------------------------------------------------------------------

    @contextlib.contextmanager
    def filesystem_tar(self, image: str) -> Iterator[IO[bytes]]:
        """A tar stream of the image's filesystem (owners, modes and setuid bits as stored)."""
        with self._container(image) as container:
            if self.tool == "podman":
                proc = subprocess.Popen(["podman", "export", container], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
            else:
                root = self.check(["buildah", "mount", container]).strip()
                proc = subprocess.Popen(["tar", "-C", root, "--numeric-owner", "-cf", "-", "."], stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE)
            try:
                assert proc.stdout is not None
                yield proc.stdout
            finally:
                proc.stdout.close()
                err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
                if proc.wait() != 0:
                    raise ToolError(f"reading the filesystem of {image} failed: {err.strip()[-2000:]}")

    @contextlib.contextmanager
    def mounted(self, image: str) -> Iterator[Path]:
        """The image's filesystem mounted read-only from the store, for a look without a copy (root
        only: rootless podman refuses, ``ToolError``)."""
        if self.tool == "podman":
            root = self.check(["podman", "image", "mount", image]).strip().splitlines()[-1]
            try:
                yield Path(root)
            finally:
                subprocess.run(["podman", "image", "unmount", image], capture_output=True, timeout=120)
        else:
            with self._container(image) as container:
                yield Path(self.check(["buildah", "mount", container]).strip().splitlines()[-1])

    @contextlib.contextmanager
    def _container(self, image: str) -> Iterator[str]:
        """A container that is never started, only read (its filesystem is the image's)."""
        if self.tool == "podman":
            container = self.check(["podman", "create", "--pull=never", image, "true"]).strip().splitlines()[-1]
        else:
            container = self.check(["buildah", "from", "--pull-never", image]).strip().splitlines()[-1]
        try:
            yield container
        finally:
            if self.tool == "buildah":
                subprocess.run(["buildah", "umount", container], capture_output=True, timeout=120)
            subprocess.run([self.tool, "rm", "-f", container] if self.tool == "podman" else ["buildah", "rm", container],
                           capture_output=True, timeout=120)

    def import_rootfs(self, rootfs: Path, tag: str, *, cmd: list[str], env: dict[str, str]) -> str:
        """A directory tree imported as a one-layer image ``tag``; returns its id."""
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "--numeric-owner", "-cf", "-", "."], stdout=subprocess.PIPE)
        try:
            if self.tool == "podman":
                changes = [f"CMD {json.dumps(cmd)}", *(f"ENV {k}={v}" for k, v in env.items())]
                argv = ["podman", "import", *(a for c in changes for a in ("--change", c)), "-", tag]
                done = subprocess.run(argv, stdin=tar.stdout, capture_output=True, text=True, timeout=1800)
                if done.returncode != 0:
                    raise ToolError(f"podman import failed: {done.stderr.strip()[-2000:]}")
            else:
                container = self.check(["buildah", "from", "scratch"]).strip().splitlines()[-1]
                try:
                    root = self.check(["buildah", "mount", container]).strip()
                    done = subprocess.run(["tar", "-C", root, "--numeric-owner", "-xpf", "-"], stdin=tar.stdout,
                                          capture_output=True, text=True, timeout=1800)
                    if done.returncode != 0:
                        raise ToolError(f"copying {rootfs} into a buildah container failed: {done.stderr.strip()[-2000:]}")
                    self.check(["buildah", "config", "--cmd", json.dumps(cmd),
                                *(a for k, v in env.items() for a in ("--env", f"{k}={v}")), container])
                    self.check(["buildah", "commit", container, tag], timeout=1800)
                finally:
                    subprocess.run(["buildah", "umount", container], capture_output=True, timeout=120)
                    subprocess.run(["buildah", "rm", container], capture_output=True, timeout=120)
        finally:
            if tar.stdout:
                tar.stdout.close()
            tar.wait()
        return self.inspect(tag).id
