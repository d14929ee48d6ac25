"""A replica killed between taking the weights and answering the served-weights check (its only
replica, so no check passes) is waited for: once its supervisor has it back, the trainer publishes to
it again and checks again, instead of failing the run with ``SyncFailed`` and relying on a restart
of the trainer. The replica is the benchmarks' simulated vLLM (``bench/sim_replica.py``, held to the
real one's answers by ``test_sim_replica_speaks_vllm.py``): killing and restarting it costs a second,
a CPU vLLM a minute; its logprobs are not the model's, so the tolerance is opened wide."""

from __future__ import annotations

import asyncio
import logging
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from transformers import AutoModelForCausalLM

from rlstack.common.registry_client import RegistryClient
from rlstack.trainer.sync import SyncFailed, SyncReport
from rlstack.trainer.sync.filesystem import FilesystemPublisher
from rlstack.trainer.sync.verify import ServedWeightsCheck, Tolerance, VerifiedPublisher
from tests.conftest import REPO, free_port
from tests.helpers.wait import wait_until
from tests.integration.inference.conftest import endpoint

SERVED = "policy-killed-mid-check"
ANY_LOGPROBS = Tolerance(mean_abs=1e9, max_abs=1e9)


class SimReplica:
    """One simulated replica process on a fixed port, killed and started again as ``rlstack up`` would."""

    def __init__(self, registry_url: str, log_dir: Path) -> None:
        self.registry_url, self.port, self.log_dir = registry_url, free_port(), log_dir
        self.starts = 0
        self.restart: threading.Timer | None = None
        self.process = self.start()

    def start(self) -> subprocess.Popen:
        self.starts += 1
        log = (self.log_dir / f"killed-sim-{self.port}-{self.starts}.log").open("w")
        return subprocess.Popen([sys.executable, str(REPO / "bench" / "sim_replica.py"), "--ports", str(self.port), "--registry-url",
                                 self.registry_url, "--heartbeat-seconds", "1", "--served-model-name", SERVED, "--replica-prefix", "killed",
                                 "--ttft-ms", "5", "--tpot-ms", "1", "--max-model-len", "4096"], cwd=REPO, stdout=log, stderr=subprocess.STDOUT)

    def kill_and_restart_after(self, seconds: float) -> None:
        self.process.kill()
        self.process.wait()
        self.restart = threading.Timer(seconds, lambda: setattr(self, "process", self.start()))
        self.restart.daemon = True
        self.restart.start()

    def stop(self) -> None:
        if self.restart is not None:
            self.restart.cancel()
        self.process.terminate()
        self.process.wait(timeout=30)


class KilledAfterTheSync:
    """The filesystem sync, after whose first push the replica dies (before the check reaches it)."""

    def __init__(self, inner: FilesystemPublisher, replica: SimReplica, back_after_s: float) -> None:
        self.inner, self.replica, self.back_after_s, self.publishes = inner, replica, back_after_s, 0

    async def publish(self, model, version: int) -> SyncReport:  # noqa: ANN001
        report = await self.inner.publish(model, version)
        self.publishes += 1
        if self.publishes == 1:
            self.replica.kill_and_restart_after(self.back_after_s)
        return report

    async def aclose(self) -> None:
        pass


@pytest.fixture
def sim(registry, stack_logs):  # noqa: ANN001, ANN201
    replica = SimReplica(registry.url, stack_logs)
    try:
        wait_until(lambda: endpoint(registry, "killed-0").get("ready") is True, timeout=60)
        yield replica
    finally:
        replica.stop()


def publish_once(registry_url: str, model, weights: Path, replica: SimReplica, wait_s: float,  # noqa: ANN001
                 back_after_s: float) -> tuple[SyncReport, KilledAfterTheSync]:
    async def go() -> tuple[SyncReport, KilledAfterTheSync]:
        client = RegistryClient(registry_url)
        try:
            inner = KilledAfterTheSync(FilesystemPublisher(weights, client, SERVED), replica, back_after_s)
            publisher = VerifiedPublisher(inner, ServedWeightsCheck(client, SERVED, {}, ANY_LOGPROBS), away_wait_s=wait_s)
            return await publisher.publish(model, version=1), inner
        finally:
            await client.aclose()

    return asyncio.run(go())


def test_the_check_waits_for_the_killed_replica_publishes_again_and_passes(registry, sim, tiny_model, tmp_path, caplog):
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    with caplog.at_level(logging.INFO, logger="rlstack.trainer.sync.verify"):
        report, inner = publish_once(registry.url, model, tmp_path / "weights", sim, wait_s=60, back_after_s=3)
    assert report.replicas == ["killed-0"] and report.version == 1
    assert inner.publishes == 2 and sim.starts == 2  # the weights went again to the restarted replica
    assert "killed-0 did not answer the served-weights check; waiting up to 60s" in caplog.text


def test_a_replica_that_stays_away_fails_the_sync_after_the_wait(registry, sim, tiny_model, tmp_path):
    """The wait is bounded: a replica not back in time fails the sync, saying so."""
    model = AutoModelForCausalLM.from_pretrained(tiny_model)
    with pytest.raises(SyncFailed, match="no replica serves weights v1: .*; no replica came back within 2s"):
        publish_once(registry.url, model, tmp_path / "weights", sim, wait_s=2, back_after_s=3600)
