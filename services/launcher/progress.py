"""Waiting on a run's main services (its trainer, or a trainer per policy) with a live progress line each from its /status."""

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


def wait_for(supervisor: Supervisor, names: list[str], poll_s: float = 1.0) -> int:
    """Block until every service in ``names`` (a trainer per policy) has exited 0; returns 0, a live line
    each meanwhile. Every service that dies, these too, is restarted under its policy (a trainer resumes
    from its checkpoint); a restart loop fails the run."""
    width = max(map(len, names))
    columns = (TextColumn("[bold]{task.fields[service]}[/]"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
               TextColumn("{task.description}"))
    with Progress(*columns, console=console, transient=False) as progress:
        tasks = {name: progress.add_task("starting", total=None, service=name.ljust(width)) for name in names}
        while True:
            svcs = {name: supervisor.running[name] for name in names}
            if all(svc.proc.poll() == 0 for svc in svcs.values()):
                return 0
            # a finished one (exit 0) is not restarted; one that died is judged by check_alive like any other
            done = [name for name, svc in svcs.items() if svc.proc.poll() == 0]
            supervisor.check_alive(except_for=done)
            for name, svc in svcs.items():
                url = svc.url + svc.spec.status_path if svc.spec.status_path else None
                if url and svc.proc.poll() is None:
                    try:
                        status = httpx.get(url, timeout=2, headers=bearer(supervisor.token(name))).json()
                        progress.update(tasks[name], total=status.get("steps"), completed=status.get("step", 0),
                                        description=_describe(status))
                    except (httpx.HTTPError, ValueError):
                        pass
                elif svc.proc.poll() == 0:
                    progress.update(tasks[name], description="done")
            time.sleep(poll_s)
