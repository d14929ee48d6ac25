"""Two policies behind one proxy (issue 53): every call goes to a replica of the policy that claims
the model it names, through every route LiteLLM may take (shared group, pinned group, fallback),
and a call for a name no policy claims, or for a policy with no replica ready, is refused naming
it, never answered by the other policy's weights."""

from __future__ import annotations

import asyncio
import json
import subprocess

import httpx
import pytest
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from rlstack.common.contracts.registry import Endpoint
from rlstack.common.policies import PolicyRoute, PolicyTable
from rlstack.proxy.config import ProxySettings
from rlstack.proxy.edge.front import FrontMiddleware
from rlstack.proxy.names import POLICY_HEADER
from rlstack.proxy.replicas import ReplicaView
from rlstack.proxy.routing.discovery import Discovery, model_list
from tests.conftest import PROXY_PYTHON, REPO

TEAM = PolicyTable((PolicyRoute(name="lead", served_names=("claude-sonnet-*",)),
                    PolicyRoute(name="helper", served_names=("claude-haiku-*",))))
MESSAGES = [{"role": "user", "content": "hi"}]


def endpoint(rid: str, policy: str, port: int) -> Endpoint:
    return Endpoint(id=rid, url=f"http://127.0.0.1:{port}", model=policy, ready=True, registered_at=0, last_heartbeat=0,
                    expires_at=1e12)


def team_view() -> ReplicaView:
    view = ReplicaView(TEAM, 32768)
    view.set_endpoints({"l0": endpoint("l0", "lead", 9000), "l1": endpoint("l1", "lead", 9001),
                        "h0": endpoint("h0", "helper", 9100)})
    return view


def test_each_replica_routes_in_its_own_policys_groups_only():
    view = team_view()
    deployments, fallbacks = model_list(view, None, 60)
    groups = {(d["model_name"], d["model_info"]["id"]) for d in deployments}
    assert groups == {("lead", "l0"), ("lead", "l1"), ("helper", "h0"),
                      ("lead@l0", "l0@pinned"), ("lead@l1", "l1@pinned"), ("helper@h0", "h0@pinned")}
    assert all(d["litellm_params"]["model"] == f"hosted_vllm/{d['model_name'].split('@')[0]}" for d in deployments)
    assert sorted(map(json.dumps, fallbacks)) == sorted(map(json.dumps, [
        {"lead@l0": ["lead"]}, {"lead@l1": ["lead"]}, {"helper@h0": ["helper"]}]))


def test_a_departed_replicas_fallback_stays_in_its_policy():
    """The helper's only replica leaves: a call pinned to it falls back to the helper's group (no
    deployment: LiteLLM fails the call), never to the lead's replicas that are still there."""
    view = team_view()
    view.set_endpoints({rid: e for rid, e in view.endpoints.items() if rid != "h0"})
    _, fallbacks = model_list(view, None, 60)
    assert {"helper@h0": ["helper"]} in fallbacks and view.pinned_group("h0") == "helper@h0"


def test_sticky_is_per_trial_and_policy_and_a_policys_last_replica_is_never_forgotten():
    view = team_view()
    applied = []
    discovery = Discovery(registry=None, view=view, apply=lambda d, f: applied.append((d, f)), api_key=None,  # type: ignore[arg-type]
                          timeout=60, watch_timeout=1)
    assert {view.sticky_replica(f"run/t{i}", "helper") for i in range(20)} == {"h0"}
    assert {view.sticky_replica(f"run/t{i}", "lead") for i in range(40)} == {"l0", "l1"}

    async def go() -> None:
        discovery.forget("h0")  # the helper's only one: LiteLLM's retries and the registry decide
        discovery.forget("l1")

    asyncio.run(go())
    assert set(view.endpoints) == {"l0", "h0"}


def test_a_replica_of_a_name_no_policy_declares_is_not_routed(caplog):
    view = ReplicaView(TEAM, 32768)
    applied = []
    discovery = Discovery(registry=None, view=view, apply=lambda d, f: applied.append((d, f)), api_key=None,  # type: ignore[arg-type]
                          timeout=60, watch_timeout=1)
    view.max_model_len = {"l0": 32768, "x0": 32768}
    asyncio.run(discovery.refresh([endpoint("l0", "lead", 9000), endpoint("x0", "evaluator", 9200)], revision=1))
    assert set(view.endpoints) == {"l0"} and "evaluator" in caplog.text and "x0" in caplog.text


async def echo(request: Request) -> JSONResponse:
    """Stands in for LiteLLM: echoes what the edge passed on (body and the policy header)."""
    return JSONResponse({"seen": json.loads(await request.body()), "policy": request.headers.get(POLICY_HEADER)})


def call(path: str, body: dict, view: ReplicaView, headers: dict | None = None) -> httpx.Response:
    inner = Starlette(routes=[Route(p, echo, methods=["POST"]) for p in ("/v1/chat/completions", "/v1/messages")])
    app = FrontMiddleware(inner, TEAM, view.urls, view.context, 16, None)

    async def go() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=app), base_url="http://front") as client:
            return await client.post(path, json=body, headers=headers or {})

    return asyncio.run(go())


@pytest.mark.parametrize(("model", "policy"), [("claude-sonnet-4-5", "lead"), ("anthropic/claude-haiku-4-5", "helper"),
                                               ("helper", "helper"), ("hosted_vllm/lead", "lead")])
def test_the_edge_names_the_policy_that_claims_the_model(model, policy):
    r = call("/v1/messages", {"model": model, "messages": MESSAGES, "max_tokens": 8}, team_view(),
             headers={POLICY_HEADER: "lead" if policy == "helper" else "helper"})  # a client's own header is dropped
    assert r.status_code == 200, r.text
    assert r.json()["seen"]["model"] == policy and r.json()["policy"] == policy


def test_a_model_no_policy_claims_is_a_404_naming_it_and_every_policys_names():
    r = call("/v1/messages", {"model": "claude-3-opus", "messages": MESSAGES, "max_tokens": 8}, team_view())
    message = r.json()["error"]["message"]
    assert r.status_code == 404 and "'claude-3-opus'" in message
    assert "lead: lead, claude-sonnet-*" in message and "helper: helper, claude-haiku-*" in message


def test_a_policy_with_no_replica_ready_is_a_503_naming_it_while_the_other_is_served():
    view = team_view()
    view.set_endpoints({rid: e for rid, e in view.endpoints.items() if e.model == "lead"})
    helper = call("/v1/chat/completions", {"model": "claude-haiku-4-5", "messages": MESSAGES, "max_tokens": 8}, view)
    lead = call("/v1/chat/completions", {"model": "claude-sonnet-4-5", "messages": MESSAGES, "max_tokens": 8}, view)
    assert helper.status_code == 503 and "policy 'helper'" in helper.json()["error"]["message"]
    assert lead.status_code == 200 and lead.json()["seen"]["model"] == "lead"


def test_settings_refuse_two_policies_claiming_one_name_before_anything_starts():
    with pytest.raises(ValueError, match="'lead' claims 'claude-\\*' and 'helper' claims 'claude-haiku-\\*'"):
        ProxySettings(policies=[{"name": "lead", "served_names": ["claude-*"]},
                                {"name": "helper", "served_names": ["claude-haiku-*"]}])
    with pytest.raises(ValueError, match="served_model_name: 'policy' is not one of policies"):
        ProxySettings(served_model_name="policy", policies=[{"name": "lead"}])
    assert ProxySettings().policy_table.names() == ["policy"]


RELAY_CROSSING = r"""
import asyncio, json
from aiohttp.test_utils import make_mocked_request
from rlstack.proxy.names import POLICY_HEADER, RELAY_PREFIX, TRIAL_HEADER
from rlstack.proxy.relay.tokenin import TokenInUpstream
from rlstack.common.contracts.registry import Endpoint
from rlstack.common.policies import PolicyRoute, PolicyTable
from rlstack.proxy.replicas import ReplicaView

async def main():
    view = ReplicaView(PolicyTable((PolicyRoute(name="lead"), PolicyRoute(name="helper"))), 32768)
    view.set_endpoints({"h0": Endpoint(id="h0", url="http://127.0.0.1:9", model="helper", ready=True, registered_at=0,
                                       last_heartbeat=0, expires_at=1e12)})
    relay = TokenInUpstream(view, None, 30.0)
    request = make_mocked_request("POST", f"{RELAY_PREFIX}/h0/v1/chat/completions", match_info={"replica": "h0"},
                                  headers={"authorization": f"Bearer {relay.token}", TRIAL_HEADER: "run/t0",
                                           POLICY_HEADER: "lead"})
    reply = await relay.chat(request)
    print(json.dumps({"status": reply.status, "body": reply.body.decode()}))

asyncio.run(main())
"""


def test_the_relay_refuses_a_call_for_another_policy_than_its_replicas():
    """Defence under LiteLLM: were a route ever to cross policies, the relay answers 502 instead of
    sampling the call from the other policy's weights, before any request to the replica (none
    listens at the view's ports). Runs in the proxy's venv (aiohttp)."""
    out = subprocess.run([str(PROXY_PYTHON), "-c", RELAY_CROSSING], capture_output=True, text=True, check=True, cwd=REPO).stdout
    reply = json.loads(out)
    assert reply["status"] == 502 and "serves policy 'helper', not this call's 'lead'" in reply["body"]
