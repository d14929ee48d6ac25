"""Health chain for a local stack: readiness of every service and a batcher round trip."""

from __future__ import annotations

import httpx
from rich.console import Console
from rich.table import Table

from rlstack.common.contracts.atropos import MASKED
from rlstack.launcher.supervisor import ServiceFailed, Supervisor

console = Console()


def print_health(supervisor: Supervisor) -> None:
    table = Table(title=f"rlstack services ({supervisor.run_dir})")
    for col in ("service", "url", "ready", "detail"):
        table.add_column(col)
    for name, svc in supervisor.running.items():
        try:
            r = httpx.get(svc.url + svc.spec.ready_path, timeout=5)
            table.add_row(name, svc.url, "yes" if r.status_code == 200 else f"no ({r.status_code})", r.text[:80])
        except httpx.HTTPError as exc:
            table.add_row(name, svc.url, "unreachable", str(exc)[:80])
    console.print(table)


def smoke_check(supervisor: Supervisor) -> None:
    """Register a trainer and an env, post one group, pull it back as a batch."""
    batcher = supervisor.running.get("batcher")
    if batcher is None:
        return
    with httpx.Client(base_url=batcher.url, timeout=10) as c:
        c.post("/register", json={"batch_size": 2, "max_token_len": 64}).raise_for_status()
        env = c.post("/register-env", json={"max_token_length": 64, "desired_name": "smoke", "group_size": 2}).json()
        group = {"tokens": [[1, 2, 3], [1, 2, 4]], "masks": [[MASKED, 2, 3], [MASKED, 2, 4]], "scores": [1.0, 0.0], "env_id": env["env_id"]}
        c.post("/scored_data", json=group).raise_for_status()
        batch = c.get("/batch").json()["batch"]
        if not batch or batch[0]["tokens"] != group["tokens"]:
            raise ServiceFailed(f"batcher round trip returned {batch!r}")
        console.print(f"batcher round trip ok: step {c.get('/status').json()['current_step']}")
