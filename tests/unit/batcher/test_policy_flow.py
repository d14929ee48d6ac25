"""Each policy's trainer is watched on its own queue (issue 53): ``/progress?policy=`` gives that
trainer's wait and queue, a trainer starving while the other is fed is a stall of its own policy
(logged and counted as such), and the queue, served and dropped series carry a ``policy`` label
(the policy's name, the served name with one policy too) that the chart's dashboard queries,
which match on namespace and pod only, still select."""

from __future__ import annotations

import asyncio
import json
import re
import time

import httpx
import orjson
from prometheus_client import CollectorRegistry, generate_latest

from rlstack.batcher.config import BatcherSettings
from rlstack.batcher.metrics import BatcherCollector
from rlstack.batcher.service import BatcherService
from rlstack.batcher.wal import WriteAheadLog
from rlstack.common.contracts.atropos import EnvRegistration, TrainerRegistration
from rlstack.common.contracts.progress import ProgressReport
from tests.conftest import REPO
from tests.helpers.groups import env_registration, make_group, trainer_registration
from tests.helpers.wait import wait_until

DASHBOARD = REPO / "charts" / "rlstack" / "dashboards" / "batcher.json"
TARGET_LABELS = {"namespace", "pod"}
"""What Prometheus's scrape adds: the labels a dashboard query may match on besides the batcher's own."""


def tagged(policy: str | None, seed: int, weight_version: int | None = None) -> dict:
    group = {**make_group(seed=seed, weight_version=weight_version), "trials": [0, 1]}
    if policy is not None:
        group["policy"] = policy
    return group


def test_progress_and_stalls_are_each_policys_own(service_factory, tmp_path):
    batcher = service_factory("batcher", ["--data-dir", str(tmp_path / "wal"), "--policies", '["lead", "helper"]',
                                          "--stall-after-seconds", "1"])
    url = batcher.url
    for policy in ("lead", "helper"):
        httpx.post(f"{url}/register", json=trainer_registration(batch_size=2, policy=policy)).raise_for_status()
    env = httpx.post(f"{url}/register-env", json=env_registration(group_size=2)).json()["env_id"]
    assert env == 0
    # a trial group of which only the lead has a group: the lead's trainer is fed, the helper's starves
    httpx.post(f"{url}/scored_data_list", json=[tagged("lead", 1)], headers={"Idempotency-Key": "g1"}).raise_for_status()
    assert httpx.get(f"{url}/batch", params={"policy": "lead"}).json()["batch"] is not None

    def helper_stalled() -> bool:
        httpx.get(f"{url}/batch", params={"policy": "helper"})  # the helper's trainer keeps asking
        return ProgressReport.model_validate_json(httpx.get(f"{url}/progress", params={"policy": "helper"}).content).stalled

    wait_until(helper_stalled, timeout=30, interval=0.2)
    helper = ProgressReport.model_validate_json(httpx.get(f"{url}/progress", params={"policy": "helper"}).content)
    lead = ProgressReport.model_validate_json(httpx.get(f"{url}/progress", params={"policy": "lead"}).content)
    first = ProgressReport.model_validate_json(httpx.get(f"{url}/progress").content)
    assert helper.policy == "helper" and helper.step == 0 and helper.trainer_waiting_seconds is not None
    assert lead.policy == "lead" and lead.step == 1 and lead.trainer_waiting_seconds is None and not lead.stalled
    assert first.policy == "lead" and first.step == 1  # no policy named: the first's, as Atropos's one queue
    wait_until(lambda: "run stalled (policy helper)" in batcher.log(), timeout=10)
    assert "(policy lead)" not in batcher.log()
    metrics = httpx.get(f"{url}/metrics").text
    assert 'rlstack_batcher_stalled{policy="helper"} 1.0' in metrics and 'rlstack_batcher_stalled{policy="lead"} 0.0' in metrics
    assert 'rlstack_batcher_stalls_total{policy="helper"} 1.0' in metrics
    assert 'rlstack_batcher_current_step{policy="lead"} 1.0' in metrics and 'rlstack_batcher_batches_served_total{policy="helper"} 0.0' in metrics
    undeclared = httpx.get(f"{url}/progress", params={"policy": "critic"})
    assert undeclared.status_code == 422 and "policy 'critic' is not one of this batcher's ['lead', 'helper']" in undeclared.text


def scrape(service: BatcherService) -> str:
    registry = CollectorRegistry()
    registry.register(BatcherCollector(service))
    return generate_latest(registry).decode()


def test_queue_served_and_dropped_series_name_their_policy(tmp_path):
    async def run() -> str:
        settings = BatcherSettings(data_dir=tmp_path, policies=["lead", "helper"], max_staleness=0)
        svc = BatcherService(settings, WriteAheadLog(tmp_path / "batcher.wal", "fsync"))
        svc.replay()
        for policy, step in (("lead", 0), ("helper", 3)):
            registration = trainer_registration(batch_size=2, policy=policy, starting_step=step)
            await svc.register_trainer(TrainerRegistration.model_validate(registration))
        await svc.register_env(EnvRegistration.model_validate(env_registration(group_size=2)))
        body = [tagged("lead", 1, 0), tagged("lead", 2, 0), tagged("helper", 3, 1), tagged("helper", 4, 3)]
        await svc.post_groups(orjson.dumps(body), as_list=True, key="k")
        await svc.next_batch(None, "lead")
        await svc.next_batch(None, "helper")  # the helper's version-1 group is stale at step 3
        text = scrape(svc)
        await svc.wal.close()
        return text

    text = asyncio.run(run())
    for line in ('rlstack_batcher_queue_groups{policy="lead"} 1.0', 'rlstack_batcher_queue_groups{policy="helper"} 0.0',
                 'rlstack_batcher_queue_sequences{policy="lead"} 2.0', 'rlstack_batcher_current_step{policy="helper"} 4.0',
                 'rlstack_batcher_batches_served_total{policy="lead"} 1.0', 'rlstack_batcher_groups_accepted_total{policy="helper"} 2.0',
                 'rlstack_batcher_groups_dropped_total{policy="helper",reason="stale"} 1.0',
                 'rlstack_batcher_groups_dropped_total{policy="lead",reason="stale"} 0.0',
                 'rlstack_batcher_requests_rejected_total{reason="invalid"} 0.0'):  # a request may hold every policy's groups
        assert line in text, line


def test_one_policy_keeps_every_series_the_dashboards_query(tmp_path):
    service = BatcherService(BatcherSettings(data_dir=tmp_path), WriteAheadLog(tmp_path / "batcher.wal", "fsync"))
    text = scrape(service)
    assert 'rlstack_batcher_queue_sequences{policy="policy"} 0.0' in text  # the served name: the chart's one policy
    exported = {line.split("{")[0].split(" ")[0] for line in text.splitlines() if line.startswith("rlstack_batcher_")}
    exported |= {"rlstack_batcher_http_request_seconds_bucket"}  # the shared server's, not the collector's
    queries = [t["expr"] for panel in json.loads(DASHBOARD.read_text())["panels"] for t in panel.get("targets", [])]
    assert queries
    for query in queries:
        for name, matchers in re.findall(r"(rlstack_batcher_\w+)\{([^}]*)\}", query):
            assert name in exported, (name, query)
            assert {m.split("=")[0].rstrip("!~") for m in matchers.split(",")} <= TARGET_LABELS, query  # policy never narrowed away


def test_a_trainer_without_a_policy_reads_the_first_policys_progress(tmp_path):
    """A batcher of one policy answers /progress as before, now naming its policy."""
    service = BatcherService(BatcherSettings(data_dir=tmp_path), WriteAheadLog(tmp_path / "batcher.wal", "fsync"))
    report = service.progress()
    assert report.policy == "policy" and report.batch_size is None and not report.stalled
    assert time.monotonic() - service.started < 60
