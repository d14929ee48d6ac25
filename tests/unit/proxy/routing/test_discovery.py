import asyncio
import json
import os
import subprocess
import sys

from rlstack.common.contracts.registry import Endpoint
from rlstack.proxy.replicas import ReplicaView
from rlstack.proxy.routing.discovery import Discovery, model_list


def endpoint(rid: str, port: int) -> Endpoint:
    return Endpoint(id=rid, url=f"http://127.0.0.1:{port}", model="policy", ready=True, registered_at=0, last_heartbeat=0, expires_at=1e12)


def make(n: int):
    view = ReplicaView("policy", 32768)
    applied = []
    discovery = Discovery(registry=None, view=view, apply=lambda d, f: applied.append((d, f)), api_key=None, timeout=60, watch_timeout=1)  # type: ignore[arg-type]
    view.endpoints = {f"r{i}": endpoint(f"r{i}", 9000 + i) for i in range(n)}
    return view, discovery, applied


def test_every_replica_is_shared_and_pinned_with_fallback():
    view, _, _ = make(2)
    deployments, fallbacks = model_list(view, None, 60)
    assert sorted(d["model_name"] for d in deployments) == ["policy", "policy", "policy@r0", "policy@r1"]
    assert {"policy@r0": ["policy"]} in fallbacks


def test_sticky_choice_is_stable_and_moves_only_the_lost_replicas_trials():
    view, _, _ = make(3)
    before = {f"t{i}": view.sticky_replica(f"t{i}") for i in range(60)}
    assert set(before.values()) == {"r0", "r1", "r2"}
    del view.endpoints["r1"]
    after = {t: view.sticky_replica(t) for t in before}
    assert all(after[t] == r for t, r in before.items() if r != "r1")


STICKY_IN_ANOTHER_PROCESS = """
import json
from tests.unit.proxy.routing.test_discovery import make
view, _, _ = make(4)
print(json.dumps({f"t{i}": view.sticky_replica(f"t{i}") for i in range(40)}))
"""


def test_every_proxy_process_pins_a_trial_to_the_same_replica():
    """Workers and pods share no state: the choice must not depend on the process (Python's hash() is salted)."""
    view, _, _ = make(4)
    here = {f"t{i}": view.sticky_replica(f"t{i}") for i in range(40)}
    there = subprocess.run([sys.executable, "-c", STICKY_IN_ANOTHER_PROCESS], capture_output=True, text=True, check=True,
                           env={**os.environ, "PYTHONHASHSEED": "12345"}).stdout
    assert json.loads(there) == here and len(set(here.values())) == 4


def test_forget_drops_a_refusing_replica_but_never_the_last():
    async def go():
        view, discovery, applied = make(2)
        discovery.forget("r1")
        assert list(view.endpoints) == ["r0"] and len(applied) == 1
        discovery.forget("r0")
        assert list(view.endpoints) == ["r0"] and len(applied) == 1

    asyncio.run(go())


def test_by_url_matches_full_route_urls():
    view, _, _ = make(2)
    assert view.by_url("http://127.0.0.1:9001/v1/chat/completions").id == "r1"
    assert view.by_url("http://127.0.0.1:9999/v1") is None


def test_a_replica_serving_a_lora_adapter_gets_the_policy_routed_to_it():
    view, _, _ = make(2)
    view.endpoints["r1"] = view.endpoints["r1"].model_copy(update={"labels": {"adapter": "policy-lora-v3"}})
    deployments, _ = model_list(view, None, 60)
    upstream = {d["model_info"]["id"]: d["litellm_params"]["model"] for d in deployments}
    assert upstream["r0"] == "hosted_vllm/policy" and upstream["r1"] == upstream["r1@pinned"] == "hosted_vllm/policy-lora-v3"


def test_a_change_of_adapter_label_alone_reapplies_the_router():
    """Same replicas at the same URLs: only the lora adapter moves, and LiteLLM must follow it."""
    async def go():
        view, discovery, applied = make(0)
        view.max_model_len = {"r0": 32768, "r1": 32768}  # known: refresh asks no replica
        base = [endpoint("r0", 9000), endpoint("r1", 9001)]

        def adapted(adapter: str) -> list[Endpoint]:
            return [base[0], base[1].model_copy(update={"labels": {"adapter": adapter}})]

        await discovery.refresh(base, revision=1)
        await discovery.refresh(base, revision=2)  # nothing routing depends on changed: no re-apply
        assert len(applied) == 1
        await discovery.refresh(adapted("policy-lora-v1"), revision=3)
        await discovery.refresh(adapted("policy-lora-v2"), revision=4)
        assert len(applied) == 3
        upstream = {d["model_info"]["id"]: d["litellm_params"]["model"] for d in applied[-1][0]}
        assert upstream == {"r0": "hosted_vllm/policy", "r0@pinned": "hosted_vllm/policy",
                            "r1": "hosted_vllm/policy-lora-v2", "r1@pinned": "hosted_vllm/policy-lora-v2"}
        assert applied[-1] == model_list(view, None, 60)

    asyncio.run(go())


def test_a_replica_dropped_by_forget_is_reapplied_when_the_registry_lists_it_again():
    async def go():
        view, discovery, applied = make(0)
        view.max_model_len = {"r0": 32768, "r1": 32768}
        both = [endpoint("r0", 9000), endpoint("r1", 9001)]
        await discovery.refresh(both, revision=1)
        discovery.forget("r1")
        await discovery.refresh(both, revision=2)  # the prober says r1 is alive after all
        assert [sorted(d["model_info"]["id"] for d in deployments) for deployments, _ in applied] == [
            ["r0", "r0@pinned", "r1", "r1@pinned"], ["r0", "r0@pinned"], ["r0", "r0@pinned", "r1", "r1@pinned"]]

    asyncio.run(go())


def test_a_replica_that_left_keeps_its_pinned_groups_fallback():
    """A call pinned to a replica just before discovery drops it (or retried after) names a group
    with no deployment left; without a fallback LiteLLM answers 400 (seen in CI under load)."""
    view, discovery, applied = make(2)
    discovery.forget("r1")
    deployments, fallbacks = applied[-1]
    assert "policy@r1" not in {d["model_name"] for d in deployments}
    assert {"policy@r1": ["policy"]} in fallbacks
    view.set_endpoints({**view.endpoints, "r1": endpoint("r1", 9001)})  # back again: pinned, not departed
    assert "r1" not in view.departed
