"""The bubblewrap command line that gives a trial Harbor's paths without root.

The sandbox sees the host's filesystem read-only (its tools, Python, the agent's own
install), a private /tmp, /proc and /dev, and writable bind mounts only where a task expects
them: the trial's workspace at /app and its log directories under /logs. Datasets and other
trials are covered by empty tmpfs mounts, so an agent cannot read the tests or solutions.
It gets its own pid namespace (when its first process dies, the kernel kills every process
left inside, even one that left the process group), no capabilities, and dies with its parent.
With ``unshare_net`` it also gets its own network namespace: a loopback of its own and no route
out (``netbridge`` brings the proxy in through a unix socket).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import NamedTuple

# Never taken from the host: bwrap makes its own, or the trial mounts its own there.
_OWN = frozenset({"proc", "dev", "tmp"})


class Bind(NamedTuple):
    source: Path
    target: str
    writable: bool = False


def runtime_paths() -> list[Path]:
    """Where this Python environment and rlstack's code live. Agents and phase runners started
    with this interpreter need both, also when a checkout sits under /tmp, which every sandbox
    replaces with its own."""
    import rlstack

    return [Path(sys.prefix).resolve(), Path(rlstack.__file__).resolve().parents[1], Path(sys.base_prefix).resolve()]


def bwrap_argv(bwrap: str, *, binds: Sequence[Bind], hide: Sequence[Path], command: Sequence[str],
               chdir: str, status_fd: int | None = None, expose: Sequence[Path] = (), unshare_net: bool = False,
               hide_first: Sequence[Path] = ()) -> list[str]:
    """``expose``: host paths shown read-only at the same place even under /tmp (also over a bind
    onto /tmp), before ``hide`` covers what must stay private inside them. ``hide_first``: covered
    before ``expose`` (home directories: what is exposed inside one, the agent's runtime, stays)."""
    taken = {b.target.strip("/").split("/")[0] for b in binds} | _OWN
    argv = [bwrap]
    for name in sorted(os.listdir("/")):
        if name in taken:
            continue
        path = f"/{name}"
        if os.path.islink(path):
            argv += ["--symlink", os.readlink(path), path]
        else:
            argv += ["--ro-bind", path, path]
    argv += ["--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    # Binds first: one may cover /tmp (a pod's emptyDir), and what is exposed must stay visible over it.
    for path in hide_first:
        if path.is_absolute() and path != Path("/") and path.exists():
            argv += ["--tmpfs", str(path)]
    for bind in binds:
        argv += ["--bind" if bind.writable else "--ro-bind", str(bind.source), bind.target]
    for path in expose:
        if path.is_absolute() and path.exists():
            argv += ["--ro-bind", str(path), str(path)]
    for path in hide:
        if path.is_absolute() and path != Path("/") and path.exists():
            argv += ["--tmpfs", str(path)]
    argv += ["--die-with-parent", "--unshare-pid", "--unshare-ipc", "--unshare-uts", "--hostname", "sandbox",
             "--cap-drop", "ALL", "--chdir", chdir]
    if unshare_net:
        argv.append("--unshare-net")
    if status_fd is not None:
        argv += ["--json-status-fd", str(status_fd)]
    return [*argv, "--", *command]


class StatusPipe:
    """bubblewrap's ``--json-status-fd``, read as it comes: ``child-pid`` once the sandbox exists
    (its namespaces made, its command held on ``--block-fd``), ``exit-code`` at its end."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)
        self.status: dict = {}
        self._buffer = b""

    def _drain(self) -> None:
        with contextlib.suppress(BlockingIOError):
            while chunk := os.read(self.read_fd, 65536):
                self._buffer += chunk
        *lines, self._buffer = self._buffer.split(b"\n")
        for line in lines:
            with contextlib.suppress(json.JSONDecodeError):
                self.status.update(json.loads(line))

    async def child_pid(self) -> int:
        loop = asyncio.get_running_loop()
        while "child-pid" not in self.status:
            ready = loop.create_future()
            loop.add_reader(self.read_fd, lambda fut=ready: fut.done() or fut.set_result(None))
            try:
                await ready
            finally:
                loop.remove_reader(self.read_fd)
            self._drain()
        return int(self.status["child-pid"])

    def close_writer(self) -> None:
        if self.write_fd >= 0:
            os.close(self.write_fd)
            self.write_fd = -1

    def finish(self) -> dict:
        """Everything bubblewrap said, once its process is gone; closes both ends."""
        self.close_writer()
        if self.read_fd >= 0:
            self._drain()
            if self._buffer:
                with contextlib.suppress(json.JSONDecodeError):
                    self.status.update(json.loads(self._buffer))
            os.close(self.read_fd)
            self.read_fd = -1
        return self.status
