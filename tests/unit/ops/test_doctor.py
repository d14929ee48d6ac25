from datetime import UTC, datetime

import httpx
from lightkube.resources.core_v1 import Pod

from rlstack.ops.doctor import DoctorConfig, check_batcher, explain, judge_sandboxes


def pod(name: str, phase: str, created: str, finished: str | None = None) -> Pod:
    status: dict = {"phase": phase}
    if finished:
        status["containerStatuses"] = [{"name": "agent", "image": "a", "imageID": "", "ready": False, "restartCount": 0,
                                        "state": {"terminated": {"exitCode": 0, "finishedAt": finished}}}]
    return Pod.from_dict({"metadata": {"name": name, "creationTimestamp": created}, "status": status})


def test_sandboxes_stuck_pending_or_left_behind_are_named():
    now = datetime(2027, 1, 15, 8, 0, tzinfo=UTC)
    fresh, old = "2027-01-15T07:59:00Z", "2027-01-15T07:00:00Z"
    just_done = pod("d", "Succeeded", old, finished=fresh)
    assert judge_sandboxes([pod("a", "Running", old), pod("b", "Pending", fresh), just_done], 600, 900, now).ok
    stuck = judge_sandboxes([pod("a", "Pending", old)], 600, 900, now)
    assert not stuck.ok and "a" in stuck.remedy and "stuck" in stuck.remedy
    leaked = judge_sandboxes([pod("c", "Succeeded", old, finished=old)], 600, 900, now)
    assert not leaked.ok and "c" in leaked.remedy and "reaper" in leaked.remedy


def test_a_sandbox_whose_image_cannot_be_pulled_is_named_with_the_fix():
    now = datetime(2027, 1, 15, 8, 0, tzinfo=UTC)
    waiting = Pod.from_dict({"metadata": {"name": "w", "creationTimestamp": "2027-01-15T07:59:50Z",
                                          "labels": {"rlstack.dev/pool": "k"}},
                             "spec": {"containers": [{"name": "trial", "image": "reg/rlstack-task/x@sha256:0"}]},
                             "status": {"phase": "Pending", "containerStatuses": [
                                 {"name": "trial", "image": "x", "imageID": "", "ready": False, "restartCount": 0,
                                  "state": {"waiting": {"reason": "ImagePullBackOff", "message": "manifest unknown"}}}]}})
    check = judge_sandboxes([waiting], 600, 900, now)  # seconds old: not stuck yet, but the pull has failed
    assert not check.ok and "reg/rlstack-task/x@sha256:0" in check.remedy and "ImagePullBackOff" in check.remedy
    assert "1 warm" in check.detail


def test_a_dead_service_reads_as_connection_refused():
    with httpx.Client(timeout=2) as client:
        check = check_batcher(DoctorConfig(batcher_url="http://127.0.0.1:9"), client)
    assert not check.ok and "connection refused" in check.remedy
    assert "timed out" in explain(httpx.ReadTimeout("x"), "proxy")


def test_policies_read_as_names_or_either_json_the_launcher_writes():
    import argparse

    import pytest

    from rlstack.cli.checks import policy_names

    assert policy_names("lead,helper") == ["lead", "helper"]
    assert policy_names('["lead", "helper"]') == ["lead", "helper"]
    assert policy_names('[{"name": "lead", "served_names": ["claude-sonnet-*"]}, {"name": "helper"}]') == ["lead", "helper"]
    for bad, says in (("lead,,helper", "served name"), ("lead,lead", "each policy once"), ('["lead"', "not valid JSON"),
                      ('[{"served_names": []}]', "served name")):
        with pytest.raises(argparse.ArgumentTypeError, match=says):
            policy_names(bad)
    assert DoctorConfig().policy_names == ["policy"] and DoctorConfig(policies=["lead"]).named("batcher", "lead") == "batcher (lead)"
    with pytest.raises(ValueError, match="policies"):
        DoctorConfig(policies=["lead", "lead"])
