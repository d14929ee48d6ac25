"""A child process in its own process group, killed as a whole on timeout or cancellation.

Agents start shells, servers and background jobs; killing only the direct child would leave
those running. Each child leads a new session (and so a new process group, with no
controlling terminal), and every kill goes to the group: SIGTERM, a grace period, SIGKILL.
Cancelling the awaiting task kills the group at once, then re-raises.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
from collections.abc import Callable, Sequence
from pathlib import Path

from pydantic import BaseModel

from rlstack.common import safefs


class GroupExit(BaseModel):
    returncode: int
    """Exit code, or minus the signal that ended it."""
    timed_out: bool


def kill_group(pgid: int, sig: int = signal.SIGKILL) -> bool:
    """Signal every process of group ``pgid``; False if the group is gone."""
    try:
        os.killpg(pgid, sig)
    except (ProcessLookupError, PermissionError):
        return False
    return True


def live_members(pgid: int) -> list[int]:
    """Pids of live (not zombie) processes in group ``pgid``, from /proc."""
    pids = []
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            stat = Path(f"/proc/{entry}/stat").read_text()
        except OSError:
            continue
        fields = stat.rsplit(")", 1)[1].split()  # after "(comm)": state, ppid, pgrp, ...
        if fields[2] == str(pgid) and fields[0] != "Z":
            pids.append(int(entry))
    return pids


async def run_group(argv: Sequence[str], *, env: dict[str, str], stdout: Path, stderr: Path | None,
                    timeout: float, kill_grace: float, pass_fds: Sequence[int] = (),
                    on_start: Callable[[int], None] | None = None, within: Path | None = None) -> GroupExit:
    """Run ``argv`` to completion or ``timeout``; ``stderr=None`` merges it into ``stdout``.

    The output files are opened without following symlinks below ``within`` (default: their own
    directory), which an agent may write.

    ``on_start`` gets the process group id (the child's pid) as soon as it exists.
    Raises ``OSError`` when the program cannot be started at all.
    """
    with contextlib.ExitStack() as files:
        out = files.enter_context(os.fdopen(safefs.open_output(stdout, within or stdout.parent), "wb"))
        err = (files.enter_context(os.fdopen(safefs.open_output(stderr, within or stderr.parent), "wb"))
               if stderr is not None else asyncio.subprocess.STDOUT)
        proc = await asyncio.create_subprocess_exec(
            *argv, stdin=asyncio.subprocess.DEVNULL, stdout=out, stderr=err, env=env,
            start_new_session=True, pass_fds=tuple(pass_fds))
    if on_start is not None:
        on_start(proc.pid)
    try:
        returncode = await asyncio.wait_for(proc.wait(), timeout)
        if kill_group(proc.pid):  # whatever it left running in its group (background jobs) goes too
            await _gone(proc.pid)
        return GroupExit(returncode=returncode, timed_out=False)
    except TimeoutError:
        if proc.returncode is None:  # not reaped yet, so its pid still names this group
            await _terminate(proc, kill_grace)
        return GroupExit(returncode=proc.returncode if proc.returncode is not None else -signal.SIGKILL, timed_out=True)
    except BaseException:
        # Cancelled (or anything else): no grace, the caller is going away.
        kill_group(proc.pid)
        await asyncio.shield(_reaped(proc))
        raise


async def _terminate(proc: asyncio.subprocess.Process, grace: float) -> None:
    """SIGTERM, up to ``grace`` seconds for the leader, then SIGKILL for every member left.

    The SIGKILL goes out even when the leader has exited: members that ignore SIGTERM keep
    the group id alive (Linux does not reuse a pid number while a group still uses it).
    """
    kill_group(proc.pid, signal.SIGTERM)
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(asyncio.shield(proc.wait()), grace)
    kill_group(proc.pid, signal.SIGKILL)
    await _reaped(proc)


async def _reaped(proc: asyncio.subprocess.Process) -> None:
    await proc.wait()
    await _gone(proc.pid)


async def _gone(pgid: int, timeout: float = 10.0) -> None:
    """Until no live process is left in the group: SIGKILL is delivered, not yet done, when killpg returns.

    Each look reads every process's ``/proc/<pid>/stat``: with a thousand sandboxes on the host
    (thousands of processes) that is tens of milliseconds, so it runs off the event loop, which
    serves every other trial meanwhile (bench/env_scale.py)."""
    deadline = asyncio.get_running_loop().time() + timeout
    while await asyncio.to_thread(live_members, pgid) and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.01)
