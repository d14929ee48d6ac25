"""Health chain for a local stack: readiness of every service and a batcher round trip."""

from __future__ import annotations

import asyncio

import httpx
from rich.console import Console
from rich.table import Table

from rlstack.common.batcher_client import BatcherClient
from rlstack.common.contracts.atropos import (
    MASKED,
    EnvRegistration,
    ScoredData,
    TrainerRegistration,
)
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
    step = asyncio.run(_round_trip(batcher.url, supervisor.token("batcher")))
    console.print(f"batcher round trip ok: step {step}")


async def _round_trip(url: str, token: str | None) -> int:
    client = BatcherClient(url, token=token, timeout=10)
    try:
        await client.register_trainer(TrainerRegistration(batch_size=2, max_token_len=64), attempts=3)
        env = await client.register_env(EnvRegistration(max_token_length=64, desired_name="smoke", group_size=2))
        group = ScoredData(tokens=[[1, 2, 3], [1, 2, 4]], masks=[[MASKED, 2, 3], [MASKED, 2, 4]], scores=[1.0, 0.0], env_id=env.env_id)
        await client.post_group(group)
        batch = await client.batch()
        if not batch or batch[0]["tokens"] != group.tokens:
            raise ServiceFailed(f"batcher round trip returned {batch!r}")
        return (await client.status()).current_step
    finally:
        await client.aclose()
