"""A trial's ``[environment]`` cpus and memory_mb, enforced by a cgroup of its own.

One cgroup per trial phase, under ``rlstack-sandboxes/`` in the memory and cpu controllers
(cgroup v1, one hierarchy each) or in the unified hierarchy (v2). The phase's launcher joins
it before it execs bubblewrap (``layers.launcher_argv`` writes its own pid to each directory's
``cgroup.procs``, named by ``env()``), so everything the agent starts is inside from its first
instruction; the cgroup is removed once the phase's processes are gone. CPU is a CFS quota (``cpus`` cores'
worth of time per period), memory a hard limit: the kernel's OOM killer ends the phase's
processes past it, which the trial records as the agent's (or verifier's) own failure.
"""

from __future__ import annotations

import contextlib
import os
import re
from dataclasses import dataclass
from pathlib import Path

ROOT = Path("/sys/fs/cgroup")
PARENT = "rlstack-sandboxes"
PERIOD_US = 100_000


class CgroupError(OSError):
    """This host will not let us make a cgroup with these limits; says why and what to set."""


@dataclass(frozen=True)
class Limits:
    cpus: float | None = None
    memory_mb: int | None = None

    @property
    def empty(self) -> bool:
        return self.cpus is None and self.memory_mb is None


def _v2() -> bool:
    return (ROOT / "cgroup.controllers").is_file()


def _v1_dir(controller: str) -> Path | None:
    for candidate in (ROOT / controller, ROOT / f"{controller},cpuacct", ROOT / f"cpu,{controller}acct"):
        if (candidate / "cgroup.procs").is_file():
            return candidate
    return None


class TrialCgroup:
    """The cgroup directories (one per v1 controller, one on v2) of one phase, made with its limits."""

    def __init__(self, name: str, limits: Limits) -> None:
        self.name = re.sub(r"[^A-Za-z0-9._-]", "_", name)
        self.limits = limits
        self.dirs: list[Path] = []

    def create(self) -> None:
        try:
            self._create()
        except OSError as exc:
            self.remove()
            raise CgroupError(exc.errno, f"cannot make a cgroup for cpus={self.limits.cpus} memory_mb="
                              f"{self.limits.memory_mb} under {ROOT} ({exc.strerror or exc}): the env server needs "
                              "root or a delegated cgroup; or set the local sandbox's limits: record") from None

    def _create(self) -> None:
        if _v2():
            parent = ROOT / PARENT
            parent.mkdir(exist_ok=True)
            wanted = [c for c, on in (("cpu", self.limits.cpus), ("memory", self.limits.memory_mb)) if on]
            enabled = (parent / "cgroup.subtree_control").read_text().split()
            if missing := [c for c in wanted if c not in enabled]:
                (parent / "cgroup.subtree_control").write_text(" ".join(f"+{c}" for c in missing))
            cgroup = parent / self.name
            cgroup.mkdir(exist_ok=True)
            self.dirs.append(cgroup)
            if self.limits.cpus:
                (cgroup / "cpu.max").write_text(f"{int(self.limits.cpus * PERIOD_US)} {PERIOD_US}")
            if self.limits.memory_mb:
                (cgroup / "memory.max").write_text(str(self.limits.memory_mb << 20))
                with contextlib.suppress(OSError):
                    (cgroup / "memory.swap.max").write_text("0")
            return
        for controller, value in (("cpu", self.limits.cpus), ("memory", self.limits.memory_mb)):
            if not value:
                continue
            base = _v1_dir(controller)
            if base is None:
                raise OSError(2, f"no {controller} controller mounted")
            cgroup = base / PARENT / self.name
            cgroup.mkdir(parents=True, exist_ok=True)
            self.dirs.append(cgroup)
            if controller == "cpu":
                (cgroup / "cpu.cfs_period_us").write_text(str(PERIOD_US))
                (cgroup / "cpu.cfs_quota_us").write_text(str(int(value * PERIOD_US)))
            else:
                (cgroup / "memory.limit_in_bytes").write_text(str(value << 20))
                with contextlib.suppress(OSError):  # no swap accounting: the limit above still holds
                    (cgroup / "memory.memsw.limit_in_bytes").write_text(str(value << 20))

    def env(self) -> dict[str, str]:
        """For the launcher: the directories whose ``cgroup.procs`` it joins before it execs the sandbox."""
        return {"RLSTACK_CGROUPS": " ".join(str(d) for d in self.dirs)} if self.dirs else {}

    def oom_killed(self) -> bool:
        """Whether the kernel killed a process of this phase for passing its memory limit."""
        for cgroup in self.dirs:
            with contextlib.suppress(OSError):
                events = cgroup / "memory.events"
                if events.is_file() and re.search(r"^oom_kill [1-9]", events.read_text(), re.M):
                    return True
                if (cgroup / "memory.failcnt").is_file() and (cgroup / "memory.oom_control").is_file():
                    if re.search(r"^oom_kill [1-9]", (cgroup / "memory.oom_control").read_text(), re.M):
                        return True
        return False

    def remove(self) -> None:
        for cgroup in reversed(self.dirs):
            with contextlib.suppress(OSError):
                os.rmdir(cgroup)
        self.dirs.clear()
