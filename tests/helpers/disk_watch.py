"""The session's lowest free disk, and the test running then: printed at the end of the output.

CI's machine comes with whatever disk it has; a run that fills it fails wherever the last write
happens to be (a checkpoint, an image layer), far from the cause. A thread reads the free space of
the disks the suite writes to (the checkout, the temporary directory, podman's store) every few
seconds, so the tail of a failed run says how close to full it came and during which test.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
from dataclasses import dataclass, field
from pathlib import Path

from tests.conftest import REPO

GIB = 1024**3
WATCHED = (REPO, Path(tempfile.gettempdir()), Path("/var/lib/containers"))


@dataclass
class DiskWatch:
    interval_s: float = 5.0
    current: str = "collection"
    """The test running now (set by the conftest's hooks)."""
    start: dict[str, float] = field(default_factory=dict)
    lowest: dict[str, tuple[float, str]] = field(default_factory=dict)
    """Per disk (its first watched path): the lowest free GiB seen, and the test running then."""
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None

    def _disks(self) -> dict[str, Path]:
        """One path per distinct filesystem, so a single disk is reported once."""
        seen: dict[int, Path] = {}
        for path in WATCHED:
            if path.exists():
                seen.setdefault(path.stat().st_dev, path)
        return {str(p): p for p in seen.values()}

    def sample(self) -> None:
        for name, path in self._disks().items():
            free = shutil.disk_usage(path).free / GIB
            self.start.setdefault(name, free)
            if name not in self.lowest or free < self.lowest[name][0]:
                self.lowest[name] = (free, self.current)

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.sample()

    def begin(self) -> None:
        self.sample()
        self._thread = threading.Thread(target=self._run, name="disk-watch", daemon=True)
        self._thread.start()

    def end(self) -> list[str]:
        self._stop.set()
        self.sample()
        return [f"disk {name}: {self.start[name]:.1f} GiB free at the start, lowest {free:.1f} GiB (during {test}), "
                f"{shutil.disk_usage(name).free / GIB:.1f} GiB at the end"
                for name, (free, test) in self.lowest.items()]


WATCH = DiskWatch()
