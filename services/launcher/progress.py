"""Waiting on a run's main service (the trainer) with a live progress line from its /status."""

from __future__ import annotations

import time

import httpx
from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from rlstack.common.auth import bearer
from rlstack.launcher.supervisor import Supervisor

console = Console()


def _describe(status: dict) -> str:
    parts = [status.get("phase", "?")]
    for key, label in (("reward_recent", "reward(10)"), ("loss", "loss"), ("staleness", "stale"), ("sync_seconds", "sync s")):
        value = status.get(key)
        if value is not None:
            parts.append(f"{label} {value:.3f}" if key != "sync_seconds" else f"{label} {value:.2f}")
    if status.get("weight_version") is not None:
        parts.append(f"v{status['weight_version']}")
    return "  ".join(parts)


def wait_for(supervisor: Supervisor, name: str, poll_s: float = 1.0) -> int:
    """Block until service ``name`` exits 0; returns 0. Every service that dies, ``name`` too, is
    restarted under its policy (the trainer resumes from its checkpoint); a restart loop fails the run."""
    columns = (TextColumn(f"[bold]{name}[/]"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(), TextColumn("{task.description}"))
    with Progress(*columns, console=console, transient=False) as progress:
        task = progress.add_task("starting", total=None)
        while True:
            svc = supervisor.running[name]
            if svc.proc.poll() == 0:
                return 0
            supervisor.check_alive(except_for=None if svc.proc.poll() is not None else name)
            url = svc.url + svc.spec.status_path if svc.spec.status_path else None
            if url and svc.proc.poll() is None:
                try:
                    status = httpx.get(url, timeout=2, headers=bearer(supervisor.token(name))).json()
                    progress.update(task, total=status.get("steps"), completed=status.get("step", 0), description=_describe(status))
                except (httpx.HTTPError, ValueError):
                    pass
            time.sleep(poll_s)
