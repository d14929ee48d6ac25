"""What the suite builds in the background while other tests run: the images and the warm-started
demo policies.

Built when their test comes, they cost the suite their whole build time; yet on CI's two cores the
suite leaves about a third of the CPU idle while services start and tests wait on them. So a test
that needs one of these marks it (``@pytest.mark.prebuilt("name")``): collection moves such tests
to the end of the session, and from then on one background thread runs their jobs in that order,
one at a time, each as a subprocess at ``nice 19`` (the tests' own services keep the CPU they ask
for; the build takes what is left). A test waits for its job and fails with the job's log tail if
the job failed. A job is the same command the test used to run inline: nothing is faked or cached
between sessions, only moved in time.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import REPO

NICE = ["nice", "-n", "19"]


@dataclass
class Job:
    name: str
    argv: list[str]
    out: Path
    """The directory the job writes into (made for it, removed at the session's end)."""
    timeout_s: float = 3600.0
    log: Path = field(init=False)
    done: threading.Event = field(default_factory=threading.Event)
    returncode: int | None = None
    seconds: float | None = None

    def __post_init__(self) -> None:
        self.log = self.out.with_suffix(".log")


JOBS: dict[str, Callable[[Path], list[str]]] = {}
"""Each job's command, given its output directory."""


def job(name: str) -> Callable[[Callable[[Path], list[str]]], Callable[[Path], list[str]]]:
    def register(command: Callable[[Path], list[str]]) -> Callable[[Path], list[str]]:
        JOBS[name] = command
        return command

    return register


@job("image-trainer")
def _image_trainer(out: Path) -> list[str]:
    return [sys.executable, "-m", "tests.images.podman", "Dockerfile.trainer", "localhost/rlstack-trainer:test",
            "TORCH_INDEX_URL=https://pypi.org/simple"]


@job("image-proxy")
def _image_proxy(out: Path) -> list[str]:
    return [sys.executable, "-m", "tests.images.podman", "Dockerfile.proxy", "localhost/rlstack-proxy:test"]


@job("agent-demo")
def _agent_demo(out: Path) -> list[str]:
    return [sys.executable, "-m", "rlstack.cli", "make-agent-demo", "--out", str(out / "model"), "--tasks-out", str(out / "tasks"),
            "--tasks", "16"]


@job("scaffold-demo")
def _scaffold_demo(out: Path) -> list[str]:
    return [sys.executable, "-m", "tests.integration.inference.scaffold_demo", str(out)]


@job("task-images")
def _task_images(out: Path) -> list[str]:
    return [sys.executable, "-m", "tests.helpers.task_images"]


ORDER = ["task-images", "agent-demo", "scaffold-demo", "image-trainer", "image-proxy"]
"""The jobs' order, and so their tests': the task images first (a few minutes, and their tests take
seconds each), then the warm starts, whose tests run minutes (the image
builds go on meanwhile), the images last, whose tests take seconds once built."""


class Prebuilds:
    """The session's background jobs, run in the order given, one at a time."""

    def __init__(self) -> None:
        self.root: Path | None = None
        self.jobs: dict[str, Job] = {}
        self._thread: threading.Thread | None = None
        self._running: subprocess.Popen | None = None
        self._stopped = False

    def start(self, names: list[str]) -> None:
        self.root = Path(tempfile.mkdtemp(prefix="rlstack-prebuild-"))
        for name in names:
            if name not in JOBS:
                raise KeyError(f"no prebuild job {name!r} (tests/helpers/prebuild.py)")
            out = self.root / name
            out.mkdir()
            self.jobs[name] = Job(name, JOBS[name](out), out)
        self._thread = threading.Thread(target=self._run_all, name="prebuild", daemon=True)
        self._thread.start()

    def _run_all(self) -> None:
        for j in self.jobs.values():
            if self._stopped:
                j.done.set()
                continue
            start = time.monotonic()
            with j.log.open("w") as log:
                try:
                    self._running = subprocess.Popen([*NICE, *j.argv], cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
                                                     env={**os.environ, "PYTHONUNBUFFERED": "1"})
                    j.returncode = self._running.wait(timeout=j.timeout_s)
                except subprocess.TimeoutExpired:
                    self._running.kill()
                    log.write(f"\nprebuild: killed after {j.timeout_s:.0f}s\n")
                    j.returncode = -9
                except OSError as exc:
                    log.write(f"\nprebuild: could not start: {exc!r}\n")
                    j.returncode = -1
            j.seconds = time.monotonic() - start
            j.done.set()

    def wait(self, name: str, timeout_s: float = 3600.0) -> Job:
        """The finished job; raises with its log's tail when it failed."""
        j = self.jobs.get(name)
        if j is None:
            raise LookupError(f"prebuild {name!r} was not started: mark the test @pytest.mark.prebuilt({name!r})")
        if not j.done.wait(timeout_s):
            raise TimeoutError(f"prebuild {name!r} still running after {timeout_s:.0f}s")
        if j.returncode != 0:
            tail = j.log.read_text(errors="replace")[-4000:] if j.log.exists() else ""
            raise RuntimeError(f"prebuild {name!r} failed ({j.returncode}):\n{tail}")
        return j

    def stop(self) -> None:
        """End of the session: kill what still runs, remove what was built."""
        self._stopped = True
        if self._running is not None and self._running.poll() is None:
            self._running.kill()
        if self._thread is not None:
            self._thread.join(timeout=30)
        if self.root is not None:
            shutil.rmtree(self.root, ignore_errors=True)


SESSION = Prebuilds()
