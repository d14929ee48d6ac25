"""The trainer's batch poll rides out a batcher that is away longer than its client's retries.

Found on a real node: `helm upgrade` rolled the batcher (Recreate: the old pod ends before the new
one replays its log), the trainer's poll ran out of retries after ~10 s, the training loop failed
and the trainer Job's pod restarted, reloading the policy and losing the steps since its checkpoint.
Here a real batcher app starts on the trainer's port only after 15 s, longer than those retries.
"""

from __future__ import annotations

import asyncio
import threading
import time

import httpx
from prometheus_client import CollectorRegistry

from rlstack.batcher.app import build_app
from rlstack.batcher.config import BatcherSettings
from rlstack.common.ports import free_port
from rlstack.trainer.config import TrainerSettings
from rlstack.trainer.loop import TrainingLoop
from rlstack.trainer.metrics import TrainerMetrics
from tests.helpers.groups import env_registration, make_group, trainer_registration
from tests.helpers.serving import BackgroundServer

OUTAGE_SECONDS = 15.0
"""Longer than BatcherClient.batch's ten attempts (at most ~13 s of back-off)."""


def test_the_batch_poll_waits_for_a_batcher_that_comes_back(tmp_path):
    port = free_port()
    trainer = TrainingLoop(TrainerSettings(batcher_url=f"http://127.0.0.1:{port}", sync_mode="none", run_dir=tmp_path / "run",
                                           steps=1, batcher_outage_seconds=120), TrainerMetrics(CollectorRegistry()))
    servers: list[BackgroundServer] = []

    def come_back() -> None:
        time.sleep(OUTAGE_SECONDS)
        servers.append(BackgroundServer(build_app(BatcherSettings(data_dir=tmp_path / "wal")), port).start())
        url = servers[0].url
        httpx.post(f"{url}/register", json=trainer_registration(batch_size=2)).raise_for_status()
        httpx.post(f"{url}/register-env", json=env_registration(group_size=2)).raise_for_status()
        httpx.post(f"{url}/scored_data", json=make_group(seed=1)).raise_for_status()

    thread = threading.Thread(target=come_back, daemon=True)
    thread.start()
    try:
        batch, waited = asyncio.run(trainer.feed.next(trainer.step, trainer.saved_step, trainer._catch_up_replicas))
    finally:
        thread.join()
        for server in servers:
            server.stop()
    assert len(batch) == 1 and len(batch[0]["tokens"]) == 2
    assert waited >= OUTAGE_SECONDS
