"""Env servers die and come back; the run goes on (issue 38): real env server processes rolling out
arithmetic through the session's proxy and vLLM, a real batcher, the test as the trainer pulling
batches.

One run walks the three ways an env pod goes: a Deployment of 3 replicas sharing one env name
(three shares) with one SIGKILLed, an env server restarted in place (SIGKILL, then the same
command again), and an env pod replaced by a new one (the new one up before the old dies). After
each, the live envs' weights sum to 1 and batches keep coming; at the end nothing a dead env left
queued is lost or served twice.
"""

from __future__ import annotations

import threading
import time

import httpx

from rlstack.common.contracts.progress import ProgressReport
from tests.conftest import ServiceProcess, start_service
from tests.helpers.groups import trainer_registration
from tests.integration.inference.conftest import SECRET

BATCH, GROUP, LEASE = 8, 4, 3.0


class Trainer:
    """Pulls batches as a trainer does, from a thread, and keeps what it got.

    Like the trainer's own client it tries a poll again when the connection drops (on two busy
    cores a keep-alive connection can close under a request); a batch served into a dropped
    answer would then be missing from what it got, which the end of the test counts.
    """

    def __init__(self, url: str) -> None:
        self.url = url
        self.batches: list[list[dict]] = []
        self.dropped = 0
        self.error: BaseException | None = None
        self.stop = threading.Event()
        self.thread = threading.Thread(target=self._pull, daemon=True)

    def _pull(self) -> None:
        try:
            with httpx.Client(timeout=10) as client:
                while not self.stop.is_set():
                    try:
                        batch = client.get(f"{self.url}/batch").json()["batch"]
                    except (httpx.RemoteProtocolError, httpx.ReadError, httpx.ConnectError):
                        self.dropped += 1
                        batch = None
                    if batch:
                        self.batches.append(batch)
                    else:
                        time.sleep(0.05)
        except BaseException as exc:  # noqa: BLE001 - surfaced by wait_for_more, not lost in a thread
            self.error = exc

    def wait_for_more(self, count: int, timeout: float = 120) -> None:
        target = len(self.batches) + count
        deadline = time.monotonic() + timeout
        while len(self.batches) < target:
            assert self.error is None, f"the pulling thread died: {self.error!r}"
            assert time.monotonic() < deadline, f"only {len(self.batches)} of {target} batches after {timeout:.0f}s"
            time.sleep(0.2)


def progress(url: str) -> ProgressReport:
    return ProgressReport.model_validate(httpx.get(f"{url}/progress").json())


def env_id_of(env: ServiceProcess) -> int:
    return httpx.get(f"{env.url}/readyz").json()["env_id"]


def wait_for_live(url: str, live: set[int], timeout: float = 30) -> ProgressReport:
    """Until exactly ``live`` are the connected, live envs; their weights must then sum to 1."""
    deadline = time.monotonic() + timeout
    while True:
        report = progress(url)
        now_live = {e.env_id for e in report.envs if e.connected and e.live}
        if now_live == live:
            assert abs(sum(e.weight for e in report.envs if e.env_id in live) - 1.0) < 1e-9, report
            return report
        assert time.monotonic() < deadline, f"live envs {now_live}, expected {live}: {report.describe()}"
        time.sleep(0.2)


def test_envs_killed_restarted_and_replaced_leave_the_live_weights_whole_and_the_run_going(proxy, registry, stack_logs, tmp_path):
    batcher = start_service("batcher", ["--data-dir", str(tmp_path / "wal"), "--env-lease-seconds", str(LEASE)], stack_logs)
    args = ["--batcher-url", batcher.url, "--proxy-url", proxy.url, "--registry-url", registry.url, "--trial-key-secret", SECRET,
            "--run-id", "envrestarts", "--group-size", str(GROUP), "--max-tokens", "6", "--workers", "1",
            "--max-batches-offpolicy", "1", "--lease-renew-seconds", "0.5"]
    envs: list[ServiceProcess] = []
    trainer = Trainer(batcher.url)

    def start_env() -> tuple[ServiceProcess, int]:
        env = start_service("envs", args, stack_logs, ready_timeout=60)
        envs.append(env)
        return env, env_id_of(env)

    try:
        httpx.post(f"{batcher.url}/register", json=trainer_registration(batch_size=BATCH)).raise_for_status()
        trainer.thread.start()

        # A Deployment of 3 replicas under one env name: three live shares.
        (a, a_id), (b, b_id), (c, c_id) = start_env(), start_env(), start_env()
        report = wait_for_live(batcher.url, {a_id, b_id, c_id})
        assert sorted(round(e.weight, 3) for e in report.envs) == [0.333] * 3
        assert {e.name for e in report.envs} == {"arithmetic_0", "arithmetic_1", "arithmetic_2"}
        trainer.wait_for_more(3)

        # One replica killed: its lease runs out, two shares of a half.
        c.kill()
        wait_for_live(batcher.url, {a_id, b_id})
        trainer.wait_for_more(3)

        # Restarted in place: the same command again registers anew; the old registration expires.
        b.kill()
        _, b2_id = start_env()
        wait_for_live(batcher.url, {a_id, b2_id})
        trainer.wait_for_more(3)

        # Replaced by a new pod: the new one is up before the old one dies.
        _, d_id = start_env()
        wait_for_live(batcher.url, {a_id, b2_id, d_id})
        a.kill()
        wait_for_live(batcher.url, {b2_id, d_id})
        trainer.wait_for_more(3)
    finally:
        for env in envs:
            if env.proc.poll() is None:
                assert env.terminate() == 0  # a clean stop disconnects: no lease to wait out
    try:
        report = progress(batcher.url)
        assert not any(e.connected for e in report.envs if e.env_id in (b2_id, d_id))  # they said so on SIGTERM
        deadline = time.monotonic() + 30  # the trainer drains what the dead and stopped envs left
        while progress(batcher.url).queue_sequences >= BATCH:
            assert time.monotonic() < deadline, progress(batcher.url).describe()
            time.sleep(0.2)
        trainer.stop.set()
        trainer.thread.join(15)
        assert trainer.error is None, trainer.error
        served = [tuple(map(tuple, g["tokens"])) for batch in trainer.batches for g in batch]
        assert len(served) == len(set(served))  # no group served twice
        metrics = httpx.get(f"{batcher.url}/metrics").text
        accepted = next(float(line.split()[-1]) for line in metrics.splitlines() if line.startswith("rlstack_batcher_sequences_accepted_total"))
        served_sequences = sum(len(g["tokens"]) for batch in trainer.batches for g in batch)
        assert accepted - served_sequences == progress(batcher.url).queue_sequences < BATCH  # nothing queued was lost
        served_by = {g["env_id"] for batch in trainer.batches for g in batch}
        assert {a_id, b_id, c_id, b2_id, d_id} <= served_by  # every env's groups, the dead ones' too, were trained
    finally:
        trainer.stop.set()
        batcher.terminate()
