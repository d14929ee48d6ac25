import asyncio

from rlstack.common.contracts.registry import EndpointRegistration
from rlstack.registry.table import EndpointTable


def reg(**kw) -> EndpointRegistration:
    return EndpointRegistration(**{"url": "http://127.0.0.1:9000", "model": "tiny", **kw})


def test_heartbeat_without_change_keeps_revision():
    table = EndpointTable(default_ttl=10)
    table.upsert("a", reg(), now=0)
    rev = table.revision
    table.upsert("a", reg(), now=5)
    assert table.revision == rev
    assert table.get("a").expires_at == 15


def test_weight_version_change_bumps_revision_and_keeps_readiness():
    table = EndpointTable(default_ttl=10)
    table.upsert("a", reg(), now=0)
    table.record_probe("a", True, None, now=1)
    rev = table.revision
    table.upsert("a", reg(weight_version=1), now=2)
    assert table.revision == rev + 1
    assert table.get("a").ready  # same url + model: still loaded


def test_new_url_resets_readiness():
    table = EndpointTable(default_ttl=10)
    table.upsert("a", reg(), now=0)
    table.record_probe("a", True, None, now=1)
    table.upsert("a", reg(url="http://127.0.0.1:9001"), now=2)
    assert not table.get("a").ready


def test_expiry_uses_per_endpoint_ttl():
    table = EndpointTable(default_ttl=10)
    table.upsert("short", reg(ttl_seconds=2), now=0)
    table.upsert("long", reg(), now=0)
    assert table.expire(now=3) == ["short"]
    assert [e.id for e in table.all()] == ["long"]
    assert table.expired_total == 1


def test_time_given_back_for_a_stall_keeps_every_lease():
    table = EndpointTable(default_ttl=3)
    table.upsert("a", reg(), now=0)
    table.upsert("b", reg(ttl_seconds=1), now=0)
    table.extend_leases(2.5)
    assert table.expire(now=3.4) == []
    assert table.expire(now=3.6) == ["b"]  # 1 + 2.5 s
    assert table.expire(now=5.4) == []
    assert table.expire(now=5.6) == ["a"]  # 3 + 2.5 s
    assert table.stalled_seconds_total == 2.5


def test_select_filters_by_model_readiness_and_labels():
    table = EndpointTable(default_ttl=10)
    table.upsert("a", reg(labels={"zone": "x"}), now=0)
    table.upsert("b", reg(model="other"), now=0)
    table.record_probe("a", True, None, now=1)
    assert [e.id for e in table.select(model="tiny")] == ["a"]
    assert [e.id for e in table.select(ready=False)] == ["b"]
    assert [e.id for e in table.select(labels={"zone": "x"})] == ["a"]
    assert table.select(labels={"zone": "y"}) == []


def test_watch_wakes_on_change_and_times_out_otherwise():
    async def go():
        table = EndpointTable(default_ttl=10)
        waiter = asyncio.create_task(table.wait_for_change(table.revision, timeout=5))
        await asyncio.sleep(0.01)
        assert not waiter.done()
        table.upsert("a", reg(), now=0)
        await asyncio.wait_for(waiter, 1)
        await table.wait_for_change(table.revision, timeout=0.05)  # nothing changes: returns after timeout
        await table.wait_for_change(0, timeout=5)  # already newer: returns at once

    asyncio.run(go())


def test_quarantine_keeps_an_endpoint_out_of_routing_until_released():
    table = EndpointTable(default_ttl=10)
    table.upsert("a", reg(instance_id="boot-1"), now=0)
    table.record_probe("a", True, None, now=1)
    rev = table.revision
    table.quarantine("a", "probe off by 3.2 nats")
    assert table.revision == rev + 1
    assert not table.get("a").ready and table.get("a").quarantine == "probe off by 3.2 nats"
    table.record_probe("a", True, None, now=2)  # it answers /v1/models, but serves the wrong weights
    table.upsert("a", reg(instance_id="boot-1", weight_version=5), now=3)  # heartbeats from the same server
    assert not table.get("a").ready and table.get("a").quarantine is not None
    assert table.select(ready=True) == []
    table.release("a")
    assert table.get("a").quarantine is None
    table.record_probe("a", True, None, now=4)
    assert table.get("a").ready


def test_a_restarted_server_leaves_quarantine():
    table = EndpointTable(default_ttl=10)
    table.upsert("a", reg(instance_id="boot-1"), now=0)
    table.quarantine("a", "bad weights")
    table.upsert("a", reg(instance_id="boot-2"), now=1)
    assert table.get("a").quarantine is None


def test_quarantine_of_an_unknown_endpoint_is_none():
    assert EndpointTable(default_ttl=10).quarantine("nope", "x") is None


def test_a_slow_probe_keeps_a_ready_replica_until_the_threshold_and_a_refusal_acts_at_once():
    table = EndpointTable(default_ttl=10, failure_threshold=3)
    table.upsert("a", reg(), now=0)
    table.record_probe("a", True, None, now=1)
    table.record_probe("a", False, "ReadTimeout", now=2, transient=True)
    table.record_probe("a", False, "GET /v1/models returned 503", now=3, transient=True)
    assert table.get("a").ready and table.get("a").probe_error == "GET /v1/models returned 503"
    table.record_probe("a", True, None, now=4)  # an answer in time resets the count
    for t in (5, 6):
        table.record_probe("a", False, "ReadTimeout", now=t, transient=True)
    assert table.get("a").ready
    table.record_probe("a", False, "ReadTimeout", now=7, transient=True)
    assert not table.get("a").ready  # the third in a row
    table.record_probe("a", True, None, now=8)
    assert table.get("a").ready
    table.record_probe("a", False, "ConnectError: refused", now=9)
    assert not table.get("a").ready  # nothing listening: no grace


def test_transient_failures_never_make_a_new_endpoint_ready():
    table = EndpointTable(default_ttl=10, failure_threshold=3)
    table.upsert("a", reg(), now=0)
    table.record_probe("a", False, "ReadTimeout", now=1, transient=True)
    assert not table.get("a").ready
