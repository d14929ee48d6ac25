"""``rlstack doctor`` names each replica's model family (the label its sidecar registers), and fails
when replicas of one served name hold different families: their tokens cannot mix in one run."""

from __future__ import annotations

from rlstack.common.contracts.registry import Endpoint
from rlstack.ops.doctor import judge_replicas


def endpoint(name: str, family: str | None, version: int = 3) -> Endpoint:
    return Endpoint(id=name, url="http://10.0.0.1:8000", model="policy", weight_version=version, ready=True,
                    labels={"device": "cpu", **({"model_family": family} if family else {})},
                    registered_at=0.0, last_heartbeat=0.0, expires_at=60.0)


def test_each_replica_is_named_with_its_family():
    check = judge_replicas([endpoint("replica-0", "qwen3"), endpoint("replica-1", "qwen3")])
    assert check.ok and check.detail == "2/2 ready: replica-0 v3 qwen3, replica-1 v3 qwen3"


def test_replicas_of_one_name_with_different_families_fail_with_the_fix():
    check = judge_replicas([endpoint("replica-0", "qwen3"), endpoint("replica-1", "demo")])
    assert not check.ok and "['demo', 'qwen3']" in check.remedy and "one model per name" in check.remedy


def test_a_replica_of_an_earlier_release_registers_no_family():
    check = judge_replicas([endpoint("replica-0", None)])
    assert check.ok and "replica-0 v3 family ?" in check.detail


def served(name: str, model: str) -> Endpoint:
    return endpoint(name, "qwen3").model_copy(update={"model": model})


def test_a_replica_whose_name_no_policy_declares_is_named():
    from rlstack.ops.doctor import judge_undeclared

    assert judge_undeclared([served("l0", "lead"), served("h0", "helper")], ["lead", "helper"]).ok
    check = judge_undeclared([served("l0", "lead"), served("x0", "policy")], ["lead", "helper"])
    assert not check.ok and check.detail == "x0 serves 'policy'" and "--served-model-name" in check.remedy


def test_each_policys_replica_line_names_it():
    assert judge_replicas([endpoint("replica-0", "qwen3")], "replicas registered (helper)").name == "replicas registered (helper)"
