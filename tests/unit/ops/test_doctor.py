import httpx

from rlstack.ops.doctor import DoctorConfig, check_batcher, explain, judge_sandboxes


def pod(name: str, phase: str, created: str) -> dict:
    return {"metadata": {"name": name, "creationTimestamp": created}, "status": {"phase": phase}}


def test_sandboxes_stuck_pending_or_left_behind_are_named():
    now = 1_800_000_000.0  # 2027-01-15T08:00:00Z
    fresh, old = "2027-01-15T07:59:00Z", "2027-01-15T07:00:00Z"
    assert judge_sandboxes([pod("a", "Running", old), pod("b", "Pending", fresh)], 600, now).ok
    stuck = judge_sandboxes([pod("a", "Pending", old)], 600, now)
    assert not stuck.ok and "a" in stuck.remedy and "stuck" in stuck.remedy
    leaked = judge_sandboxes([pod("c", "Succeeded", old)], 600, now)
    assert not leaked.ok and "does not delete" in leaked.remedy


def test_a_dead_service_reads_as_connection_refused():
    with httpx.Client(timeout=2) as client:
        check = check_batcher(DoctorConfig(batcher_url="http://127.0.0.1:9"), client)
    assert not check.ok and "connection refused" in check.remedy
    assert "timed out" in explain(httpx.ReadTimeout("x"), "proxy")
