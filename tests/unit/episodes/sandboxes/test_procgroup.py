"""Child process groups: a timeout or a cancel kills every process of the group, not just the child."""

from __future__ import annotations

import asyncio
import os

import pytest

from rlstack.episodes.sandboxes.procgroup import live_members, run_group
from tests.helpers.harbor_tasks import processes_with, sleep_marker, until
from tests.helpers.wait import wait_until

ENV = {"PATH": os.environ["PATH"]}


def run(argv, tmp_path, timeout=30.0, grace=1.0):
    started: list[int] = []
    result = asyncio.run(run_group(argv, env=ENV, stdout=tmp_path / "out", stderr=tmp_path / "err", timeout=timeout,
                                   kill_grace=grace, on_start=started.append))
    return result, started[0]


def test_exit_code_and_output(tmp_path):
    result, _ = run(["sh", "-c", "echo hi; echo oops >&2; exit 3"], tmp_path)
    assert result.returncode == 3 and not result.timed_out
    assert (tmp_path / "out").read_text() == "hi\n" and (tmp_path / "err").read_text() == "oops\n"


def test_timeout_kills_the_whole_group(tmp_path):
    marker = sleep_marker()
    result, pgid = run(["sh", "-c", f"sleep {marker} & sleep {marker}; wait"], tmp_path, timeout=0.5)
    assert result.timed_out
    assert live_members(pgid) == []
    assert processes_with(marker) == []


def test_a_child_that_ignores_sigterm_is_killed_after_the_grace(tmp_path):
    marker = sleep_marker()
    script = f"trap '' TERM; sleep {marker} & trap '' TERM; wait"
    result, pgid = run(["sh", "-c", script], tmp_path, timeout=0.5, grace=0.2)
    assert result.timed_out
    assert live_members(pgid) == [] and processes_with(marker) == []


def test_background_jobs_do_not_outlive_a_normal_exit(tmp_path):
    marker = sleep_marker()
    result, pgid = run(["sh", "-c", f"sleep {marker} > /dev/null 2>&1 & exit 0"], tmp_path)
    assert result.returncode == 0
    assert processes_with(marker) == []


def test_cancel_kills_the_group_and_propagates(tmp_path):
    marker = sleep_marker()
    started: list[int] = []

    async def scenario():
        task = asyncio.create_task(run_group(["sh", "-c", f"sleep {marker} & sleep {marker}; wait"], env=ENV,
                                             stdout=tmp_path / "out", stderr=None, timeout=600, kill_grace=1,
                                             on_start=started.append))
        await until(lambda: processes_with(marker))
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(scenario())
    wait_until(lambda: live_members(started[0]) == [], timeout=10)
    assert processes_with(marker) == []


def test_a_missing_program_raises_oserror(tmp_path):
    with pytest.raises(OSError):
        run(["/nonexistent/agent"], tmp_path)
